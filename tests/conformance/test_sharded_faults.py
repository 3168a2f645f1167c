"""Faults inside a sharded removal (issue 35, What to build 1; issue 34, the conformance suite): an exception raised
at ANY executed line of ``remove``/``add`` — every line of lethe's own code the call runs, found by ``sys.settrace``
— leaves the model exactly as it was (predictions, shards, rows, keys, mask, ``certificate_``), and the same removal
then goes through. The removal commits in one step (``_commit_erasing``: the erasure of the rows and the adoption of
the prepared state); an exception at one of the few lines after that step (leaving the lock, returning) finds the
removal complete: the model then equals, array for array, the uninterrupted model, and ``certificate_`` is its
certificate. Nothing in between exists: no removal without its erasure, no certificate of a state not adopted."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, SGDClassifier

import lethe
from lethe.sharded import ShardedClassifier

LETHE = str(Path(lethe.__file__).resolve().parent)
KEY = b"fault-injection-hash-key"
FAST = LogisticRegression(solver="newton-cholesky")  # cloned for each shard (a few ms per fit)
ROW_ARRAYS = ("X_", "y_", "keys_", "active_", "shard_of_", "slice_of_", "seeds_", "classes_")


class Injected(BaseException):
    """Raised by the tracer: a BaseException, like KeyboardInterrupt (no ``except Exception`` swallows it)."""


class InjectedError(RuntimeError):
    """Raised by the tracer: an ordinary exception (a failed solver, a full disk)."""


def _lethe_frame(frame) -> bool:
    return frame.f_code.co_filename.startswith(LETHE)


def _run(call, at: int | None, exc: type[BaseException] = Injected) -> tuple[BaseException | None, list[tuple]]:
    """Run ``call()`` tracing lethe's lines; raise ``exc`` at the ``at``-th executed line (None: never). Returns the
    exception that escaped (None if the call returned) and the lines seen (file, function, line number)."""
    seen: list[tuple] = []

    def local(frame, event, arg):
        if event == "line":
            seen.append((frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno))
            if len(seen) == at:
                raise exc(f"injected at line event {at}")
        return local

    def tracer(frame, event, arg):
        return local if _lethe_frame(frame) else None

    sys.settrace(tracer)
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - whatever escapes is the outcome under test
        return e, seen
    finally:
        sys.settrace(None)
    return None, seen


def _snapshot(model) -> dict:
    d = {name: np.array(getattr(model, name), copy=True) for name in ROW_ARRAYS if name in model.__dict__}
    d["estimators"] = list(model.estimators_)
    d["checkpoints"] = [list(c) for c in model.checkpoints_]
    d["certificate"] = model.certificate_
    d["counters"] = (model.n_removed_, model.n_shard_fits_)
    return d


def _same_arrays(model, snap) -> bool:
    return all(np.array_equal(getattr(model, name), snap[name]) and getattr(model, name).dtype == snap[name].dtype
               for name in ROW_ARRAYS if name in snap)


def _as_it_was(model, snap, X, proba) -> bool:
    """The very same shard objects, checkpoints and certificate; equal arrays, counters and predictions."""
    return (_same_arrays(model, snap) and model.certificate_ is snap["certificate"]
            and all(a is b for a, b in zip(model.estimators_, snap["estimators"], strict=True))
            and all(all(a is b for a, b in zip(c, d, strict=True))
                    for c, d in zip(model.checkpoints_, snap["checkpoints"], strict=True))
            and (model.n_removed_, model.n_shard_fits_) == snap["counters"]
            and np.array_equal(model.predict_proba(X), proba))


def _cert_fields(cert) -> dict:
    return {k: v for k, v in cert.to_dict().items() if k != "seconds"}


def _as_completed(model, reference, X) -> bool:
    """Equal to the uninterrupted model: arrays, counters, predictions, and a certificate of this removal."""
    return (_same_arrays(model, _snapshot(reference)) and model.certificate_ is not None
            and _cert_fields(model.certificate_) == _cert_fields(reference.certificate_)
            and (model.n_removed_, model.n_shard_fits_) == (reference.n_removed_, reference.n_shard_fits_)
            and np.array_equal(model.predict_proba(X), reference.predict_proba(X)))


def _data(n: int = 48, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, "yes", "no").astype(str)
    y[5] = "rare"  # the only record of its class: removing it retrains every shard
    return X, y, np.array([f"person-{i:03d}" for i in range(n)])


SCENARIOS = {
    # name: (model factory, removal, rows removed before the one under test)
    "one-row": (lambda: ShardedClassifier(FAST, n_shards=3, key=KEY, random_state=0),
                lambda m: m.remove(indices=[7]), [2]),
    "keys-batch": (lambda: ShardedClassifier(FAST, n_shards=3, key=KEY, random_state=0),
                   lambda m: m.remove(keys=["person-010", "person-011", "person-030"]), [2]),
    "class-leaves": (lambda: ShardedClassifier(FAST, n_shards=3, key=KEY, random_state=0),
                     lambda m: m.remove(keys=["person-005"]), []),
    "slices-checkpoints": (lambda: ShardedClassifier(SGDClassifier(max_iter=5, tol=None), n_shards=2, n_slices=3,
                                                     key=KEY, random_state=0),
                           lambda m: m.remove(indices=[9, 20]), [1]),
}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(("name", "exc"), [(name, Injected) for name in sorted(SCENARIOS)]
                         + [("keys-batch", InjectedError)])
def test_an_exception_at_any_line_of_remove_leaves_the_model_as_it_was_or_completed(name, exc):
    make, removal, earlier = SCENARIOS[name]
    X, y, ids = _data()
    base = make().fit(X, y, sample_ids=ids)
    if earlier:
        base.remove(indices=earlier)  # a certificate_ to keep, rows already erased
    reference = copy.deepcopy(base)
    err, lines = _run(lambda: removal(reference), None)
    assert err is None and lines, "the uninterrupted removal runs lethe lines"
    outcomes = []
    for at in range(1, len(lines) + 1):
        model = copy.deepcopy(base)
        snap, proba = _snapshot(model), model.predict_proba(X)
        err, _ = _run(lambda m=model: removal(m), at, exc)
        assert isinstance(err, exc), (at, lines[at - 1], err)
        if _as_it_was(model, snap, X, proba):
            outcomes.append("as it was")
            removal(model)  # not stuck: the same removal then goes through, to the same model
            assert _as_completed(model, reference, X), (name, at, lines[at - 1])
        elif _as_completed(model, reference, X):
            outcomes.append("completed")
        else:
            pytest.fail(f"{name}: an exception at line event {at} {lines[at - 1]} left the model neither as it was "
                        "nor as the completed removal")
    # every line up to the commit leaves the model as it was; after it, only leaving the lock and returning
    # (the certificate's origin mark of lethe.model_origin, applied to what remove returns, runs after it too)
    first = outcomes.index("completed") if "completed" in outcomes else len(outcomes)
    after = [lines[i] for i in range(first, len(outcomes)) if not lines[i][0].endswith("model_origin.py")]
    assert outcomes[first:] == ["completed"] * (len(outcomes) - first) and len(after) <= 3, (
        name, [(o, lines[i]) for i, o in enumerate(outcomes) if o == "completed"])
    assert lines[first - 1][1] == "_commit_erasing"  # the last line leaving it as it was: the commit


@pytest.mark.parametrize("call", ["add", "bad-removal"])
def test_an_exception_at_any_line_of_a_refused_call_changes_nothing(call):
    X, y, ids = _data()
    base = ShardedClassifier(FAST, n_shards=3, key=KEY, random_state=0).fit(X, y, sample_ids=ids)
    base.remove(indices=[2])

    def attempt(m):
        if call == "add":
            m.add(X[:2], y[:2])
        else:
            m.remove(keys=["person-002"])  # already removed: refused

    err, lines = _run(lambda: attempt(base), None)
    assert isinstance(err, NotImplementedError if call == "add" else ValueError) and lines
    for at in range(1, len(lines) + 1):
        model = copy.deepcopy(base)
        snap, proba = _snapshot(model), model.predict_proba(X)
        err, _ = _run(lambda m=model: attempt(m), at)
        assert isinstance(err, Injected), (at, err)
        assert _as_it_was(model, snap, X, proba), (call, at, lines[at - 1])


def test_the_tracer_reaches_the_commit_and_the_retraining():
    """The injection covers the call tree in lethe (not only ``remove``'s own lines): the retraining of a shard,
    the shared row checks of every family, and the commit."""
    X, y, ids = _data()
    model = ShardedClassifier(FAST, n_shards=3, key=KEY, random_state=0).fit(X, y, sample_ids=ids)
    _, lines = _run(lambda: model.remove(indices=[7]), None)
    functions = {(Path(f).name, fn) for f, fn, _ in lines}
    assert {("base.py", "remove"), ("base.py", "_train_shard"), ("base.py", "_commit_erasing"),
            ("estimator_data.py", "removal_rows"), ("rows.py", "check_indices")} <= functions
