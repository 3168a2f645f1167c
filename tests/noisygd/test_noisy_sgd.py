"""PNSGD (Chien et al. 2024): the coupling distance Z_B, the sequential start distance and the unlearning bound,
against independent computations (mpmath series and shift recursion) and against synchronously coupled runs; the
schedule side by side with Thm 5.1; mutation checks."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.nn.accounting import linear_rdp_epsilon
from lethe.noisygd import noisy_sgd as ns
from lethe.noisygd.noisy_sgd import (
    pnsgd_contraction,
    pnsgd_learning_shift,
    pnsgd_logistic,
    pnsgd_schedule,
    pnsgd_start_distance,
    pnsgd_unlearning_epochs,
    pnsgd_unlearning_epsilon,
    pnsgd_unlearning_rdp_slope,
)

mpmath.mp.dps = 30


def z_b_reference(eta, lip, b, n, lam):
    """Σ_{k≥0} (2ηL/b) c^{kE}: partial sums in mpmath (up to 2000 epochs) plus the exact geometric tail."""
    c = 1 - mpmath.mpf(eta) * mpmath.mpf(lam)
    q = c ** (n // b)
    term = 2 * mpmath.mpf(eta) * mpmath.mpf(lip) / b
    partial = mpmath.fsum(term * q**k for k in range(2000))
    return partial + term * q**2000 / (1 - q)


def rdp_slope_reference(distance, c, sigma, steps):
    """Shift recursion z_{t+1} = c z_t − a_t with optimal a_t ∝ c^{T−1−t}: Σ a_t²/(2σ²), and the final shift."""
    c = mpmath.mpf(c)
    w = [c ** (steps - 1 - t) for t in range(steps)]
    coef = c**steps * mpmath.mpf(distance) / sum(x * x for x in w)
    z, cost = mpmath.mpf(distance), mpmath.mpf(0)
    for t in range(steps):
        a = coef * w[t]
        z = c * z - a
        assert z >= -mpmath.mpf(10) ** -20 * (1 + distance)
        cost += a * a / (2 * mpmath.mpf(sigma) ** 2)
    return cost


params = st.fixed_dictionaries({
    "n": st.integers(1, 5000),
    "b_frac": st.floats(1e-3, 1.0),
    "eta_frac": st.floats(1e-3, 1.0),
    "lam": st.floats(1e-4, 1.0),
    "beta": st.floats(0.0, 2.0),
    "lip": st.floats(1e-2, 10.0),
    "sigma": st.floats(1e-3, 10.0),
    "steps": st.integers(1, 400),
    "distance": st.floats(1e-4, 100.0),
})


def check_bounds(p, z_b_fn=pnsgd_learning_shift, slope_fn=pnsgd_unlearning_rdp_slope):
    b = max(1, min(p["n"], int(p["b_frac"] * p["n"])))
    eta = p["eta_frac"] * 2.0 / (p["beta"] + 2.0 * p["lam"])
    if eta * p["lam"] >= 1.0:
        eta = 0.99 / p["lam"]
    c = pnsgd_contraction(eta=eta, lam=p["lam"], smoothness=p["beta"])
    assert c == pytest.approx(1 - eta * p["lam"])
    zb = z_b_fn(eta=eta, lipschitz=p["lip"], batch_size=b, n=p["n"], c=c)
    assert zb == pytest.approx(float(z_b_reference(eta, p["lip"], b, p["n"], p["lam"])), rel=1e-9)
    slope = slope_fn(distance=p["distance"], c=c, sigma=p["sigma"], steps=p["steps"])
    assert slope == pytest.approx(float(rdp_slope_reference(p["distance"], c, p["sigma"], p["steps"])), rel=1e-8)


@given(p=params)
def test_bounds_match_independent_computation(p):
    check_bounds(p)


@pytest.mark.slow
@given(p=params)
def test_bounds_match_independent_computation_slow(p):
    check_bounds(p)


@pytest.mark.parametrize("factor", [0.8, 1.2])
def test_mutations_are_caught(factor):
    p = {"n": 100, "b_frac": 0.1, "eta_frac": 0.5, "lam": 0.1, "beta": 0.25, "lip": 1.0, "sigma": 0.5, "steps": 30,
         "distance": 2.0}

    def zb_mut(**kw):
        return factor * pnsgd_learning_shift(**kw)

    def slope_mut(**kw):
        return factor * pnsgd_unlearning_rdp_slope(**kw)

    with pytest.raises(AssertionError):
        check_bounds(p, z_b_fn=zb_mut)
    with pytest.raises(AssertionError):
        check_bounds(p, slope_fn=slope_mut)
    check_bounds(p)


def _data(rng, n, d):
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return X, y


def _coupled_distance(seed, n, d, b, r, lam, eta, sigma, R, epochs):
    rng = np.random.default_rng(seed)
    X, y = _data(rng, n, d)
    X2, y2 = X.copy(), y.copy()
    gone = rng.choice(n, size=r, replace=False)
    X2[gone], y2[gone] = 0.0, 0.0
    t1 = t2 = np.zeros(d)
    worst = 0.0
    for e in range(epochs):  # same seed per epoch on both sides: same permutation and noise (synchronous coupling)
        t1 = pnsgd_logistic(X, y, t1, epochs=1, eta=eta, lam=lam, sigma=sigma, batch_size=b, radius=R,
                            random_state=seed * 1000 + e)
        t2 = pnsgd_logistic(X2, y2, t2, epochs=1, eta=eta, lam=lam, sigma=sigma, batch_size=b, radius=R,
                            random_state=seed * 1000 + e)
        worst = max(worst, float(np.linalg.norm(t1 - t2)))
    return worst


@given(seed=st.integers(0, 10**6), n=st.integers(4, 40), b_div=st.integers(1, 4), r=st.integers(1, 3),
       lam=st.floats(0.01, 1.0), eta_frac=st.floats(0.1, 1.0))
@settings(max_examples=25)
def test_coupled_runs_stay_within_r_z_b(seed, n, b_div, r, lam, eta_frac):
    b = max(1, n // b_div)
    eta = eta_frac * 2.0 / (0.25 + 2.0 * lam)
    c = pnsgd_contraction(eta=eta, lam=lam, smoothness=0.25)
    zb = pnsgd_learning_shift(eta=eta, lipschitz=1.0, batch_size=b, n=n, c=c)
    dist = _coupled_distance(seed, n, 3, b, min(r, n), lam, eta, 0.1, 1.0 / lam, 8)
    assert dist <= min(r, n) * zb * (1 + 1e-9) + 1e-12


def test_sequential_start_distance_bounds_coupled_runs():
    rng = np.random.default_rng(1)
    n, d, b, lam = 30, 3, 10, 0.2
    eta = 1.0 / (0.25 + 2 * lam)
    c = pnsgd_contraction(eta=eta, lam=lam, smoothness=0.25)
    zb = pnsgd_learning_shift(eta=eta, lipschitz=1.0, batch_size=b, n=n, c=c)
    X, y = _data(rng, n, d)
    D1 = (X.copy(), y.copy())
    D1[0][[0, 1]], D1[1][[0, 1]] = 0.0, 0.0          # request 1 removes 2 records
    D2 = (D1[0].copy(), D1[1].copy())
    D2[0][[5]], D2[1][[5]] = 0.0, 0.0                 # request 2 removes 1 more
    kw = dict(eta=eta, lam=lam, sigma=0.05, batch_size=b, radius=1 / lam)
    ours = pnsgd_logistic(X, y, np.zeros(d), epochs=5, random_state=11, **kw)
    ref = pnsgd_logistic(*D2, np.zeros(d), epochs=5, random_state=11, **kw)
    ours = pnsgd_logistic(*D1, ours, epochs=2, random_state=12, **kw)   # phase 1 on D1'
    ref = pnsgd_logistic(*D2, ref, epochs=2, random_state=12, **kw)     # the reference runs phase 1 on D2'
    bound = pnsgd_start_distance(removed=[2, 1], phase_steps=[2 * (n // b)], z_b=zb, c=c, radius=1 / lam)
    assert float(np.linalg.norm(ours - ref)) <= bound
    assert bound == pytest.approx(min(c ** (2 * (n // b)) * 3 * zb + zb, 2 / lam))


def test_unlearning_epochs_is_minimal_and_schedule_doctest_values():
    c, sigma, E = 0.98, 0.02, 10
    k = pnsgd_unlearning_epochs(1.0, 1e-5, distance=0.5, c=c, sigma=sigma, steps_per_epoch=E)
    assert pnsgd_unlearning_epsilon(distance=0.5, c=c, sigma=sigma, steps=k * E, delta=1e-5) <= 1.0
    assert pnsgd_unlearning_epsilon(distance=0.5, c=c, sigma=sigma, steps=(k - 1) * E, delta=1e-5) > 1.0
    assert pnsgd_unlearning_epsilon(distance=0.5, c=c, sigma=sigma, steps=0, delta=1e-5) == math.inf
    s = pnsgd_schedule(1.0, 1e-5, n=1000, lam=0.01, sigma=0.05, eta=1.0, batch_size=100, radius=100.0)
    eps = linear_rdp_epsilon(pnsgd_unlearning_rdp_slope(distance=s.z_b, c=s.c, sigma=0.05,
                                                        steps=s.steps_first_request), 1e-5)
    assert eps <= 1.0 and s.steps_first_request == s.epochs_first_request * 10
    assert s.to_dict()["theorem"] == ns.THEOREM


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pnsgd_contraction(eta=10.0, lam=0.1, smoothness=0.25), r"eta must be <= 2/\(smoothness \+ 2 lam\)"),
        (lambda: pnsgd_contraction(eta=1.0, lam=0.0, smoothness=0.25), "lam"),
        (lambda: pnsgd_learning_shift(eta=1.0, lipschitz=1.0, batch_size=20, n=10, c=0.5), "batch_size must be <="),
        (lambda: pnsgd_start_distance(removed=[1, 1], phase_steps=[], z_b=1.0, c=0.5, radius=1.0), "phase_steps"),
        (lambda: pnsgd_logistic(np.ones((2, 2)), np.ones(2), np.zeros(2), epochs=1, eta=0.1, lam=0.1, sigma=0.0,
                                batch_size=1, radius=1.0), "norm <= 1"),
    ],
)
def test_bad_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()
