"""Objective perturbation DP calibration: exact 1-D privacy profile by quadrature, and the derivation's steps in d > 1.

In one dimension the output density of w = argmin Σ ℓ(w xᵢ, yᵢ) + λn w²/2 + b w is known in closed form by the
change of variables b ↦ w: p_D(w) = φ_σ(b_D(w)) · H_D(w) with b_D(w) = −(Σ ℓ'(w xᵢ, yᵢ) xᵢ + λ n w) and
H_D(w) = Σ ℓ''(w xᵢ, yᵢ) xᵢ² + λ n. The exact δ(ε) = ∫ (p_D − e^ε p_D')₊ dw is integrated on a fine grid
(trapezoid rule in t = asinh w; its error is far below the δ values compared).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import expit
from scipy.stats import norm

from lethe.privacy.objective_perturbation import objective_perturbation_epsilon, objective_perturbation_sigma


def _density(w, X, y, lam, sigma):
    z = np.outer(w, X)
    s = expit(-y * z)  # logistic: ℓ'(z, y) = −y σ(−yz), ℓ'' = σ(−yz) σ(yz)
    b = -((-y * s) @ X + lam * X.size * w)
    H = (s * (1 - s)) @ (X**2) + lam * X.size
    return norm.pdf(b, scale=sigma) * H


def _exact_delta(X, y, X2, y2, lam, sigma, eps, points=200_001):
    n = X.size
    R = (14 * sigma + n) / (lam * n)
    # grid uniform in t = asinh(w): fine near 0 (where ℓ'' varies on the scale of 1/|x|), coarse far out
    t = np.linspace(-np.arcsinh(R), np.arcsinh(R), points)
    w, jac = np.sinh(t), np.cosh(t)
    p, q = _density(w, X, y, lam, sigma) * jac, _density(w, X2, y2, lam, sigma) * jac
    dt = t[1] - t[0]
    mass = np.trapezoid(p, dx=dt)
    assert mass == pytest.approx(1.0, abs=1e-8)  # the change of variables is right and the grid covers the mass
    return max(np.trapezoid(np.maximum(p - math.exp(eps) * q, 0), dx=dt),
               np.trapezoid(np.maximum(q - math.exp(eps) * p, 0), dx=dt))


def _pair(seed, n):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, n)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    X2, y2 = X.copy(), y.copy()
    X[0], y[0] = 1.0, 1.0
    X2[0], y2[0] = rng.uniform(-1, 1), -1.0  # replace record 0
    return X, y, X2, y2


@pytest.mark.parametrize(
    ("seed", "n", "lam", "eps", "delta"),
    [(0, 10, 0.1, 1.0, 1e-3), (1, 5, 1.0, 0.5, 1e-2), (2, 30, 0.02, 2.0, 1e-5), (3, 8, 0.3, 0.3, 0.05)],
)
def test_calibrated_sigma_meets_the_exact_1d_profile(seed, n, lam, eps, delta):
    X, y, X2, y2 = _pair(seed, n)
    sigma = objective_perturbation_sigma(eps, delta, lam, n)
    assert _exact_delta(X, y, X2, y2, lam, sigma, eps) <= delta


def test_audit_has_power():
    # negative control: far less noise than calibrated is caught by the same quadrature
    X, y, X2, y2 = _pair(0, 5)
    sigma = objective_perturbation_sigma(1.0, 1e-3, 1.0, 5)
    assert _exact_delta(X, y, X2, y2, 1.0, sigma / 8, 1.0) > 1e-3


@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), d=st.integers(2, 6), lam=st.floats(1e-3, 1.0),
       scale=st.floats(0.01, 50.0))
def test_derivation_steps_hold_in_higher_dimension(seed, n, d, lam, scale):
    # (i) det H_D(w)/det H_D'(w) ≤ 1 + c/(λn); (ii) b_D'(w) − b_D(w) lies in span{x₁, x₁'} with norm ≤ 2L
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    X2, y2 = X.copy(), y.copy()
    X2[0] = rng.standard_normal(d)
    X2[0] /= max(np.linalg.norm(X2[0]), 1.0)
    y2[0] = -y[0]
    w = scale * rng.standard_normal(d)

    def grad_and_hess(X, y):
        s = expit(-y * (X @ w))
        g = X.T @ (-y * s) + lam * n * w
        H = (X.T * (s * (1 - s))) @ X + lam * n * np.eye(d)
        return g, H

    g1, H1 = grad_and_hess(X, y)
    g2, H2 = grad_and_hess(X2, y2)
    logdet_ratio = np.linalg.slogdet(H1)[1] - np.linalg.slogdet(H2)[1]
    assert logdet_ratio <= math.log1p(0.25 / (lam * n)) + 1e-12
    v = g1 - g2  # = b_D'(w) − b_D(w)
    assert np.linalg.norm(v) <= 2.0 + 1e-12
    basis = np.linalg.qr(np.stack([X[0], X2[0]], axis=1))[0]
    assert np.linalg.norm(v - basis @ (basis.T @ v)) <= 1e-9 * (1 + np.linalg.norm(v))


@given(eps=st.floats(0.05, 20.0), delta=st.floats(1e-12, 0.5), lam=st.floats(1e-4, 1.0), n=st.integers(10, 10**6))
def test_sigma_inverts_epsilon(eps, delta, lam, n):
    if eps <= math.log1p(0.25 / (lam * n)):
        with pytest.raises(ValueError, match=r"epsilon must be > ln\(1 \+ curvature/\(lam\*n_samples\)\)"):
            objective_perturbation_sigma(eps, delta, lam, n)
        return
    sigma = objective_perturbation_sigma(eps, delta, lam, n)
    assert objective_perturbation_epsilon(sigma, delta, lam, n) <= eps
    assert objective_perturbation_epsilon(sigma * (1 - 1e-9), delta, lam, n) > eps * (1 - 1e-6)


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), lam=st.floats(1e-2, 1.0), eps=st.floats(0.1, 3.0),
       delta=st.floats(1e-6, 0.1))
def test_calibrated_sigma_meets_the_exact_1d_profile_exhaustive(seed, n, lam, eps, delta):
    if eps <= math.log1p(0.25 / (lam * n)):
        return
    X, y, X2, y2 = _pair(seed, n)
    sigma = objective_perturbation_sigma(eps, delta, lam, n)
    assert _exact_delta(X, y, X2, y2, lam, sigma, eps, points=400_001) <= delta


def test_errors_name_parameter_rule_and_value():
    with pytest.raises(ValueError, match=r"sigma must be > 0. Found 0.0"):
        objective_perturbation_epsilon(0.0, 1e-5, 0.1, 10)
    with pytest.raises(ValueError, match=r"Found 0.01"):
        objective_perturbation_sigma(0.01, 1e-5, 1e-3, 10)
    with pytest.raises(ValueError, match=r"n_samples must be >= 1. Found 0"):
        objective_perturbation_sigma(1.0, 1e-5, 1e-3, 0)
