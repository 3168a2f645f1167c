"""Calibration of the Gaussian mechanism: the classical σ of the lecture and the exact (analytic) σ.

Symbols (lecture 9; Balle & Wang 2018) and argument names:

====================  ==================  ===============================================================
symbol                argument            meaning
====================  ==================  ===============================================================
ε                     ``epsilon``         privacy parameter, ε > 0
δ                     ``delta``           privacy parameter, 0 < δ < 1
Δ, Δ₂                 ``sensitivity``     L2 sensitivity sup ‖f(D) − f(D')‖₂ over neighbouring D, D'
σ                     ``sigma``           standard deviation of each coordinate of the noise
μ = Δ/σ               —                   the "Gaussian DP" parameter; the privacy profile depends on μ only
Φ                     ``scipy.special.ndtr``  standard normal CDF
====================  ==================  ===============================================================

The exact privacy profile of M(D) = f(D) + N(0, σ² I) (Balle & Wang 2018, Thm 8) is

    δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ),

the smallest δ for which M is (ε, δ)-DP. Everything here is evaluated in log space with ``log_ndtr``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import optimize, special

from lethe._validation import check_nonnegative, check_open_unit, check_positive

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
]

# Relative padding applied to the root of δ(ε; σ) = δ so that float rounding in the root finder can only
# make σ larger (more noise), never smaller. It is far above the root finder's tolerance (~1e-15) and far
# below anything that matters for utility.
_SIGMA_PADDING = 1e-10


# Gauss–Legendre rule on [-1, 1] for the integral form of erfcx(u) − erfcx(u + h) below.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(32)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfcx_slope(x: np.ndarray) -> np.ndarray:
    """g(x) = −erfcx'(x) = 2/√π − 2x·erfcx(x) > 0, accurate also for large x (asymptotic series)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    small = x <= 30.0
    out[small] = _TWO_OVER_SQRT_PI - 2.0 * x[small] * special.erfcx(x[small])
    big = ~small
    if np.any(big):
        # erfcx(x) ~ (1/(x√π)) Σ_n (−1)^n (2n−1)!!/(2x²)^n, so g(x) ~ (2/√π) Σ_{n≥1} (−1)^{n+1} (2n−1)!!/(2x²)^n;
        # for x > 30 the ratio of successive terms is ≤ (2n+1)/1800 and 10 terms reach full precision.
        z = 1.0 / (2.0 * x[big] ** 2)
        term = z.copy()
        acc = term.copy()
        for n in range(2, 11):
            term = -term * (2 * n - 1) * z
            acc += term
        out[big] = _TWO_OVER_SQRT_PI * acc
    return out


def _erfcx_drop(u: float, h: float) -> float:
    """erfcx(u) − erfcx(u + h) for h > 0 without catastrophic cancellation.

    When erfcx(u + h) ≤ erfcx(u)/2 the plain difference loses at most one bit. Otherwise the interval is
    short relative to the scale on which erfcx varies, and the difference is the integral of the smooth,
    positive g = −erfcx' over [u, u + h], computed by 32-point Gauss–Legendre quadrature.
    """
    fu = float(special.erfcx(u))
    fuh = float(special.erfcx(u + h))
    if fuh <= 0.5 * fu:
        return fu - fuh
    x = u + 0.5 * h * (_GL_NODES + 1.0)
    return float(0.5 * h * np.dot(_GL_WEIGHTS, _erfcx_slope(x)))


def _log_delta_am(a: float, mu: float) -> float:
    """log δ for the Gaussian profile written with a = μ/2 − ε/μ and μ = Δ/σ (so b = a − μ, ε = μ²/2 − aμ).

    δ = Φ(a) − e^ε Φ(b). Because (a² − b²)/2 = −ε, e^ε φ(b) = φ(a), and with Mills' ratio
    Φ(−x) = φ(x)·√(π/2)·erfcx(x/√2) the difference is, exactly,

        δ = ½ e^{−a²/2} [erfcx(−a/√2) − erfcx(−a/√2 + μ/√2)],

    which is evaluated with :func:`_erfcx_drop` (no cancellation). For a > 20 (Φ(a) = 1 to 89 digits,
    where erfcx(−a/√2) would overflow) the two log-CDFs are subtracted directly; there δ is not small
    relative to Φ(a) unless e^ε Φ(b) ≈ 1, where the log-space subtraction is accurate.
    """
    if a > 20.0:
        eps = mu * (mu / 2.0 - a)
        x = float(special.log_ndtr(a))
        y = eps + float(special.log_ndtr(a - mu))
        if y >= x:
            return -math.inf
        return x + math.log(-math.expm1(y - x))
    drop = _erfcx_drop(-a / math.sqrt(2.0), mu / math.sqrt(2.0))
    if not drop > 0.0:
        return -math.inf
    return -0.5 * a * a - math.log(2.0) + math.log(drop)


def log_gaussian_delta(epsilon: float, mu: float) -> float:
    """log δ(ε) of the Gaussian mechanism with μ = Δ/σ > 0 (Balle & Wang 2018, Thm 8)."""
    return _log_delta_am(mu / 2.0 - epsilon / mu, mu)


def _mu(sigma: Any, sensitivity: Any) -> float:
    """μ = Δ/σ of the Gaussian mechanism, checked (σ > 0, Δ ≥ 0); 0 when Δ = 0 (nothing to hide: δ(ε) = 0)."""
    s = check_positive("sigma", sigma)
    return check_nonnegative("sensitivity", sensitivity) / s


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8).

    .. math:: δ(ε) = Φ\\left(\\frac{Δ}{2σ} − \\frac{εσ}{Δ}\\right)
              − e^{ε} Φ\\left(−\\frac{Δ}{2σ} − \\frac{εσ}{Δ}\\right)

    It is the smallest δ such that adding N(0, σ² I) to a function of L2 sensitivity Δ is (ε, δ)-DP:
    the mechanism is (ε, δ)-DP if and only if δ ≥ δ(ε).

    Parameters
    ----------
    epsilon : float
        ε ≥ 0.
    sigma : float
        σ > 0, standard deviation of each noise coordinate.
    sensitivity : float, default=1.0
        Δ ≥ 0, L2 sensitivity. Δ = 0 gives δ = 0.

    Returns
    -------
    float
        δ(ε) in [0, 1).

    Examples
    --------
    >>> round(analytic_gaussian_delta(1.0, sigma=1.0), 6)
    0.126937
    >>> analytic_gaussian_delta(0.5, sigma=analytic_gaussian_sigma(0.5, 1e-5)) <= 1e-5
    True
    """
    eps = check_nonnegative("epsilon", epsilon)
    mu = _mu(sigma, sensitivity)
    if mu == 0.0:
        return 0.0
    return math.exp(log_gaussian_delta(eps, mu))


def analytic_gaussian_epsilon(delta: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Smallest ε ≥ 0 with δ(ε) ≤ δ for the Gaussian mechanism (inverse of :func:`analytic_gaussian_delta`).

    δ(ε) is strictly decreasing in ε, so the answer is the root of δ(ε) = δ (or 0 if δ(0) ≤ δ). The root
    is bracketed and then rounded *up*: the returned ε always satisfies δ(ε) ≤ δ.

    Parameters
    ----------
    delta : float
        0 < δ < 1.
    sigma : float
        σ > 0.
    sensitivity : float, default=1.0
        Δ ≥ 0.

    Returns
    -------
    float
        ε ≥ 0.

    Examples
    --------
    >>> eps = analytic_gaussian_epsilon(1e-5, sigma=2.0)
    >>> round(eps, 4)
    1.9931
    >>> analytic_gaussian_delta(eps, sigma=2.0) <= 1e-5
    True
    """
    dl = check_open_unit("delta", delta)
    mu = _mu(sigma, sensitivity)
    if mu == 0.0:
        return 0.0
    log_target = math.log(dl)
    if log_gaussian_delta(0.0, mu) <= log_target:
        return 0.0
    hi = 1.0
    while log_gaussian_delta(hi, mu) > log_target:
        hi *= 2.0
    lo = hi / 2.0 if hi > 1.0 else 0.0
    root = optimize.brentq(lambda e: log_gaussian_delta(e, mu) - log_target, lo, hi, xtol=1e-15, rtol=1e-15)
    eps = float(root) * (1.0 + _SIGMA_PADDING) + 1e-300
    while log_gaussian_delta(eps, mu) > log_target:  # pragma: no cover - guard against rounding
        eps = eps * (1.0 + _SIGMA_PADDING) + 1e-15
    return eps


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The lecture's Gaussian-mechanism noise: σ = Δ₂ √(2 ln(1.25/δ)) / ε, valid for 0 < ε < 1 only.

    Lecture 9 ("Gaussian Mechanism"; Dwork & Roth 2014, Thm A.1): adding N(0, σ² I) with this σ to a
    function of L2 sensitivity Δ₂ is (ε, δ)-DP. (The lecture writes "variance σ"; σ is the standard
    deviation.) The proof bounds the privacy loss by ε with probability ≥ 1 − δ and needs ε < 1; for
    ε ≥ 1 the formula is not a theorem (and can be false), so this function refuses ε ≥ 1. Use
    :func:`analytic_gaussian_sigma`, exact for every ε > 0 and never larger (see ``docs/privacy.md``).

    Parameters
    ----------
    epsilon : float
        ε in (0, 1).
    delta : float
        δ in (0, 1).
    sensitivity : float, default=1.0
        Δ₂ > 0.

    Returns
    -------
    float
        σ.

    Raises
    ------
    ValueError
        If ε ∉ (0, 1), δ ∉ (0, 1) or Δ₂ ≤ 0.

    Examples
    --------
    >>> round(classical_gaussian_sigma(0.5, 1e-5), 4)
    9.6896
    >>> classical_gaussian_sigma(0.5, 1e-5) >= analytic_gaussian_sigma(0.5, 1e-5)
    True
    """
    eps = check_open_unit("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    d = check_positive("sensitivity", sensitivity)
    return d * math.sqrt(2.0 * math.log(1.25 / dl)) / eps


def _log_b_plus(epsilon: float, v: float) -> float:
    # B⁺(v) = Φ(√(εv)) − e^ε Φ(−√(ε(v+2))): a = √(εv), μ = a − b = √(εv) + √(ε(v+2))
    a = math.sqrt(epsilon * v)
    return _log_delta_am(a, a + math.sqrt(epsilon * (v + 2.0)))


def _log_b_minus(epsilon: float, u: float) -> float:
    # B⁻(u) = Φ(−√(εu)) − e^ε Φ(−√(ε(u+2))): a = −√(εu), μ = √(ε(u+2)) − √(εu) = 2ε/(√(ε(u+2)) + √(εu))
    root_u, root_u2 = math.sqrt(epsilon * u), math.sqrt(epsilon * (u + 2.0))
    return _log_delta_am(-root_u, 2.0 * epsilon / (root_u2 + root_u))


def _root_in_log(f, log_target: float, increasing: bool) -> float:
    """Root t* of f(e^t) = log_target for a monotone f on (0, ∞), found in t = log v; returns v* = e^{t*}.

    The caller guarantees f(0⁺) is on the "≤ target" side (increasing) or "≥ target" side (decreasing)
    and that f crosses the target. Returns 0.0 if the crossing lies below v = e^{-700}.
    """

    def g(t: float) -> float:
        return f(math.exp(t)) - log_target

    below = (lambda val: val <= 0.0) if increasing else (lambda val: val >= 0.0)
    lo, hi = -1.0, 1.0
    while not below(g(lo)):
        hi = lo
        lo *= 2.0
        if lo < -700.0:
            return 0.0
    while below(g(hi)):
        lo = hi
        hi = hi * 2.0 if hi > 0 else 1.0
        if hi > 700.0:  # pragma: no cover - δ < 1 always crosses well before this
            raise RuntimeError("analytic Gaussian root finding failed to bracket the root.")
    t = optimize.brentq(g, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps)
    return math.exp(float(t))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise σ making the Gaussian mechanism (ε, δ)-DP, for every ε > 0 (Balle & Wang 2018, Alg. 1).

    Balle & Wang's analytic Gaussian mechanism: with δ₀ = Φ(0) − e^ε Φ(−√(2ε)),

    * if δ ≥ δ₀, let v* = sup{v ≥ 0 : B⁺(v) ≤ δ} with B⁺(v) = Φ(√(εv)) − e^ε Φ(−√(ε(v+2))) and
      α = √(1 + v*/2) − √(v*/2);
    * otherwise let u* = inf{u ≥ 0 : B⁻(u) ≤ δ} with B⁻(u) = Φ(−√(εu)) − e^ε Φ(−√(ε(u+2))) and
      α = √(1 + u*/2) + √(u*/2);

    then σ = α Δ / √(2ε). The scalar roots are found in log space (B± via ``log_ndtr``, the unknown as
    log v) with Brent's method. The result is then padded up by a relative 1e-10 and checked against the
    exact δ(ε) of :func:`analytic_gaussian_delta`, so that the returned σ always satisfies
    δ(ε; σ) ≤ δ: rounding can only add noise.

    Parameters
    ----------
    epsilon : float
        ε > 0 (any size; no ε < 1 restriction).
    delta : float
        δ in (0, 1).
    sensitivity : float, default=1.0
        Δ > 0, L2 sensitivity.

    Returns
    -------
    float
        σ > 0.

    Examples
    --------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 4)
    3.7306
    >>> analytic_gaussian_sigma(1.0, 1e-5, sensitivity=2.0) == 2 * analytic_gaussian_sigma(1.0, 1e-5)
    True
    """
    eps = check_positive("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    d = check_positive("sensitivity", sensitivity)
    log_target = math.log(dl)
    log_delta0 = _log_delta_am(0.0, math.sqrt(2.0 * eps))
    if log_target >= log_delta0:
        v = _root_in_log(lambda x: _log_b_plus(eps, x), log_target, increasing=True)
        alpha = math.sqrt(1.0 + v / 2.0) - math.sqrt(v / 2.0)
    else:
        u = _root_in_log(lambda x: _log_b_minus(eps, x), log_target, increasing=False)
        alpha = math.sqrt(1.0 + u / 2.0) + math.sqrt(u / 2.0)
    sigma_unit = alpha / math.sqrt(2.0 * eps) * (1.0 + _SIGMA_PADDING)
    while log_gaussian_delta(eps, 1.0 / sigma_unit) > log_target:  # pragma: no cover - rounding guard
        sigma_unit *= 1.0 + _SIGMA_PADDING
    return sigma_unit * d
