"""Thm G.7, G.9, G.15 (against exact Gaussian divergences), Thm 4.1, 4.3 and the (ε, δ) conversion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lethe.noisygd.guarantees import (
    adaptive_deletion_epsilon,
    deletion_privacy_to_dp,
    exposure_deletion_epsilon,
    membership_advantage_bound,
    noisy_gd_rdp,
    noisy_gd_rdp_convex,
)
from lethe.noisygd.schedule import convex_deletion_epsilon
from lethe.privacy.rdp import rdp_to_dp, rdp_to_dp_tight


def gaussian_renyi(q: float, mean_gap: float, var: float) -> float:
    """R_q(N(a, v) ‖ N(b, v)) = q (a − b)² / (2v), computed independently of the code under test."""
    return q * mean_gap**2 / (2.0 * var)


def test_g7_hand():
    # q L² η K / (σ² n²) = 2·1·0.1·50/(0.5·100) = 0.2
    assert noisy_gd_rdp(2.0, lipschitz=1.0, sigma2=0.5, eta=0.1, n=10, n_steps=50) == pytest.approx(0.2)
    assert noisy_gd_rdp(2.0, lipschitz=1.0, sigma2=0.5, eta=0.1, n=10, n_steps=0) == 0.0


def test_g9_hand():
    # 4qL²/(λσ²n²)(1 − e^{−ληK/2}) = 4·3·4/(0.5·2·100)·(1 − e^{−0.5·0.2·10/2}) = 0.48 (1 − e^{−1/2})
    v = noisy_gd_rdp_convex(3.0, lipschitz=2.0, smoothness=1.0, lam=0.5, sigma2=2.0, eta=0.2, n=10, n_steps=10)
    assert v == pytest.approx(0.48 * (1 - math.exp(-0.5)))


@given(st.floats(1.01, 100.0), st.floats(0.01, 5.0), st.floats(0.01, 2.0), st.floats(1e-3, 1.0),
       st.integers(1, 1000), st.integers(1, 5000))
def test_g7_is_exact_on_linear_loss(q, L, sigma2, eta, n, K):
    # ℓ(θ; x) = −θᵀx with λ = 0: neighbours x = +L e₁ vs −L e₁ shift the mean gradient by 2L/n every step,
    # so after K steps from the same Θ₀ the means differ by 2LηK/n, the variance is 2ησ²K: the bound is tight.
    exact = gaussian_renyi(q, 2 * L * eta * K / n, 2 * eta * sigma2 * K)
    assert noisy_gd_rdp(q, lipschitz=L, sigma2=sigma2, eta=eta, n=n, n_steps=K) == pytest.approx(exact, rel=1e-9)


@given(st.floats(1.01, 100.0), st.floats(0.01, 5.0), st.floats(0.01, 2.0), st.floats(1e-3, 1.0),
       st.floats(0.01, 0.99), st.integers(1, 1000), st.integers(1, 5000))
def test_g9_upper_bounds_exact_divergence_on_linear_loss(q, L, sigma2, lam, eta_frac, n, K):
    # Linear loss (convex, 0-smooth, L-Lipschitz) + λ‖θ‖²/2, fixed Θ₀: Θ_K is Gaussian with
    # mean gap (2L/(nλ))(1 − (1 − ηλ)^K) and variance 2ησ² Σ_{j<K} (1 − ηλ)^{2j}.
    eta = eta_frac / lam
    c = 1 - eta * lam
    gap = 2 * L / (n * lam) * (1 - c**K)
    var = 2 * eta * sigma2 * (1 - c ** (2 * K)) / (1 - c**2)
    exact = gaussian_renyi(q, gap, var)
    bound = noisy_gd_rdp_convex(q, lipschitz=L, smoothness=0.0, lam=lam, sigma2=sigma2, eta=eta, n=n, n_steps=K)
    assert bound >= exact * (1 - 1e-9)


@given(st.floats(1.01, 100.0), st.floats(0.01, 5.0), st.floats(0.01, 2.0), st.floats(1e-3, 1.0),
       st.floats(0.01, 0.99), st.integers(1, 1000), st.integers(0, 5000), st.integers(0, 2000))
def test_g15_upper_bounds_exact_deletion_divergence_on_linear_loss(q, L, sigma2, lam, eta_frac, n, T1, K_u):
    # Both runs start from ρ = N(0, σ²/(λ(1 − ηλ/2))), which is exactly stationary for the linear recursion, so the
    # variance stays v*. Phase I (T1 = K_A + (i−1)K_Ā steps, databases differ in one record) opens a mean gap
    # (2L/(nλ))(1 − c^{T1}); phase II (K_Ā steps on identical databases) multiplies it by c^{K_Ā}.
    eta = eta_frac / lam
    c = 1 - eta * lam
    v_star = sigma2 / (lam * (1 - eta * lam / 2))
    gap = 2 * L / (n * lam) * (1 - c**T1) * c**K_u
    exact = gaussian_renyi(q, gap, v_star)
    bound = convex_deletion_epsilon(K_u, q=q, lipschitz=L, smoothness=0.0, lam=lam, sigma2=sigma2, eta=eta, n=n)
    assert bound >= exact * (1 - 1e-9)


def test_exposure_bound_is_g7_over_exposed_steps():
    e = exposure_deletion_epsilon(3.0, lipschitz=1.0, sigma2=0.2, eta=0.5, n=20, exposed_steps=30)
    assert e == pytest.approx(3.0 * 0.5 * 30 / (0.2 * 400))


def test_theorem_4_3():
    assert adaptive_deletion_epsilon(0.1, 1.0, 0) == 0.1
    assert adaptive_deletion_epsilon(0.1, 1.0, 3) == pytest.approx(3.1)
    with pytest.raises(ValueError, match="p must be"):
        adaptive_deletion_epsilon(0.1, 1.0, -1)


def test_theorem_4_1_hand():
    # q = 2, ε = 0.02: √0.04 = 0.2 < 2 e^{0.01} √2 − 1 = 1.857
    assert membership_advantage_bound(2.0, 0.02) == pytest.approx(0.2)
    # q = 1000, ε = 0.1: (1000/999) e^{0.0999} 1998^{0.001} − 1 = 0.11464 < √0.2
    assert membership_advantage_bound(1000.0, 0.1) == pytest.approx(
        1000 / 999 * math.exp(0.0999) * 1998**0.001 - 1, rel=1e-12
    )
    assert membership_advantage_bound(5.0, 0.0) == 0.0


@given(st.floats(1.05, 200.0), st.floats(1e-4, 3.0))
def test_theorem_4_1_second_term_is_min_over_delta(q, eps):
    # Independently: min over δ ∈ (0, 1) of e^{ε + log(1/δ)/(q−1)} − 1 + 2δ (proof of Thm 4.1), on a fine grid.
    delta = np.logspace(-12, 0, 20001)[:-1]
    brute = float(np.min(np.exp(eps + np.log(1 / delta) / (q - 1)) - 1 + 2 * delta))
    closed = q / (q - 1) * math.exp(eps * (q - 1) / q) * (2 * (q - 1)) ** (1 / q) - 1
    # The closed form is the unconstrained minimum: never above the grid minimum; equal when δ* < 1.
    assert closed <= brute + 1e-9
    delta_star = (math.exp(eps) / (2 * (q - 1))) ** ((q - 1) / q)
    if delta_star < 0.999:
        assert closed == pytest.approx(brute, rel=1e-3, abs=1e-6)
    assert membership_advantage_bound(q, eps) == pytest.approx(min(math.sqrt(2 * eps), closed))


@given(st.floats(1.05, 200.0), st.floats(0.0, 3.0), st.floats(1e-4, 1.0))
def test_theorem_4_1_monotone_in_epsilon(q, eps, de):
    assert membership_advantage_bound(q, eps) <= membership_advantage_bound(q, eps + de)


def test_conversion_uses_toolkit():
    assert deletion_privacy_to_dp(11.0, 0.5, 1e-5) == rdp_to_dp(11.0, 0.5, 1e-5)
    assert deletion_privacy_to_dp(11.0, 0.5, 1e-5, tight=True) == rdp_to_dp_tight(11.0, 0.5, 1e-5)


@pytest.mark.parametrize("q", [1.0, 0.5, -2.0])
def test_orders_must_exceed_one(q):
    with pytest.raises(ValueError, match="q"):
        noisy_gd_rdp(q, lipschitz=1.0, sigma2=1.0, eta=0.1, n=10, n_steps=1)
    with pytest.raises(ValueError, match="q"):
        membership_advantage_bound(q, 0.1)


def test_check_convex_run_names_the_rule_and_value_it_refuses():
    from lethe.noisygd.guarantees import check_convex_run

    ok = {"q": 2.0, "lipschitz": 1.0, "smoothness": 0.0, "lam": 1.0, "sigma2": 1.0, "eta": 0.5, "n": 3}
    assert check_convex_run(**ok) == (2.0, 1.0, 0.0, 1.0, 1.0, 0.5, 3)
    for name, bad, rule in [("q", 1.0, "must be > 1"), ("lipschitz", 0.0, "must be > 0"),
                            ("smoothness", -1.0, "must be >= 0"), ("lam", 0.0, "must be > 0"),
                            ("sigma2", -1.0, "must be > 0"), ("eta", 0.0, "must be > 0"), ("n", 0, "must be >= 1"),
                            ("eta", 1.0, r"must be < 1/\(lam \+ smoothness\) = 1.0 \(Thm G.15, G.9\)")]:
        with pytest.raises(ValueError, match=rf"^{name}.*{rule}"):
            check_convex_run(**{**ok, name: bad})
