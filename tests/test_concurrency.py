"""Concurrent calls on one fitted model (issue 28): serialised by the model's lock, never a false certificate.

Many threads remove (and add, and predict) on ONE model at once. Afterwards:

* every certificate describes its own state: the probe subclasses below record, inside the call (under the lock
  the call holds), the state each certificate was issued for; its residual bound is checked against the exact
  ‖∇L_b(w; D′)‖ of that state, recomputed in long double (tests/certified/_exact.py);
* the certificates form one serial history: their ``n_remaining`` are all distinct (two certificates issued from
  the same old state would share one);
* n of every state equals its active rows, and the removed rows are exactly the union of the requests.

On the code before issue 28 (no lock) these fail (two threads: both return certificates, the model reflects one
removal; eight threads: n and active rows disagree, bounds exceeded, ``onepass`` raises). A switch interval of
1 µs makes the interpreter change threads often, so the interleavings happen within a few removals.
"""

from __future__ import annotations

import copy
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from lethe._locking import instance_lock, serialised
from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression, joint_residual

from .certified._exact import grad_ld, norm_ld

THREADS = 8
PER_THREAD = 15


@contextmanager
def _busy_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_threads(work: list[Callable[[], Any]]) -> list[Any]:
    """Run each callable in its own thread, all released at once; re-raise the first error."""
    barrier = threading.Barrier(len(work))
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work[i]()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    with _busy_switching():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return results


def _snapshot(model: Any) -> dict[str, Any]:
    """What a certificate describes: every binary model's (w, b, n, β) and its rows, copied at issue time."""
    return {"states": [(st.w.copy(), st.b.copy(), st.n, st.residual_bound) for st in model.states_],
            "rows": [(model.active_ if model.members_ is None else model.active_ & model.members_[k]).copy()
                     for k in range(len(model.states_))],
            "X": model.X_.copy(), "Y": model.Y_.copy(),
            "step": (int(model.n_removed_), int(model.X_.shape[0]))}  # one op changes one of them by one


class ProbedLogistic(CertifiedLogisticRegression):
    """Records the state each certificate was issued for, inside the certified call (under its lock)."""

    def remove_rows(self, idx: np.ndarray) -> Any:
        cert = super().remove_rows(idx)
        self.log_.append((cert, _snapshot(self)))
        return cert

    @serialised  # an override of a public method takes the lock itself (remove_rows runs inside remove's)
    def add(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        cert = super().add(X, y, sample_ids)
        self.log_.append((cert, _snapshot(self)))
        return cert


class ProbedLinear(CertifiedLinearRegression):
    def remove_rows(self, idx: np.ndarray) -> Any:
        cert = super().remove_rows(idx)
        self.log_.append((cert, _snapshot(self)))
        return cert


def _grad_squared_ld(w, b, X, y, lam):
    """∇L_b(w; D) = 2 Xᵀ(Xw − y) + λ n w + b for the squared loss, in long double."""
    Xl, yl, wl, bl = (np.asarray(a, dtype=np.longdouble) for a in (X, y, w, b))
    return 2 * Xl.T @ (Xl @ wl - yl) + np.longdouble(lam) * Xl.shape[0] * wl + bl


def _check_history(model: Any, log: list[tuple[Any, dict[str, Any]]], n_requests: int, squared: bool = False):
    """Every certificate's bound ≥ the exact residual of the state it was issued for; one serial history."""
    assert len(log) == n_requests, f"{n_requests} requests, {len(log)} certificates"
    lam = model.trained_params_["lam"]
    noise = model.mechanism_.noise
    for cert, snap in log:
        exact = []
        for (w, b, n, beta), rows, y in zip(snap["states"], snap["rows"], snap["Y"], strict=True):
            assert n == int(np.count_nonzero(rows)), "a state's n disagrees with its active rows"
            g = (_grad_squared_ld if squared else grad_ld)(w, b, snap["X"][rows], y[rows], lam)
            exact.append(norm_ld(g))
            assert exact[-1] <= beta, f"bound {beta:.6g} below the exact residual {exact[-1]:.6g}"
        # the certificate is the one of this state (not of a state another thread left)
        assert cert.residual_bound == joint_residual([s[3] for s in snap["states"]], noise)
        assert joint_residual(exact, noise) <= cert.residual_bound
        assert cert.residual_bound <= cert.budget or noise == "none"
    steps = [snap["step"] for _, snap in log]
    assert len(set(steps)) == len(steps), "two operations left the same state: they were not serialised"
    assert model.n_removed_ + model.X_.shape[0] == max(a + b for a, b in steps)
    for k, st in enumerate(model.states_):
        rows = model.active_ if model.members_ is None else model.active_ & model.members_[k]
        assert st.n == int(np.count_nonzero(rows))


def _unit_rows(n: int, d: int, seed: int, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, -1) if classes == 2 else np.argmax(X[:, :classes], axis=1)
    return X, y


def _requests(n: int, seed: int) -> list[list[int]]:
    """THREADS disjoint lists of PER_THREAD rows to remove, one row per request."""
    rows = np.random.default_rng(seed).permutation(n)[: THREADS * PER_THREAD]
    return [rows[t * PER_THREAD:(t + 1) * PER_THREAD].tolist() for t in range(THREADS)]


MODELS = {
    "binary-auto": lambda: ProbedLogistic(lam=1e-2, sigma=1.0, random_state=0),
    "binary-onepass": lambda: ProbedLogistic(lam=1e-2, sigma=1.0, solver="onepass", random_state=0),
    "binary-pcg-paper": lambda: ProbedLogistic(lam=1e-2, sigma=0.5, solver="pcg", bound="paper", random_state=0),
    "one-vs-all": lambda: ProbedLogistic(lam=1e-2, sigma=1.0, random_state=0),
    "one-vs-all-subsampled": lambda: ProbedLogistic(lam=1e-2, sigma=1.0, negative_subsample=1.0, random_state=0),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_concurrent_removals_publish_only_true_certificates(name):
    classes = 3 if name.startswith("one-vs-all") else 2
    X, y = _unit_rows(400, 6, seed=1, classes=classes)
    model = MODELS[name]().fit(X, y)
    model.log_ = []
    requests = _requests(X.shape[0], seed=2)

    def worker(rows: list[int]) -> Callable[[], list[Any]]:
        return lambda: [model.remove([r]) for r in rows]

    _run_threads([worker(r) for r in requests])
    _check_history(model, model.log_, THREADS * PER_THREAD)
    removed = np.flatnonzero(~model.active_)
    np.testing.assert_array_equal(removed, np.sort(np.concatenate(requests)))
    assert model.n_removed_ == removed.size and model.n_remaining_ == X.shape[0] - removed.size


def test_concurrent_removals_from_a_linear_regression_stay_exact():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 5))
    y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=300)
    model = ProbedLinear(lam=1e-3).fit(X, y)
    model.log_ = []
    requests = _requests(X.shape[0], seed=4)
    _run_threads([lambda rows=rows: [model.remove([r]) for r in rows] for rows in requests])
    _check_history(model, model.log_, THREADS * PER_THREAD, squared=True)
    np.testing.assert_array_equal(np.flatnonzero(~model.active_), np.sort(np.concatenate(requests)))


def test_mixed_removals_additions_and_predictions_on_one_model():
    X, y = _unit_rows(400, 6, seed=5)
    Xa, ya = _unit_rows(4 * 10, 6, seed=6)
    model = ProbedLogistic(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    model.log_ = []
    requests = _requests(X.shape[0], seed=7)[:4]  # 4 removing threads (rows of the initial data only)
    predictions: list[tuple[np.ndarray, np.ndarray]] = []

    def remover(rows: list[int]) -> Callable[[], None]:
        def run() -> None:
            for r in rows:
                model.remove([r])
        return run

    def adder(part: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(part * 10, part * 10 + 10):
                model.add(Xa[i:i + 1], ya[i:i + 1])
        return run

    def predictor() -> None:
        for _ in range(20):
            with instance_lock(model):  # a consistent (w, state) pair to compare the prediction with
                expected = np.where(X @ model.coef_[0] > 0, 1, -1)
                predictions.append((model.predict(X), expected))
            status = model.budget_status()
            assert status["residual_bound"] <= status["budget"]

    _run_threads([remover(r) for r in requests] + [adder(p) for p in range(2)] + [predictor, predictor])
    _check_history(model, model.log_, 4 * PER_THREAD + 2 * 10)
    assert model.X_.shape[0] == X.shape[0] + 20
    np.testing.assert_array_equal(np.flatnonzero(~model.active_), np.sort(np.concatenate(requests)))
    for got, expected in predictions:
        np.testing.assert_array_equal(got, expected)


def test_the_lock_is_not_a_parameter_and_is_not_copied_or_pickled():
    import pickle

    from sklearn.base import clone

    model = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0)
    lock = instance_lock(model)
    assert instance_lock(model) is lock and "_lethe_lock" not in model.get_params()
    twin = pickle.loads(pickle.dumps(model))  # unfitted: pickles without its lock
    assert instance_lock(twin) is not lock
    assert instance_lock(copy.deepcopy(model)) is not lock and instance_lock(clone(model)) is not lock
    assert instance_lock(copy.copy(model)) is not lock


# -- the other front ends ----------------------------------------------------------------------------------------
def test_concurrent_removals_through_an_unlearning_pipeline():
    from sklearn.preprocessing import Normalizer

    from lethe.pipeline import make_unlearning_pipeline

    X, y = _unit_rows(400, 6, seed=8)
    pipe = make_unlearning_pipeline(Normalizer(), ProbedLogistic(lam=1e-2, sigma=1.0, random_state=0)).fit(X, y)
    final = pipe[-1]
    final.log_ = []
    requests = _requests(X.shape[0], seed=9)
    _run_threads([lambda rows=rows: [pipe.remove([r]) for r in rows] for rows in requests]
                 + [lambda: [pipe.predict(X) for _ in range(10)]])
    _check_history(final, final.log_, THREADS * PER_THREAD)
    np.testing.assert_array_equal(np.flatnonzero(~final.active_), np.sort(np.concatenate(requests)))


def test_concurrent_noisy_gd_removals_form_one_history():
    from lethe.noisygd.estimators import NoisyGDLogisticRegression

    X, y = _unit_rows(200, 4, seed=10)
    clf = NoisyGDLogisticRegression(random_state=0).fit(X, y)
    requests = [[4 * t + j] for t in range(4) for j in range(4)]
    certs = _run_threads([lambda rows=rows: clf.remove(rows) for rows in requests])
    assert sorted(c.step for c in certs) == list(range(1, len(requests) + 1))  # one certificate per state
    gone = np.flatnonzero(~np.any(clf.curator_.database.X, axis=1))
    np.testing.assert_array_equal(gone, np.sort(np.concatenate(requests)))
    np.testing.assert_array_equal(clf.coef_.ravel()[: X.shape[1]], clf.curator_.theta.ravel()[: X.shape[1]])


def test_concurrent_pnsgd_removals_form_one_history(tmp_path):
    from lethe.io import load_npz
    from lethe.noisygd.pnsgd import PNSGDLogisticRegression

    X, y = _unit_rows(300, 4, seed=11)
    clf = PNSGDLogisticRegression(batch_size=32, learn_epochs=3, random_state=0).fit(X, y)
    requests = [[3 * t + j] for t in range(4) for j in range(3)]
    certs = _run_threads([lambda rows=rows: clf.remove(rows) for rows in requests])
    assert sorted(c.request for c in certs) == list(range(1, len(requests) + 1))
    # the model's state as its file holds it (the rows, which are gone, the request history)
    arrays, meta = load_npz(clf.save(tmp_path / "m.npz", key=b"k" * 32), key=b"k" * 32)
    assert int(arrays["gone"].sum()) == len(requests) == len(meta["removed"]) == len(meta["phase_steps"])
    gone = np.flatnonzero(~np.any(arrays["X"], axis=1))  # every removed row replaced by the zero record, none restored
    np.testing.assert_array_equal(gone, np.sort(np.concatenate(requests)))


def test_concurrent_removals_from_a_noisy_fine_tuned_network():
    pytest.importorskip("torch")
    from lethe.nn.estimators import NoisyFineTuneClassifier

    X, y = _unit_rows(120, 4, seed=12)
    clf = NoisyFineTuneClassifier(train_epochs=2, unlearn_steps=2, post_steps=2, batch_size=16,
                                  random_state=0).fit(X, y)
    # indices are ORIGINAL positions (issue 25): thread t removes rows 3t, 3t+1, 3t+2
    certs = _run_threads([lambda t=t: [clf.remove([3 * t + j]) for j in range(3)] for t in range(4)])
    assert sum(len(c) for c in certs) == 12 == len(clf.certificates_)
    assert clf.X_.shape[0] == clf.y_.shape[0] == X.shape[0] - 12  # each request removed its own row
    np.testing.assert_array_equal(clf.X_.numpy(), X[12:].astype(np.float32))  # exactly rows 0..11 left


def test_output_perturbation_predictions_never_mix_two_fits():
    from lethe.privacy.output_perturbation import OutputPerturbationLogisticRegression

    XA, yA = _unit_rows(300, 4, seed=13)
    XB, yB = XA, -yA
    clf = OutputPerturbationLogisticRegression(lam=0.05, fit_intercept=True, random_state=0).fit(XA, yA)
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def fitter(Xf, yf):
        def run() -> None:
            for _ in range(5):
                clf.fit(Xf, yf)
        return run

    def predictor() -> None:
        for _ in range(50):
            with instance_lock(clf):
                seen.append((clf.decision_function(XA), clf.coef_.copy(), clf.intercept_.copy()))

    _run_threads([fitter(XA, yA), fitter(XB, yB), predictor, predictor])
    for scores, coef, intercept in seen:
        np.testing.assert_allclose(scores, XA @ coef[0] + intercept[0], rtol=1e-12, atol=1e-12)


# -- no copies of a secret ------------------------------------------------------------------------------------------
def _secret_models() -> list[tuple[Any, np.ndarray, np.ndarray]]:
    from lethe.noisygd.estimators import NoisyGDLogisticRegression
    from lethe.noisygd.pnsgd import PNSGDLogisticRegression

    X, y = _unit_rows(200, 4, seed=14)
    X3, y3 = _unit_rows(200, 4, seed=14, classes=3)
    out = [(CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), X, y),
           (CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), X3, y3),
           (CertifiedLinearRegression(lam=1e-3, noise="gaussian", sigma=1.0, random_state=0), X, X[:, 0]),
           (NoisyGDLogisticRegression(random_state=0), X, y),
           (PNSGDLogisticRegression(batch_size=32, learn_epochs=2, random_state=0), X, y)]
    try:
        from lethe.nn.estimators import NoisyFineTuneClassifier

        out.append((NoisyFineTuneClassifier(train_epochs=1, unlearn_steps=2, random_state=0), X, y))
    except ImportError:  # pragma: no cover - torch is an optional extra
        pass
    return out


@pytest.mark.parametrize("index", range(6))
def test_a_fitted_model_holding_secret_noise_refuses_copies(index):
    from sklearn.base import clone

    models = _secret_models()
    if index >= len(models):
        pytest.skip("torch is not installed")
    model, X, y = models[index]
    assert type(copy.deepcopy(model)) is type(model)  # unfitted: copies
    model.fit(X, y)
    for how in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match=r"SECRET noise.*clone\(model\)\.fit"):
            how(model)
    twin = clone(model).fit(X, y)  # the supported path: a second model with fresh noise
    assert type(twin) is type(model)


@pytest.mark.parametrize("index", [3, 4, 5])
def test_a_fitted_noisy_model_refuses_pickle_naming_its_secret_and_refuses_add(index):
    """SerialisedModel's one refusal: pickle names what the model holds and sends to save/load; add says why not."""
    import pickle

    models = _secret_models()
    if index >= len(models):
        pytest.skip("torch is not installed")
    model, X, y = models[index]
    assert type(pickle.loads(pickle.dumps(model))) is type(model)  # unfitted: pickles
    model.fit(X, y)
    secret = type(model)._secret_state
    assert "SECRET" in secret
    with pytest.raises(TypeError, match=re.escape(f"cannot be pickled: it holds {secret}") + r".*\.load\(path\)"):
        pickle.dumps(model)
    with pytest.raises(NotImplementedError, match=r"cannot add records \(supports_add = False\): \w"):
        model.add(X[:2], y[:2])
    assert model.supports_add is False


def test_serialised_model_refusals_raise_the_class_error_only_when_fitted():
    import pickle

    from lethe._locking import SerialisedModel, instance_lock

    class Model(SerialisedModel):
        _fitted_attribute = "w_"
        _secret_state = "the secret w_"
        _refusal_error = ValueError

    m = Model()
    m.b = 2.0
    with instance_lock(m):  # the lock exists and is left out of the state
        assert type(copy.copy(m)) is Model and m.__getstate__() == {"b": 2.0}
    m.w_ = 1.0
    for how, word in ((copy.copy, "copied"), (copy.deepcopy, "copied"), (pickle.dumps, "pickled")):
        with pytest.raises(ValueError, match=f"A fitted Model cannot be {word}"):
            how(m)


def test_a_fitted_pipeline_refuses_copies_through_its_final_step():
    from sklearn.preprocessing import Normalizer

    from lethe.pipeline import make_unlearning_pipeline

    X, y = _unit_rows(200, 4, seed=15)
    pipe = make_unlearning_pipeline(Normalizer(), CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0))
    copy.deepcopy(pipe)
    pipe.fit(X, y)
    with pytest.raises(TypeError, match="SECRET"):
        copy.deepcopy(pipe)


def test_a_removal_never_changes_which_attributes_a_fitted_model_has():
    """Readers that take no lock (scikit-learn's ``check_is_fitted``, run by ``Pipeline.predict``, iterates
    ``vars(model)``) must never see the instance's ``__dict__`` change size in the middle of a removal: the race CI
    caught as "dictionary changed size during iteration" when ``remove`` parked its validated rows in ``__dict__``.
    Deterministic: the attribute names seen inside the certified call equal those after ``fit`` and after the call
    (mutation check: parking anything in ``__dict__`` during ``remove`` fails it)."""
    X, y = _unit_rows(120, 4, seed=12)

    class Seen(CertifiedLogisticRegression):
        def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
            self.inside_.append(set(vars(self)))
            return super().remove_rows(idx, random_state=random_state)

    model = Seen(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    model.inside_ = []
    model.remove([0])  # the first removal may set what fit did not; after it the set is fixed
    names = set(vars(model))
    for r in range(1, 6):
        model.remove([r])
        assert set(vars(model)) == names
    assert all(seen == names for seen in model.inside_[1:])
