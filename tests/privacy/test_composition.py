"""Group privacy and composition bounds against exact values (mpmath, Kairouz et al.'s optimal composition,
dp_accounting's PLD)."""

from __future__ import annotations

import math

import mpmath
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given
from hypothesis import strategies as st
from privacy_exact import gaussian_delta, randomized_response_composition_delta

from lethe.privacy import (
    advanced_composition,
    advanced_composition_epsilon,
    analytic_gaussian_delta,
    basic_composition,
    group_privacy,
)


# ----------------------------------------------------------------------------------------------- group
@given(eps=st.floats(0.0, 3.0), delta=st.floats(0.0, 0.1), k=st.integers(1, 30))
def test_group_privacy_formula_matches_geometric_sum(eps, delta, k):
    g_eps, g_delta = group_privacy(eps, delta, k)
    assert g_eps == pytest.approx(k * eps)
    geometric = mpmath.fsum(mpmath.exp(j * mpmath.mpf(eps)) for j in range(k))  # Σ_{j<k} e^{jε}
    assert g_delta == pytest.approx(float(delta * geometric), rel=1e-12, abs=1e-300)


@given(sigma=st.floats(0.5, 10.0), eps=st.floats(0.01, 2.0), k=st.integers(1, 8))
def test_group_privacy_bounds_the_exact_gaussian_group(sigma, eps, k):
    # a group of k records moves f by at most kΔ: the exact δ of N(0, σ²) at distance k and level kε
    # must not exceed the group-privacy δ derived from the single-record δ(ε)
    delta = analytic_gaussian_delta(eps, sigma, 1.0)
    g_eps, g_delta = group_privacy(eps, delta, k)
    assert gaussian_delta(g_eps, sigma, k) <= g_delta * (1 + 1e-9) + 1e-300


# ----------------------------------------------------------------------------------------------- basic
@given(sigma=st.floats(0.5, 10.0), eps=st.floats(0.01, 2.0), steps=st.integers(1, 50))
def test_basic_composition_bounds_the_exact_composed_gaussian(sigma, eps, steps):
    delta = analytic_gaussian_delta(eps, sigma)
    tot_eps, tot_delta = basic_composition([eps] * steps, [delta] * steps)
    # T Gaussians with Δ = 1 compose exactly to one Gaussian with σ/√T
    assert gaussian_delta(tot_eps, sigma / math.sqrt(steps)) <= tot_delta * (1 + 1e-9) + 1e-300


def test_basic_composition_sums():
    assert basic_composition([], []) == (0.0, 0.0)
    assert basic_composition([0.5, 0.25], [1e-6, 0.0]) == (0.75, 1e-6)


# -------------------------------------------------------------------------------------------- advanced
@given(
    eps=st.floats(0.005, 1.0),
    delta=st.sampled_from([0.0, 1e-8, 1e-5]),
    steps=st.integers(1, 120),
    delta_prime=st.floats(min_value=math.log(1e-9), max_value=math.log(0.5)).map(math.exp),
)
def test_advanced_composition_bounds_optimal_composition(eps, delta, steps, delta_prime):
    # Kairouz–Oh–Viswanath: the exact smallest δ for T-fold composition of *any* (ε, δ)-DP mechanisms at
    # level ε' (attained by randomized response); the advanced-composition δ must be at least that
    eps_total, delta_total = advanced_composition(eps, delta, steps, delta_prime)
    exact = randomized_response_composition_delta(eps, delta, steps, eps_total)
    assert exact <= delta_total * (1 + 1e-9)


@given(eps=st.floats(0.01, 0.5), steps=st.integers(1, 60), delta_prime=st.floats(1e-8, 0.1))
def test_advanced_composition_bounds_composed_laplace_pld(eps, steps, delta_prime):
    eps_total, delta_total = advanced_composition(eps, 0.0, steps, delta_prime)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_event.LaplaceDpEvent(noise_multiplier=1.0 / eps), steps)
    # pessimistic PLD gives an upper estimate of the true δ; the true δ is below it, and must be ≤ δ'
    assert acc.get_delta(eps_total) <= delta_total * (1 + 1e-9) + 1e-12


def test_advanced_composition_can_beat_basic_and_forms_are_ordered():
    eps, steps, dp = 0.01, 10_000, 1e-6
    adv, _ = advanced_composition(eps, 0.0, steps, dp)
    assert adv < steps * eps  # √T scaling wins for large T
    loose, _ = advanced_composition(eps, 0.0, steps, dp, form="dwork_roth")
    assert adv <= loose
    # the drift term ε tanh(ε/2) is the lecture's ε(e^ε − 1)/(e^ε + 1)
    e = 0.3
    assert advanced_composition(e, 0.0, 1, 0.5)[0] - e * math.sqrt(2 * math.log(2)) == pytest.approx(
        e * math.expm1(e) / (math.exp(e) + 1)
    )


@given(target=st.floats(0.01, 0.99), steps=st.integers(1, 10_000),
       delta_prime=st.floats(min_value=math.log(1e-12), max_value=math.log(0.8)).map(math.exp))
def test_corollary_per_step_epsilon_meets_the_target(target, steps, delta_prime):
    eps = advanced_composition_epsilon(target, steps, delta_prime)
    assert eps == pytest.approx(target / math.sqrt(8 * steps * math.log(1 / delta_prime)))
    assert advanced_composition(eps, 0.0, steps, delta_prime)[0] <= target


def test_corollary_side_condition_is_needed_and_enforced():
    # with δ' close to 1 the corollary's ε would overshoot: the side condition δ' ≤ e^{−ε'/8} is enforced
    target, steps, dp = 0.9, 1, 0.99
    eps = target / math.sqrt(8 * steps * math.log(1 / dp))
    assert advanced_composition(eps, 0.0, steps, dp)[0] > target
    with pytest.raises(ValueError, match=r"delta_prime must be <= exp\(-target_epsilon/8\).*Found 0.99"):
        advanced_composition_epsilon(target, steps, dp)


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: group_privacy(-1.0, 0.0, 2), ValueError, r"epsilon must be >= 0. Found -1.0"),
        (lambda: group_privacy(1.0, 1.5, 2), ValueError, r"delta must be in \[0, 1\]. Found 1.5"),
        (lambda: group_privacy(1.0, 0.0, 0), ValueError, r"group_size must be >= 1. Found 0"),
        (lambda: group_privacy(1.0, 0.0, 2.0), TypeError, r"group_size must be an integer"),
        (lambda: basic_composition([1.0], []), ValueError, r"same length. Found 1 and 0"),
        (lambda: basic_composition([1.0], [-0.1]), ValueError, r"deltas\[0\] must be >= 0. Found -0.1"),
        (lambda: advanced_composition(0.1, 0.0, 10, 0.0), ValueError,
         r"delta_prime must be in the open interval \(0, 1\). Found 0.0"),
        (lambda: advanced_composition(0.1, 0.0, 10, 0.1, form="kov"), ValueError,  # type: ignore[arg-type]
         r"form must be one of \('lecture', 'dwork_roth'\). Found 'kov'"),
        (lambda: advanced_composition_epsilon(1.0, 10, 1e-5), ValueError,
         r"target_epsilon must be in the open interval \(0, 1\). Found 1.0"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_pld_reference_sanity():
    # the PLD reference agrees with the closed-form Laplace profile for one step (so it is a fair judge)
    p = pld.from_laplace_mechanism(2.0, value_discretization_interval=1e-5)
    assert p.get_delta_for_epsilon(0.2) == pytest.approx(-math.expm1((0.2 - 0.5) / 2), abs=1e-4)
