"""The removal hot path's shortcuts keep every number and every refusal (issue 25): the certificate's ε spent
computed when first read, and the caller's mask cleared in place (``clear_active``)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest

from lethe.certified.certificate import Certificate
from lethe.certified.mechanism import CertifiedRemoval
from lethe.certified.noise import epsilon_spent
from lethe.estimators import CertifiedLogisticRegression


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
