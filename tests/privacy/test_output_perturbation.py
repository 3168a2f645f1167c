"""Output perturbation: the sensitivity lemma, the calibration, the utility bound and the estimator contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from sklearn.datasets import make_classification
from sklearn.utils.estimator_checks import parametrize_with_checks

from lethe.privacy import (
    OutputPerturbationLogisticRegression,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    erm_sensitivity,
    excess_risk_bound,
    excess_risk_bound_from_sigma,
    output_perturbation_sigma,
)


# ---------------------------------------------------------------------------- an independent ERM solver
def _loss(w, X, y):
    return float(np.mean(np.logaddexp(0.0, -y * (X @ w))))


def _exact_minimiser(X, y, lam):
    """Newton's method to machine precision on mean log(1 + e^{−y xᵀw}) + (λ/2)‖w‖² (test-only code)."""
    n, d = X.shape
    w = np.zeros(d)
    for _ in range(100):
        m = y * (X @ w)
        s = 1.0 / (1.0 + np.exp(m))  # σ(−m)
        g = -(X.T @ (y * s)) / n + lam * w
        if np.linalg.norm(g) < 1e-14:
            break
        H = (X.T * (s * (1 - s) / n)) @ X + lam * np.eye(d)
        w = w - np.linalg.solve(H, g)
    return w


def _unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * rng.uniform(1.0, 2.0, (n, 1))
    return X


@given(seed=st.integers(0, 10_000), n=st.integers(5, 60), d=st.integers(1, 6), lam=st.floats(1e-3, 1.0))
def test_sensitivity_lemma_holds_for_exact_minimisers(seed, n, d, lam):
    rng = np.random.default_rng(seed)
    X = _unit_rows(rng, n, d)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    w = _exact_minimiser(X, y, lam)
    # adversarial replacement of record 0: a unit vector pushing against the current solution
    X2, y2 = X.copy(), y.copy()
    direction = w / np.linalg.norm(w) if np.linalg.norm(w) > 0 else np.eye(d)[0]
    X2[0], y2[0] = direction, -1.0
    w2 = _exact_minimiser(X2, y2, lam)
    assert np.linalg.norm(w - w2) <= erm_sensitivity(1.0, lam, n) * (1 + 1e-9)


def test_sensitivity_lemma_is_not_vacuous():
    # with a replacement that flips a record to the opposite label at the same point, the distance is a
    # sizeable fraction of 2L/(μn) (the lemma is tight up to the loss's curvature)
    rng = np.random.default_rng(0)
    n, d, lam = 10, 2, 1.0
    X = _unit_rows(rng, n, d)
    X[0] = [1.0, 0.0]
    y = np.ones(n)
    X2, y2 = X.copy(), y.copy()
    y2[0] = -1.0
    dist = np.linalg.norm(_exact_minimiser(X, y, lam) - _exact_minimiser(X2, y2, lam))
    assert dist > 0.3 * erm_sensitivity(1.0, lam, n)


@given(seed=st.integers(0, 10_000), n=st.integers(5, 60), d=st.integers(1, 6), lam=st.floats(1e-3, 1.0),
       intercept=st.booleans())
def test_estimator_released_weights_respect_the_sensitivity(seed, n, d, lam, intercept):
    # same seed ⇒ same noise draw, so w_priv(D) − w_priv(D') = ŵ(D) − ŵ(D'), which must be ≤ Δ₂ in x̃-space
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 3.0)
    y = np.arange(n) % 2
    X2 = X.copy()
    X2[0] = rng.standard_normal(d) * 10
    kw = {"epsilon": 1.0, "lam": lam, "fit_intercept": intercept, "random_state": seed}
    a = OutputPerturbationLogisticRegression(**kw).fit(X, y)
    b = OutputPerturbationLogisticRegression(**kw).fit(X2, y)
    scale = math.sqrt(2.0) if intercept else 1.0
    wa = np.append(a.coef_[0], a.intercept_) * scale
    wb = np.append(b.coef_[0], b.intercept_) * scale
    assert np.linalg.norm(wa - wb) <= a.sensitivity_ * (1 + 1e-9)
    assert a.sensitivity_ == pytest.approx(2 * (1 + a.tol) / (lam * n))


def test_noise_has_the_calibrated_scale():
    X, y = make_classification(n_samples=500, n_features=400, n_informative=20, random_state=0)
    fits = [OutputPerturbationLogisticRegression(epsilon=0.5, lam=0.1, random_state=s).fit(X, y) for s in (1, 2)]
    w = [np.append(f.coef_[0], f.intercept_) * math.sqrt(2.0) for f in fits]
    z = (w[0] - w[1]) / (math.sqrt(2.0) * fits[0].sigma_)  # difference of two independent N(0, σ²) draws
    assert stats.kstest(z, "norm").statistic < math.sqrt(math.log(2e6) / (2 * z.size))
    assert fits[0].sigma_ == analytic_gaussian_sigma(0.5, 1e-5, fits[0].sensitivity_)


def test_classical_calibration_is_the_lecture_formula():
    X, y = make_classification(n_samples=300, n_features=5, random_state=1)
    clf = OutputPerturbationLogisticRegression(epsilon=0.5, delta=1e-6, lam=0.05, calibration="classical").fit(X, y)
    n, tol = 300, clf.tol
    expected = 2 * (1 + tol) * math.sqrt(2 * math.log(1.25 / 1e-6)) / (0.5 * 0.05 * n)
    assert clf.sigma_ == pytest.approx(expected, rel=1e-14)
    assert output_perturbation_sigma(0.5, 1e-6, 1.0, 0.05, n) == pytest.approx(expected / (1 + tol), rel=1e-14)
    assert clf.guarantee_["epsilon"] == 0.5 and clf.guarantee_["delta"] == 1e-6


def test_seeded_fit_is_reproducible_and_does_not_touch_global_state():
    X, y = make_classification(n_samples=200, n_features=4, random_state=2)
    a = OutputPerturbationLogisticRegression(random_state=5).fit(X, y)
    b = OutputPerturbationLogisticRegression(random_state=5).fit(X, y)
    c = OutputPerturbationLogisticRegression(random_state=6).fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and not np.array_equal(a.coef_, c.coef_)


# -------------------------------------------------------------------------------------------- utility
def test_excess_risk_bound_holds_in_expectation():
    rng = np.random.default_rng(3)
    n, d, lam, eps, delta = 400, 8, 0.05, 0.5, 1e-5
    X = _unit_rows(rng, n, d)
    y = np.sign(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n))
    w = _exact_minimiser(X, y, lam)
    sigma = output_perturbation_sigma(eps, delta, 1.0, lam, n)
    z = sigma * rng.standard_normal((4000, d))
    excess = np.array([_loss(w + zi, X, y) for zi in z]) - _loss(w, X, y)
    # the proof's first step, draw by draw: L̂(w + z) − L̂(w) ≤ L‖z‖ with L = 1 for rows in the unit ball
    assert np.all(excess <= np.linalg.norm(z, axis=1) * (1 + 1e-12))
    # each excess is ≤ L‖z‖; E‖z‖ ≤ √d σ. Monte-Carlo slack: 6 standard errors of the mean
    slack = 6 * excess.std() / math.sqrt(excess.size)
    assert excess.mean() <= excess_risk_bound_from_sigma(1.0, sigma, d) + slack
    assert excess_risk_bound_from_sigma(1.0, sigma, d) <= excess_risk_bound(eps, delta, 1.0, lam, n, d)


@given(eps=st.floats(1e-3, 0.999), delta=st.floats(1e-12, 0.5), mu=st.floats(1e-4, 10.0),
       n=st.integers(1, 10**6), d=st.integers(1, 10_000))
def test_lecture_bound_dominates_the_proof_bound(eps, delta, mu, n, d):
    sigma = classical_gaussian_sigma(eps, delta, erm_sensitivity(1.3, mu, n))
    assert excess_risk_bound_from_sigma(1.3, sigma, d) <= excess_risk_bound(eps, delta, 1.3, mu, n, d)


# ------------------------------------------------------------------------------------------- contract
@parametrize_with_checks(
    [
        OutputPerturbationLogisticRegression(),
        OutputPerturbationLogisticRegression(
            epsilon=0.5, calibration="classical", row_norm="normalize", fit_intercept=False, random_state=0
        ),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_row_norm_modes():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [-6.0, 8.0], [0.0, 0.1]])
    y = np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"row_norm='error' requires every row .* Found norm 10.0 at row 2"):
        OutputPerturbationLogisticRegression(row_norm="error").fit(X, y)
    clip = OutputPerturbationLogisticRegression(row_norm="clip", random_state=0).fit(X, y)
    # clipping is per row: rows already in the unit ball are scored as given, others as their projection
    np.testing.assert_allclose(clip.decision_function(X[:1]), clip.decision_function(X[:1] / 5.0), rtol=1e-12)
    np.testing.assert_allclose(clip.decision_function(X[1:2]), X[1] @ clip.coef_[0] + clip.intercept_[0])
    norm = OutputPerturbationLogisticRegression(row_norm="normalize", random_state=0).fit(X, y)
    np.testing.assert_allclose(norm.decision_function(X[1:2]), norm.decision_function(X[1:2] * 7.0))
    ok = OutputPerturbationLogisticRegression(row_norm="error", random_state=0).fit(X / 10.0, y)
    assert ok.coef_.shape == (1, 2)


def test_predict_proba_and_classes():
    X, y = make_classification(
        n_samples=3000, n_features=5, n_informative=3, n_redundant=0, n_clusters_per_class=1, class_sep=2.0,
        random_state=4,
    )
    labels = np.array(["cat", "dog"])[y]
    clf = OutputPerturbationLogisticRegression(epsilon=5.0, lam=0.01, random_state=0).fit(X, labels)
    assert list(clf.classes_) == ["cat", "dog"]
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(clf.predict(X), clf.classes_[(proba[:, 1] > 0.5).astype(int)])
    assert clf.score(X, labels) > 0.95  # sklearn's non-private LogisticRegression: 0.990


@pytest.mark.parametrize(
    ("params", "exc", "message"),
    [
        ({"epsilon": -1.0}, ValueError, r"epsilon must be > 0. Found -1.0"),
        ({"delta": 0.0}, ValueError, r"delta must be in the open interval \(0, 1\). Found 0.0"),
        ({"lam": 0.0}, ValueError, r"lam must be > 0. Found 0.0"),
        ({"epsilon": 2.0, "calibration": "classical"}, ValueError,
         r"epsilon must be in the open interval \(0, 1\). Found 2.0"),
        ({"calibration": "exact"}, ValueError,
         r"calibration must be one of \('analytic', 'classical'\). Found 'exact'"),
        ({"row_norm": "scale"}, ValueError, r"row_norm must be one of \('clip', 'normalize', 'error'\)"),
        ({"tol": -1.0}, ValueError, r"tol must be > 0. Found -1.0"),
        ({"max_iter": 0}, ValueError, r"max_iter must be >= 1. Found 0"),
        ({"fit_intercept": "yes"}, TypeError, r"fit_intercept must be a bool. Found 'yes'"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(params, exc, message):
    X, y = make_classification(n_samples=50, n_features=4, n_informative=2, random_state=0)
    with pytest.raises(exc, match=message):
        OutputPerturbationLogisticRegression(**params).fit(X, y)


def test_multiclass_is_refused():
    X, y = make_classification(
        n_samples=90, n_features=4, n_informative=3, n_redundant=1, n_classes=3, random_state=0
    )
    with pytest.raises(ValueError, match="Only binary classification is supported"):
        OutputPerturbationLogisticRegression().fit(X, y)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: erm_sensitivity(1.0, 0.0, 10), r"strong_convexity must be > 0. Found 0.0"),
        (lambda: erm_sensitivity(1.0, 1.0, 0), r"n_samples must be >= 1. Found 0"),
        (lambda: excess_risk_bound(1.5, 1e-5, 1.0, 1.0, 10, 3), r"epsilon must be in the open interval \(0, 1\)"),
        (lambda: output_perturbation_sigma(0.5, 1e-5, -1.0, 1.0, 10), r"lipschitz must be > 0. Found -1.0"),
    ],
)
def test_function_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
