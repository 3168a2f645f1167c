"""The public API of the certified-removal estimators keeps its promises (issue 16): no certificate for a state
trained under other parameters, the one-vs-all joint budget, no pickle of a fitted model, removal by key, the row
rules, the intercept, whole classes removed."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from sklearn.base import clone

from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression
from lethe.certified.mechanism import CertifiedRemoval
from lethe.certified.noise import epsilon_spent

from ._data import unit_rows


def _exact_residuals(clf):
    """‖∇L_b(w; D′)‖ of every binary model on its current rows, computed from scratch."""
    out = []
    for k, st in enumerate(clf.states_):
        act = clf.active_ if clf.members_ is None else clf.active_ & clf.members_[k]
        Xa, ya = clf.X_[act], clf.Y_[k][act]
        g = Xa.T @ (-ya / (1 + np.exp(ya * (Xa @ st.w)))) + clf.lam * act.sum() * st.w + st.b
        out.append(float(np.linalg.norm(g)))
    return np.array(out)


# -- 1. set_params after fit ------------------------------------------------------------------------------------
@pytest.mark.parametrize("change", [{"sigma": 100.0}, {"lam": 1e-2}, {"epsilon": 5.0}, {"solver": "anchor"},
                                    {"normalize_rows": True}])
def test_set_params_after_fit_cannot_save_or_remove_under_the_new_parameters(tmp_path, change):
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=1.0, random_state=0).fit(X, y)
    coef = clf.coef_.copy()
    clf.set_params(**change)
    name = next(iter(change))
    with pytest.raises(ValueError, match=f"changed since fit.*{name}"):
        clf.save(tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()
    with pytest.raises(ValueError, match=f"changed since fit.*{name}"):
        clf.remove([0])
    assert clf.active_.all()
    np.testing.assert_array_equal(clf.coef_, coef)
    np.testing.assert_array_equal(clf.predict(X), np.where(X @ coef[0] > 0, 1, -1))  # the fitted model predicts
    clf.set_params(**{k: CertifiedLogisticRegression(lam=1e-3, sigma=1.0).get_params()[k] for k in change})
    cert = clf.remove([0])  # parameters set back: the model is the one they describe
    assert cert.residual_bound <= cert.budget
    other = CertifiedLogisticRegression.load(clf.save(tmp_path / "m.npz"))
    assert other.get_params()["sigma"] == 1.0 and other.trained_params_ == clf.trained_params_


def test_a_refit_after_set_params_trains_under_the_new_parameters_and_certifies_them(tmp_path):
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=1.0, random_state=0).fit(X, y)
    clf.set_params(sigma=100.0).fit(X, y)
    assert clf.trained_params_["sigma"] == 100.0
    assert np.std(clf.states_[0].b) > 20  # b was drawn at the new σ
    other = CertifiedLogisticRegression.load(clf.save(tmp_path / "m.npz"))
    cert = other.remove([3])
    eps = epsilon_spent(cert.residual_bound, 100.0, 1e-4, "gaussian", calibration="analytic")
    assert cert.epsilon_spent == pytest.approx(eps) and eps <= 1.0
    assert _exact_residuals(other)[0] <= other.states_[0].residual_bound


def test_random_state_may_change_after_fit():
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.set_params(random_state=5)
    assert clf.remove([1]).residual_bound <= clf.mechanism_.budget


# -- 1. one-vs-all joint budget ------------------------------------------------------------------------------------
@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_one_vs_all_refuses_a_tol_above_its_share_of_the_joint_budget(noise):
    X, y = unit_rows(n=400, d=8, classes=3)
    budget = CertifiedRemoval(lam=1e-3, sigma=0.5, noise=noise, calibration="analytic").budget
    share = budget / 3 if noise == "laplace" else budget / np.sqrt(3)
    for tol in (budget, 1.01 * share):
        with pytest.raises(ValueError, match="tol must be <="):
            CertifiedLogisticRegression(lam=1e-3, sigma=0.5, noise=noise, tol=tol, random_state=0).fit(X, y)


def test_one_vs_all_joint_budget_holds_at_fit_and_after_every_retraining_with_a_large_user_tol():
    """With tol just under ε′/√K every class trains close to its share, and the joint bound must stay ≤ ε′ after the
    fit and after retrainings of several classes; each β_k bounds the exact residual."""
    X, y = unit_rows(n=400, d=8, classes=3)
    budget = CertifiedRemoval(lam=1e-3, sigma=0.05, calibration="analytic").budget
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.05, tol=0.99 * budget / np.sqrt(3), max_iter=3,
                                      random_state=1).fit(X, y)
    joint = np.sqrt(sum(s.residual_bound ** 2 for s in clf.states_))
    assert joint <= budget
    rng = np.random.default_rng(0)
    retrained = 0
    for i in rng.permutation(400)[:30]:
        cert = clf.remove([int(i)])
        retrained += len(cert.retrained_classes)
        assert cert.residual_bound <= cert.budget and cert.epsilon_spent <= 1.0 + 1e-9
        assert np.all(_exact_residuals(clf) <= [s.residual_bound for s in clf.states_])
    assert retrained >= 2


# -- 1. no pickle of a fitted model -----------------------------------------------------------------------------
@pytest.mark.parametrize("est", [CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0),
                                 CertifiedLinearRegression(lam=1e-3)])
def test_a_fitted_model_refuses_pickle_joblib_and_copies_but_clones(tmp_path, est):
    import joblib

    X, y = unit_rows()
    pickle.dumps(est)  # unfitted: pickles (parallel grid searches send unfitted clones)
    est.fit(X, y.astype(float))
    with pytest.raises(TypeError, match=r"save\(path\)"):
        pickle.dumps(est)
    with pytest.raises(TypeError, match="SECRET"):
        joblib.dump(est, tmp_path / "m.joblib")
    secret = est.states_[0].b.tobytes()
    written = (tmp_path / "m.joblib").read_bytes() if (tmp_path / "m.joblib").exists() else b""
    assert secret not in written and est.X_[5].tobytes() not in written
    with pytest.raises(TypeError, match="save"):
        copy.copy(est)
    with pytest.raises(TypeError, match=r"clone\(model\)\.fit"):  # two live models would share one secret b
        copy.deepcopy(est)
    assert copy.deepcopy(clone(est)).get_params() == est.get_params()  # unfitted: copies
    assert clone(est).get_params() == est.get_params()


# -- 2. smaller defects ---------------------------------------------------------------------------------------------
def test_float32_rows_normalised_in_float32_are_accepted():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 64)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    assert np.max(np.linalg.norm(X.astype(np.float64), axis=1)) > 1 + 1e-9  # the float32 rounding
    y = np.where(X[:, 0] > 0, 1, -1)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    assert np.max(np.linalg.norm(clf.X_, axis=1)) <= 1 + 1e-9
    np.testing.assert_allclose(clf.X_, X, rtol=1e-5, atol=1e-7)
    assert _exact_residuals(clf)[0] <= clf.states_[0].residual_bound


def test_a_row_norm_just_above_one_is_printed_so():
    X, y = unit_rows()
    X[4] *= 1 + 2e-9
    with pytest.raises(ValueError, match=r"Row 4 has norm 1 \+ 2e-09"):
        CertifiedLogisticRegression().fit(X, y)
    X[4] *= 1.5
    with pytest.raises(ValueError, match=r"Row 4 has norm 1\.5"):
        CertifiedLogisticRegression().fit(X, y)


def test_normalize_rows_does_not_zero_rows_with_huge_entries():
    X, y = unit_rows()
    X[7] = X[7] * 1e200
    X[8] = [1e308, -1e308, 1e308, 0, 0, 0]
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, normalize_rows=True, random_state=0).fit(X, y)
    np.testing.assert_allclose(clf.X_[7], X[7] / np.linalg.norm(X[7] / 1e200) / 1e200)
    np.testing.assert_allclose(clf.X_[8], np.array([1, -1, 1, 0, 0, 0]) / np.sqrt(3))
    assert clf.decision_function(X[7:9]).tolist() == pytest.approx((clf.X_[7:9] @ clf.coef_[0]).tolist())


def test_save_with_a_generator_random_state(tmp_path):
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=np.random.default_rng(3)).fit(X, y)
    other = CertifiedLogisticRegression.load(clf.save(tmp_path / "m.npz"))
    assert other.random_state is None
    np.testing.assert_array_equal(other.coef_, clf.coef_)
    assert other.remove([2]).residual_bound <= other.mechanism_.budget


@pytest.mark.parametrize("shape", ["wide", "collinear"])
def test_linear_regression_defaults_fit_wide_and_collinearunit_rows(shape):
    rng = np.random.default_rng(0)
    if shape == "wide":
        X = rng.normal(size=(40, 120))
    else:
        B = rng.normal(size=(200, 5))
        X = np.column_stack([B, B @ rng.normal(size=(5, 15))])
    y = X @ rng.normal(size=X.shape[1]) + 0.01 * rng.normal(size=X.shape[0])
    reg = CertifiedLinearRegression(lam=1e-8).fit(X, y)
    cert = reg.remove([0, 1])
    assert cert.epsilon == 0.0 and not cert.retrained
    act = reg.active_
    g = 2 * X[act].T @ (X[act] @ reg.coef_ - y[act]) + 1e-8 * act.sum() * reg.coef_
    assert np.linalg.norm(g) <= cert.residual_bound


def test_removing_a_whole_class_stops_predicting_it():
    X, y = unit_rows(n=400, d=8, classes=4)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.5, random_state=0).fit(X, y)
    cls2 = np.flatnonzero(y == 2)
    clf.remove(cls2)
    assert not clf.classes_present_[2] and clf.classes_present_.sum() == 3
    pred = clf.predict(unit_rows(n=2000, d=8, classes=4, seed=9)[0])
    assert not np.any(pred == 2)
    assert np.allclose(clf.predict_proba(X[:50])[:, 2], 0.0)


def test_binary_model_with_one_class_left_predicts_it():
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.remove(np.flatnonzero(y == 1))
    assert np.all(clf.predict(X) == -1)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 0], 1.0)


# -- 3. removal by key ----------------------------------------------------------------------------------------------
def test_removal_by_dataframe_index_and_by_sample_ids(tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = unit_rows()
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(6)], index=[f"user-{i}" for i in range(300)])
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(df, y)
    cert = clf.remove(keys=["user-17", "user-40"])
    assert cert.n_removed == 2 and not clf.active_[17] and not clf.active_[40]
    assert "user-17" not in clf.keys_.tolist()  # the removed key is gone from memory
    for bad in (["user-17"], ["nobody"]):
        with pytest.raises(ValueError, match="not a record of this model"):
            clf.remove(keys=bad)
    with pytest.raises(ValueError, match="exactly one"):
        clf.remove([1], keys=["user-1"])
    other = CertifiedLogisticRegression.load(clf.save(tmp_path / "m.npz"))
    assert "user-17" not in other.keys_.tolist()
    other.remove(keys="user-3")
    assert not other.active_[3]
    np.testing.assert_array_equal(other.predict(df.iloc[:20]), clf.predict(df.iloc[:20]))

    ids = np.arange(1000, 1300)
    reg = CertifiedLinearRegression().fit(X, y.astype(float), sample_ids=ids)
    reg.remove(keys=[1005])
    assert not reg.active_[5]
    with pytest.raises(ValueError, match="not a record"):
        reg.remove(keys=[1005])
    with pytest.raises(ValueError, match="without record keys"):
        CertifiedLinearRegression().fit(X, y.astype(float)).remove(keys=[1])
    with pytest.raises(ValueError, match="distinct"):
        CertifiedLinearRegression().fit(X, y.astype(float), sample_ids=np.zeros(300, dtype=int))


def test_sample_weight_other_than_ones_is_refused_clearly():
    X, y = unit_rows()
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        CertifiedLogisticRegression().fit(X, y, sample_weight=np.full(300, 2.0))
    CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y, sample_weight=np.ones(300))


# -- 3. intercept ---------------------------------------------------------------------------------------------------
def test_fit_intercept_keeps_rows_in_the_unit_ball_and_certifies_the_exact_residual():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= rng.uniform(0, 1, size=(400, 1))
    y = np.where(X[:, 0] > 0.3, 1, -1)  # a threshold away from 0 needs an intercept
    plain = CertifiedLogisticRegression(lam=1e-4, sigma=0.1, random_state=0).fit(X, y)
    clf = CertifiedLogisticRegression(lam=1e-4, sigma=0.1, fit_intercept=True, random_state=0).fit(X, y)
    assert np.max(np.linalg.norm(clf.X_, axis=1)) <= 1 + 1e-12
    assert clf.coef_.shape == (1, 5) and clf.intercept_.shape == (1,) and clf.intercept_[0] < 0
    assert clf.score(X, y) > plain.score(X, y) + 0.03
    np.testing.assert_allclose(clf.decision_function(X), X @ clf.coef_[0] + clf.intercept_[0])
    for i in range(10):
        cert = clf.remove([i])
        assert cert.residual_bound <= cert.budget
        assert _exact_residuals(clf)[0] <= clf.states_[0].residual_bound
    reg = CertifiedLinearRegression(fit_intercept=True).fit(X, 3.0 + X @ [1, 2, 3, 4, 5])
    assert reg.intercept_ == pytest.approx(3.0, abs=1e-2)


def test_budget_status_reports_epsilon():
    X, y = unit_rows(n=400, d=8, classes=3)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.5, random_state=0).fit(X, y)
    for i in range(5):
        clf.remove([i])
    status = clf.budget_status()
    beta = np.sqrt(sum(s.residual_bound ** 2 for s in clf.states_))
    assert status["residual_bound"] == pytest.approx(beta) and 0 < status["budget_used"] <= 1
    assert 0 < status["epsilon_spent"] <= status["epsilon"] == 1.0
    assert status["epsilon_spent"] == pytest.approx(
        epsilon_spent(beta, 0.5, 1e-4, "gaussian", calibration="analytic"))
    reg = CertifiedLinearRegression().fit(X, X[:, 0])
    assert reg.budget_status()["epsilon"] == 0.0 == reg.budget_status()["epsilon_spent"]


def test_prediction_does_not_refuse_rows_outside_the_ball():
    X, y = unit_rows()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    np.testing.assert_allclose(clf.decision_function(3 * X[:5]), 3 * (X[:5] @ clf.coef_[0]))
