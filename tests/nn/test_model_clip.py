"""Model-clipping unlearning (Koloskova et al. 2025): the per-step hockey-stick contraction and the δ recursion, checked
against independent computations — the Gaussian E_γ by numerical integration (mpmath), the recursion in 50-digit
arithmetic, and the contraction lemma itself on random finite Markov kernels — plus a mutation check that a 20 %
error in the bound or in the calibrated σ fails the CI profile; and the mechanism on a torch module."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.nn import accounting
from lethe.nn.accounting import (
    ModelClipSchedule,
    calibrate_model_clip,
    model_clip_contraction,
    model_clip_delta,
    model_clip_steps,
)
from lethe.nn.models import build_module
from lethe.nn.unlearning import flat_parameters, unlearn_model_clip

MP_DPS = 60


# ---------------------------------------------------------------- independent computations
def hockey_stick_integral(epsilon, mu):
    """E_{e^ε}(N(μ, 1) ‖ N(0, 1)) = ∫ (φ(x − μ) − e^ε φ(x))₊ dx by quadrature over the region where the integrand is
    positive (x > ε/μ + μ/2), in mpmath."""
    with mpmath.workdps(MP_DPS):
        mu, g = mpmath.mpf(mu), mpmath.exp(mpmath.mpf(epsilon))
        x0 = mpmath.mpf(epsilon) / mu + mu / 2
        f = lambda x: mpmath.npdf(x, mu, 1) - g * mpmath.npdf(x, 0, 1)  # noqa: E731
        sc = 1 / (abs(x0) + 1)  # the integrand decays on this scale past x0
        return mpmath.quad(f, [x0] + [x0 + sc * 4**j for j in range(6)] + [mpmath.inf])


def theta_mp(epsilon, mu):
    with mpmath.workdps(MP_DPS):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        cdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        return cdf(m / 2 - e / m) - mpmath.exp(e) * cdf(-m / 2 - e / m)


def delta_reference(epsilon, sigma, clip, steps):
    """The recursion δ_{t+1} = δ_t θ_{ε̃_t}(2C₂/σ), ε̃_t = log(1 + (e^ε − 1)/δ_t), in 60-digit arithmetic."""
    with mpmath.workdps(MP_DPS):
        d, mu, em1 = mpmath.mpf(1), 2 * mpmath.mpf(clip) / mpmath.mpf(sigma), mpmath.expm1(mpmath.mpf(epsilon))
        for _ in range(steps):
            d = d * theta_mp(mpmath.log1p(em1 / d), mu)
            if d < mpmath.mpf("1e-4400"):  # far below what a float reports (1e-300)
                break
        return d


def e_gamma(p, q, gamma):
    return float(np.maximum(p - gamma * q, 0.0).sum())


# ---------------------------------------------------------------- the checks
def check_contraction(epsilon, mu, fn=model_clip_contraction):
    got = fn(epsilon, sigma=1.0, model_clip=mu / 2)
    ref = theta_mp(epsilon, mu)
    assert abs(hockey_stick_integral(epsilon, mu) - ref) <= 1e-6 * ref  # quadrature = closed form (not lethe's code)
    if ref < mpmath.mpf("1e-300"):
        assert got == 1e-300  # floored, never below the bound
        return
    assert got >= float(ref) * (1 - 1e-12)
    assert got <= float(ref) * (1 + 1e-6)


def check_delta(epsilon, sigma, clip, steps, fn=model_clip_delta):
    got = fn(epsilon, sigma=sigma, model_clip=clip, steps=steps)
    ref = delta_reference(epsilon, sigma, clip, steps)
    if ref < mpmath.mpf("1e-300"):
        assert got == 1e-300  # floored, never below the bound
        return
    assert got >= float(ref)  # an upper bound
    assert got <= float(ref) * (1 + 1e-3)  # and a tight one (float error is amplified through ε̃ for small 2C₂/σ)


def check_lemma(m, k, gamma, rng_seed):
    """E_γ(μK‖νK) ≤ E_γ(μ‖ν) · max_{i,j} E_{γ'}(K_i‖K_j), γ' = 1 + (γ − 1)/E_γ(μ‖ν): finite kernels, exact sums."""
    rng = np.random.default_rng(rng_seed)
    mu, nu = rng.dirichlet(np.full(m, 0.5)), rng.dirichlet(np.full(m, 0.5))
    K = rng.dirichlet(np.full(k, 0.5), size=m)
    e0 = e_gamma(mu, nu, gamma)
    lhs = e_gamma(mu @ K, nu @ K, gamma)
    if e0 == 0.0:
        assert lhs <= 1e-12
        return
    g2 = 1.0 + (gamma - 1.0) / e0
    eta = max(e_gamma(K[i], K[j], g2) for i in range(m) for j in range(m))
    assert lhs <= e0 * eta + 1e-12
    # the bound is nondecreasing in the δ put in for E_γ(μ‖ν) (so an upper bound may be used)
    for x in (e0 * 1.5, e0 * 3.0, 1.0):
        x = min(x, 1.0)
        eta_x = max(e_gamma(K[i], K[j], 1.0 + (gamma - 1.0) / x) for i in range(m) for j in range(m))
        assert x * eta_x >= e0 * eta - 1e-12


def check_calibration(epsilon, delta, clip, steps, fn=calibrate_model_clip):
    s = fn(epsilon, delta, model_clip=clip, lr=0.1, steps=steps)
    ref = delta_reference(epsilon, s.sigma, clip, s.steps)
    assert ref <= delta  # meets the target, recomputed independently
    assert delta_reference(epsilon, s.sigma * (1 - 1e-6), clip, s.steps) > delta * (1 - 1e-4)  # and σ is minimal


contraction_cases = st.tuples(st.floats(0.0, 12.0), st.floats(0.05, 8.0))
delta_cases = st.tuples(st.floats(0.1, 4.0), st.floats(0.2, 20.0), st.floats(0.05, 5.0), st.integers(0, 40))
calibration_cases = st.tuples(st.floats(0.2, 3.0), st.sampled_from([1e-3, 1e-5, 1e-8]), st.floats(0.01, 10.0),
                              st.integers(1, 60))


@given(c=contraction_cases)
@settings(max_examples=40)
def test_contraction_is_the_gaussian_hockey_stick(c):
    check_contraction(*c)


@given(c=delta_cases)
def test_delta_matches_recursion_in_high_precision(c):
    check_delta(*c)


@given(m=st.integers(2, 5), k=st.integers(2, 6), gamma=st.floats(1.0, 30.0), seed=st.integers(0, 2**32 - 1))
def test_contraction_lemma_on_finite_kernels(m, k, gamma, seed):
    check_lemma(m, k, gamma, seed)


@given(c=calibration_cases)
@settings(max_examples=15)
def test_calibration_meets_target_independently(c):
    check_calibration(*c)


@pytest.mark.slow
@given(c=contraction_cases)
def test_contraction_is_the_gaussian_hockey_stick_slow(c):
    check_contraction(*c)


@pytest.mark.slow
@given(c=delta_cases)
def test_delta_matches_recursion_in_high_precision_slow(c):
    check_delta(*c)


@pytest.mark.slow
@given(m=st.integers(2, 5), k=st.integers(2, 6), gamma=st.floats(1.0, 30.0), seed=st.integers(0, 2**32 - 1))
def test_contraction_lemma_on_finite_kernels_slow(m, k, gamma, seed):
    check_lemma(m, k, gamma, seed)


@pytest.mark.slow
@given(c=calibration_cases)
def test_calibration_meets_target_independently_slow(c):
    check_calibration(*c)


def test_one_step_is_exact_for_two_point_starts():
    # one step from the two ends of a diameter: the two outputs are N(±C₂, σ²), whose E_γ is the bound itself
    assert model_clip_delta(1.0, sigma=1.3, model_clip=0.7, steps=1) == pytest.approx(
        float(hockey_stick_integral(1.0, 2 * 0.7 / 1.3)), rel=1e-6)


def test_steps_are_minimal_and_sigma_mode():
    t = model_clip_steps(1.0, 1e-5, sigma=1.0, model_clip=1.0)
    assert model_clip_delta(1.0, sigma=1.0, model_clip=1.0, steps=t) <= 1e-5
    assert model_clip_delta(1.0, sigma=1.0, model_clip=1.0, steps=t - 1) > 1e-5
    s = calibrate_model_clip(1.0, 1e-5, model_clip=1.0, lr=0.1, sigma=1.0)
    assert s.steps == t and s.delta_certified <= 1e-5


# ---------------------------------------------------------------- mutation check: a 20 % error fails the CI checks
def _fails(check, *args, **kw) -> bool:
    try:
        check(*args, **kw)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("factor", [0.8, 1.2])
def test_mutation_of_delta_is_caught(factor):
    def mutated(*a, **kw):
        return factor * model_clip_delta(*a, **kw)

    assert _fails(check_delta, 1.0, 1.0, 1.0, 5, fn=mutated)
    assert not _fails(check_delta, 1.0, 1.0, 1.0, 5)


@pytest.mark.parametrize("factor", [0.8, 1.2])
def test_mutation_of_contraction_is_caught(factor):
    def mutated(*a, **kw):
        return factor * model_clip_contraction(*a, **kw)

    assert _fails(check_contraction, 1.0, 2.0, fn=mutated)


@pytest.mark.parametrize("factor", [0.8, 1.2])
def test_mutation_of_calibrated_sigma_is_caught(factor):
    real = accounting.calibrate_model_clip

    def mutated(*a, **kw):
        s = real(*a, **kw)
        return ModelClipSchedule(**{**s.to_dict(), "sigma": s.sigma * factor})

    assert _fails(check_calibration, 1.0, 1e-5, 1.0, 20, fn=mutated)
    assert not _fails(check_calibration, 1.0, 1e-5, 1.0, 20)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="exactly one"):
        calibrate_model_clip(1.0, 1e-5, model_clip=1.0, lr=0.1)
    with pytest.raises(ValueError, match="init_delta"):
        model_clip_delta(1.0, sigma=1.0, model_clip=1.0, steps=2, init_delta=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        model_clip_steps(1.0, 1e-5, sigma=0.01, model_clip=1.0, max_steps=50)


# ---------------------------------------------------------------- the mechanism
def _data(n=64, seed=0):
    g = np.random.default_rng(seed)
    return torch.tensor(g.normal(size=(n, 6)), dtype=torch.float32), torch.tensor(g.integers(0, 3, n))


def test_mechanism_projects_then_adds_the_scheduled_noise():
    X, y = _data()
    model = build_module({"kind": "mlp", "hidden": [5]}, 6, 3, random_state=np.random.default_rng(0))
    s = calibrate_model_clip(1.0, 1e-5, model_clip=0.5, lr=0.1, steps=3)
    tiny = ModelClipSchedule(**{**s.to_dict(), "sigma": 1e-12})
    cert = unlearn_model_clip(model, X, y, schedule=tiny, batch_size=16, random_state=0)
    assert np.linalg.norm(flat_parameters(model)) <= 0.5 + 1e-6
    assert cert.steps == 3 and cert.gradient_evaluations == 48 and cert.operation == "unlearn_model_clip"
    # with the calibrated σ the output is noise of std σ per coordinate around a point of norm ≤ C₂
    model2 = build_module({"kind": "mlp", "hidden": [5]}, 6, 3, random_state=np.random.default_rng(0))
    unlearn_model_clip(model2, X, y, schedule=s, batch_size=16, random_state=1)
    theta = flat_parameters(model2)
    assert abs(np.linalg.norm(theta) / math.sqrt(theta.size) - s.sigma) < 0.35 * s.sigma + 0.5


def test_mechanism_restores_parameters_on_failure():
    X, y = _data()
    model = build_module({"kind": "mlp", "hidden": [5]}, 6, 3, random_state=np.random.default_rng(0))
    before = flat_parameters(model).copy()
    s = calibrate_model_clip(1.0, 1e-5, model_clip=0.5, lr=0.1, steps=3)
    with pytest.raises(ValueError):
        unlearn_model_clip(model, X, y, schedule=s, batch_size=0)
    with pytest.raises(TypeError, match="ModelClipSchedule"):
        unlearn_model_clip(model, X, y, schedule=object())  # type: ignore[arg-type]

    def broken(out, target):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        unlearn_model_clip(model, X, y, schedule=s, loss_fn=broken)
    assert np.array_equal(flat_parameters(model), before)
