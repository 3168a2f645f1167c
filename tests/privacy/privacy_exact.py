"""Independent reference values for the privacy tests, computed with mpmath at high precision.

Nothing here imports lethe: these are the "truth" the library's bounds are checked against.
"""

from __future__ import annotations

import mpmath

mpmath.mp.dps = 60


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> mpmath.mpf:
    """Exact δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8), at 60 digits."""
    eps, mu = mpmath.mpf(epsilon), mpmath.mpf(sensitivity) / mpmath.mpf(sigma)
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def gaussian_delta_by_quadrature(epsilon: float, sigma: float, sensitivity: float = 1.0) -> mpmath.mpf:
    """δ(ε) = ∫ (p(x) − e^ε q(x))₊ dx for p = N(0, σ²), q = N(Δ, σ²), by numerical integration.

    The integrand is positive exactly where the log ratio (Δ² − 2xΔ)/(2σ²) exceeds ε, i.e. for
    x < x* = Δ/2 − εσ²/Δ.
    """
    eps, s, d = mpmath.mpf(epsilon), mpmath.mpf(sigma), mpmath.mpf(sensitivity)
    x_star = d / 2 - eps * s * s / d

    def integrand(x):
        return mpmath.npdf(x, 0, s) - mpmath.exp(eps) * mpmath.npdf(x, d, s)

    return mpmath.quad(integrand, [-mpmath.inf, x_star - 10 * s, x_star - s, x_star])


def gaussian_renyi(alpha: float, sigma: float, sensitivity: float) -> mpmath.mpf:
    """R_α(N(0, σ²) ‖ N(Δ, σ²)) = (1/(α−1)) log ∫ p^α q^(1−α), by numerical integration."""
    a, s, d = mpmath.mpf(alpha), mpmath.mpf(sigma), mpmath.mpf(sensitivity)

    def integrand(x):
        return mpmath.exp(a * mpmath.log(mpmath.npdf(x, 0, s)) + (1 - a) * mpmath.log(mpmath.npdf(x, d, s)))

    centre = -(a - 1) * d  # the tilted density peaks near here
    total = mpmath.quad(integrand, [-mpmath.inf, centre - 10 * s, centre, centre + 10 * s, mpmath.inf])
    return mpmath.log(total) / (a - 1)


def laplace_renyi(alpha: float, scale: float, sensitivity: float) -> mpmath.mpf:
    """R_α(Lap(0, b) ‖ Lap(Δ, b)) by numerical integration (kinks at 0 and Δ)."""
    a, b, d = mpmath.mpf(alpha), mpmath.mpf(scale), mpmath.mpf(sensitivity)

    def lap(x, m):
        return mpmath.exp(-abs(x - m) / b) / (2 * b)

    def integrand(x):
        return lap(x, 0) ** a * lap(x, d) ** (1 - a)

    total = mpmath.quad(integrand, [-mpmath.inf, 0, d, mpmath.inf])
    return mpmath.log(total) / (a - 1)


def laplace_delta(epsilon: float, scale: float, distance: float) -> mpmath.mpf:
    """Exact δ(ε) = ∫ (p − e^ε q)₊ for p = Lap(0, b), q = Lap(d, b), by numerical integration."""
    eps, b, d = mpmath.mpf(epsilon), mpmath.mpf(scale), mpmath.mpf(distance)

    def lap(x, m):
        return mpmath.exp(-abs(x - m) / b) / (2 * b)

    def integrand(x):
        return max(lap(x, 0) - mpmath.exp(eps) * lap(x, d), 0)

    # the integrand has kinks at 0 and d and its positive part ends where (d − 2x)/b = ε
    x_star = min(max((d - eps * b) / 2, 0), d)
    return mpmath.quad(integrand, [-mpmath.inf, 0, x_star, d, mpmath.inf])


def randomized_response_composition_delta(epsilon: float, delta: float, steps: int, eps_total) -> mpmath.mpf:
    """Exact smallest δ_total with which the T-fold composition of (ε, δ)-DP mechanisms is (ε_total, δ_total)-DP.

    Kairouz, Oh & Viswanath (ICML 2015, Thm 3.3): the worst case is the (ε, δ) randomized response, whose
    T-fold privacy loss under P is ε (T − 2J) with J ~ Binomial(T, 1/(1+e^ε)), plus an atom of mass
    1 − (1 − δ)^T at +∞. Its hockey-stick divergence at e^{ε_total} is
    1 − (1−δ)^T (1 − Σ_j C(T,j) p^{T−j} (1−p)^j (1 − e^{ε_total − ε(T−2j)})₊), p = e^ε/(1+e^ε).
    """
    eps, dl, et = mpmath.mpf(epsilon), mpmath.mpf(delta), mpmath.mpf(eps_total)
    p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
    acc = mpmath.mpf(0)
    for j in range(steps + 1):
        loss = eps * (steps - 2 * j)
        if loss > et:
            acc += mpmath.binomial(steps, j) * p ** (steps - j) * (1 - p) ** j * (1 - mpmath.exp(et - loss))
    return 1 - (1 - dl) ** steps * (1 - acc)
