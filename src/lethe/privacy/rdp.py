"""Rényi differential privacy: the Gaussian and Laplace mechanisms, composition, conversion to (ε, δ)-DP.

Symbols (Chourasia & Shah 2023, App. B; Mironov 2017) and argument names:

=============  =================  =====================================================================
symbol         argument           meaning
=============  =================  =====================================================================
q, α           ``alpha``          Rényi order, α > 1
ε_rdp, ε₀      ``rdp_epsilon``    (α, ε_rdp)-Rényi DP: R_α(M(D) ‖ M(D')) ≤ ε_rdp for all neighbours
R_α(ν ‖ ν')    —                  (1/(α−1)) log E_{ν'}[(ν/ν')^α]  (Def. B.2)
Δ              ``sensitivity``    L2 sensitivity (Gaussian) or L1 sensitivity (Laplace)
σ              ``sigma``          Gaussian noise standard deviation
b              ``scale``          Laplace noise scale
δ              ``delta``          target δ of the (ε, δ) guarantee, 0 < δ < 1
=============  =================  =====================================================================

Conversions (both valid upper bounds on the ε of an (α, ε_rdp)-RDP mechanism at a given δ):

* Thm B.1 (Mironov 2017, Prop. 3):  ε = ε_rdp + log(1/δ)/(α − 1);
* tight (Canonne, Kamath & Steinke 2020, Prop. 12; Balle et al. 2020, Thm 21; Asoodeh et al. 2021):
  ε = ε_rdp + log((α − 1)/α) − (log δ + log α)/(α − 1), never larger than Thm B.1 because
  log((α−1)/α) < 0 and −log α/(α−1) < 0 for every α > 1.

A curve ε_rdp(α) = α ε₀ (every order at once: shifted-Rényi bounds of noisy iterations, lethe.nn and Noisy-SGD)
converts by :func:`linear_rdp_epsilon`, the tight conversion minimised over the continuum of orders, and is
calibrated by :func:`linear_rdp_max_slope`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from lethe._validation import check_nonnegative, check_open_unit, check_positive, check_real
from lethe.privacy.calibration import bisect_boundary

__all__ = [
    "DEFAULT_ORDERS",
    "best_dp_over_orders",
    "compose_rdp",
    "gaussian_rdp",
    "laplace_rdp",
    "linear_rdp_epsilon",
    "linear_rdp_max_slope",
    "pure_dp_rdp",
    "rdp_to_dp",
    "rdp_to_dp_tight",
]

#: Rényi orders searched by default (those of Google's dp_accounting RDP accountant).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)


def _check_order(alpha: float) -> float:
    a = check_real("alpha", alpha)
    if not a > 1.0:
        raise ValueError(f"alpha (the Rényi order) must be > 1. Found {alpha}.")
    return a


def gaussian_rdp(alpha: float, sensitivity: float, sigma: float) -> float:
    """Rényi DP of order α of the Gaussian mechanism: ε_rdp = α Δ² / (2σ²) (Mironov 2017, Prop. 7).

    R_α(N(0, σ² I) ‖ N(v, σ² I)) = α ‖v‖² / (2σ²), maximised at ‖v‖ = Δ. This is an equality, not just a
    bound; it is used by Chourasia & Shah 2023, Thm G.7, Eq. (97).

    Parameters
    ----------
    alpha : float
        Rényi order α > 1.
    sensitivity : float
        Δ ≥ 0, L2 sensitivity of the released function.
    sigma : float
        σ > 0, standard deviation of each noise coordinate.

    Returns
    -------
    float
        ε_rdp ≥ 0.

    Examples
    --------
    >>> gaussian_rdp(2.0, sensitivity=1.0, sigma=1.0)
    1.0
    >>> gaussian_rdp(10.0, sensitivity=0.5, sigma=2.0)
    0.3125
    """
    a = _check_order(alpha)
    d = check_nonnegative("sensitivity", sensitivity)
    s = check_positive("sigma", sigma)
    return a * d * d / (2.0 * s * s)


def laplace_rdp(alpha: float, sensitivity: float, scale: float) -> float:
    """Rényi DP of order α of the Laplace mechanism (Mironov 2017, Prop. 6), exact for 1-D output.

    With ε₀ = Δ/b,

    .. math:: ε_{rdp} = \\frac{1}{α − 1} \\log\\left(\\frac{α}{2α − 1} e^{(α − 1)ε₀}
              + \\frac{α − 1}{2α − 1} e^{−αε₀}\\right),

    evaluated in log space. For vector outputs with L1 sensitivity Δ it is a valid upper bound (the
    divergence is additive over coordinates and convex in each |v_i|, hence maximal when the whole L1
    budget sits on one coordinate). Convexity: as a function of t = |v_i|/b the divergence is
    log(α/(2α−1) e^{(α−1)t} + (α−1)/(2α−1) e^{−αt})/(α−1), a log-sum-exp of affine functions of t, which is
    convex and 0 at t = 0. It never exceeds ε₀ (the pure-DP bound).

    Parameters
    ----------
    alpha : float
        α > 1.
    sensitivity : float
        Δ ≥ 0, L1 sensitivity.
    scale : float
        b > 0, Laplace scale.

    Returns
    -------
    float

    Examples
    --------
    >>> round(laplace_rdp(2.0, sensitivity=1.0, scale=1.0), 6)
    0.619124
    """
    a = _check_order(alpha)
    d = check_nonnegative("sensitivity", sensitivity)
    b = check_positive("scale", scale)
    e0 = d / b
    if e0 == 0.0:
        return 0.0
    log_t1 = math.log(a / (2 * a - 1)) + (a - 1) * e0
    log_t2 = math.log((a - 1) / (2 * a - 1)) - a * e0
    value = float(np.logaddexp(log_t1, log_t2)) / (a - 1)
    return min(max(value, 0.0), e0)


def pure_dp_rdp(alpha: float, epsilon: float) -> float:
    """Rényi DP implied by pure ε-DP: ε_rdp = min(ε, α ε² / 2) (Bun & Steinke 2016, Prop. 3.3).

    ε-DP bounds the privacy loss by ε almost surely, hence R_α ≤ R_∞ ≤ ε; Bun & Steinke show it is also
    ½ε²-zCDP, i.e. R_α ≤ α ε² / 2 for every α > 1.

    Examples
    --------
    >>> pure_dp_rdp(2.0, 0.1)
    0.010000000000000002
    >>> pure_dp_rdp(2.0, 3.0)
    3.0
    """
    a = _check_order(alpha)
    e = check_nonnegative("epsilon", epsilon)
    return min(e, a * e * e / 2.0)


def compose_rdp(epsilons: Sequence[float]) -> float:
    """Rényi composition at one fixed order: (α, Σ ε_i)-RDP (Chourasia & Shah 2023, Thm B.3; Mironov, Prop. 1).

    Holds for adaptively chosen mechanisms. All ``epsilons`` must be RDP values at the *same* order α.

    Parameters
    ----------
    epsilons : sequence of float
        ε_i ≥ 0, the RDP of each mechanism at the common order.

    Returns
    -------
    float
        Σ ε_i (``math.fsum``, correctly rounded); 0.0 for an empty sequence.

    Examples
    --------
    >>> compose_rdp([0.1] * 10)
    1.0
    """
    values = [check_nonnegative(f"epsilons[{i}]", e) for i, e in enumerate(epsilons)]
    return math.fsum(values)


def rdp_to_dp(alpha: float, rdp_epsilon: float, delta: float) -> float:
    """(α, ε_rdp)-RDP ⇒ (ε, δ)-DP with ε = ε_rdp + log(1/δ)/(α − 1) (Chourasia & Shah 2023, Thm B.1).

    Thm B.1 (Mironov 2017, Prop. 3): if R_q(ν ‖ ν') < ε₀ then P_ν[O] ≤ e^ε P_ν'[O] + δ for
    ε = ε₀ + log(1/δ)/(q − 1) and any 0 < δ < 1. Applied to both orders of every neighbouring pair it
    gives (ε, δ)-DP.

    Parameters
    ----------
    alpha : float
        Rényi order α = q > 1.
    rdp_epsilon : float
        ε_rdp = ε₀ ≥ 0.
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        ε.

    Examples
    --------
    >>> round(rdp_to_dp(11.0, 0.5, 1e-5), 6)
    1.651293
    """
    a = _check_order(alpha)
    r = check_nonnegative("rdp_epsilon", rdp_epsilon)
    d = check_open_unit("delta", delta)
    return r - math.log(d) / (a - 1.0)


def rdp_to_dp_tight(alpha: float, rdp_epsilon: float, delta: float) -> float:
    """Tighter (α, ε_rdp)-RDP ⇒ (ε, δ)-DP conversion.

    .. math:: ε = ε_{rdp} + \\log\\frac{α − 1}{α} − \\frac{\\log δ + \\log α}{α − 1}

    Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020),
    Prop. 12 (arXiv:2004.00010 v4); equivalently Balle, Barthe, Gaboardi, Hsu & Sato (AISTATS 2020),
    Thm 21. It is the conversion used by Google's dp_accounting. The value is clipped below at 0
    ((ε, δ)-DP with ε < 0 implies (0, δ)-DP). It is never larger than :func:`rdp_to_dp`, since the
    difference log(1 − 1/α) − log(α)/(α − 1) is negative for every α > 1.

    Parameters
    ----------
    alpha : float
        α > 1.
    rdp_epsilon : float
        ε_rdp ≥ 0.
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        ε ≥ 0.

    Examples
    --------
    >>> round(rdp_to_dp_tight(11.0, 0.5, 1e-5), 6)
    1.316193
    >>> rdp_to_dp_tight(11.0, 0.5, 1e-5) <= rdp_to_dp(11.0, 0.5, 1e-5)
    True
    """
    a = _check_order(alpha)
    r = check_nonnegative("rdp_epsilon", rdp_epsilon)
    d = check_open_unit("delta", delta)
    eps = r + math.log1p(-1.0 / a) - (math.log(d) + math.log(a)) / (a - 1.0)
    return max(0.0, eps)


def best_dp_over_orders(
    orders: Sequence[float], rdp_epsilons: Sequence[float], delta: float, tight: bool = True
) -> tuple[float, float]:
    """Best (ε, δ)-DP over several Rényi orders: min over α of the conversion of (α, ε_rdp(α)).

    A mechanism that is (α, ε_rdp(α))-RDP for every listed α is (ε, δ)-DP for each converted ε, hence for
    the smallest.

    Parameters
    ----------
    orders : sequence of float
        Orders α_j > 1 (non-empty).
    rdp_epsilons : sequence of float
        ε_rdp(α_j) ≥ 0, same length as ``orders``; ``math.inf`` is allowed (an order with no bound).
    delta : float
        δ in (0, 1).
    tight : bool, default=True
        Use :func:`rdp_to_dp_tight` (True) or Thm B.1 :func:`rdp_to_dp` (False).

    Returns
    -------
    (float, float)
        (ε, α) with α the minimising order (the first one in case of ties).

    Examples
    --------
    >>> orders = [2.0, 8.0, 32.0]
    >>> eps, alpha = best_dp_over_orders(orders, [gaussian_rdp(a, 1.0, 4.0) for a in orders], 1e-5)
    >>> round(eps, 4), alpha
    (1.2278, 32.0)
    """
    orders = list(orders)
    rdps = list(rdp_epsilons)
    if len(orders) == 0:
        raise ValueError("orders must be non-empty. Found 0 orders.")
    if len(orders) != len(rdps):
        raise ValueError(
            f"orders and rdp_epsilons must have the same length. Found {len(orders)} and {len(rdps)}."
        )
    if not isinstance(tight, bool | np.bool_):
        raise TypeError(f"tight must be a bool. Found {tight!r}.")
    d = check_open_unit("delta", delta)
    convert = rdp_to_dp_tight if tight else rdp_to_dp
    best_eps, best_alpha = math.inf, math.nan
    for j, (a, r) in enumerate(zip(orders, rdps, strict=True)):
        a_f = check_real(f"orders[{j}]", a)
        if not a_f > 1.0:
            raise ValueError(f"orders[{j}] (a Rényi order) must be > 1. Found {a}.")
        if isinstance(r, numbers.Real) and not isinstance(r, bool) and float(r) == math.inf:
            eps = math.inf
        else:
            eps = convert(a_f, check_nonnegative(f"rdp_epsilons[{j}]", r), d)
        if eps < best_eps or math.isnan(best_alpha):
            best_eps, best_alpha = eps, a_f
    return best_eps, best_alpha


def _eps_at(alpha: float, slope: float, delta: float) -> float:
    return rdp_to_dp_tight(alpha, alpha * slope, delta)


def _best_alpha(slope: float, delta: float) -> tuple[float, float]:
    """min over α > 1 of the tight conversion of (α, α·slope); a golden-section search on log(α − 1).

    Any α gives a valid ε, so the minimiser only needs to be good, not exact.
    """
    if slope == 0.0:
        return 0.0, math.inf
    # the Gaussian-like optimum is near α* ≈ 1 + sqrt(log(1/δ)/slope); search log(α-1) in a wide bracket
    guess = math.log(math.sqrt(-math.log(delta) / slope))
    lo, hi = min(guess - 8.0, -10.0), max(guess + 8.0, 10.0)

    def f(u: float) -> float:
        return _eps_at(1.0 + math.exp(u), slope, delta)

    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    x1, x2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = f(x1), f(x2)
    for _ in range(200):
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - g * (b - a)
            f1 = f(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + g * (b - a)
            f2 = f(x2)
        if b - a < 1e-10:
            break
    u = x1 if f1 <= f2 else x2
    return f(u), 1.0 + math.exp(u)


def linear_rdp_epsilon(slope: float, delta: float) -> float:
    r"""(ε, δ) of a mechanism with :math:`D_α ≤ α\,ε_0` for every α > 1.

    .. math:: ε(δ) = \min_{α>1}\; α ε_0 + \log\frac{α-1}{α} - \frac{\log δ + \log α}{α - 1}

    (Canonne, Kamath & Steinke 2020, Prop. 12, applied at every order; the minimum is found numerically and any
    order evaluated is a valid bound, so an imperfect minimiser only loses tightness, never soundness). Each order
    is converted by :func:`rdp_to_dp_tight`; the minimum is over the continuum of orders, not a
    grid (:func:`best_dp_over_orders`). The curve has the shape of a Gaussian mechanism's RDP, but
    :func:`lethe.privacy.gaussian.analytic_gaussian_epsilon` is *not* a valid substitute: shifted-Rényi bounds only
    bound the Rényi divergences, not the Gaussian privacy profile.

    Parameters
    ----------
    slope : float
        ε₀ ≥ 0.
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        ε ≥ 0.

    Examples
    --------
    >>> round(linear_rdp_epsilon(0.02, 1e-5), 4)
    0.7943
    """
    s = check_nonnegative("slope", slope)
    d = check_open_unit("delta", delta)
    if not math.isfinite(s):
        return math.inf
    return _best_alpha(s, d)[0]


def linear_rdp_max_slope(epsilon: float, delta: float) -> float:
    """The largest ε₀ (to relative precision 1e-12, rounded down) with ``linear_rdp_epsilon(ε₀, δ) ≤ ε``.

    Parameters
    ----------
    epsilon : float
        Target ε > 0.
    delta : float
        Target δ in (0, 1).

    Returns
    -------
    float
        ε₀ > 0 such that :func:`linear_rdp_epsilon` (ε₀, δ) ≤ ε (checked).

    Examples
    --------
    >>> s = linear_rdp_max_slope(1.0, 1e-5)
    >>> linear_rdp_epsilon(s, 1e-5) <= 1.0 < linear_rdp_epsilon(1.01 * s, 1e-5)
    True
    """
    e = check_positive("epsilon", epsilon)
    d = check_open_unit("delta", delta)
    lo, hi = 0.0, e  # ε(ε₀) ≥ ε₀ (α → 1 side is worse), so ε₀ = ε is infeasible or exactly feasible
    while linear_rdp_epsilon(hi, d) <= e:
        lo, hi = hi, 2.0 * hi
    lo, hi = bisect_boundary(lambda s: linear_rdp_epsilon(s, d) <= e, lo, hi, feasible_side="lo", rel_tol=1e-12,
                             max_iter=200)
    if lo <= 0.0 or linear_rdp_epsilon(lo, d) > e:
        raise ValueError(f"No positive RDP slope meets epsilon={e!r} at delta={d!r}.")
    return lo
