"""Tree aggregation over the removal stream: correlated release noise with an exact μ-GDP accountant (issue 39).

Opt-in; nothing in lethe uses it by default (``ReleasedLogisticRegression`` keeps fresh noise per release).

**Mechanism.** Releases t = 0, …, T−1 publish noisy versions of the centres c_t (c_0 after ``fit``, c_t after the
t-th batch of removals; each c_t any point with gradient residual ≤ β, :mod:`lethe.privacy.drift`). The leaves of
a binary tree are the increments c_t − c_{t−1} (c_{−1} := 0); every dyadic block [a, b] = [j2^ℓ, (j+1)2^ℓ − 1]
with b ≤ T − 1 is a node, published once, at release b, as c_b − c_{a−1} + N(0, σ² I) with fresh noise
(Dwork, Naor, Pitassi & Rothblum 2010; Chan, Shi & Song 2011). Honaker (2015): each node's estimate is refined
with its two children's (inverse-variance weights; variance v_0 = σ², v_ℓ = 1/(1/σ² + 1/(2v_{ℓ−1}))), and
release t is the sum of the refined estimates of the dyadic blocks that partition [0, t]: an unbiased estimate of
c_t whose noise is Gaussian with variance Σ v_ℓ over the set bits ℓ of t + 1, per coordinate. Everything after the
noisy nodes is post-processing.

**Privacy.** Two worlds differ in the presence of one target record z (held from ``fit``, possibly deleted in
release τ's batch; τ = T: held throughout). The nodes are Gaussian mechanisms, released adaptively; for every
pair of hidden histories, node [a, b]'s two means differ by at most s[a, b] (:mod:`lethe.privacy.drift`,
corollary):

* b < τ, a = 0: Δ;  b < τ, a ≥ 1: min(2Δ, D(k(b − a + 1)) + 4e);
* a ≤ τ ≤ b: Δ + 2e (2e if a = 0);  a > τ: 4e;

with Δ = :func:`~lethe.certified.bounds.release_sensitivity` (residual β), e = β/(λm), D the drift bound and k the
public cap on the rows of other records removed per release. Adaptive composition of Gaussian mechanisms (Dong,
Roth & Su 2019, Cor. 3.3) makes the whole sequence μ-GDP with μ² = max_τ Σ_nodes s[a, b]²/σ², and σ is chosen
so that μ-GDP is (ε, δ)-DP by Balle & Wang's exact conversion (:func:`~lethe.privacy.gaussian.analytic_gaussian_sigma`
at sensitivity √(max_τ Σ s²)). The maximum over τ is exact (computed per level with prefix sums).

Premises (published, checked): others ≥ ``n_floor`` rows at every release; λ_max of the held rows' Gram matrix
≤ ``gram_cap`` at ``fit`` (:func:`lethe.privacy.drift.check_gram_cap`); at most ``rows_per_release`` rows of other
records removed per release (given the release schedule, as for fresh noise: docs/release_privacy.md §3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lethe._validation import (
    check_nonnegative,
    check_nonnegative_int,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from lethe.certified.bounds import release_sensitivity
from lethe.privacy.drift import centre_error, drift_bound
from lethe.privacy.gaussian import analytic_gaussian_epsilon, analytic_gaussian_sigma
from lethe.privacy.mechanisms import OSRandomSource

__all__ = [
    "TreeRelease",
    "TreeReleaseAccountant",
    "honaker_level_variances",
    "prefix_blocks",
    "tree_squared_sensitivity",
]


def prefix_blocks(t: int) -> list[tuple[int, int, int]]:
    """The dyadic blocks (level, start, end) that partition [0, t], largest first (the set bits of t + 1).

    Examples
    --------
    >>> prefix_blocks(5)
    [(2, 0, 3), (1, 4, 5)]
    """
    t = check_nonnegative_int("t", t)
    out, start, n = [], 0, t + 1
    for level in range(n.bit_length() - 1, -1, -1):
        if n >> level & 1:
            out.append((level, start, start + (1 << level) - 1))
            start += 1 << level
    return out


def honaker_level_variances(horizon: int, sigma: float) -> np.ndarray:
    """v_ℓ for ℓ = 0 … ⌊log₂ T⌋: the variance of a level-ℓ node's refined estimate (v_0 = σ²).

    Examples
    --------
    >>> [round(float(v), 6) for v in honaker_level_variances(4, 1.0)]
    [1.0, 0.666667, 0.571429]
    """
    T = check_positive_int("horizon", horizon)
    s2 = check_positive("sigma", sigma) ** 2
    v = [s2]
    for _ in range(T.bit_length() - 1):
        v.append(1.0 / (1.0 / s2 + 1.0 / (2.0 * v[-1])))
    return np.asarray(v)


def tree_squared_sensitivity(horizon: int, rows_per_release: int, lam: float, n_floor: int, gram_cap: float,
                             residual: float, **loss: Any) -> float:
    """max over the target's deletion time τ ∈ {1, …, T} of Σ_nodes s[a, b]² (module docstring; τ = T: held).

    ``loss`` passes the loss constants to :func:`~lethe.privacy.drift.drift_bound` (logistic by default).
    """
    T = check_positive_int("horizon", horizon)
    k = check_nonnegative_int("rows_per_release", rows_per_release)
    m = check_positive_int("n_floor", n_floor)
    beta = check_nonnegative("residual", residual)
    keys = {key: loss[key] for key in ("grad_bound", "row_norm", "loss_at_zero") if key in loss}
    delta_ = release_sensitivity(lam, m, beta, grad_bound=keys.get("grad_bound", 1.0),
                                 row_norm=keys.get("row_norm", 1.0 + 1e-9),
                                 loss_at_zero=keys.get("loss_at_zero", math.log(2.0)))
    e = centre_error(lam, m, beta)
    taus = np.arange(1, T + 1)
    total = np.zeros(T)
    for level in range(T.bit_length()):
        width = 1 << level
        nb = T // width  # complete blocks at this level
        if nb == 0:
            continue
        js = np.arange(nb)
        held = np.empty(nb)
        held[0] = delta_
        if nb > 1:
            drift = drift_bound(k * width, lam, m, gram_cap, **loss) + 4.0 * e
            held[1:] = min(2.0 * delta_, drift)
        straddle = np.where(js == 0, 2.0 * e, delta_ + 2.0 * e)
        cum_held = np.concatenate(([0.0], np.cumsum(held**2)))
        J = taus >> level  # the block holding τ
        inside = J < nb
        Jc = np.minimum(J, nb)
        lvl = cum_held[Jc]
        lvl = lvl + np.where(inside, straddle[np.minimum(J, nb - 1)] ** 2, 0.0)
        lvl = lvl + np.where(inside, (nb - J - 1) * (4.0 * e) ** 2, 0.0)
        total += lvl
    return float(total.max())


@dataclass(frozen=True)
class TreeReleaseAccountant:
    """σ of every tree node for T releases at (ε, δ) for the whole sequence, and what a release's noise is.

    Attributes
    ----------
    epsilon, delta : float
        The target of the whole sequence (μ-GDP converted exactly, Balle & Wang).
    horizon : int
        T releases (release 0 after ``fit`` included).
    rows_per_release : int
        k, the public cap on rows of other records removed per release.
    lam, n_floor, gram_cap, residual : float, int, float, float
        λ, m, Λ and β of :mod:`lethe.privacy.drift`.
    """

    epsilon: float
    delta: float
    horizon: int
    rows_per_release: int
    lam: float
    n_floor: int
    gram_cap: float
    residual: float
    squared_sensitivity: float = field(init=False)
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_open_unit("delta", self.delta)
        s2 = tree_squared_sensitivity(self.horizon, self.rows_per_release, self.lam, self.n_floor, self.gram_cap,
                                      self.residual)
        object.__setattr__(self, "squared_sensitivity", s2)
        object.__setattr__(self, "sigma", analytic_gaussian_sigma(self.epsilon, self.delta, math.sqrt(s2)))

    @property
    def mu(self) -> float:
        """μ of the whole sequence: √(max_τ Σ s²)/σ."""
        return math.sqrt(self.squared_sensitivity) / self.sigma

    def epsilon_at(self, delta: float) -> float:
        """The whole sequence's ε at δ (≤ ``epsilon`` at ``delta``)."""
        return analytic_gaussian_epsilon(delta, self.sigma, math.sqrt(self.squared_sensitivity))

    def release_std(self, t: int) -> float:
        """Per-coordinate standard deviation of release t's noise (Honaker's refined estimate)."""
        v = honaker_level_variances(self.horizon, self.sigma)
        if not 0 <= t < self.horizon:
            raise ValueError(f"t must be in [0, horizon) = [0, {self.horizon}), got {t!r}")
        return math.sqrt(sum(v[level] for level, _, _ in prefix_blocks(t)))

    def release_stds(self) -> np.ndarray:
        """``release_std(t)`` for every t < T."""
        v = honaker_level_variances(self.horizon, self.sigma)
        return np.asarray([math.sqrt(sum(v[lv] for lv, _, _ in prefix_blocks(t))) for t in range(self.horizon)])

    def fresh_sigma(self) -> float:
        """Today's fresh-noise σ = √T σ_BW(ε, δ) Δ at the same (ε, δ, T, m, β), for comparison."""
        d = release_sensitivity(self.lam, self.n_floor, self.residual, loss_at_zero=math.log(2.0))
        return math.sqrt(self.horizon) * analytic_gaussian_sigma(self.epsilon, self.delta, d)


class TreeRelease:
    """The mechanism: feed the centres c_0, c_1, … (``publish``), get the released vectors.

    Parameters
    ----------
    accountant : TreeReleaseAccountant
        Its σ and horizon.
    random_state : None or int or numpy Generator
        None (default): the operating system's CSPRNG (:class:`~lethe.privacy.mechanisms.OSRandomSource`).
        Anything else makes the stream reproducible and NOT private (``private`` is False).

    The true centres are kept only while a future node still needs them (c_{a−1} for a node starting at a).
    """

    def __init__(self, accountant: TreeReleaseAccountant, random_state: Any = None) -> None:
        self.accountant = accountant
        self.private = random_state is None
        self._rng: Any = OSRandomSource() if random_state is None else np.random.default_rng(random_state)
        self._t = 0
        self._centres: dict[int, np.ndarray] = {}
        self._refined: dict[tuple[int, int], np.ndarray] = {}
        self._v = honaker_level_variances(accountant.horizon, accountant.sigma)

    @property
    def releases(self) -> int:
        """Releases published so far."""
        return self._t

    def publish(self, centre: Any) -> np.ndarray:
        """Publish the next release for the centre c_t; returns the released vector (c_t plus tree noise).

        Raises
        ------
        ValueError
            Past the horizon, or a centre of another shape than the first (nothing changes).
        """
        c = np.array(centre, dtype=np.float64, copy=True).ravel()
        t = self._t
        if t >= self.accountant.horizon:
            raise ValueError(f"releases must be <= horizon = {self.accountant.horizon}; this would be release {t}")
        if t and c.shape != next(iter(self._refined.values())).shape:
            raise ValueError(f"centre must have shape {next(iter(self._refined.values())).shape}, got {c.shape}")
        if not np.all(np.isfinite(c)):
            raise ValueError("centre must be finite")
        sigma, s2 = self.accountant.sigma, self.accountant.sigma**2
        new: dict[tuple[int, int], np.ndarray] = {}
        for level in range((t + 1).bit_length()):
            width = 1 << level
            if (t + 1) % width:
                break
            j = (t + 1) // width - 1
            start = j * width
            prev = self._centres.get(start - 1) if start else np.zeros_like(c)
            assert prev is not None
            noisy = c - prev + sigma * np.asarray(self._rng.standard_normal(c.shape))
            if level == 0:
                new[(0, j)] = noisy
            else:
                kids = new[(level - 1, 2 * j)] if (level - 1, 2 * j) in new else self._refined[(level - 1, 2 * j)]
                kid2 = new[(level - 1, 2 * j + 1)]
                vk = 2.0 * self._v[level - 1]
                new[(level, j)] = (noisy / s2 + (kids + kid2) / vk) / (1.0 / s2 + 1.0 / vk)
        self._refined.update(new)
        self._centres[t] = c
        self._t = t + 1
        # forget centres and refined nodes no future node or release needs
        for i in list(self._centres):
            nu = ((i + 1) & -(i + 1)).bit_length() - 1  # 2^ν ‖ i + 1: the largest node starting at i + 1
            if i + (1 << nu) < self._t:
                del self._centres[i]
        return sum((self._refined[(lv, a >> lv)] for lv, a, _ in prefix_blocks(t)), np.zeros_like(c))
