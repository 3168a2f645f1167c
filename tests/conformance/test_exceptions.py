"""An exception raised at ANY executed line of ``remove``/``add`` leaves the model as it was — or, past the commit
point, with the operation done in full — and never certifies falsely (issues 34 and 35).

A tracer (:func:`sys.settrace`) counts the lines of lethe's modules that one call executes (a dry run), then the
call is run again on a fresh, identical model, raising at line k, for every k (or, for long calls, for every
distinct (file, line) at least once and a deterministic sample of the rest). The exception is a ``BaseException``
(as ``KeyboardInterrupt`` and a timeout handler's exception are): ``except Exception`` blocks do not catch it.

After each fault the model must be exactly as before (weights, b, β, counters, mask, data, keys, random generator,
``certificate_``), or exactly as after an uninterrupted call. A model left as before takes the next fault (up to
``CHAIN`` in a row: it must execute the same lines again); then the interrupted operation and one more removal are
run: their certificates must be bit-identical to those of a model that was never
interrupted (so the solver caches were restored too), and every certified bound must cover the true gradient
residual, computed here independently in extended precision from the original data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import lethe
from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression
from lethe.release import ReleasedLogisticRegression

SRC = str(Path(lethe.__file__).parent)
MAX_RUNS = 150  # injections per case beyond the distinct lines (deterministic sample of the remaining positions)
CHAIN = 16  # faults injected one after another into one model (each rolled back) before its retry is compared


class Fault(BaseException):
    """The injected exception (not an ``Exception``: it passes ``except Exception`` as KeyboardInterrupt does)."""


def _traced(fn: Callable[[], Any], raise_at: int | None) -> tuple[Any, list[tuple[str, int]], bool]:
    """Run ``fn`` counting the executed lines of lethe's modules; raise :class:`Fault` at line ``raise_at``."""
    seen: list[tuple[str, int]] = []
    fired = [False]

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            seen.append((frame.f_code.co_filename, frame.f_lineno))
            if raise_at is not None and len(seen) == raise_at:
                fired[0] = True
                raise Fault(f"injected at {frame.f_code.co_filename}:{frame.f_lineno}")
        return local

    def glob(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(SRC) else None

    sys.settrace(glob)
    try:
        out = fn()
    finally:
        sys.settrace(None)
    return out, seen, fired[0]


def _positions(seen: list[tuple[str, int]]) -> list[int]:
    """1-based positions to inject at: the first occurrence of every distinct line, then an even sample."""
    first: dict[tuple[str, int], int] = {}
    for k, loc in enumerate(seen, start=1):
        first.setdefault(loc, k)
    picked = set(first.values())
    rest = [k for k in range(1, len(seen) + 1) if k not in picked]
    if rest:
        step = max(1, len(rest) // MAX_RUNS)
        picked.update(rest[::step])
    return sorted(picked)


# -- the models --------------------------------------------------------------------------------------------------
def _data(n: int = 60, d: int = 5, seed: int = 0, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.05
    if classes == 2:
        y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1, 0)
    else:
        y = np.argmax(X @ rng.normal(size=(d, classes)) + 0.3 * rng.normal(size=(n, classes)), axis=1)
    return X, y


def _strip(d: Any) -> Any:
    """A certificate's dict without its timings (the only field that differs between identical runs)."""
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if k != "seconds"}
    if isinstance(d, list | tuple):
        return [_strip(v) for v in d]
    return d


def _cert(c: Any) -> Any:
    if c is None:
        return None
    return _strip(c.to_dict() if hasattr(c, "to_dict") else {"release": c.certificate.to_dict(),
                                                              "coef": c.coef.tobytes()})


def _state_key(s: Any) -> tuple[Any, ...]:
    return (s.w.tobytes(), s.b.tobytes(), s.n, s.residual_bound, s.x_norm_bound, s.removals_since_training,
            s.retrainings, s.train_iterations)


def _snapshot(m: Any) -> dict[str, Any]:
    """Everything a certificate depends on, as bytes (an estimator or a release model)."""
    if isinstance(m, ReleasedLogisticRegression):
        v = vars(m)
        return {"state": _state_key(v["_state"]), "active": v["_active"].tobytes(), "X": v["_X"].tobytes(),
                "Y": v["_Y"].tobytes(), "n_removed": m.n_removed_, "pending": v["_pending"],
                "releases": [_cert(r) for r in m.releases_], "rng": repr(v["_rng"].bit_generator.state)}
    keys = getattr(m, "keys_", None)
    X = m.X_.toarray() if sp.issparse(m.X_) else np.asarray(m.X_)  # (a CSR pattern: compared after the next call)
    return {"states": [_state_key(s) for s in m.states_], "active": m.active_.tobytes(),
            "X": X.tobytes(), "Y": m.Y_.tobytes(), "keys": None if keys is None else keys.tobytes(),
            "cert": _cert(m.certificate_), "n_removed": m.n_removed_, "rng": repr(vars(m)["_rng"].bit_generator.state)}


def _true_residuals(m: Any, X: np.ndarray, Y: np.ndarray) -> tuple[list[float], list[float]]:
    """(certified bounds, ‖∇L_b(w; D′)‖ in extended precision from the original data) per binary model."""
    if isinstance(m, ReleasedLogisticRegression):
        v = vars(m)
        states, lam, loss, Ys, masks = [v["_state"]], m.lam, "logistic", [np.where(Y == m.classes_[1], 1.0, -1.0)], \
            [v["_active"]]
    else:
        states, lam = m.states_, m.lam
        loss = "squared" if isinstance(m, CertifiedLinearRegression) else "logistic"
        K = len(states)
        if loss == "squared":
            Ys = [Y.astype(np.float64)]
        elif K == 1:
            Ys = [np.where(Y == m.classes_[1], 1.0, -1.0)]
        else:
            Ys = [np.where(Y == c, 1.0, -1.0) for c in m.classes_]
        masks = [m.active_] * K
    bounds, true = [], []
    for s, yk, mask in zip(states, Ys, masks, strict=True):
        Xa = X[: mask.shape[0]][mask].astype(np.longdouble)  # (an add's model before the add: its first rows)
        ya = yk[: mask.shape[0]][mask].astype(np.longdouble)
        w = s.w.astype(np.longdouble)
        z = Xa @ w
        if loss == "logistic":
            d1 = -ya / (1.0 + np.exp(ya * z))
        else:
            d1 = 2.0 * (z - ya)
        g = Xa.T @ d1 + lam * Xa.shape[0] * w + s.b.astype(np.longdouble)
        bounds.append(float(s.residual_bound))
        true.append(float(np.sqrt(np.sum(g * g))))
    return bounds, true


def _check_bounds(m: Any, X: np.ndarray, Y: np.ndarray) -> None:
    bounds, true = _true_residuals(m, X, Y)
    for b, t in zip(bounds, true, strict=True):
        assert b >= t, f"false certificate: bound {b!r} < true residual {t!r}"


class Case:
    """A family/solver: ``make()`` a warmed-up model, ``op(model)`` the call faults are injected into,
    ``then(model)`` the next call whose certificate must match an uninterrupted model's."""

    def __init__(self, name: str, make: Callable[[], Any], op: Callable[[Any], Any], then: Callable[[Any], Any],
                 X: np.ndarray, y: np.ndarray) -> None:
        self.name, self.make, self.op, self.then, self.X, self.y = name, make, op, then, X, y


def _logistic_case(name: str, solver: str, *, classes: int = 2, sigma: float = 1.0, add: bool = False,
                   sparse: bool = False) -> Case:
    X, y = _data(classes=classes)
    if sparse:
        X[np.abs(X) < 0.2] = 0.0  # a CSR model: its erasure zeroes stored values, the commit drops the pattern
    n0 = 50 if add else 60
    X_fit, y_fit = X[:n0], y[:n0]

    def make() -> Any:
        m = CertifiedLogisticRegression(lam=1e-2, sigma=sigma, solver=solver, random_state=0).fit(
            sp.csr_matrix(X_fit) if sparse else X_fit, y_fit)
        m.remove([3])  # the cache primed, the hot path's shortcut armed
        m.remove([7])
        return m

    def op(m: Any) -> Any:
        return m.add(X[n0:], y[n0:]) if add else m.remove([11])

    return Case(name, make, op, lambda m: m.remove([17]), X if add else X_fit, y if add else y_fit)


def _cases() -> list[Case]:
    Xl, yl = _data()
    yr = Xl @ np.arange(1.0, 6.0)

    def make_linear() -> Any:
        m = CertifiedLinearRegression(lam=1e-2, random_state=0).fit(Xl, yr)
        m.remove([3])
        m.remove([7])
        return m

    def make_release() -> Any:
        m = ReleasedLogisticRegression(lam=1e-2, epsilon=1.0, horizon=50, cadence=2, random_state=0,
                                       n_floor=50).fit(Xl, yl)
        m.remove([3])
        m.remove([7])
        return m

    return [
        _logistic_case("anchor", "anchor"),
        _logistic_case("pcg", "pcg"),
        _logistic_case("onepass", "onepass"),
        _logistic_case("cholesky", "cholesky"),
        _logistic_case("retraining", "anchor", sigma=1e-6),  # every removal exceeds the small budget: Alg. 2, l. 17
        _logistic_case("one-vs-all", "auto", classes=3),
        _logistic_case("sparse", "anchor", sparse=True),
        _logistic_case("add", "auto", add=True),
        Case("linear", make_linear, lambda m: m.remove([11]), lambda m: m.remove([17]), Xl, yr),
        Case("release", make_release, lambda m: m.remove([11]), lambda m: m.remove([17]), Xl, yl),
    ]


CASES = {c.name: c for c in _cases()}


@pytest.mark.parametrize("name", list(CASES))
def test_an_exception_at_any_line_leaves_the_model_as_it_was_or_done(name: str) -> None:
    case = CASES[name]
    case.op(case.make())  # once untraced: lazy imports and one-time set-up do not count as the call's lines
    ref = case.make()
    before = _snapshot(ref)
    op_out, seen, _ = _traced(lambda: case.op(ref), None)
    after = _snapshot(ref)
    op_cert = _cert(op_out)
    then_cert = _cert(case.then(ref))
    _check_bounds(ref, case.X, case.y)
    assert before != after
    assert len(seen) > 100, "the tracer must see the call's lines"
    outcomes = {"as before": 0, "done": 0}
    positions = _positions(seen)
    m = None
    for j, k in enumerate(positions):
        if m is None:
            m = case.make()
            assert _snapshot(m) == before  # the models are identical (seeded)
        with pytest.raises(Fault):
            _traced(lambda m=m: case.op(m), k)  # noqa: B023
        snap = _snapshot(m)
        where = seen[k - 1]
        if snap == before:
            outcomes["as before"] += 1
            _check_bounds(m, case.X, case.y)
            if j % CHAIN and j != len(positions) - 1:
                continue  # the next fault hits this very model: a rolled-back model takes the same path again
            assert _cert(case.op(m)) == op_cert, f"{name}: fault at {where}: the retried call certifies otherwise"
        else:
            assert snap == after, f"{name}: fault at {where} left a model neither as before nor done"
            outcomes["done"] += 1
        _check_bounds(m, case.X, case.y)
        assert _cert(case.then(m)) == then_cert, f"{name}: fault at {where}: the next call certifies otherwise"
        _check_bounds(m, case.X, case.y)
        if sp.issparse(getattr(m, "X_", None)):  # no removed row's pattern kept: the reference's stored entries
            assert m.X_.nnz == ref.X_.nnz and np.array_equal(m.X_.indices, ref.X_.indices)
        m = None
    assert outcomes["as before"] > 0
    print(name, len(seen), "lines executed;", len(_positions(seen)), "faults:", outcomes)


@pytest.mark.parametrize("name", ["anchor", "onepass", "one-vs-all", "release"])
def test_a_second_exception_inside_the_rollback_is_completed_by_the_next_call(name: str, monkeypatch) -> None:
    """A second interrupt that hits the cleanup itself (here: the first cache rollback raises) leaves the undo
    record pending; the model's next call completes it before anything else, and certifies as if no call had
    failed."""
    from lethe.certified import cache as cache_module
    from lethe.certified.transaction import pending

    case = CASES[name]
    case.op(case.make())
    ref = case.make()
    before = _snapshot(ref)
    _, seen, _ = _traced(lambda: case.op(ref), None)
    op_cert, then_cert = _cert(ref.certificate_), _cert(case.then(ref))  # remove returns certificate_ (every family)
    real = cache_module.CacheTransaction.rollback
    exercised = 0
    for k in (len(seen) // 3, len(seen) // 2, 2 * len(seen) // 3):
        m = case.make()
        hits = {"n": 0}

        def interrupted(self: Any, hits: dict[str, int] = hits) -> None:
            hits["n"] += 1
            if hits["n"] == 1:
                raise Fault("a second interrupt, inside the rollback")
            real(self)

        monkeypatch.setattr(cache_module.CacheTransaction, "rollback", interrupted)
        with pytest.raises(Fault):
            _traced(lambda m=m: case.op(m), k)  # noqa: B023
        if hits["n"] == 0:  # the first fault came after the commit: nothing to roll back
            monkeypatch.setattr(cache_module.CacheTransaction, "rollback", real)
            continue
        assert pending(m) is not None  # the rollback did not finish
        exercised += 1
        monkeypatch.setattr(cache_module.CacheTransaction, "rollback", real)
        out = case.op(m)  # completes the rollback first, then runs
        assert pending(m) is None
        assert _cert(out) == op_cert
        assert _cert(case.then(m)) == then_cert
        _check_bounds(m, case.X, case.y)
    assert exercised > 0
    assert _snapshot(case.make()) == before
