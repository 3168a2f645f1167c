"""Gaussian calibration against independent values (mpmath at 60 digits, Google's dp_accounting)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import gaussian_mechanism as dpa_gaussian
from hypothesis import given
from hypothesis import strategies as st
from privacy_exact import gaussian_delta, gaussian_delta_by_quadrature

from lethe.privacy import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)

log_uniform = st.floats(min_value=-12.0, max_value=math.log(0.5)).map(math.exp)  # δ in [6e-6.., 0.5]
small_delta = st.floats(min_value=math.log(1e-15), max_value=math.log(0.5)).map(math.exp)
any_epsilon = st.floats(min_value=math.log(1e-3), max_value=math.log(60.0)).map(math.exp)
unit_epsilon = st.floats(min_value=1e-3, max_value=0.999)
sensitivity = st.floats(min_value=1e-3, max_value=1e3)


def test_reference_closed_form_matches_quadrature():
    # the reference formula itself, against the definition δ = ∫ (p − e^ε q)₊
    for eps, sigma, d in [(0.5, 1.0, 1.0), (2.0, 0.7, 1.3), (0.1, 5.0, 2.0), (4.0, 0.3, 1.0)]:
        a, b = gaussian_delta(eps, sigma, d), gaussian_delta_by_quadrature(eps, sigma, d)
        assert abs(a - b) <= mpmath.mpf("1e-25") + mpmath.mpf("1e-20") * abs(a)


@given(eps=st.floats(0.0, 60.0), sigma=st.floats(0.05, 50.0), d=sensitivity)
def test_delta_matches_mpmath(eps, sigma, d):
    exact = gaussian_delta(eps, sigma, d)
    ours = analytic_gaussian_delta(eps, sigma, d)
    if exact < mpmath.mpf("1e-250"):
        assert ours <= 1e-240
    else:
        assert abs(mpmath.mpf(ours) - exact) <= mpmath.mpf("1e-9") * exact


@given(eps=any_epsilon, delta=small_delta, d=sensitivity)
def test_analytic_sigma_is_sound_and_tight(eps, delta, d):
    sigma = analytic_gaussian_sigma(eps, delta, d)
    # sound: the exact δ(ε) at the returned σ does not exceed the target
    assert gaussian_delta(eps, sigma, d) <= delta
    # nearly tight: 1e-8 less noise already breaks the target
    assert gaussian_delta(eps, sigma * (1 - 1e-8), d) > delta


@given(eps=any_epsilon, delta=log_uniform)
def test_analytic_sigma_matches_dp_accounting(eps, delta):
    ours = analytic_gaussian_sigma(eps, delta)
    theirs = dpa_gaussian.get_sigma_gaussian(eps, delta)
    assert ours == pytest.approx(theirs, rel=1e-8)


@given(eps=unit_epsilon, delta=small_delta, d=sensitivity)
def test_classical_sigma_is_sound_and_not_below_analytic(eps, delta, d):
    classical = classical_gaussian_sigma(eps, delta, d)
    assert classical >= analytic_gaussian_sigma(eps, delta, d)
    assert gaussian_delta(eps, classical, d) <= delta


def test_classical_formula_is_unsound_above_its_domain():
    # Why ε < 1 is enforced: at ε = 20, δ = 0.3 the lecture's σ would give δ(ε) > δ.
    eps, delta = 20.0, 0.3
    sigma = math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert gaussian_delta(eps, sigma) > delta
    with pytest.raises(ValueError, match=r"epsilon must be in the open interval \(0, 1\). Found 20.0"):
        classical_gaussian_sigma(eps, delta)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log1p:RuntimeWarning")  # inside dp_accounting
@given(delta=log_uniform, sigma=st.floats(0.1, 30.0), d=sensitivity)
def test_epsilon_inverse_is_sound_and_matches_dp_accounting(delta, sigma, d):
    eps = analytic_gaussian_epsilon(delta, sigma, d)
    assert gaussian_delta(eps, sigma, d) <= delta
    if eps > 0:
        assert gaussian_delta(eps * (1 - 1e-7) - 1e-12, sigma, d) > delta
    theirs = dpa_gaussian.get_epsilon_gaussian(sigma / d, delta)
    assert eps == pytest.approx(theirs, rel=1e-7, abs=1e-9)


def test_zero_epsilon_is_total_variation():
    # δ(0) = TV(N(0,σ²), N(Δ,σ²)) = 2Φ(Δ/(2σ)) − 1
    for sigma in [0.3, 1.0, 4.0]:
        tv = 2 * mpmath.ncdf(1 / (2 * sigma)) - 1
        assert analytic_gaussian_delta(0.0, sigma) == pytest.approx(float(tv), rel=1e-12)
    assert analytic_gaussian_epsilon(0.9, sigma=1.0) == 0.0  # TV(σ=1) ≈ 0.383 ≤ 0.9


def test_sigma_is_linear_in_sensitivity_and_monotone():
    base = analytic_gaussian_sigma(1.0, 1e-6)
    assert analytic_gaussian_sigma(1.0, 1e-6, sensitivity=3.0) == pytest.approx(3 * base, rel=1e-15)
    sigmas = [analytic_gaussian_sigma(e, 1e-6) for e in np.geomspace(0.01, 50, 25)]
    assert all(a > b for a, b in zip(sigmas, sigmas[1:], strict=False))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: analytic_gaussian_sigma(0.0, 1e-5), r"epsilon must be > 0. Found 0.0"),
        (lambda: analytic_gaussian_sigma(1.0, 1.0), r"delta must be in the open interval \(0, 1\). Found 1.0"),
        (lambda: analytic_gaussian_sigma(1.0, 1e-5, -1.0), r"sensitivity must be > 0. Found -1.0"),
        (lambda: analytic_gaussian_delta(-0.1, 1.0), r"epsilon must be >= 0. Found -0.1"),
        (lambda: analytic_gaussian_delta(0.1, 0.0), r"sigma must be > 0. Found 0.0"),
        (lambda: analytic_gaussian_epsilon(0.0, 1.0), r"delta must be in the open interval \(0, 1\). Found 0.0"),
        (lambda: classical_gaussian_sigma(1.0, 1e-5), r"epsilon must be in the open interval \(0, 1\). Found 1.0"),
        (lambda: analytic_gaussian_sigma(math.nan, 1e-5), r"epsilon must be finite. Found nan"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_wrong_type_is_type_error():
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        analytic_gaussian_sigma("1", 1e-5)  # type: ignore[arg-type]


@pytest.mark.slow
@given(eps=st.floats(min_value=math.log(1e-4), max_value=math.log(500.0)).map(math.exp),
       delta=st.floats(min_value=math.log(1e-300), max_value=math.log(0.99)).map(math.exp))
def test_analytic_sigma_is_sound_extreme_ranges(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta)
    assert gaussian_delta(eps, sigma) <= delta
    assert gaussian_delta(eps, sigma * (1 - 1e-7)) > delta
