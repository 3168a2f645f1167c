"""ReleasedLogisticRegression (lethe.release): fit / remove / cadence / horizon refusal / persistence / predictions
from the latest release only / no copies of the secret centre; and the mechanism's residual_cap hook."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from sklearn.base import clone

from lethe.certified.bounds import release_sensitivity
from lethe.certified.mechanism import Certificate, CertifiedRemoval, NewtonCache
from lethe.exceptions import BudgetExceededError, SecretStateError
from lethe.privacy.release import release_epsilon_spent, release_sigma
from lethe.release import Release, ReleasedLogisticRegression

from ._certified import exact_residual


def _data(n=3000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X @ np.linspace(1, -1, d) + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


def _model(**kw):
    params = dict(lam=1e-2, epsilon=1.0, delta=1e-5, horizon=20, random_state=0)
    params.update(kw)
    return ReleasedLogisticRegression(**params)


def _centre_residual(m, X, y):
    """‖∇L_0(w̃; D′)‖ of the secret centre on the rows still present (b = 0): the caller's unit rows (no intercept
    column, no normalisation: what the model holds), labels y ∈ {0, 1} as ±1."""
    keep = m.active_
    return exact_residual(m.mechanism_, m.state_, X[keep], np.where(y[keep] == 1, 1.0, -1.0))


def _held(m):
    """Every numpy array reachable from the model's attributes (its held rows, labels and keys among them)."""
    seen: set[int] = set()
    out: list[np.ndarray] = []

    def walk(obj, depth):
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            out.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, list | tuple):
            for v in obj:
                walk(v, depth + 1)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("lethe"):
            walk(vars(obj), depth + 1)

    walk(m, 0)
    return out


def _holds_row(m, row):
    """Whether the model still holds the feature vector ``row`` (its float64 bytes) in any array."""
    blob = b"".join(np.ascontiguousarray(a).tobytes() for a in _held(m) if a.dtype == np.float64)
    return np.ascontiguousarray(row, dtype=np.float64).tobytes() in blob


def _holds_key(m, key):
    return any(key in set(a.ravel().tolist()) for a in _held(m) if a.dtype.kind in "UO")


def test_fit_publishes_release_zero_with_the_calibrated_noise():
    X, y = _data()
    m = _model().fit(X, y)
    assert len(m.releases_) == 1 and m.release_ is m.releases_[0]
    rel = m.release_
    assert isinstance(rel, Release) and rel.version == 0 and rel.coef.shape == (X.shape[1],)
    cert = rel.certificate
    assert cert.observer == "every published release"
    assert m.n_floor_ == 2560  # auto: 15 * 3000 / 16 = 2812 rounded down to 4 significant bits
    delta_ = release_sensitivity(1e-2, 2560, 0.01, loss_at_zero=np.log(2) * (1 + 1e-15))
    assert cert.sensitivity == m.sensitivity_ == delta_
    assert cert.sigma == m.sigma_ == release_sigma(1.0, 1e-5, 20, delta_)
    assert cert.releases == 1 and cert.horizon == 20
    assert cert.epsilon == pytest.approx(release_epsilon_spent(1, m.sigma_, delta_, 1e-5))
    assert cert.epsilon < cert.epsilon_budget == 1.0
    assert m.privacy_spent() == {"epsilon": cert.epsilon, "delta": 1e-5, "releases": 1, "horizon": 20}
    assert set(cert.to_dict()) >= {"observer", "epsilon", "delta", "sigma", "sensitivity", "horizon", "theorems"}
    # the centre is the UNPERTURBED minimiser to the certified residual
    assert not np.any(m.state_.b)
    with pytest.raises(ValueError):
        m.active_[0] = False  # a read-only copy
    assert m.active_.all() and m.active_.shape == (len(y),)
    assert _centre_residual(m, X, y) <= m.state_.residual_bound <= 0.01


def test_remove_publishes_every_cadence_and_keeps_the_centre_certified():
    X, y = _data()
    m = _model(cadence=3, horizon=5).fit(X, y, sample_ids=[f"id{i}" for i in range(len(y))])
    out = [m.remove([i]) for i in range(3)] + [m.remove(keys=["id10", "id11"])]
    assert [o.published for o in out] == [False, False, True, False]
    assert m.certificate_ is out[-1] and out[0].version == 0
    assert out[2].version == 1 and len(m.releases_) == 2 and out[2] == m.releases_[1].certificate
    assert m.n_removed_ == 5 and int(np.count_nonzero(m.active_)) == len(y) - 5
    assert _centre_residual(m, X, y) <= m.state_.residual_bound <= 0.01
    # the removed rows are gone from memory (features, key); the others are held
    assert not any(_holds_row(m, X[i]) for i in [0, 1, 2, 10, 11]) and _holds_row(m, X[3])
    assert not _holds_key(m, "id10") and _holds_key(m, "id12")
    with pytest.raises(ValueError, match="not a record") as err:
        m.remove(keys=["id10"])
    assert "id10" not in str(err.value)  # a key is never echoed


def test_horizon_refusal_changes_nothing():
    X, y = _data()
    m = _model(horizon=3).fit(X, y)
    m.remove([0])
    m.remove([1])
    assert m.privacy_spent()["releases"] == 3
    assert m.privacy_spent()["epsilon"] == pytest.approx(1.0, rel=1e-8)
    before = (m.active_, m.state_, len(m.releases_), m.accountant_, m.n_removed_)
    with pytest.raises(BudgetExceededError, match="horizon of 3 releases is spent"):
        m.remove([2])
    assert np.array_equal(m.active_, before[0]) and m.state_ is before[1]
    assert len(m.releases_) == before[2] and m.accountant_ == before[3] and m.n_removed_ == before[4]
    assert _holds_row(m, X[2])


def test_n_floor_refusal_changes_nothing():
    X, y = _data(n=400)
    m = _model(n_floor=395, horizon=50).fit(X, y)
    assert m.n_floor_ == 395
    m.remove([0, 1, 2])
    with pytest.raises(ValueError, match=r"fewer than n_floor \+ 1 = 396"):
        m.remove([3, 4, 5])
    assert int(np.count_nonzero(m.active_)) == 397 and len(m.releases_) == 2
    # exactly n_floor rows left would leave a held record n_floor - 1 others, below the bound's premise (as fit)
    with pytest.raises(ValueError, match=r"would leave 395, fewer than n_floor \+ 1"):
        m.remove([3, 4])
    m.remove([3])
    assert int(np.count_nonzero(m.active_)) == 396
    with pytest.raises(ValueError, match="fewer than n_floor"):
        _model(n_floor=401).fit(X, y)


def test_predictions_use_only_the_latest_release():
    X, y = _data()
    m = _model(fit_intercept=True, lam=1e-3, horizon=5, random_state=1).fit(X, y)
    m.remove([5])
    rel = m.release_
    assert rel.version == 1
    margins = X @ rel.coef + rel.intercept
    np.testing.assert_allclose(m.decision_function(X), margins, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(m.predict(X), m.classes_[(margins > 0).astype(int)])
    np.testing.assert_allclose(m.predict_proba(X)[:, 1], 1 / (1 + np.exp(-margins)), rtol=1e-12)
    np.testing.assert_array_equal(m.coef_, rel.coef[None, :])
    assert m.intercept_[0] == rel.intercept
    # the released weights are not the secret centre, and no public attribute holds the centre
    centre = m.state_.w
    assert not np.allclose(np.append(rel.coef, rel.intercept) * np.sqrt(2), centre)
    for name in dir(m):
        if name.startswith("_"):
            continue
        try:
            value = getattr(m, name)
        except Exception:  # noqa: BLE001 - e.g. sklearn attributes not defined here
            continue
        if isinstance(value, np.ndarray) and value.size == centre.size:
            assert not np.allclose(value.ravel(), centre), name
    with pytest.raises(ValueError):
        rel.coef[0] = 1.0  # read-only


def test_each_release_draws_fresh_noise():
    """Consecutive releases minus their centres are independent N(0, σ²I): the difference of two releases minus the
    difference of the centres has ‖·‖²/(2σ²) ~ χ²_d / d ≈ 1 (d = 200; seeded; tolerance 5 sd of χ²_d/d)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 200))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1, 0)
    m = ReleasedLogisticRegression(lam=1e-2, horizon=4, random_state=3).fit(X, y)
    w0 = m.state_.w.copy()
    m.remove([7])
    diff = (m.releases_[1].coef - m.releases_[0].coef) - (m.state_.w - w0)
    ratio = float(diff @ diff) / (2 * m.sigma_**2 * 200)
    assert abs(ratio - 1.0) < 5 * np.sqrt(2 / 200)


def test_save_load_continues_the_stream(tmp_path):
    X, y = _data()
    m = _model(horizon=4, cadence=2).fit(X, y, sample_ids=np.arange(len(y)))
    m.remove([0])
    m.remove(keys=[1])
    m.remove([2])  # pending
    path = m.save(tmp_path / "m.npz")
    assert (path.stat().st_mode & 0o777) == 0o600
    m2 = ReleasedLogisticRegression.load(path)
    assert m2.privacy_spent() == m.privacy_spent()
    assert [r.version for r in m2.releases_] == [0, 1]
    np.testing.assert_array_equal(m2.coef_, m.coef_)
    assert m2.releases_[1].certificate == m.releases_[1].certificate
    np.testing.assert_array_equal(m2.predict(X), m.predict(X))
    cert = m2.remove([3])  # completes the pending cadence
    assert cert.published and cert.version == 2 and m2.release_.version == 2
    assert _centre_residual(m2, X, y) <= 0.01
    m2.remove([4])
    m2.remove([5])
    with pytest.raises(BudgetExceededError):
        m2.remove([6])
    with pytest.raises(ValueError, match="holds a"):
        from lethe.certified.estimators import CertifiedLogisticRegression

        CertifiedLogisticRegression.load(path)


def test_no_copies_of_a_fitted_model():
    X, y = _data(n=500)
    unfitted = _model()
    assert pickle.loads(pickle.dumps(unfitted)).get_params() == unfitted.get_params()
    assert clone(unfitted).get_params() == unfitted.get_params()
    m = unfitted.fit(X, y)
    for how in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(SecretStateError, match="cannot be"):
            how(m)
    assert clone(m).get_params() == m.get_params()  # clone copies parameters only


def test_parameter_and_input_errors():
    X, y = _data(n=300)
    with pytest.raises(ValueError, match="delta must be in"):
        _model(delta=1.0).fit(X, y)
    with pytest.raises(ValueError, match="cadence must be an integer >= 1"):
        _model(cadence=0).fit(X, y)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        _model().fit(X, np.arange(300) % 3)
    with pytest.raises(ValueError):
        _model().fit(X * 2.0, y)  # rows outside the unit ball
    m = _model().fit(X, y)
    with pytest.raises(ValueError, match="exactly one of"):
        m.remove()
    with pytest.raises(ValueError, match="distinct"):
        m.remove([1, 1])
    m.remove([1])
    with pytest.raises(ValueError, match="already removed"):
        m.remove([1])


# -- the mechanism hook and the one-version certificate ------------------------------------------------------------


def test_residual_cap_hook_trains_and_retrains_without_perturbation():
    X, y = _data(n=400)
    yy = np.where(y == 1, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-3, residual_cap=1e-6, solver="pcg", bound="tight", calibration="analytic")
    assert mech.budget == 1e-6
    cache = NewtonCache()
    state, _ = mech.train(X, yy, random_state=0, cache=cache)
    assert not np.any(state.b) and state.residual_bound <= 1e-6
    active = np.ones(len(y), dtype=bool)
    retrained = False
    for i in range(5):
        state, cert = mech.remove(state, X, yy, [i], active=active, cache=cache)
        active[i] = False
        retrained |= cert.retrained
        assert not np.any(state.b) and state.residual_bound <= 1e-6
        assert exact_residual(mech, state, X[active], yy[active]) <= state.residual_bound
    assert retrained  # the tiny cap forces Alg. 2's re-solve, still with b = 0
    with pytest.raises(ValueError, match="residual_cap must be"):
        CertifiedRemoval(residual_cap=0.0)
    # the default mechanism is unchanged: Guo's budget and a drawn b, and its certificates cover one version
    plain = CertifiedRemoval(lam=1e-3, sigma=1.0)
    assert plain.residual_cap is None and plain.budget > 0
    st, cert = plain.train(X, yy, random_state=0)
    assert np.any(st.b)
    assert isinstance(cert, Certificate) and cert.observer == "one published version"
    assert cert.to_dict()["observer"] == "one published version"


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_neighbouring_centres_are_within_the_sensitivity(fit_intercept):
    """End to end: the secret centres of two models on neighbouring data sets — one fitted with the target and then
    told to remove others, one fitted without it — are within Δ at every release, whatever their histories (here the
    target is kept, so the two worlds differ at every release). Small n, separable data, an adversarial target
    (an outlier with the minority label), λ = 1e-3: the regime where Δ is largest."""
    rng = np.random.default_rng(11)
    n, d = 300, 4
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1, 0)
    X[0] = np.array([1.0, 0, 0, 0])
    y[0] = 0  # the target: on the wrong side
    params = dict(lam=1e-3, horizon=8, n_floor=n - 8, fit_intercept=fit_intercept, random_state=0)
    with_z = ReleasedLogisticRegression(**params).fit(X, y)
    without = ReleasedLogisticRegression(**params).fit(X[1:], y[1:])
    assert with_z.sensitivity_ == without.sensitivity_
    gaps = [float(np.linalg.norm(with_z.state_.w - without.state_.w))]
    for k in range(1, 7):  # remove the same other record in both worlds (positions shift by one in the second)
        with_z.remove([k * 10])
        without.remove([k * 10 - 1])
        gaps.append(float(np.linalg.norm(with_z.state_.w - without.state_.w)))
    assert max(gaps) <= with_z.sensitivity_
    assert max(gaps) > 0.05 * with_z.sensitivity_  # the target matters: the check is not vacuous


# -- protocol, concurrency, verified files (issues 25 and 28 applied to the release stream) ---------------------------
def test_is_an_unlearner_and_its_certificates_are_certificates():
    from lethe.protocols import Certificate as CertificateProtocol
    from lethe.protocols import Unlearner

    X, y = _data(n=800)
    m = _model().fit(X, y)
    assert isinstance(m, Unlearner) and m.supports_add is False
    assert m.certificate_ is m.releases_[-1].certificate
    assert isinstance(m.certificate_, CertificateProtocol)
    before = [r.coef.copy() for r in m.releases_]
    with pytest.raises(NotImplementedError, match="cannot add"):
        m.add(X[:2], y[:2])
    assert len(m.releases_) == len(before)


def test_release_certificates_publish_no_data_dependent_bound():
    """The centre's residual bound β is a function of the rows, not covered by the accounting: certificates carry
    the public cap only (every field is a parameter or a count)."""
    X, y = _data(n=800)
    m = _model(horizon=5).fit(X, y)
    m.remove([1])
    for rel in m.releases_:
        d = rel.certificate.to_dict()
        assert "residual_bound" not in d
        assert d["residual_cap"] == 0.01


def test_concurrent_removals_are_serialised():
    import threading

    X, y = _data(n=1500)
    m = _model(horizon=200).fit(X, y)
    errors: list[BaseException] = []

    def work(rows):
        try:
            for r in rows:
                m.remove([int(r)])
        except BaseException as e:  # pragma: no cover - a failure is reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(np.arange(t, 96, 8),)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert m.n_removed_ == 96 and int(np.count_nonzero(~m.active_)) == 96
    assert m.state_.n == int(np.count_nonzero(m.active_))
    assert [r.version for r in m.releases_] == list(range(97))
    assert _centre_residual(m, X, y) <= m.state_.residual_bound <= 0.01


def _edit(path, tmp_path, **changes):
    import json

    from lethe.io import load_npz, save_npz

    arrays, meta = load_npz(path)
    for k, fn in changes.items():
        if k == "meta":
            fn(meta)
        else:
            arrays[k] = fn(arrays[k])
    out = tmp_path / "edited.npz"
    save_npz(out, arrays, json.loads(json.dumps(meta)))
    return out


@pytest.mark.parametrize("edit", ["w doubled", "w shifted", "beta above cap", "beta nan", "sensitivity lowered",
                                  "row outside ball", "removed row restored", "n inconsistent"])
def test_edited_files_are_refused(tmp_path, edit):
    X, y = _data(n=800)
    m = _model(horizon=5).fit(X, y)
    m.remove([0])
    path = m.save(tmp_path / "m.npz")
    ReleasedLogisticRegression.load(path)  # the genuine file loads

    def meta_state(key, value):
        def f(meta):
            meta["state"][key] = value
        return f

    def sens(meta):
        meta["accountant"]["sensitivity"] *= 0.5
        meta["accountant"]["sigma"] *= 0.5

    edits = {
        "w doubled": dict(w=lambda w: 2 * w),
        "w shifted": dict(w=lambda w: w + 0.05 * X[0] / np.linalg.norm(X[0])),
        "beta above cap": dict(meta=meta_state("residual_bound", 0.5)),
        "beta nan": dict(meta=meta_state("residual_bound", float("nan"))),
        "sensitivity lowered": dict(meta=sens),
        "row outside ball": dict(X=lambda a: np.vstack([a[:1], a[1:2] * 3.0, a[2:]])),
        "removed row restored": dict(X=lambda a: np.vstack([X[:1], a[1:]])),
        "n inconsistent": dict(meta=meta_state("n", 10)),
    }
    bad = _edit(path, tmp_path, **edits[edit])
    with pytest.raises(ValueError, match="no authentication tag"):
        ReleasedLogisticRegression.load(bad)
    with pytest.raises(ValueError):  # trusted anyway: the invariant checks still refuse it
        ReleasedLogisticRegression.load(bad, trust_unauthenticated=True)


def test_a_centre_edit_is_caught_only_by_the_re_measure(tmp_path, monkeypatch):
    """Mutation check: without the residual re-measure, a moved centre loads."""
    import lethe.release.model_file as rel_mod

    X, y = _data(n=800)
    m = _model(horizon=5).fit(X, y)
    path = m.save(tmp_path / "m.npz")
    bad = _edit(path, tmp_path, w=lambda w: w + 0.05 * X[0] / np.linalg.norm(X[0]))
    with pytest.raises(ValueError, match="re-measured"):
        ReleasedLogisticRegression.load(bad, trust_unauthenticated=True)
    monkeypatch.setattr(rel_mod, "measured_residual", lambda *a, **k: (np.zeros(X.shape[1]), 0.0))
    ReleasedLogisticRegression.load(bad, trust_unauthenticated=True)  # the mutation lets the edited centre through


def test_authenticated_files(tmp_path):
    X, y = _data(n=800)
    m = _model(horizon=5).fit(X, y)
    key = bytes(range(32))
    path = m.save(tmp_path / "m.npz", key=key)
    assert ReleasedLogisticRegression.load(path, key=key).privacy_spent() == m.privacy_spent()
    with pytest.raises(ValueError):
        ReleasedLogisticRegression.load(path)  # tagged file, no key
    with pytest.raises(ValueError):
        ReleasedLogisticRegression.load(path, key=bytes(range(1, 33)))  # wrong key
    plain = m.save(tmp_path / "plain.npz")  # tagged under this machine's key (created on the first save)
    ReleasedLogisticRegression.load(plain)
    with pytest.raises(ValueError):
        ReleasedLogisticRegression.load(plain, key=key)  # another key
