"""σ planning: the planned σ supports the removals asked for, grows with them, and reports its accuracy cost."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.planning import plan_sigma


def _data(n=600, d=8, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, -1) if classes == 2 else np.argmax(X[:, :classes], axis=1)
    return X, y


@pytest.mark.parametrize("classes", [2, 3])
def test_planned_sigma_supports_the_removals_without_retraining(classes):
    X, y = _data(classes=classes)
    est = CertifiedLogisticRegression(lam=1e-3)
    plan = plan_sigma(X, y, n_removals=40, estimator=est, random_state=0)
    assert plan.residual_after_removals <= plan.budget
    assert 0.0 <= plan.accuracy <= 1.0 and abs(plan.accuracy_cost) < 0.2
    # a fresh model at that σ, removing other random rows, does not retrain within the planned removals
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=plan.sigma, random_state=5).fit(X, y)
    rows = np.random.default_rng(7).choice(X.shape[0], size=40, replace=False)
    assert not any(clf.remove([int(i)]).retrained for i in rows)
    # half the planned σ runs out of budget within those removals (the plan is not wastefully large)
    half = CertifiedLogisticRegression(lam=1e-3, sigma=plan.sigma / 2.5, random_state=5).fit(X, y)
    assert any(half.remove([int(i)]).retrained for i in rows)


def test_more_removals_need_more_noise():
    X, y = _data()
    small = plan_sigma(X, y, n_removals=5, random_state=0)
    large = plan_sigma(X, y, n_removals=80, random_state=0)
    assert large.sigma > 2 * small.sigma  # σ grows with R (sublinearly for anchor, whose bound adapts)
    assert large.epsilon == 1.0 and large.n_removals == 80


def test_bad_plans_are_refused():
    X, y = _data(n=100)
    with pytest.raises(ValueError, match="n_removals"):
        plan_sigma(X, y, n_removals=0)
    with pytest.raises(ValueError, match="n_removals must be below"):
        plan_sigma(X, y, n_removals=90)
    with pytest.raises(ValueError, match="margin"):
        plan_sigma(X, y, n_removals=5, margin=0.5)


# ---- planning on tables: pipelines, DataFrames, and the choice of λ ------------------------------------------------

import pandas as pd  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

from lethe.pipeline import make_unlearning_pipeline  # noqa: E402
from lethe.planning import plan_lambda  # noqa: E402
from lethe.preprocessing import SchemaEncoder  # noqa: E402

TABLE = {"columns": [
    {"name": "x", "type": "numeric", "lower": -3, "upper": 3},
    {"name": "z", "type": "numeric", "lower": -3, "upper": 3},
    {"name": "city", "type": "categorical", "categories": ["north", "south", "east"]},
]}


def _frame(n=500, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x": rng.normal(size=n), "z": rng.normal(size=n),
                          "city": rng.choice(["north", "south", "east", "west"], n)},
                         index=[f"r{i}" for i in range(n)])
    y = np.where(frame["x"] + (frame["city"] == "north") - 0.5 + 0.3 * rng.normal(size=n) > 0, "yes", "no")
    return frame, y


def test_plan_sigma_on_a_pipeline_and_a_dataframe_is_the_plan_of_its_encoded_rows():
    frame, y = _frame()
    est = CertifiedLogisticRegression(lam=1e-3, fit_intercept=True)
    pipe = make_unlearning_pipeline(SchemaEncoder(TABLE), est)
    plan = plan_sigma(frame, y, n_removals=30, estimator=pipe, random_state=0)
    direct = plan_sigma(SchemaEncoder(TABLE).transform(frame), y, n_removals=30, estimator=est, random_state=0)
    assert plan == direct
    assert plan.residual_after_removals <= plan.budget
    assert plan.sigma > 0 and 0.5 < plan.accuracy <= 1.0


def test_plans_refuse_raw_tables_and_steps_that_learn():
    frame, y = _frame(n=100)
    with pytest.raises(ValueError, match=r"non-numeric columns \['city'\]"):
        plan_sigma(frame, y, n_removals=5)
    learning = make_unlearning_pipeline(StandardScaler(), CertifiedLogisticRegression())
    with pytest.raises(ValueError, match="step 'standardscaler' .* learns from the training data"):
        plan_sigma(frame[["x", "z"]], y, n_removals=5, estimator=learning)
    with pytest.raises(ValueError, match="step 'onehotencoder'"):
        plan_lambda(frame, y, data="public", estimator=make_unlearning_pipeline(
            OneHotEncoder(), CertifiedLogisticRegression()))


def test_plan_lambda_prints_the_tradeoff_between_accuracy_and_removals():
    frame, y = _frame(n=600)
    pipe = make_unlearning_pipeline(SchemaEncoder(TABLE), CertifiedLogisticRegression(fit_intercept=True))
    plan = plan_lambda(frame, y, data="public", estimator=pipe, lams=[1e-2, 1e-3], sigmas=[1e-5, 100.0],
                       max_removals=40, random_state=0)
    assert [(p.lam, p.sigma) for p in plan.points] == [(1e-2, 1e-5), (1e-2, 100.0), (1e-3, 1e-5), (1e-3, 100.0)]
    by = {(p.lam, p.sigma): p for p in plan.points}
    for lam in (1e-2, 1e-3):
        assert by[lam, 100.0].capped and by[lam, 100.0].removals_supported == 40  # much noise: every removal fits
        assert by[lam, 1e-5].removals_supported < 40 and not by[lam, 1e-5].capped  # little noise: retrains early
    assert all(0.5 < p.accuracy <= 1.0 for p in plan.points)
    assert plan.best(40).sigma == 100.0
    assert plan.best(0) == max(plan.points, key=lambda p: (p.accuracy, p.removals_supported))
    table = str(plan)
    assert "chosen on public data" in table and ">= 40" in table and table.count("\n") == 5
    with pytest.raises(ValueError, match="min_removals must be met"):
        plan.best(41)
    # a public validation set instead of a held-out share
    val, yv = _frame(n=200, seed=9)
    plan_v = plan_lambda(frame, y, data="public", estimator=pipe, lams=[1e-3], sigmas=[1e-3], X_val=val,
                         y_val=yv, max_removals=1, random_state=0)
    assert plan_v.points[0].accuracy == pytest.approx(float(np.mean(
        make_unlearning_pipeline(SchemaEncoder(TABLE), CertifiedLogisticRegression(
            lam=1e-3, sigma=1e-3, fit_intercept=True, random_state=0)).fit(frame, y).predict(val) == yv)), abs=0.02)


def test_plan_lambda_on_private_data_says_what_it_costs():
    frame, y = _frame(n=200)
    pipe = make_unlearning_pipeline(SchemaEncoder(TABLE), CertifiedLogisticRegression())
    with pytest.warns(UserWarning, match="no removal certificate covers that choice"):
        plan_lambda(frame, y, data="private", estimator=pipe, lams=[1e-2], sigmas=[10.0], max_removals=5,
                    random_state=0)
    with pytest.raises(ValueError, match="data must be 'public' or 'private'. Found None"):
        plan_lambda(frame, y, data=None, estimator=pipe)
    with pytest.raises(ValueError, match="max_removals must be below"):
        plan_lambda(frame, y, data="public", estimator=pipe, max_removals=500)


# ---- the promise: fresh models at the planned σ (fresh b, fresh removal rows) rarely retrain -----------------------

def _retrained_within(X, y, sigma, R, seed, **params):
    """Whether a fresh model at ``sigma`` (its own b from ``seed``) retrains within R random removals."""
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=sigma, random_state=seed, **params).fit(X, y)
    rows = np.random.default_rng(1000 + seed).choice(X.shape[0], size=R, replace=False)
    return any(clf.remove([int(i)]).retrained for i in rows)


@pytest.mark.slow  # the fast equivalent: test_the_promise_holds_over_random_tables_and_removal_counts
@pytest.mark.parametrize("params", [{"fit_intercept": True}, {"fit_intercept": False},
                                    {"fit_intercept": True, "solver": "pcg"}], ids=["auto+b", "auto", "pcg+b"])
def test_the_plan_keeps_its_promise_over_fresh_models(params):
    """The table of the finding (500 rows, 30 removals), 3 plans × 6 fresh models (b and removal rows independent
    of the plan's): the plan of the code before this test retrained 7, 5 and 2 of 18 (auto with intercept, auto,
    pcg); the plan now (confidence 0.9) retrains 0 of 36 in each set-up over 6 plans. At most 1 of 18 may
    retrain here."""
    frame, y = _frame(n=500)
    X = SchemaEncoder(TABLE).transform(frame)
    retrained = 0
    for plan_seed in range(3):
        plan = plan_sigma(X, y, n_removals=30, estimator=CertifiedLogisticRegression(lam=1e-3, **params),
                          random_state=plan_seed)
        assert plan.confidence == 0.9 and plan.n_simulations == 10
        assert plan.retraining_rate <= 0.1 and plan.residual_after_removals <= plan.budget
        assert plan.retraining_rate <= plan.retraining_rate_upper <= 1.0
        retrained += sum(_retrained_within(X, y, plan.sigma, 30, 10 * plan_seed + s, **params) for s in range(6))
    assert retrained <= 1


def test_confidence_and_simulations_are_validated():
    X, y = _data(n=100)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\). Found 1.0"):
        plan_sigma(X, y, n_removals=5, confidence=1.0)
    with pytest.raises(ValueError, match="n_simulations"):
        plan_sigma(X, y, n_removals=5, n_simulations=0)
    with pytest.raises(ValueError, match="removal_rows must be distinct rows"):
        plan_sigma(X, y, n_removals=2, removal_rows=[3, 3])



def test_the_promise_holds_over_random_tables_and_removal_counts():
    """Random cases of the table of the finding (fresh data draws, R, solver and intercept drawn from a seed): at
    the planned σ, fresh models (b and removal rows independent of the plan's) do not retrain within R removals.
    Tolerance: at most 1 of the 24 fresh models (the plan promises probability >= 0.9 per model; it measured 0 of
    36 in test_the_plan_keeps_its_promise_over_fresh_models, the slow profile of this test). Mutation: without the
    two-stage search's confirmation on all draws and without the check on fresh draws (lethe.planning), 2 of the
    24 fresh models retrain and one plan measures a retraining rate of 0.2: this test fails."""
    rng = np.random.default_rng(2024)
    retrained = 0
    for case in range(6):
        frame, y = _frame(n=int(rng.integers(350, 550)), seed=100 + case)
        X = SchemaEncoder(TABLE).transform(frame)
        R = int(rng.integers(20, 41))
        params = [{"fit_intercept": True}, {"fit_intercept": False}, {"fit_intercept": True, "solver": "pcg"}][case % 3]
        plan = plan_sigma(X, y, n_removals=R, estimator=CertifiedLogisticRegression(lam=1e-3, **params),
                          random_state=case)
        assert plan.residual_after_removals <= plan.budget and plan.retraining_rate <= 0.1
        for s in range(4):
            clf = CertifiedLogisticRegression(lam=1e-3, sigma=plan.sigma, random_state=500 + 10 * case + s,
                                              **params).fit(X, y)
            rows = np.random.default_rng(900 + 10 * case + s).choice(X.shape[0], size=R, replace=False)
            retrained += any(clf.remove([int(i)]).retrained for i in rows)
    assert retrained <= 1


# ---- issue 37: planners that converge on small tables ---------------------------------------------------------------

import warnings  # noqa: E402

import lethe.planning as planning  # noqa: E402


def _affine_residual(monkeypatch, a, c):
    """Make the simulated β of the fixed-point search affine in σ (β = a + cσ), as on small tables, and count calls."""
    calls = []

    def fake(base, X, y, sigma, draws, confidence, cache=None):
        calls.append(sigma)
        return a + c * sigma

    monkeypatch.setattr(planning, "_quantile_residual", fake)
    return calls


def test_the_sigma_search_settles_when_the_residual_grows_in_proportion_to_sigma(monkeypatch):
    X, y = _data(n=300)
    est = CertifiedLogisticRegression(lam=1e-3, solver="pcg")
    unit = planning.residual_budget(1.0, 1.0, 1e-4, "gaussian", calibration=est.get_params()["calibration"])
    # margin · dβ/dσ = 0.95 ε′(1): the plain step σ ← margin β/ε′(1) needs tens of iterations (it raised
    # "σ did not settle in 5 iterations" before); the secant on the affine model lands on the fixed point
    calls = _affine_residual(monkeypatch, a=0.05 * unit, c=0.95 * unit / 1.2)
    plan = plan_sigma(X, y, n_removals=5, estimator=est, random_state=0)
    fixed = 1.2 * 0.05 / (1 - 0.95)
    assert len(calls) <= 6 and any(abs(s / fixed - 1) < 1e-6 for s in calls)
    assert plan.sigma >= fixed * 0.999


def test_a_search_that_cannot_settle_ends_with_the_best_point_and_says_so(monkeypatch):
    X, y = _data(n=300)
    est = CertifiedLogisticRegression(lam=1e-3, solver="pcg")
    unit = planning.residual_budget(1.0, 1.0, 1e-4, "gaussian", calibration=est.get_params()["calibration"])
    _affine_residual(monkeypatch, a=0.01 * unit, c=2.0 * unit)  # β outgrows the budget: no σ fits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = plan_sigma(X, y, n_removals=5, estimator=est, random_state=0)
    assert any("no σ tried supports 5 removals" in str(w.message) for w in caught)
    assert plan.sigma > 0 and 0.0 <= plan.retraining_rate <= 1.0  # a plan, with what it measured


def test_plan_lambda_scales_its_default_removals_to_a_small_table():
    X, y = _data(n=200)
    plan = plan_lambda(X, y, data="public", lams=[1e-2], sigmas=[10.0], random_state=0)
    assert plan.max_removals == 32  # 160 training rows // 5 (1000 before, refused: "must be below the 160 ...")
    assert "default: min(1000, training rows // 5)" in str(plan)
