"""Rényi DP formulas against mpmath quadrature and Google's dp_accounting; conversions against exact ε."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting import gaussian_mechanism as dpa_gaussian
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from hypothesis import given
from hypothesis import strategies as st
from privacy_exact import gaussian_renyi, laplace_delta, laplace_renyi

from lethe.privacy import (
    DEFAULT_ORDERS,
    best_dp_over_orders,
    compose_rdp,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    rdp_to_dp,
    rdp_to_dp_tight,
)

orders = st.floats(min_value=1.02, max_value=256.0)
deltas = st.floats(min_value=math.log(1e-12), max_value=math.log(0.5)).map(math.exp)
rdp_values = st.floats(min_value=0.0, max_value=50.0)


@pytest.mark.parametrize(
    ("alpha", "sigma", "d"), [(2.0, 1.0, 1.0), (1.5, 0.8, 0.5), (7.3, 3.0, 2.0), (32.0, 10.0, 1.0)]
)
def test_gaussian_rdp_matches_quadrature(alpha, sigma, d):
    assert gaussian_rdp(alpha, d, sigma) == pytest.approx(float(gaussian_renyi(alpha, sigma, d)), rel=1e-10)


def test_gaussian_rdp_matches_dp_accounting_composition():
    acc = dpa_rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(noise_multiplier=2.5), 7))
    ours = [compose_rdp([gaussian_rdp(a, 1.0, 2.5)] * 7) for a in DEFAULT_ORDERS]
    np.testing.assert_allclose(ours, acc._rdp, rtol=1e-12)


@pytest.mark.parametrize(("alpha", "b", "d"), [(2.0, 1.0, 1.0), (1.5, 0.5, 1.0), (9.0, 2.0, 1.5), (40.0, 1.0, 0.3)])
def test_laplace_rdp_matches_quadrature_and_dp_accounting(alpha, b, d):
    ours = laplace_rdp(alpha, d, b)
    assert ours == pytest.approx(float(laplace_renyi(alpha, b, d)), rel=1e-9)
    assert ours == pytest.approx(dpa_rdp._laplace_rdp(d / b, alpha), rel=1e-12)


@given(alpha=orders, eps=st.floats(0.0, 20.0))
def test_pure_dp_rdp_bounds_the_laplace_mechanism(alpha, eps):
    # the Laplace mechanism with b = Δ/ε is ε-DP, so the generic bound must dominate its exact RDP
    assert laplace_rdp(alpha, eps, 1.0) <= pure_dp_rdp(alpha, eps) * (1 + 1e-12) + 1e-15


@given(alpha=orders, r=rdp_values, delta=deltas)
def test_tight_conversion_never_exceeds_theorem_b1(alpha, r, delta):
    assert 0.0 <= rdp_to_dp_tight(alpha, r, delta) <= rdp_to_dp(alpha, r, delta)


@given(alpha=st.floats(1.02, 256.0), r=st.floats(1e-3, 50.0), delta=deltas)
def test_tight_conversion_matches_dp_accounting(alpha, r, delta):
    theirs, _ = dpa_rdp.compute_epsilon([alpha], [r], delta)
    if delta**2 + math.expm1(-r) > 0:  # dp_accounting then uses a KL shortcut and returns 0
        return
    assert rdp_to_dp_tight(alpha, r, delta) == pytest.approx(theirs, rel=1e-12, abs=1e-12)


def test_theorem_b1_value():
    # ε = ε₀ + log(1/δ)/(q − 1), Chourasia & Shah Thm B.1, and their footnote 6: (1 + 2 log(1/δ)/ε, ε/2)-RDP ⇒ (ε, δ)
    eps, delta = 0.7, 1e-6
    q = 1 + 2 / eps * math.log(1 / delta)
    assert rdp_to_dp(q, eps / 2, delta) == pytest.approx(eps, rel=1e-14)


@given(alpha=orders, sigma=st.floats(0.3, 50.0), delta=deltas)
def test_conversions_bound_the_exact_gaussian_epsilon(alpha, sigma, delta):
    # soundness: the exact ε(δ) of the Gaussian mechanism (dp_accounting's exact solver) is never above
    # the RDP-derived ε at any single order, for both conversions
    exact = dpa_gaussian.get_epsilon_gaussian(sigma, delta)
    r = gaussian_rdp(alpha, 1.0, sigma)
    assert rdp_to_dp_tight(alpha, r, delta) >= exact - 1e-9
    assert rdp_to_dp(alpha, r, delta) >= exact - 1e-9


@given(sigma=st.floats(0.5, 20.0), steps=st.integers(1, 500), delta=deltas)
def test_best_over_orders_bounds_exact_composed_gaussian(sigma, steps, delta):
    # T-fold composition of N(0, σ²) with Δ = 1 is exactly one Gaussian with σ/√T
    rdps = [compose_rdp([gaussian_rdp(a, 1.0, sigma)] * steps) for a in DEFAULT_ORDERS]
    eps, alpha = best_dp_over_orders(DEFAULT_ORDERS, rdps, delta)
    exact = dpa_gaussian.get_epsilon_gaussian(sigma / math.sqrt(steps), delta)
    assert eps >= exact - 1e-9
    assert alpha in DEFAULT_ORDERS
    eps_b1, _ = best_dp_over_orders(DEFAULT_ORDERS, rdps, delta, tight=False)
    assert eps <= eps_b1


@given(alpha=orders, eps0=st.floats(0.05, 5.0), delta=st.floats(1e-6, 0.3))
def test_conversions_bound_the_exact_laplace_epsilon(alpha, eps0, delta):
    # exact Laplace profile δ(ε) = 1 − e^{(ε − ε₀)/2} (ε ≤ ε₀), checked against quadrature below
    exact = max(0.0, eps0 + 2 * math.log1p(-delta))
    r = laplace_rdp(alpha, eps0, 1.0)
    assert rdp_to_dp_tight(alpha, r, delta) >= exact - 1e-12


def test_laplace_exact_profile_reference():
    for eps, eps0 in [(0.0, 1.0), (0.3, 1.0), (1.5, 2.0)]:
        closed = 1 - math.exp((eps - eps0) / 2)
        assert closed == pytest.approx(float(laplace_delta(eps, 1.0, eps0)), rel=1e-10)


def test_best_over_orders_picks_the_minimum():
    eps, alpha = best_dp_over_orders([2.0, 3.0, 4.0], [0.1, 0.2, math.inf], 1e-3, tight=False)
    assert alpha == 3.0
    assert eps == pytest.approx(min(rdp_to_dp(2.0, 0.1, 1e-3), rdp_to_dp(3.0, 0.2, 1e-3)))
    assert best_dp_over_orders([2.0], [math.inf], 0.1) == (math.inf, 2.0)


def test_compose_rdp_sums_exactly():
    assert compose_rdp([]) == 0.0
    assert compose_rdp([0.1] * 10) == 1.0
    assert compose_rdp(np.array([0.25, 0.5])) == 0.75


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: gaussian_rdp(1.0, 1.0, 1.0), ValueError, r"alpha \(the Rényi order\) must be > 1. Found 1.0"),
        (lambda: gaussian_rdp(2.0, -1.0, 1.0), ValueError, r"sensitivity must be >= 0. Found -1.0"),
        (lambda: gaussian_rdp(2.0, 1.0, 0.0), ValueError, r"sigma must be > 0. Found 0.0"),
        (lambda: laplace_rdp(2.0, 1.0, -2.0), ValueError, r"scale must be > 0. Found -2.0"),
        (lambda: compose_rdp([0.1, -0.2]), ValueError, r"epsilons\[1\] must be >= 0. Found -0.2"),
        (lambda: rdp_to_dp(2.0, 0.1, 0.0), ValueError, r"delta must be in the open interval \(0, 1\). Found 0.0"),
        (lambda: rdp_to_dp_tight(0.5, 0.1, 0.1), ValueError, r"alpha \(the Rényi order\) must be > 1. Found 0.5"),
        (lambda: rdp_to_dp_tight(2.0, math.inf, 0.1), ValueError, r"rdp_epsilon must be finite. Found inf"),
        (lambda: best_dp_over_orders([], [], 0.1), ValueError, r"orders must be non-empty. Found 0 orders."),
        (lambda: best_dp_over_orders([2.0], [0.1, 0.2], 0.1), ValueError, r"same length. Found 1 and 2."),
        (lambda: best_dp_over_orders([1.0], [0.1], 0.1), ValueError, r"orders\[0\] .* must be > 1. Found 1.0"),
        (lambda: best_dp_over_orders([2.0], [0.1], 0.1, tight=1), TypeError, r"tight must be a bool. Found 1"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


@pytest.mark.slow
@given(alpha=st.floats(1.001, 4096.0), sigma=st.floats(0.05, 200.0), delta=st.floats(1e-30, 0.9))
def test_tight_conversion_sound_extreme(alpha, sigma, delta):
    exact = dpa_gaussian.get_epsilon_gaussian(sigma, delta)
    assert rdp_to_dp_tight(alpha, gaussian_rdp(alpha, 1.0, sigma), delta) >= exact - 1e-9
    assert mpmath.mpf(rdp_to_dp_tight(alpha, 0.3, delta)) <= rdp_to_dp(alpha, 0.3, delta)
