"""Privacy loss random variable: law, tail, implied (ε, δ) curve, against mpmath and dp_accounting.

Seeded Monte-Carlo checks use the tolerance of Hoeffding's inequality at β = 1e-6 (see test_mechanisms).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given
from hypothesis import strategies as st
from privacy_exact import gaussian_delta, laplace_delta
from scipy import stats

from lethe.privacy import GaussianPrivacyLoss, LaplacePrivacyLoss, empirical_hockey_stick, empirical_tail


def hoeffding(n: int, beta: float = 1e-6) -> float:
    return math.sqrt(math.log(1.0 / beta) / (2.0 * n))


# ------------------------------------------------------------------------------------------- Gaussian
def test_gaussian_plrv_law_is_normal_mu2_over_2_mu2():
    plrv = GaussianPrivacyLoss(sigma=1.3, value=[0.0, 1.0, 2.0], neighbour_value=[0.5, 0.2, 2.4])
    mu = plrv.mu
    assert mu == pytest.approx(math.sqrt(0.25 + 0.64 + 0.16) / 1.3)
    losses = plrv.sample(100_000, random_state=0)
    ks = stats.kstest(losses, "norm", args=(mu * mu / 2, mu)).statistic
    assert ks < math.sqrt(math.log(2e6) / (2 * losses.size))


@given(sigma=st.floats(0.1, 20.0), dist=st.floats(0.01, 10.0), eps=st.floats(-5.0, 30.0))
def test_gaussian_tail_matches_mpmath(sigma, dist, eps):
    plrv = GaussianPrivacyLoss(sigma=sigma, value=0.0, neighbour_value=dist)
    mu = mpmath.mpf(dist) / sigma
    exact = mpmath.ncdf((mu * mu / 2 - eps) / mu)  # P(N(μ²/2, μ²) > ε), no 1 − x cancellation
    assert plrv.tail(eps) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)


@given(sigma=st.floats(0.1, 20.0), dist=st.floats(0.01, 10.0), delta=st.floats(1e-12, 0.9))
def test_implied_curve_is_a_valid_dp_curve(sigma, dist, delta):
    # the lecture's theorem, checked against the exact privacy profile: (ε, P(L > ε)) is (ε, δ)-DP,
    # i.e. the exact hockey-stick δ(ε) never exceeds the tail
    plrv = GaussianPrivacyLoss(sigma=sigma, value=0.0, neighbour_value=dist)
    eps = plrv.epsilon_for_tail(delta)
    assert plrv.tail(eps) <= delta * (1 + 1e-9)
    exact = gaussian_delta(eps, sigma, dist)
    assert exact <= plrv.tail(eps) * (1 + 1e-9) + 1e-300
    assert plrv.hockey_stick(eps) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)


def test_empirical_tail_and_hockey_stick_match_exact():
    plrv = GaussianPrivacyLoss(sigma=1.0, value=[0.0, 0.0], neighbour_value=[0.6, 0.8])
    n = 200_000
    losses = plrv.sample(n, random_state=3)
    for eps in [0.0, 0.5, 1.0]:
        assert abs(empirical_tail(losses, eps) - plrv.tail(eps)) <= hoeffding(n)
        assert abs(empirical_hockey_stick(losses, eps) - plrv.hockey_stick(eps)) <= hoeffding(n)
    curve = plrv.curve([0.0, 0.5, 1.0])
    assert np.all(np.diff(curve) < 0)


def test_log_ratio_matches_scipy_densities():
    plrv = GaussianPrivacyLoss(sigma=0.7, value=[1.0, 2.0], neighbour_value=[1.5, 1.0])
    o = np.array([[0.0, 0.0], [3.0, -1.0]])
    ref = np.sum(stats.norm.logpdf(o, [1.0, 2.0], 0.7) - stats.norm.logpdf(o, [1.5, 1.0], 0.7), axis=1)
    np.testing.assert_allclose(plrv.log_ratio(o), ref, rtol=1e-12)


# -------------------------------------------------------------------------------------------- Laplace
@pytest.mark.parametrize(("b", "d"), [(1.0, 1.0), (0.5, 1.2), (3.0, 0.4)])
def test_scalar_laplace_tail_matches_monte_carlo(b, d):
    plrv = LaplacePrivacyLoss(scale=b, value=0.0, neighbour_value=d)
    n = 200_000
    losses = plrv.sample(n, random_state=1)
    a = d / b
    assert losses.max() <= a + 1e-12 and losses.min() >= -a - 1e-12
    # avoid the atoms at ±a (where float ties decide the side) and compare at interior points
    for t in np.linspace(-a, a, 9)[1:-1]:
        assert abs(empirical_tail(losses, t) - plrv.tail(t)) <= hoeffding(n)
    assert plrv.tail(a) == 0.0 and plrv.tail(-a - 1e-9) == 1.0
    assert plrv.tail(a - 1e-12) == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize(("eps", "b", "d"), [(0.0, 1.0, 1.0), (0.3, 1.0, 1.0), (1.0, 0.5, 1.5), (0.1, 2.0, 0.5)])
def test_scalar_laplace_hockey_stick_matches_quadrature_and_dp_accounting(eps, b, d):
    plrv = LaplacePrivacyLoss(scale=b, value=0.0, neighbour_value=d)
    exact = float(laplace_delta(eps, b, d))
    assert plrv.hockey_stick(eps) == pytest.approx(exact, rel=1e-10, abs=1e-14)
    pessimistic = pld.from_laplace_mechanism(b, sensitivity=d, value_discretization_interval=1e-5)
    assert plrv.hockey_stick(eps) <= pessimistic.get_delta_for_epsilon(eps) * (1 + 1e-9)
    assert plrv.hockey_stick(eps) == pytest.approx(pessimistic.get_delta_for_epsilon(eps), abs=1e-4)
    assert plrv.hockey_stick(eps) <= plrv.tail(eps)


def test_scalar_laplace_implied_epsilon():
    plrv = LaplacePrivacyLoss(scale=1.0, value=0.0, neighbour_value=2.0)
    assert plrv.epsilon_for_tail(0.1) == 2.0  # L = ε₀ with probability 1/2
    eps = plrv.epsilon_for_tail(0.7)
    assert plrv.tail(eps) == pytest.approx(0.7)


def test_vector_laplace_tail_bounds_bracket_monte_carlo_and_tighten():
    plrv = LaplacePrivacyLoss(scale=1.0, value=[0.0, 0.0, 0.0], neighbour_value=[0.3, 0.5, 0.25])
    n = 200_000
    losses = plrv.sample(n, random_state=2)
    assert plrv.max_loss == pytest.approx(1.05)
    for t in [-0.5, 0.1, 0.45, 0.7, 0.9, 1.0]:
        lo, hi = plrv.tail_bounds(t)
        assert lo <= hi
        mc = empirical_tail(losses, t)
        assert lo - hoeffding(n) <= mc <= hi + hoeffding(n)
    # away from the atoms of L (sums of ±a_i, e.g. 0.45 = −0.3 + 0.5 + 0.25) the bracket closes as h → 0
    lo_c, hi_c = plrv.tail_bounds(0.4, grid=0.01)
    lo_f, hi_f = plrv.tail_bounds(0.4, grid=0.0005)
    assert lo_c <= hi_c and lo_f <= hi_f
    assert hi_f - lo_f < 0.25 * (hi_c - lo_c) and hi_f - lo_f < 0.005
    assert plrv.tail(1.05) == 0.0
    eps = plrv.epsilon_for_tail(0.2)
    assert plrv.tail(eps) <= 0.2 and eps <= plrv.max_loss
    with pytest.raises(ValueError, match="at most one coordinate. Found 3"):
        plrv.hockey_stick(0.1)


def test_vector_laplace_with_one_differing_coordinate_is_exact():
    one = LaplacePrivacyLoss(scale=2.0, value=[1.0, 5.0], neighbour_value=[1.0, 6.0])
    scalar = LaplacePrivacyLoss(scale=2.0, value=5.0, neighbour_value=6.0)
    for t in [-0.4, 0.0, 0.3]:
        assert one.tail_bounds(t) == (scalar.tail(t), scalar.tail(t))
    assert one.hockey_stick(0.2) == scalar.hockey_stick(0.2)


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: GaussianPrivacyLoss(0.0, 0.0, 1.0), ValueError, r"sigma must be > 0. Found 0.0"),
        (lambda: GaussianPrivacyLoss(1.0, [0.0, 1.0], [1.0]), ValueError, r"same shape. Found \(2,\) and \(1,\)"),
        (lambda: LaplacePrivacyLoss(-1.0, 0.0, 1.0), ValueError, r"scale must be > 0. Found -1.0"),
        (lambda: GaussianPrivacyLoss(1.0, 0.0, 1.0).sample(0), ValueError, r"n_samples must be >= 1. Found 0"),
        (lambda: GaussianPrivacyLoss(1.0, 0.0, 1.0).epsilon_for_tail(1.0), ValueError,
         r"delta must be in the open interval \(0, 1\). Found 1.0"),
        (lambda: empirical_tail([], 1.0), ValueError, r"losses must be non-empty. Found 0 samples."),
        (lambda: LaplacePrivacyLoss(1.0, [0.0] * 3, [1.0] * 3).tail_bounds(0.0, grid=1e-7), ValueError,
         r"grid is too fine"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, exc, message):
    with pytest.raises(exc, match=message):
        call()
