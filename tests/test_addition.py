"""Adding records (lethe.certified.addition, Estimator.add): the certified β⁺ bounds the exact residual on D ∪ A,
computed here independently (long double), over random cases; a bound that leaves out the added rows fails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression


def exact_logistic_residual(w, b, X, y, lam):
    """‖Σ ∇ℓ(wᵀxᵢ, yᵢ) + λ n w + b‖ for the logistic loss in long double, written independently of lethe."""
    Xl, yl, wl, bl = (np.asarray(a, dtype=np.longdouble) for a in (X, y, w, b))
    d1 = -yl / (1 + np.exp(yl * (Xl @ wl)))
    g = Xl.T @ d1 + lam * Xl.shape[0] * wl + bl
    return float(np.sqrt(np.sum(g * g)))


def _problem(seed, n, d, classes):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(n, 1))
    w = rng.normal(size=(d, classes)) * 3
    y = np.argmax(X @ w + rng.gumbel(size=(n, classes)), axis=1)
    y[:classes] = np.arange(classes)  # every class present in the first rows
    return X, y


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(30, 120), d=st.integers(1, 8), classes=st.integers(2, 3),
       lam=st.floats(1e-3, 1e-1), sigma=st.floats(0.05, 5.0), batches=st.lists(st.integers(1, 10), min_size=1,
                                                                                max_size=3))
def test_added_rows_certificate_bounds_the_exact_residual(seed, n, d, classes, lam, sigma, batches):
    X, y = _problem(seed, n + sum(batches), d, classes)
    clf = CertifiedLogisticRegression(lam=lam, sigma=sigma, random_state=seed % 1000).fit(X[:n], y[:n])
    start = n
    for m in batches:
        cert = clf.add(X[start:start + m], y[start:start + m])
        start += m
        assert cert.residual_bound <= cert.budget
        for k, st_ in enumerate(clf.states_):
            exact = exact_logistic_residual(st_.w, st_.b, X[:start], clf.Y_[k], lam)
            assert exact <= st_.residual_bound
    assert clf.n_remaining_ == start
    i = int(np.random.default_rng(seed).integers(start))  # removal after adding still certifies
    clf.remove([i])
    keep = np.arange(start) != i
    for k, st_ in enumerate(clf.states_):
        assert exact_logistic_residual(st_.w, st_.b, X[:start][keep], clf.Y_[k][keep], lam) <= st_.residual_bound


def test_a_bound_that_treats_adding_as_free_would_be_false():
    """Mutation check: keeping the old β after the step (as if adding cost nothing, like a step with no Taylor
    remainder) under-states the exact residual on D ∪ A; the certified β⁺ does not."""
    X, y = _problem(3, 260, 6, 2)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=1.0, random_state=0).fit(X[:200], y[:200])
    old_beta = clf.states_[0].residual_bound
    clf.add(X[200:], y[200:])
    st_ = clf.states_[0]
    exact = exact_logistic_residual(st_.w, st_.b, X, clf.Y_[0], 1e-3)
    assert old_beta < exact <= st_.residual_bound


def test_adding_approaches_the_model_trained_on_all_rows():
    X, y = _problem(1, 900, 6, 3)
    full = CertifiedLogisticRegression(lam=1e-3, sigma=0.2, random_state=0).fit(X, y)
    grown = CertifiedLogisticRegression(lam=1e-3, sigma=0.2, random_state=0).fit(X[:600], y[:600])
    cert = grown.add(X[600:], y[600:])
    assert cert.n_added == 300 and cert.residual_bound <= cert.budget
    # same b (same seed): the Newton step lands next to the model trained on all rows from scratch
    assert np.max(np.abs(grown.coef_ - full.coef_)) < 0.05 * np.max(np.abs(full.coef_))


def test_adding_forces_a_retraining_when_the_step_exceeds_the_budget():
    X, y = _problem(2, 400, 6, 2)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=1e-3, random_state=0).fit(X[:100], y[:100])
    cert = clf.add(X[100:], y[100:])
    assert cert.retrained and cert.operation == "retrain" and cert.residual_bound <= cert.budget
    assert exact_logistic_residual(clf.states_[0].w, clf.states_[0].b, X, clf.Y_[0], 1e-3) <= cert.residual_bound


def test_add_for_linear_regression_is_exact_and_keys_follow():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = X @ [1.0, 2.0, -1.0, 0.5] + 0.1 * rng.normal(size=80)
    reg = CertifiedLinearRegression(lam=1e-3).fit(X[:50], y[:50], sample_ids=np.arange(50))
    cert = reg.add(X[50:], y[50:], sample_ids=np.arange(50, 80))
    ref = CertifiedLinearRegression(lam=1e-3).fit(X, y)
    np.testing.assert_allclose(reg.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    assert cert.epsilon == 0.0 and cert.operation == "add"
    reg.remove(keys=[77])
    assert not reg.active_[77]
    with pytest.raises(ValueError, match="new keys"):
        reg.add(X[:1], y[:1], sample_ids=[3])
    with pytest.raises(ValueError, match="sample_ids"):
        reg.add(X[:1], y[:1])


def test_add_refusals_change_nothing():
    X, y = _problem(4, 300, 5, 3)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X[:200], y[:200])
    before = clf.coef_.copy()
    with pytest.raises(ValueError, match="class the model was not fitted with"):
        clf.add(X[200:210], np.full(10, 7))
    with pytest.raises(ValueError, match="norm"):
        clf.add(X[200:210] * 3, y[200:210])
    with pytest.raises(ValueError, match="features"):
        clf.add(X[200:210, :4], y[200:210])
    clf.set_params(sigma=2.0)
    with pytest.raises(ValueError, match="changed since fit"):
        clf.add(X[200:210], y[200:210])
    np.testing.assert_array_equal(clf.coef_, before)
    assert clf.X_.shape[0] == 200
    sub = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, negative_subsample=1.0, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="negative_subsample"):
        sub.add(X[:3], y[:3])
