"""The removal hot path's shortcuts keep every number and every refusal (issue 25): the certificate's ε spent
computed when first read, and the caller's mask cleared in place (``clear_active``)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest

from lethe.certified.certificate import Certificate
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.certified.mechanism import CertifiedRemoval
from lethe.certified.noise import epsilon_spent


def _data(n: int = 400, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.where(X @ rng.normal(size=d) > 0, 1.0, -1.0)


@pytest.mark.parametrize("calibration", ["analytic", "paper"])
def test_epsilon_spent_read_later_is_the_eager_value(calibration: str) -> None:
    """Over random removals (and retrainings), the ε spent a certificate reports is exactly the function of its β
    computed independently, in to_dict at its field's place, and survives copy and pickle."""
    X, y = _data()
    rng = np.random.default_rng(1)
    for seed in range(4):
        est = CertifiedLogisticRegression(lam=10.0 ** rng.uniform(-4, -2), sigma=float(rng.uniform(0.05, 2.0)),
                                          calibration=calibration, random_state=seed).fit(X, y)
        mech = est.mechanism_
        for i in rng.permutation(X.shape[0])[:40]:
            cert = est.remove([int(i)])
            want = epsilon_spent(cert.residual_bound, mech.sigma, mech.delta, mech.noise, calibration=calibration)
            if rng.random() < 0.5:  # read through to_dict first, or the attribute first
                d = cert.to_dict()
                assert d["epsilon_spent"] == want
                assert cert.epsilon_spent == want
            else:
                assert cert.epsilon_spent == want
                d = cert.to_dict()
            assert list(d) == [f.name for f in dataclasses.fields(Certificate)]
            assert type(cert.epsilon_spent) is float
    fresh = est.remove([int(np.flatnonzero(est.active_)[0])])
    assert pickle.loads(pickle.dumps(fresh)).epsilon_spent == fresh.epsilon_spent
    assert copy.deepcopy(fresh) == fresh
    with pytest.raises(dataclasses.FrozenInstanceError):
        fresh.epsilon_spent = 0.0  # type: ignore[misc]


def test_clear_active_clears_on_success_and_restores_on_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(n=120, d=4, seed=2)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0)
    state, _ = mech.train(X, y, random_state=0)
    active = np.ones(X.shape[0], dtype=bool)
    ref = active.copy()
    state2, cert = mech.remove(state, X, y, [3, 7], active=active, random_state=0, clear_active=True)
    ref_state, ref_cert = mech.remove(state, X, y, [3, 7], active=ref, random_state=0)
    assert not active[3] and not active[7] and int(np.count_nonzero(active)) == X.shape[0] - 2
    assert ref.all()  # without the flag the caller's mask is not touched
    assert np.array_equal(state2.w, ref_state.w) and cert.residual_bound == ref_cert.residual_bound

    before = active.copy()

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("step failed")

    monkeypatch.setattr(CertifiedRemoval, "propose", boom)
    with pytest.raises(RuntimeError, match="step failed"):
        mech.remove(state2, X, y, [10, 11], active=active, random_state=0, clear_active=True)
    assert np.array_equal(active, before)  # a failed removal changes nothing
    with pytest.raises(TypeError, match="active must be a boolean NumPy array"):
        mech.remove(state2, X, y, [10], active=list(before), clear_active=True)


def test_the_estimator_mask_is_unchanged_after_a_failed_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(n=150, d=5, seed=3)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    est.remove([4])
    before = est.active_.copy()

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("step failed")

    monkeypatch.setattr(CertifiedRemoval, "propose", boom)
    with pytest.raises(RuntimeError):
        est.remove([5])
    assert np.array_equal(est.active_, before)
    monkeypatch.undo()
    est.remove([5])
    assert not est.active_[5]


# -- the estimator's mask: read-only between calls, compared in full only when it may have changed -------------------


def _count_compares(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    import lethe.certified.cache as cache_module

    calls = {"n": 0}
    real = cache_module.same_mask

    def counting(a: np.ndarray, b: np.ndarray) -> bool:
        calls["n"] += 1
        return real(a, b)

    monkeypatch.setattr(cache_module, "same_mask", counting)
    return calls


def test_the_fitted_mask_is_read_only_after_every_operation(tmp_path: object) -> None:
    from pathlib import Path

    X, y = _data(n=200, d=5, seed=4)
    y3 = np.digitize(X[:, 1], [-0.3, 0.3])
    for est, yy in ((CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), y),
                    (CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), y3)):
        est.fit(X[:150], yy[:150])
        assert not est.active_.flags.writeable
        est.remove([3])
        assert not est.active_.flags.writeable and not est.active_[3]
        est.add(X[150:160], yy[150:160])
        assert not est.active_.flags.writeable and est.active_.shape == (160,)
        with pytest.raises(ValueError, match="read-only"):
            est.active_[7] = False  # a user's write is refused; nothing changed
        assert est.active_[7]
        path = Path(str(tmp_path)) / f"m{len(est.classes_)}.npz"
        est.save(path)
        loaded = CertifiedLogisticRegression.load(path)
        assert not loaded.active_.flags.writeable
        loaded.remove([8])
        assert not loaded.active_.flags.writeable and not loaded.active_[8]


def test_an_unchanged_mask_is_not_compared_again_and_a_writable_one_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the second removal on, the model's own read-only mask is not compared in full (the cache advanced with it);
    a mask made writable again is compared, and one changed meanwhile is refused, as before."""
    X, y = _data(n=300, d=5, seed=5)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    ref = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    calls = _count_compares(monkeypatch)
    for step, row in enumerate((5, 9, 13, 21)):
        calls["n"] = 0
        cert = est.remove([row])
        assert (calls["n"] >= 1) if step == 0 else (calls["n"] == 0), f"removal {step}: {calls['n']} comparisons"
        ref_cert = ref.remove([row])
        assert cert.to_dict() | {"seconds": 0} == ref_cert.to_dict() | {"seconds": 0}
    # tampering: the mask made writable (on purpose) and a removed row marked active again
    est.active_.flags.writeable = True
    est.active_[5] = True
    calls["n"] = 0
    with pytest.raises(ValueError, match="active rows the model was trained on"):
        est.remove([30])
    assert calls["n"] >= 1  # compared in full, found different: the cache is not trusted
    est.active_[5] = False  # put back: the model is usable again, and compares while the mask stays writable
    calls["n"] = 0
    cert = est.remove([30])
    ref_cert = ref.remove([30])
    assert calls["n"] >= 1
    assert cert.to_dict() | {"seconds": 0} == ref_cert.to_dict() | {"seconds": 0}
    assert not est.active_.flags.writeable  # the removal made it the model's own again


def test_owned_is_trusted_only_for_the_array_the_cache_advanced_with(monkeypatch: pytest.MonkeyPatch) -> None:
    from lethe.certified.cache import NewtonCache

    X, y = _data(n=150, d=4, seed=6)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    active = np.ones(X.shape[0], dtype=bool)
    state, _ = mech.remove(state, X, y, [1], active=active, cache=cache, check_input=False, clear_active=True)
    active.flags.writeable = False
    calls = _count_compares(monkeypatch)
    assert cache.synced_count(X, state.w, active, owned=True) == X.shape[0] - 1 and calls["n"] == 0
    other = active.copy()
    other.flags.writeable = False
    assert cache.synced_count(X, state.w, other, owned=True) == X.shape[0] - 1 and calls["n"] == 1  # a copy
    assert cache.synced_count(X, state.w, active) == X.shape[0] - 1 and calls["n"] == 2  # not owned
    assert cache.synced_count(X, state.w + 1e-9, active, owned=True) is None  # other weights
    active.flags.writeable = True
    calls["n"] = 0
    assert cache.synced_count(X, state.w, active, owned=True) == X.shape[0] - 1 and calls["n"] == 1  # writable


def test_from_state_keeps_its_own_mask_and_leaves_the_callers_alone() -> None:
    """The service builds estimators through from_state with its own mask: the estimator takes a private read-only
    copy (the caller's array stays writable and unchanged, even one that cannot be made writable again)."""
    X, y = _data(n=120, d=4, seed=7)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    est.remove([2])
    mask = np.frombuffer(est.active_.tobytes(), dtype=bool)  # read-only, and cannot be made writable
    clone = CertifiedLogisticRegression.from_state(est.trained_params_, X=est.X_.copy(), Y=est.Y_.copy(), active=mask,
                                                   states=list(est.states_), n_features_in=est.n_features_in_,
                                                   classes=est.classes_, n_removed=1, solver=est.solver_)
    assert clone.active_ is not mask and not clone.active_.flags.writeable
    clone.remove([3])
    assert not clone.active_[3] and mask[3]
