"""Noisy-GD files are authenticated and checked at load (issue 28's gap for NoisyGDCurator, and the Noisy-GD/PNSGD
estimators' own save/load): edits refused, genuine round trip, the tag policy.

Every edited file is refused by its tag by default; loaded with ``trust_unauthenticated=True``, the invariant checks
still refuse what would make a certificate false or the state inconsistent: a
certificate's ε (the accountant's numbers are recomputed), σ² in the configuration (it no longer satisfies Thm G.15's
ρ, or disagrees with the estimator's parameters), the step counters, a row outside the unit ball, NaN in θ, a
removed row restored. Any change at all is refused by the HMAC tag. Mutation check: with the
certificate recomputation of ``NoisyGDCurator.from_state`` disabled, the edited-ε file loads (the test
``test_curator_refuses_edits_without_a_key[certificate epsilon]`` then fails).
"""

from __future__ import annotations

import numpy as np
import pytest

from lethe.io import KEY_ENV, TAG_KEY, ModelFileError
from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.estimators import NoisyGDLogisticRegression
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.pnsgd import PNSGDLogisticRegression
from lethe.noisygd.schedule import convex_schedule

from .._files import KEY, edit_model_file, no_key_in_environment, read_model_file, set_in  # noqa: F401 (autouse fixture)


def _data(n=80, p=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0)


def _curator(p=1):
    X, y = _data()
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.1, n=80, d=3, r=2, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=0.5)
    cur = NoisyGDCurator(LogisticModel(3), CuratorConfig.from_convex_schedule(s, p=p), random_state=0)
    cur.learn(Database(X, y))
    cur.unlearn(EditRequest.deletion([4], 3))
    cur.unlearn(EditRequest.deletion([9, 11], 3), p=2)
    return cur


def _scale_config_sigma2(meta):
    meta["config"]["sigma2"] *= 4.0


CURATOR_EDITS = {
    "certificate epsilon": (None, lambda m: set_in(m, ["certificates", 2, "epsilon_dd"], 1e-3)),
    "certificate adaptivity": (None, lambda m: set_in(m, ["certificates", 2, "p"], 0)),
    "sigma2": (None, _scale_config_sigma2),
    "step counter": (None, lambda m: set_in(m, ["step"], 1)),
    "total steps": (None, lambda m: set_in(m, ["total_steps"], m["total_steps"] + 1)),
    "row outside the ball": (lambda a: a["X"].__setitem__((0, 0), 5.0), None),
    "NaN theta": (lambda a: a["theta"].__setitem__(0, np.nan), None),
    "theta shape": (lambda a: a.__setitem__("theta", a["theta"][:-1]), None),
    "bad label": (lambda a: a["y"].__setitem__(0, 0.5), None),
    "extra array": (lambda a: a.__setitem__("noise", np.zeros(3)), None),
}


def test_curator_round_trip_continues_bit_identically(tmp_path):
    cur = _curator()
    for key in (None, KEY):
        path = cur.save(tmp_path / f"c{key is None}.npz", key=key)
        again = NoisyGDCurator.load(path, key=key)
        assert again.certificates == cur.certificates and again.step == cur.step
        np.testing.assert_array_equal(again.theta, cur.theta)
    a, b = _curator(), NoisyGDCurator.load(_curator().save(tmp_path / "d.npz"))
    u = EditRequest.deletion([20], 3)
    a.unlearn(u), b.unlearn(u)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.certificates == b.certificates


@pytest.mark.parametrize("what", sorted(CURATOR_EDITS))
def test_curator_refuses_edits_without_a_key(tmp_path, what):
    path = _curator().save(tmp_path / "c.npz")
    arrays_fn, meta_fn = CURATOR_EDITS[what]
    bad = edit_model_file(path, tmp_path / "bad.npz", arrays_fn, meta_fn)
    with pytest.raises(ModelFileError, match="failed authentication"):  # by default: the tag
        NoisyGDCurator.load(bad)
    with pytest.raises(ModelFileError, match="refused|does not hold"):  # trusted anyway: the invariant checks
        NoisyGDCurator.load(bad, trust_unauthenticated=True)


@pytest.mark.parametrize("what", ["certificate epsilon", "NaN theta"])
def test_curator_tag_refuses_any_edit_and_the_policy_holds(tmp_path, what, monkeypatch):
    path = _curator().save(tmp_path / "c.npz", key=KEY)
    arrays_fn, meta_fn = CURATOR_EDITS[what]
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyGDCurator.load(edit_model_file(path, tmp_path / "bad.npz", arrays_fn, meta_fn), key=KEY)
    # even an edit the invariants cannot see (theta moved by a little) is refused by the tag
    nudged = edit_model_file(path, tmp_path / "nudge.npz", lambda a: a["theta"].__setitem__(0, a["theta"][0] + 1e-3))
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyGDCurator.load(nudged, key=KEY)
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyGDCurator.load(path, key=bytes(32))  # wrong key
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyGDCurator.load(path)  # tagged under another key than this machine's
    untagged = edit_model_file(path, tmp_path / "u.npz", lambda a: a.pop(TAG_KEY))
    with pytest.raises(ModelFileError, match="no authentication tag"):
        NoisyGDCurator.load(untagged, key=KEY)  # an untagged (stripped) file is refused
    with pytest.raises(ModelFileError, match="no authentication tag"):
        NoisyGDCurator.load(untagged)
    trusted = NoisyGDCurator.load(untagged, trust_unauthenticated=True)
    cert = trusted.unlearn(EditRequest.deletion([30], 3))
    assert cert.to_dict()["authenticated"] is False and cert.guarantee.startswith("NOT AUTHENTICATED")
    monkeypatch.setenv(KEY_ENV, KEY.hex())  # the environment's key is used by default, for save and load
    env_path = _curator().save(tmp_path / "e.npz")
    assert TAG_KEY in read_model_file(env_path)[0]
    NoisyGDCurator.load(env_path)


def _estimator():
    X, y = _data(n=300, p=4)
    est = NoisyGDLogisticRegression(random_state=0, adaptivity=1).fit(X, y, sample_ids=np.arange(300) + 1000)
    est.remove([2])
    est.remove(keys=[1010])
    return est, X


ESTIMATOR_EDITS = {
    "parameters": (None, lambda m: set_in(m, ["params", "lam"], 0.02)),
    "config and parameters": (None, lambda m: set_in(m, ["curator", "config", "k_unlearn"],
                                                   m["curator"]["config"]["k_unlearn"] - 1)),
    "removed row restored": (lambda a: a["active"].__setitem__(2, True), None),
    "removed row's values": (lambda a: a["X"].__setitem__((10, 0), 0.1), None),
    "key of a removed row": (lambda a: a["keys"].__setitem__(2, 1002), None),
}


@pytest.mark.parametrize("what", sorted(ESTIMATOR_EDITS))
def test_noisygd_estimator_file_refuses_edits(tmp_path, what):
    est, _ = _estimator()
    path = est.save(tmp_path / "m.npz")
    arrays_fn, meta_fn = ESTIMATOR_EDITS[what]
    bad = edit_model_file(path, tmp_path / "bad.npz", arrays_fn, meta_fn)
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyGDLogisticRegression.load(bad)
    with pytest.raises(ModelFileError, match="refused"):
        NoisyGDLogisticRegression.load(bad, trust_unauthenticated=True)


def test_noisygd_estimator_round_trip(tmp_path):
    est, X = _estimator()
    again = NoisyGDLogisticRegression.load(est.save(tmp_path / "m.npz", key=KEY), key=KEY)
    np.testing.assert_array_equal(again.coef_, est.coef_)
    assert again.certificate_ == est.certificate_ and again.curator_.certificates == est.curator_.certificates
    a, b = est.remove(keys=[1020]), again.remove(keys=[1020])
    assert a == b  # the generator state travels with the curator: the next removal is the same
    np.testing.assert_array_equal(again.coef_, est.coef_)


def _pnsgd():
    X, y = _data(n=200, p=3)
    est = PNSGDLogisticRegression(batch_size=20, learn_epochs=2, random_state=0).fit(X, y)
    est.remove([1, 2])
    est.remove([5])
    return est, X


PNSGD_EDITS = {
    "request history": (None, lambda m: set_in(m, ["removed"], [1, 2])),
    "phase steps": (None, lambda m: set_in(m, ["phase_steps", 0], m["phase_steps"][0] - 1)),
    "certificate epsilon": (None, lambda m: set_in(m, ["certificates", 0, "epsilon_certified"], 1e-6)),
    "epsilon target": (None, lambda m: set_in(m, ["params", "epsilon"], 10.0)),
    "theta outside the radius": (lambda a: a.__setitem__("theta", a["theta"] * 1e6), None),
    "removed row restored": (lambda a: a["gone"].__setitem__(5, False), None),
}


@pytest.mark.parametrize("what", sorted(PNSGD_EDITS))
def test_pnsgd_file_refuses_edits(tmp_path, what):
    est, _ = _pnsgd()
    path = est.save(tmp_path / "m.npz")
    arrays_fn, meta_fn = PNSGD_EDITS[what]
    bad = edit_model_file(path, tmp_path / "bad.npz", arrays_fn, meta_fn)
    with pytest.raises(ModelFileError, match="failed authentication"):
        PNSGDLogisticRegression.load(bad)
    with pytest.raises(ModelFileError, match="refused"):
        PNSGDLogisticRegression.load(bad, trust_unauthenticated=True)


def test_pnsgd_round_trip_draws_fresh_noise(tmp_path):
    est, X = _pnsgd()
    again = PNSGDLogisticRegression.load(est.save(tmp_path / "m.npz"))
    np.testing.assert_array_equal(again.decision_function(X), est.decision_function(X))
    assert again.certificate_ == est.certificate_
    a, b = est.remove([9]), again.remove([9])
    assert a == b  # the same request history certifies the same numbers ...
    assert not np.array_equal(again.theta_, est.theta_)  # ... with fresh noise (the generator is never saved)
