"""Schedules of Thm 5.1 / 5.2 and the Eq. 114 inverse, on hand-computed cases and as properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lethe.noisygd.schedule import (
    convex_deletion_epsilon,
    convex_excess_risk_bound,
    convex_schedule,
    convex_unlearning_steps,
    nonconvex_excess_risk_bound,
    nonconvex_schedule,
)


def test_convex_schedule_hand_computed():
    # λ = β = L = 1, n = 10, d = 3, r = 1, q = 2, ε_dp = 1, ε_dd = 1/2.
    # κ = 2, η = 1/4, σ² = 4·2/(1·1·100) = 0.08, ρ variance = 0.08/(1 − 1/8) = 0.0914285714…
    # Eq. 18: K_Ā ≥ 8 log 2 = 5.545 → 6.  Eq. 19: K_A ≥ 8 log(100/24) = 11.417 → 12,
    # K_Ā ≥ 8 log max{10, 8/6} = 18.42 → 19.  Certified ε_dd = e^{−19/8}.  Risk bound 10·2·2·3/100 = 1.2.
    s = convex_schedule(lipschitz=1.0, smoothness=1.0, lam=1.0, n=10, d=3, r=1, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=0.5)
    assert s.kappa == 2.0
    assert s.eta == 0.25
    assert s.sigma2 == pytest.approx(0.08, rel=1e-15)
    assert s.init_variance == pytest.approx(0.08 / 0.875, rel=1e-15)
    assert s.k_unlearn_deletion == 6
    assert s.k_learn == 12
    assert s.k_unlearn_utility == 19
    assert s.k_unlearn == 19
    assert s.epsilon_dd == pytest.approx(math.exp(-19 / 8), rel=1e-12)
    assert s.excess_risk_bound == pytest.approx(1.2, rel=1e-15)
    assert s.predicted_speedup == pytest.approx(12 / 19)


def test_convex_schedule_mnist_setting():
    # Logistic loss on unit rows (L = 1, β = 1/4), λ = 1e-2: κ = 26, η = 1/0.52.
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.01, n=11982, d=785, r=1, q=10.0, epsilon_dp=1.0,
                        epsilon_dd=0.1)
    assert s.kappa == pytest.approx(26.0)
    assert s.eta == pytest.approx(1 / 0.52)
    assert s.sigma2 == pytest.approx(40.0 / (0.01 * 11982**2))
    assert s.k_unlearn_deletion == 240  # 104 ln 10 = 239.46
    assert s.k_unlearn_utility == math.ceil(104 * math.log(130))  # 5κ = 130 > 8/(10·785)
    assert s.k_learn == math.ceil(104 * math.log(11982**2 / (40 * 785)))
    s2 = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.01, n=11982, d=785, r=1, q=10.0, epsilon_dp=1.0,
                         epsilon_dd=0.5, utility=False)
    assert s2.k_unlearn == 73 and s2.k_learn == 0  # 104 ln 2 = 72.09


def test_convex_schedule_deletion_steps_match_eq_114():
    s = convex_schedule(lipschitz=2.0, smoothness=0.7, lam=0.03, n=500, d=7, r=3, q=4.0, epsilon_dp=2.0,
                        epsilon_dd=0.05, utility=False)
    k = convex_unlearning_steps(0.05, q=4.0, lipschitz=2.0, smoothness=0.7, lam=0.03, sigma2=s.sigma2, eta=s.eta,
                                n=500)
    assert k == s.k_unlearn_deletion
    assert s.epsilon_dd <= 0.05


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon_dd": 2.0}, "epsilon_dd must be <="),
        ({"q": 1.0}, "q"),
        ({"r": 11}, "r must be <="),
        ({"lam": 0.0}, "lam must be > 0"),
        ({"n": 0}, "n must be >= 1"),
    ],
)
def test_convex_schedule_rejects_bad_inputs(kwargs, match):
    base = dict(lipschitz=1.0, smoothness=1.0, lam=1.0, n=10, d=3, r=1, q=2.0, epsilon_dp=1.0, epsilon_dd=0.5)
    with pytest.raises(ValueError, match=match):
        convex_schedule(**{**base, **kwargs})


def test_deletion_epsilon_requires_step_size_condition():
    with pytest.raises(ValueError, match="eta must be <"):
        convex_deletion_epsilon(5, q=2.0, lipschitz=1.0, smoothness=1.0, lam=1.0, sigma2=1.0, eta=0.5, n=10)


params = st.fixed_dictionaries(
    {
        "q": st.floats(1.01, 64.0),
        "lipschitz": st.floats(0.1, 10.0),
        "smoothness": st.floats(0.0, 10.0),
        "lam": st.floats(1e-3, 1.0),
        "sigma2": st.floats(1e-6, 10.0),
        "n": st.integers(1, 10**6),
    }
)


@given(params, st.floats(0.01, 0.99), st.floats(1e-4, 10.0))
def test_inverse_reproduces_eq_114_and_is_minimal(p, eta_frac, epsilon_dd):
    eta = eta_frac / (p["lam"] + p["smoothness"])
    k = convex_unlearning_steps(epsilon_dd, eta=eta, **p)
    eps_k = convex_deletion_epsilon(k, eta=eta, **p)
    assert eps_k <= epsilon_dd
    # Eq. 114 with ε_dd(K) plugged back holds (with equality up to rounding).
    bound = 2.0 / (eta * p["lam"]) * math.log(4 * p["q"] * p["lipschitz"] ** 2 / (p["lam"] * eps_k * p["sigma2"]
                                                                              * p["n"] ** 2))
    assert k >= bound - 1e-6 * max(1.0, abs(bound))
    assert bound == pytest.approx(k, rel=1e-9, abs=1e-6) or bound < 0
    if k > 0:
        assert convex_deletion_epsilon(k - 1, eta=eta, **p) > epsilon_dd


@given(params, st.floats(0.01, 0.99), st.integers(0, 10**5), st.integers(1, 1000))
def test_deletion_epsilon_is_decreasing_in_steps(p, eta_frac, k, dk):
    eta = eta_frac / (p["lam"] + p["smoothness"])
    e1 = convex_deletion_epsilon(k, eta=eta, **p)
    e2 = convex_deletion_epsilon(k + dk, eta=eta, **p)
    assert e2 <= e1
    assert e1 <= convex_deletion_epsilon(0, eta=eta, **p)


def test_convex_excess_risk_bound_hand():
    # 10 κ q d L²/(λ ε n²) with κ = 5, q = 3, d = 4, L = 2, λ = 0.5, ε = 2, n = 20.
    v = convex_excess_risk_bound(q=3.0, lipschitz=2.0, smoothness=2.0, lam=0.5, epsilon_dp=2.0, n=20, d=4)
    assert v == pytest.approx(10 * 5 * 3 * 4 * 4 / (0.5 * 2 * 400))


def test_nonconvex_schedule_hand_computed():
    lam, beta, L, B, n, d, r, q, edp, edd = 1.0, 1.0, 1.0, math.e, 100, 2, 1, 2.0, 1.0, 0.5
    s = nonconvex_schedule(lipschitz=L, smoothness=beta, lam=lam, B=B, n=n, d=d, r=r, q=q, epsilon_dp=edp,
                           epsilon_dd=edd)
    eta_52 = 0.5 / (64 * 2 * 2 * math.e * 4)  # λ ε_dd / (64 d q B (β+λ)²)
    eta_g22 = 1.0 / (64 * math.e * 4 * 4)  # λ / (64 B q² (β+λ)²)
    assert s.eta == min(eta_52, eta_g22) == eta_52
    scale = 2 * math.e / eta_52
    assert s.k_learn == math.ceil(scale * math.log(2 * 1 / 0.5))  # q log B / ε_dd = 4
    assert s.k_unlearn == math.ceil(s.k_learn - scale * math.log(1 / (2 * (0.5 + 0.01))))
    assert s.sigma2 == pytest.approx(2 * eta_52 * max(s.k_learn, s.k_unlearn) / (1.0 * 100**2))
    assert s.init_variance == pytest.approx(s.sigma2)
    assert s.required_loss_bound == pytest.approx(s.sigma2 / 4)
    with pytest.raises(ValueError, match="loss_half_range"):
        s.check_loss_bound(2 * s.required_loss_bound)
    s.check_loss_bound(s.required_loss_bound)


def test_nonconvex_schedule_uses_g22_step_when_smaller():
    # ε_dd q > d: Thm G.22's λ/(64 B q² (β+λ)²) is the binding step-size condition.
    s = nonconvex_schedule(lipschitz=1.0, smoothness=1.0, lam=1.0, B=2.0, n=1000, d=3, r=1, q=8.0, epsilon_dp=2.0,
                           epsilon_dd=2.0)
    assert s.eta == pytest.approx(1.0 / (64 * 2.0 * 64 * 4))
    assert s.eta < 1.0 * 2.0 / (64 * 3 * 8 * 2.0 * 4)


@given(
    st.floats(1.01, 1e3), st.floats(1.01, 32.0), st.floats(0.01, 1.0), st.floats(0.0, 1.0), st.integers(10, 10**5),
    st.integers(1, 10),
)
def test_nonconvex_schedule_satisfies_eq_21(B, q, edd_frac, r_frac, n, d_extra):
    edp = 1.0
    edd = edd_frac * edp
    d = 1 + d_extra
    r = max(1, int(r_frac * n))
    try:
        s = nonconvex_schedule(lipschitz=1.0, smoothness=0.5, lam=0.1, B=B, n=n, d=d, r=r, q=q, epsilon_dp=edp,
                               epsilon_dd=edd)
    except ValueError as exc:
        assert "sigma2 = 0" in str(exc)
        return
    scale = 2 * B / (0.1 * s.eta)
    assert s.eta <= 0.1 * edd / (64 * d * q * B * 0.36)
    b_learn = scale * math.log(q * math.log(B) / edd)
    b_unlearn = s.k_learn - scale * math.log(math.log(B) / (2 * (edd + r / n * math.log(B))))
    assert s.k_learn >= b_learn - 1e-9 - 1e-13 * abs(b_learn)  # 1e-13: this test's own float error
    assert s.k_unlearn >= b_unlearn - 1e-9 - 1e-13 * abs(b_unlearn)
    assert s.sigma2 >= 1.0 * s.eta * max(s.k_learn, s.k_unlearn) / (edp * n**2) * (1 - 1e-12)


def test_nonconvex_schedule_rejects_d_not_above_epsilon_dp():
    with pytest.raises(ValueError, match="d must be >"):
        nonconvex_schedule(lipschitz=1.0, smoothness=1.0, lam=1.0, B=2.0, n=10, d=1, r=1, q=2.0, epsilon_dp=1.0,
                           epsilon_dd=0.5)


def test_nonconvex_excess_risk_hand():
    # Eq. 165 with L = β = λ = 1, B = 4, σ² = 1, ε_dd = 1/2, d = 2:
    # 1·1·√(2·0.5·4/1) = 2;  0.5·4·1·3/1 = 6;  (2/2)(log 2 + 2·2) = log 2 + 4.
    v = nonconvex_excess_risk_bound(lipschitz=1.0, smoothness=1.0, lam=1.0, B=4.0, sigma2=1.0, epsilon_dd=0.5, d=2)
    assert v == pytest.approx(2 + 6 + math.log(2) + 4)


def test_unlearning_steps_are_the_smallest_that_certify_computed_independently() -> None:
    """Over random convex runs, the K_Ā returned certifies ε_dd by Eq. (114) evaluated in 50-digit arithmetic
    (independently of the library's float formula), K_Ā − 1 does not (up to the float rounding of the boundary), and
    the search from K = 0 reaches the same K (mutations: accepting ε up to 1.5 ε_dd, or K − 1, fail it)."""
    import random

    import mpmath

    from lethe.noisygd.schedule import _certified_steps

    mpmath.mp.dps = 50
    rnd = random.Random(11)
    for _ in range(400):
        lam = 10 ** rnd.uniform(-3, 0)
        beta = 10 ** rnd.uniform(-1, 1)
        run = dict(q=rnd.uniform(1.5, 20.0), lipschitz=10 ** rnd.uniform(-1, 1), smoothness=beta, lam=lam,
                   sigma2=10 ** rnd.uniform(-6, -1), eta=rnd.uniform(0.1, 0.99) / (lam + beta),
                   n=rnd.randint(10, 100_000))
        def exact(k: float, r: dict = run) -> mpmath.mpf:
            return (4 * mpmath.mpf(r["q"]) * mpmath.mpf(r["lipschitz"]) ** 2
                    / (mpmath.mpf(r["lam"]) * mpmath.mpf(r["sigma2"]) * mpmath.mpf(r["n"]) ** 2)
                    * mpmath.exp(-mpmath.mpf(r["eta"]) * mpmath.mpf(r["lam"]) * k / 2))

        eps_dd = float(exact(rnd.uniform(0, 400))) * rnd.uniform(0.5, 2.0)
        k = convex_unlearning_steps(eps_dd, **run)
        assert exact(k) <= eps_dd * (1 + 1e-12), (run, eps_dd, k)
        if k > 0:
            assert exact(k - 1) > eps_dd * (1 - 1e-12), (run, eps_dd, k)
        assert _certified_steps(0, eps_dd, **run) == k
