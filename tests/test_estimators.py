"""scikit-learn contract and behaviour of the certified-removal estimators."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression

from ._data import unit_rows

_SAMPLE_WEIGHT = "sample_weight other than all ones is refused (the certified objective is unweighted)"


def _expected_failed_checks(estimator):
    """What the estimators refuse on purpose: pickling a fitted model (it holds the secret b; use save/load) and
    non-unit sample weights (on dense and, since the estimators declare sparse input, on CSR data). Every other
    check, including the sparse-input ones, must pass."""
    return {
        "check_estimators_pickle": "a fitted model refuses pickle (secret b); use save/load",
        "check_sample_weights_list": _SAMPLE_WEIGHT,
        "check_all_zero_sample_weights_error": _SAMPLE_WEIGHT,
        "check_sample_weights_not_overwritten": _SAMPLE_WEIGHT,
        "check_sample_weight_equivalence_on_dense_data": _SAMPLE_WEIGHT,
        "check_sample_weight_equivalence_on_sparse_data": _SAMPLE_WEIGHT,  # sparse input tag (issue 14)
        "check_classifiers_one_label_sample_weights": _SAMPLE_WEIGHT,
    }


@parametrize_with_checks([
    CertifiedLogisticRegression(lam=1e-2, sigma=0.1, normalize_rows=True, random_state=0),
    CertifiedLogisticRegression(lam=1e-2, sigma=0.1, normalize_rows=True, solver="anchor", random_state=0),
    CertifiedLogisticRegression(lam=1e-2, sigma=0.1, normalize_rows=True, bound="paper", calibration="paper",
                                solver="cholesky", random_state=0),
    CertifiedLinearRegression(lam=1e-3),
    CertifiedLogisticRegression(lam=1e-2, sigma=0.1, normalize_rows=True, fit_intercept=True, random_state=0),
    CertifiedLinearRegression(lam=1e-3, fit_intercept=True),
], expected_failed_checks=_expected_failed_checks, xfail_strict=True)
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_same_random_state_same_model_and_certificates():
    X, y = unit_rows()
    a = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=7).fit(X, y)
    b = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=7).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    ca, cb = a.remove([5, 9]), b.remove([5, 9])
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert ca.residual_bound == cb.residual_bound
    c = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=8).fit(X, y)
    assert not np.array_equal(a.coef_, c.coef_)


def test_rows_outside_unit_ball_rejected_with_row_named():
    X, y = unit_rows()
    X[17] *= 1.5
    with pytest.raises(ValueError, match="Row 17"):
        CertifiedLogisticRegression().fit(X, y)
    clf = CertifiedLogisticRegression(normalize_rows=True, sigma=1.0, random_state=0).fit(X, y)
    assert np.linalg.norm(clf.X_[17]) == pytest.approx(1.0)


@pytest.mark.parametrize("params, word", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"delta": 0.0}, "delta"),
    ({"delta": 1.0}, "delta"), ({"lam": 0.0}, "lam"), ({"lam": -1e-3}, "lam"), ({"sigma": 0.0}, "sigma"),
    ({"sigma": -2.0}, "sigma"), ({"noise": "cauchy"}, "noise"), ({"solver": "magic"}, "solver"),
    ({"bound": "loose"}, "bound"), ({"calibration": "classical"}, "calibration"), ({"refresh": 0}, "refresh"),
])
def test_bad_parameters_raise_and_name_the_parameter(params, word):
    X, y = unit_rows()
    with pytest.raises(ValueError, match=word):
        CertifiedLogisticRegression(**params).fit(X, y)


def test_bad_inputs_raise():
    X, y = unit_rows()
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CertifiedLogisticRegression().fit(Xn, y)
    Xi = X.copy()
    Xi[4, 0] = np.inf
    with pytest.raises(ValueError, match="infinity|inf"):
        CertifiedLogisticRegression().fit(Xi, y)
    with pytest.raises(ValueError, match="2 classes"):
        CertifiedLogisticRegression().fit(X, np.ones_like(y))


def test_bad_removals_raise_and_change_nothing():
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.remove([1])
    before = (clf.coef_.copy(), clf.active_.copy(), clf.states_[0].residual_bound, clf.X_.copy())
    for bad, exc, word in [([300], ValueError, "300"), ([-1], ValueError, "-1"), ([1], ValueError, "already"),
                           ([2, 2], ValueError, "distinct"), ([], ValueError, "non-empty"),
                           ([0.5], TypeError, "integers")]:
        with pytest.raises(exc, match=word):
            clf.remove(bad)
        np.testing.assert_array_equal(clf.coef_, before[0])
        np.testing.assert_array_equal(clf.active_, before[1])
        assert clf.states_[0].residual_bound == before[2]
        np.testing.assert_array_equal(clf.X_, before[3])


def test_removed_row_is_zeroed_in_memory():
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.remove([10, 11])
    assert not clf.X_[[10, 11]].any() and not clf.Y_[:, [10, 11]].any()
    assert clf.n_remaining_ == 298


def test_save_load_roundtrip_owner_only(tmp_path):
    X, y = unit_rows(classes=3)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, negative_subsample=1.0, random_state=0).fit(X, y)
    clf.remove([0])
    path = clf.save(tmp_path / "model.npz")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o600
    other = CertifiedLogisticRegression.load(path)
    np.testing.assert_array_equal(other.coef_, clf.coef_)
    for a, b in zip(other.states_, clf.states_, strict=True):
        np.testing.assert_array_equal(a.b, b.b)
        # load re-measures the residual: β stays, or rises to the measured bound (rounding allowance, ~1e-12)
        assert b.residual_bound <= a.residual_bound <= b.residual_bound * (1 + 1e-6)
    np.testing.assert_array_equal(other.predict(X), clf.predict(X))
    cert = other.remove([1])
    assert cert.residual_bound <= cert.budget
    with pytest.raises(ValueError, match="already"):
        other.remove([0])


def test_multiclass_one_vs_all_with_subsampling_removes_only_where_sampled():
    X, y = unit_rows(n=600, d=8, classes=4)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, negative_subsample=1.0, random_state=3).fit(X, y)
    assert clf.coef_.shape == (4, 8)
    assert clf.score(X, y) > 0.7
    i = 5
    cert = clf.remove([i])
    sampled = clf.members_[:, i]
    assert [c is not None for c in cert.per_class] == list(sampled)
    joint = np.sqrt(sum(s.residual_bound ** 2 for s in clf.states_))
    assert cert.residual_bound == pytest.approx(joint)
    assert cert.residual_bound <= cert.budget


def test_multiclass_joint_budget_forces_retraining():
    X, y = unit_rows(n=400, d=8, classes=3)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.05, random_state=1).fit(X, y)
    rng = np.random.default_rng(0)
    retrained = False
    for i in rng.permutation(400)[:40]:
        cert = clf.remove([int(i)])
        assert cert.residual_bound <= cert.budget
        retrained |= cert.retrained
    assert retrained


def test_fit_does_not_alias_or_modify_the_callers_array():
    X, y = unit_rows()
    X0 = X.copy()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.remove([5])
    np.testing.assert_array_equal(X, X0)


def test_defaults_are_the_tightest_sound_options():
    clf = CertifiedLogisticRegression()
    assert (clf.bound, clf.calibration, clf.solver, clf.refresh) == ("tight", "analytic", "auto", "auto")
    assert {"bound", "calibration", "refresh"} <= set(clf.get_params())
    assert CertifiedLinearRegression().solver == "auto"


def _removals_until_retraining(clf, X, y, cap=400):
    clf.fit(X, y)
    for k, i in enumerate(np.random.default_rng(0).permutation(X.shape[0])[:cap]):
        if clf.remove([int(i)]).retrained:
            return k
    return cap


def test_tight_mode_supports_more_removals_than_the_paper_mode():
    X, y = unit_rows(n=400, d=6)
    params = dict(lam=1e-2, sigma=0.2, random_state=0)
    paper = _removals_until_retraining(
        CertifiedLogisticRegression(**params, bound="paper", calibration="paper", solver="cholesky"), X, y)
    tight = _removals_until_retraining(CertifiedLogisticRegression(**params), X, y)
    anchor = _removals_until_retraining(CertifiedLogisticRegression(**params, solver="anchor"), X, y)
    assert paper < 400 and tight > 3 * paper and anchor > paper


def test_one_vs_all_with_anchor_solver_certifies_the_exact_residuals():
    X, y = unit_rows(n=500, d=8, classes=3)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.5, solver="anchor", random_state=2).fit(X, y)
    rng = np.random.default_rng(1)
    for _ in range(25):
        i = int(rng.choice(np.flatnonzero(clf.active_)))
        cert = clf.remove([i])
        assert cert.residual_bound <= cert.budget
    act = clf.active_
    for k, st in enumerate(clf.states_):
        Xa, ya = X[act], clf.Y_[k][act]
        g = Xa.T @ (-ya / (1 + np.exp(ya * (Xa @ st.w)))) + clf.lam * act.sum() * st.w + st.b
        assert np.linalg.norm(g) <= st.residual_bound


def _check_exact_residuals(clf, X):
    act = clf.active_
    for k, st in enumerate(clf.states_):
        Xa, ya = X[act], clf.Y_[k][act]
        g = Xa.T @ (-ya / (1 + np.exp(ya * (Xa @ st.w)))) + clf.lam * act.sum() * st.w + st.b
        assert np.linalg.norm(g) <= st.residual_bound


def test_one_vs_all_onepass_shares_one_float32_copy_and_stays_sound(monkeypatch):
    """The binary models' onepass caches hold one float32 copy of the data between them. A removal that fails
    half-way (after some models zeroed the rows in the shared copy) must not leave a copy that a later removal
    trusts: it is rebuilt, and every certificate still bounds the exact residual."""
    import lethe.certified.mechanism as mech_module

    X, y = unit_rows(n=500, d=8, classes=4)
    X[:, 6] = X[:, 2]  # identical columns: merged in the copy
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.5, solver="onepass", random_state=2).fit(X, y)
    assert all(c.X32 is None for c in clf.caches_)  # the removal machinery is formed by the first removal
    rng = np.random.default_rng(1)
    clf.remove([int(rng.choice(np.flatnonzero(clf.active_)))])
    copies = {id(c.X32) for c in clf.caches_}
    assert len(copies) == 1 and clf.caches_[0].X32 is not None and clf.caches_[0].X32.shape[1] == 7
    for _ in range(9):
        clf.remove([int(rng.choice(np.flatnonzero(clf.active_)))])
    assert len({id(c.X32) for c in clf.caches_}) == 1
    _check_exact_residuals(clf, X)

    calls = {"n": 0}
    real = mech_module.compute_step

    def failing(*args, **kwargs):  # the third binary model fails after two have zeroed the rows
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(mech_module, "compute_step", failing)
    victim = int(rng.choice(np.flatnonzero(clf.active_)))
    with pytest.raises(RuntimeError, match="injected"):
        clf.remove([victim])
    monkeypatch.setattr(mech_module, "compute_step", real)
    assert clf.active_[victim]  # the failed removal changed nothing the estimator reports
    for _ in range(10):  # the shared copy has the victim's row zeroed although it is active: it must be rebuilt
        clf.remove([int(rng.choice(np.flatnonzero(clf.active_ & (np.arange(500) != victim))))])
        _check_exact_residuals(clf, X)
        for c in clf.caches_:  # every copy in use has every active row, and only those
            assert np.all(np.any(c.X32[clf.active_] != 0, axis=1)) and not np.any(c.X32[~clf.active_])
    shared = clf.caches_[0].shared
    assert shared is not None and not np.any(shared.zeroed & clf.active_)
    clf.remove([victim])
    _check_exact_residuals(clf, X)


def test_one_vs_all_onepass_after_loading_primes_once_and_shares_the_copy(tmp_path):
    """After ``load`` every binary model primes at the first removal; models after the first must find the copy the
    first one built (with the removed rows already zeroed) instead of building, and storing, their own."""
    X, y = unit_rows(n=400, d=8, classes=3)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.5, solver="onepass", refresh="never",
                                      random_state=2).fit(X, y)
    other = CertifiedLogisticRegression.load(clf.save(tmp_path / "m.npz"))
    rng = np.random.default_rng(0)
    for _ in range(10):
        other.remove([int(rng.choice(np.flatnonzero(other.active_)))])
    assert len({id(c.X32) for c in other.caches_}) == 1
    assert all(c.refreshes == 1 for c in other.caches_)  # one anchor build each, at the first removal (no policy)
    _check_exact_residuals(other, other.X_)


def test_loading_a_file_without_the_new_parameters_keeps_the_paper_mode(tmp_path):
    from lethe.io import load_npz, save_npz

    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, bound="paper", calibration="paper", random_state=0)
    path = clf.fit(X, y).save(tmp_path / "m.npz")
    arrays, meta = load_npz(path)
    for key in ("bound", "calibration", "refresh"):  # as written before these parameters existed
        meta["params"].pop(key)
    meta.pop("format_version")
    save_npz(path, arrays, meta)  # untagged, as files were written without a key before keys were created
    other = CertifiedLogisticRegression.load(path, trust_unauthenticated=True)
    assert (other.bound, other.calibration, other.refresh) == ("paper", "paper", "auto")
    np.testing.assert_array_equal(other.coef_, clf.coef_)


def test_certificates_are_strict_json():
    import json

    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    for cert in [clf.fit_certificates_[0], clf.remove([1])]:
        text = json.dumps(cert.to_dict(), allow_nan=False)  # raises on NaN/Infinity
        assert json.loads(text)["epsilon"] == cert.epsilon
