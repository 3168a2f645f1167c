"""The privacy loss random variable (PLRV) of the Gaussian and Laplace mechanisms on two neighbouring inputs.

Lecture 9 ("Connection to pure DP"): for fixed D, D' the PLRV draws o from M(D) and outputs

    L(o) = ln( P(M(D) = o) / P(M(D') = o) ).

Theorem (lecture): if L ≤ ε with probability ≥ 1 − δ (for both orders of the pair), M is (ε, δ)-DP.
So δ_tail(ε) = P(L > ε) is an (ε, δ)-DP curve; it is valid but not tight. The exact (tight) curve is the
hockey-stick divergence δ_hs(ε) = E[(1 − e^{ε − L})₊] ≤ P(L > ε) (Balle & Wang 2018, Thm 5).

Symbols and argument names:

==========  ===================  =======================================================================
symbol      argument             meaning
==========  ===================  =======================================================================
f(D)        ``value``            the mechanism's centre on D
f(D')       ``neighbour_value``  its centre on the neighbour D'
v           —                    f(D') − f(D)
σ, b        ``sigma``, ``scale``  Gaussian std / Laplace scale
μ           —                    ‖v‖₂/σ (Gaussian): L ~ N(μ²/2, μ²)
a_i         —                    |v_i|/b (Laplace): L = Σ_i (|z_i − v_i| − |z_i|)/b, z_i ~ Laplace(0, b)
==========  ===================  =======================================================================

Both mechanisms are symmetric: the PLRV of the pair (D', D) has the same law as that of (D, D') (map
z ↦ −z), so one direction gives the curve for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from lethe._rng import check_random_state
from lethe._validation import check_nonnegative, check_open_unit, check_positive, check_positive_int, check_real
from lethe.privacy.gaussian import analytic_gaussian_delta

__all__ = [
    "GaussianPrivacyLoss",
    "LaplacePrivacyLoss",
    "empirical_hockey_stick",
    "empirical_tail",
]


def _centres(value: Any, neighbour_value: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.atleast_1d(np.asarray(value, dtype=np.float64))
    b = np.atleast_1d(np.asarray(neighbour_value, dtype=np.float64))
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"value and neighbour_value must be scalars or 1-D arrays. Found shapes {a.shape}, {b.shape}.")
    if a.shape != b.shape:
        raise ValueError(f"value and neighbour_value must have the same shape. Found {a.shape} and {b.shape}.")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("value and neighbour_value must contain only finite numbers. Found a non-finite entry.")
    return a, b


def _check_outputs(outputs: Any, dim: int) -> np.ndarray:
    o = np.asarray(outputs, dtype=np.float64)
    if o.ndim <= 1 and dim == 1:
        o = o.reshape(-1, 1)
    elif o.ndim == 1:
        o = o.reshape(1, -1)
    if o.ndim != 2 or o.shape[1] != dim:
        raise ValueError(f"outputs must have {dim} columns (one row per output). Found shape {np.shape(outputs)}.")
    return o


class _NoisyQuery:
    """What the two PLRVs share: a noise scale (the field named ``_scale``, > 0) and the query's values f(D), f(D'),
    stored as tuples of floats of the same length (the dataclasses are frozen)."""

    _scale: ClassVar[str]
    value: Any
    neighbour_value: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, self._scale, check_positive(self._scale, getattr(self, self._scale)))
        a, b = _centres(self.value, self.neighbour_value)
        object.__setattr__(self, "value", tuple(float(x) for x in a))
        object.__setattr__(self, "neighbour_value", tuple(float(x) for x in b))


def _check_losses(losses: Any) -> np.ndarray:
    arr = np.asarray(losses, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("losses must be non-empty. Found 0 samples.")
    return arr


def empirical_tail(losses: Any, epsilon: float) -> float:
    """Fraction of privacy-loss samples strictly above ε: the plug-in estimate of P(L > ε).

    Examples
    --------
    >>> empirical_tail([0.1, 0.5, 2.0, 3.0], 1.0)
    0.5
    """
    e = check_real("epsilon", epsilon)
    arr = _check_losses(losses)
    return float(np.mean(arr > e))


def empirical_hockey_stick(losses: Any, epsilon: float) -> float:
    """Unbiased estimate of the exact δ(ε) from PLRV samples L ~ (law under M(D)): mean of (1 − e^{ε−L})₊.

    δ_hs(ε) = sup_Ω P(M(D) ∈ Ω) − e^ε P(M(D') ∈ Ω) = E_{o∼M(D)}[(1 − e^{ε − L(o)})₊]. Each term lies in
    [0, 1], so Hoeffding's inequality gives a sampling tolerance √(ln(1/β)/(2N)) at confidence 1 − β.

    Examples
    --------
    >>> round(empirical_hockey_stick([0.0, 1.0, 2.0], 1.0), 6)
    0.210707
    """
    e = check_real("epsilon", epsilon)
    arr = _check_losses(losses)
    return float(np.mean(-np.expm1(np.minimum(e - arr, 0.0))))


@dataclass(frozen=True)
class GaussianPrivacyLoss(_NoisyQuery):
    """PLRV of M(D) = f(D) + N(0, σ² I) against M(D') = f(D') + N(0, σ² I).

    With o = f(D) + z, L(o) = (‖o − f(D')‖² − ‖o − f(D)‖²)/(2σ²) = (‖v‖² − 2⟨z, v⟩)/(2σ²), so
    L ~ N(μ²/2, μ²) with μ = ‖v‖₂/σ. Hence P(L > ε) = Φ(μ/2 − ε/μ), and the smallest ε with
    P(L > ε) ≤ δ is μ²/2 + μ Φ⁻¹(1 − δ).

    Parameters
    ----------
    sigma : float
        σ > 0.
    value, neighbour_value : float or 1-D array-like
        f(D) and f(D') (same shape).

    Examples
    --------
    >>> plrv = GaussianPrivacyLoss(sigma=1.0, value=0.0, neighbour_value=1.0)
    >>> round(plrv.tail(1.0), 6)          # P(L > 1) = Φ(-1/2)
    0.308538
    >>> plrv.hockey_stick(1.0) <= plrv.tail(1.0)
    True
    >>> losses = plrv.sample(20000, random_state=0)
    >>> bool(abs(losses.mean() - 0.5) < 0.03)    # E[L] = μ²/2
    True
    """

    sigma: float
    value: Any
    neighbour_value: Any
    _scale: ClassVar[str] = "sigma"

    @property
    def mu(self) -> float:
        """μ = ‖f(D) − f(D')‖₂ / σ."""
        diff = np.subtract(self.neighbour_value, self.value)
        return float(np.linalg.norm(diff)) / self.sigma

    def log_ratio(self, outputs: Any) -> np.ndarray:
        """L(o) = ln p_D(o) − ln p_{D'}(o) for each output row o (from the two densities, no shortcut)."""
        o = _check_outputs(outputs, len(self.value))
        c, c2 = np.asarray(self.value), np.asarray(self.neighbour_value)
        s2 = 2.0 * self.sigma**2
        return (np.sum((o - c2) ** 2, axis=1) - np.sum((o - c) ** 2, axis=1)) / s2

    def sample(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """Draw outputs o ~ M(D) by running the mechanism and return their privacy losses L(o)."""
        n = check_positive_int("n_samples", n_samples)
        rng = check_random_state(random_state)
        c = np.asarray(self.value)
        outputs = c + self.sigma * rng.standard_normal((n, c.size))
        return self.log_ratio(outputs)

    def tail(self, epsilon: float) -> float:
        """P(L > ε) = Φ(μ/2 − ε/μ) exactly (0 or 1 for μ = 0)."""
        e = check_real("epsilon", epsilon)
        mu = self.mu
        if mu == 0.0:
            return 0.0 if e >= 0 else 1.0
        return float(special.ndtr(mu / 2.0 - e / mu))

    def epsilon_for_tail(self, delta: float) -> float:
        """Smallest ε ≥ 0 with P(L > ε) ≤ δ: max(0, μ²/2 + μ Φ⁻¹(1 − δ)) (the lecture's implied ε)."""
        d = check_open_unit("delta", delta)
        mu = self.mu
        return max(0.0, mu * mu / 2.0 - mu * float(special.ndtri(d)))

    def curve(self, epsilons: Any) -> np.ndarray:
        """The implied (ε, δ) curve δ(ε) = P(L > ε) at each ε (valid for both orders of the pair)."""
        return np.array([self.tail(float(e)) for e in np.atleast_1d(epsilons)])

    def hockey_stick(self, epsilon: float) -> float:
        """The exact (tight) δ(ε) = E[(1 − e^{ε−L})₊] of this pair (Balle & Wang 2018, Thm 8)."""
        e = check_nonnegative("epsilon", epsilon)
        mu = self.mu
        return 0.0 if mu == 0.0 else analytic_gaussian_delta(e, 1.0, mu)


def _laplace_loss_cdf(t: np.ndarray, a: float) -> np.ndarray:
    """CDF of L = (|z − d| − |z|)/b for one coordinate, a = d/b > 0.

    L = +a (z ≤ 0, probability ½), L = −a (z ≥ d, probability ½e^{−a}), and L = a − 2z/b for 0 < z < d, so
    P(L ≤ t) = ½ e^{−(a − t)/2} for −a ≤ t < a, 0 below −a and 1 from a on.
    """
    t = np.asarray(t, dtype=np.float64)
    out = np.where(t >= a, 1.0, 0.5 * np.exp(-(a - np.clip(t, -a, a)) / 2.0))
    return np.where(t < -a, 0.0, out)


@dataclass(frozen=True)
class LaplacePrivacyLoss(_NoisyQuery):
    """PLRV of M(D) = f(D) + Laplace(0, b)^k against M(D') = f(D') + Laplace(0, b)^k.

    L = Σ_i L_i with independent L_i = (|z_i − v_i| − |z_i|)/b ∈ [−a_i, a_i], a_i = |v_i|/b, so
    L ≤ ‖v‖₁/b always (the mechanism's ε). One coordinate has the closed-form law of
    :func:`_laplace_loss_cdf`: P(L > t) = 1 − ½ e^{−(a − t)/2} on [−a, a). With several non-zero
    coordinates P(L > t) is bracketed by discretising each L_i on a grid of width h, rounding up (an
    upper bound on the tail) or down (a lower bound), and convolving.

    Parameters
    ----------
    scale : float
        b > 0.
    value, neighbour_value : float or 1-D array-like
        f(D) and f(D').

    Examples
    --------
    >>> plrv = LaplacePrivacyLoss(scale=1.0, value=0.0, neighbour_value=1.0)
    >>> plrv.tail(1.0), plrv.tail(0.999) > 0.5   # L ≤ 1 always, and L = 1 with probability 1/2
    (0.0, True)
    >>> plrv.epsilon_for_tail(0.01)
    1.0
    """

    scale: float
    value: Any
    neighbour_value: Any
    _scale: ClassVar[str] = "scale"

    @property
    def _a(self) -> np.ndarray:
        diff = np.abs(np.subtract(self.neighbour_value, self.value)) / self.scale
        return diff[diff > 0]

    @property
    def max_loss(self) -> float:
        """sup L = ‖v‖₁ / b."""
        return float(np.sum(self._a))

    def log_ratio(self, outputs: Any) -> np.ndarray:
        """L(o) = Σ_i (|o_i − f(D')_i| − |o_i − f(D)_i|)/b for each output row o."""
        o = _check_outputs(outputs, len(self.value))
        c, c2 = np.asarray(self.value), np.asarray(self.neighbour_value)
        return np.sum(np.abs(o - c2) - np.abs(o - c), axis=1) / self.scale

    def sample(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """Draw outputs o ~ M(D) by running the mechanism and return their privacy losses L(o)."""
        n = check_positive_int("n_samples", n_samples)
        rng = check_random_state(random_state)
        c = np.asarray(self.value)
        return self.log_ratio(c + rng.laplace(0.0, self.scale, (n, c.size)))

    def tail_bounds(self, epsilon: float, grid: float | None = None) -> tuple[float, float]:
        """(lower, upper) bounds on P(L > ε); equal (exact) when at most one coordinate differs.

        Parameters
        ----------
        epsilon : float
        grid : float, optional
            Discretisation width h > 0 of each L_i (default: ‖v‖₁/b / 2000). The bracket width shrinks
            with h; the work grows as (‖v‖₁/(b h))².
        """
        e = check_real("epsilon", epsilon)
        a = self._a
        if a.size == 0:
            p = 0.0 if e >= 0 else 1.0
            return p, p
        if a.size == 1:
            p = float(1.0 - _laplace_loss_cdf(np.array([e]), float(a[0]))[0])
            return p, p
        total = float(a.sum())
        if e >= total:
            return 0.0, 0.0
        h = total / 2000.0 if grid is None else check_positive("grid", grid)
        n_cells = int(math.ceil(2 * total / h)) + 2 * a.size
        if n_cells > 200_000:
            raise ValueError(f"grid is too fine: {n_cells} cells (limit 200000). Found grid={h}.")
        up = self._rounded_tail(a, h, e, upward=True)
        down = self._rounded_tail(a, h, e, upward=False)
        return down, min(1.0, up)

    @staticmethod
    def _rounded_tail(a: np.ndarray, h: float, e: float, upward: bool) -> float:
        # pmf of each L_i rounded to the grid hZ (up: ⌈L_i/h⌉h ≥ L_i; down: ⌊L_i/h⌋h ≤ L_i), then convolved.
        pmf = np.array([1.0])
        offset = 0  # grid index of pmf[0]
        for ai in a:
            lo_k = int(math.floor(-ai / h)) - 1
            hi_k = int(math.ceil(ai / h)) + 1
            ks = np.arange(lo_k, hi_k + 1)
            if upward:  # P(⌈L/h⌉ = k) = F(kh) − F((k−1)h)
                p = _laplace_loss_cdf(ks * h, ai) - _laplace_loss_cdf((ks - 1) * h, ai)
            else:  # P(⌊L/h⌋ = k) = P(kh ≤ L < (k+1)h) = F⁻((k+1)h) − F⁻(kh), F⁻ the left limit
                p = _laplace_loss_cdf(np.nextafter((ks + 1) * h, -np.inf), ai) - _laplace_loss_cdf(
                    np.nextafter(ks * h, -np.inf), ai
                )
            p = np.clip(p, 0.0, None)
            pmf = np.convolve(pmf, p)
            offset += lo_k
        ks_total = offset + np.arange(pmf.size)
        if upward:  # one cell of slack, so that rounding of k·h near ε can only add mass
            return float(np.sum(pmf[(ks_total + 1) * h > e]))
        return float(np.sum(pmf[ks_total * h > e]))

    def tail(self, epsilon: float) -> float:
        """P(L > ε): exact for one differing coordinate, else the upper bound of :meth:`tail_bounds`."""
        return self.tail_bounds(epsilon)[1]

    def epsilon_for_tail(self, delta: float) -> float:
        """Smallest ε ≥ 0 with P(L > ε) ≤ δ (upper bound in the multi-coordinate case).

        One coordinate: ε = a for δ < ½ (L = a with probability ½), else max(0, a + 2 ln(2(1 − δ))).
        """
        d = check_open_unit("delta", delta)
        a = self._a
        if a.size == 0:
            return 0.0
        if a.size == 1:
            ai = float(a[0])
            return ai if d < 0.5 else max(0.0, ai + 2.0 * math.log(2.0 * (1.0 - d)))
        lo, hi = 0.0, self.max_loss
        if self.tail(0.0) <= d:
            return 0.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if self.tail(mid) <= d:
                hi = mid
            else:
                lo = mid
        return hi

    def curve(self, epsilons: Any) -> np.ndarray:
        """The implied (ε, δ) curve δ(ε) = P(L > ε) (upper bound in the multi-coordinate case)."""
        return np.array([self.tail(float(e)) for e in np.atleast_1d(epsilons)])

    def hockey_stick(self, epsilon: float) -> float:
        """Exact δ(ε) for one differing coordinate: max(0, 1 − e^{(ε − a)/2}).

        Raises ``ValueError`` when several coordinates differ (no closed form is implemented).
        """
        e = check_nonnegative("epsilon", epsilon)
        a = self._a
        if a.size == 0:
            return 0.0
        if a.size > 1:
            raise ValueError(
                f"hockey_stick needs f(D) and f(D') to differ in at most one coordinate. Found {a.size}."
            )
        return max(0.0, -math.expm1((e - float(a[0])) / 2.0))
