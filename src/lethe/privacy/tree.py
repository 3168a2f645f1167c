"""Tree aggregation over the removal stream: correlated release noise with an exact μ-GDP accountant (issue 39).

Opt-in; nothing in lethe uses it by default (``ReleasedLogisticRegression`` keeps fresh noise per release).

**Mechanism.** Releases t = 0, …, T−1 publish noisy versions of the centres c_t (c_0 after ``fit``, c_t after the
t-th batch of removals; each c_t any point with gradient residual ≤ β, :mod:`lethe.privacy.drift`). Release 0 is
c_0 + N(0, σ₀²I). The leaves of a binary tree are the increments c_i − c_{i−1}, i = 1 … T−1; every dyadic block of
increments a … b is a node, published once, at release b, as c_b − c_{a−1} + N(0, σ²I) with fresh noise (Dwork et al.
2010; Chan et al. 2011). Honaker's refinement (TPDP workshop, 2015): each node's estimate is refined with its two
children's (inverse-variance weights; v_0 = σ², v_ℓ = 1/(1/σ² + 1/(2v_{ℓ−1}))), and release t is release 0 plus
the refined estimates of the dyadic blocks that partition the increments 1 … t: an unbiased estimate of c_t whose
noise is Gaussian, of variance σ₀² + Σ v_ℓ per coordinate. Everything after the noisy values is post-processing.

**Privacy.** Two worlds differ in the presence of one target record z (held from ``fit``, possibly deleted in
the batch of release τ; τ = T: held throughout). Release 0 and the nodes are Gaussian mechanisms, released
adaptively; for every pair of hidden histories their two means differ by at most (:mod:`lethe.privacy.drift`,
corollary): Δ for release 0; for the node of increments a … b,

* τ > b (held at a − 1 and b): min(2Δ, D(k(b − a + 1)) + 4e);
* a ≤ τ ≤ b (the target's deletion inside): Δ + 2e;   τ < a: 4e;

with Δ = :func:`~lethe.certified.bounds.release_sensitivity` (residual β), e = β/(λm), D the drift bound and k the
public cap on the rows of other records removed per release. Adaptive composition of Gaussian mechanisms (Dong,
Roth & Su 2019, Cor. 3.3) makes the whole sequence μ-GDP with μ² = Δ²/σ₀² + max_τ Σ_nodes s²/σ², and (σ₀, σ) are
chosen so that μ = 1/σ_BW(ε, δ), the μ-GDP that Balle & Wang's exact conversion makes (ε, δ)-DP
(:func:`~lethe.privacy.gaussian.analytic_gaussian_sigma`). The maximum over τ is exact (per level, closed form).

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


def tree_squared_sensitivity(horizon: int, rows_per_release: int, lam: float, n_floor: int, gram_cap: float | None,
                             residual: float, **loss: Any) -> float:
    """max over the target's deletion time τ ∈ {1, …, T} of Σ_nodes s[a, b]² over the increments' tree.

    The tree's leaves are the T − 1 increments c_i − c_{i−1}, i = 1 … T−1; the node of increments a … b publishes
    c_b − c_{a−1}, whose sensitivity is (module docstring) min(2Δ, D(k(b − a + 1)) + 4e) if the target is held at
    b (τ > b), Δ + 2e if its deletion falls in the block (a ≤ τ ≤ b), 4e after (τ < a); τ = T: held throughout.
    The first release c_0 (sensitivity Δ) is not part of it. ``loss`` passes the loss constants to
    :func:`~lethe.privacy.drift.drift_bound` (logistic by default); 0 for T = 1.
    """
    T = check_positive_int("horizon", horizon)
    k = check_nonnegative_int("rows_per_release", rows_per_release)
    m = check_positive_int("n_floor", n_floor)
    beta = check_nonnegative("residual", residual)
    delta_ = _sensitivity(lam, m, beta, loss)
    e = centre_error(lam, m, beta)
    leaves = T - 1
    taus = np.arange(1, T + 1)  # deletion in increment τ (τ = T: never)
    total = np.zeros(T)
    for level in range(max(leaves, 1).bit_length()):
        width = 1 << level
        nb = leaves // width  # complete blocks of increments [1 + j·width, (j + 1)·width]
        if nb == 0:
            continue
        held = min(2.0 * delta_, drift_bound(k * width, lam, m, gram_cap, **loss) + 4.0 * e)
        J = (taus - 1) >> level  # the block holding increment τ
        inside = J < nb
        Jc = np.minimum(J, nb)
        lvl = Jc * held**2
        lvl = lvl + np.where(inside, (delta_ + 2.0 * e) ** 2 + (nb - J - 1) * (4.0 * e) ** 2, 0.0)
        total += lvl
    return float(total.max())


def _sensitivity(lam: float, m: int, beta: float, loss: dict[str, Any]) -> float:
    return release_sensitivity(lam, m, beta, grad_bound=loss.get("grad_bound", 1.0),
                               row_norm=loss.get("row_norm", 1.0 + 1e-9),
                               loss_at_zero=loss.get("loss_at_zero", _LOG2_UP))


#: log 2 rounded up (the logistic loss at margin 0), as the released estimator's Δ uses it
_LOG2_UP = math.log(2.0) * (1.0 + 1e-15)


def _worst_level_weight(leaves: int) -> float:
    """max over t of Σ_{blocks of [0, t−1]} v_ℓ/σ² (Honaker), 0 without leaves."""
    if leaves == 0:
        return 0.0
    v = honaker_level_variances(leaves, 1.0)
    return max(sum(float(v[lv]) for lv, _, _ in prefix_blocks(t)) for t in range(leaves))


@dataclass(frozen=True)
class TreeReleaseAccountant:
    """The noise of the first release and of every tree node, for T releases at (ε, δ) for the whole sequence.

    The whole sequence is μ-GDP with μ² = Δ²/σ₀² + S²/σ², S² = :func:`tree_squared_sensitivity`, and μ is the
    largest that Balle & Wang's exact conversion makes (ε, δ)-DP (μ = 1/σ_BW(ε, δ)). Among the (σ₀, σ) on that
    curve it takes the pair minimising the worst release's variance σ₀² + h σ² (h = the worst Honaker weight):
    σ₀² = Δ(Δ + S√h)/μ², σ² = (S/√h)(Δ + S√h)/μ², worst variance (Δ + S√h)²/μ².

    Attributes
    ----------
    epsilon, delta : float
        The target of the whole sequence.
    horizon : int
        T releases (release 0 after ``fit`` included).
    rows_per_release : int
        k, the public cap on rows of other records removed per release.
    lam, n_floor, gram_cap, residual : float, int, float or None, float
        λ, m, Λ and β of :mod:`lethe.privacy.drift` (``gram_cap=None``: no Gram premise, the drift bound's
        self-concordance form alone).
    """

    epsilon: float
    delta: float
    horizon: int
    rows_per_release: int
    lam: float
    n_floor: int
    gram_cap: float | None
    residual: float
    sensitivity: float = field(init=False)
    squared_sensitivity: float = field(init=False)
    sigma_first: float = field(init=False)
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_open_unit("delta", self.delta)
        s2 = tree_squared_sensitivity(self.horizon, self.rows_per_release, self.lam, self.n_floor, self.gram_cap,
                                      self.residual)
        d = _sensitivity(self.lam, self.n_floor, self.residual, {})
        mu = 1.0 / analytic_gaussian_sigma(self.epsilon, self.delta, 1.0)
        h = _worst_level_weight(self.horizon - 1)
        S = math.sqrt(s2)
        total = d + S * math.sqrt(h)
        sigma_first = math.sqrt(d * total) / mu
        sigma = math.sqrt(S / math.sqrt(h) * total) / mu if s2 > 0 else 1.0
        object.__setattr__(self, "sensitivity", d)
        object.__setattr__(self, "squared_sensitivity", s2)
        object.__setattr__(self, "sigma_first", sigma_first)
        object.__setattr__(self, "sigma", sigma)

    @property
    def mu(self) -> float:
        """μ of the whole sequence: √(Δ²/σ₀² + S²/σ²)."""
        return math.sqrt(self.sensitivity**2 / self.sigma_first**2 + self.squared_sensitivity / self.sigma**2)

    def epsilon_at(self, delta: float) -> float:
        """The whole sequence's ε at δ (≤ ``epsilon`` at ``delta``)."""
        return analytic_gaussian_epsilon(delta, 1.0, self.mu)

    def release_std(self, t: int) -> float:
        """Per-coordinate standard deviation of release t's noise (σ₀² plus Honaker's refined prefix of t leaves)."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.horizon:
            raise ValueError(f"t must be an integer in [0, horizon) = [0, {self.horizon}), got {t!r}")
        if t == 0:
            return self.sigma_first
        v = honaker_level_variances(self.horizon - 1, self.sigma)
        return math.sqrt(self.sigma_first**2 + sum(float(v[lv]) for lv, _, _ in prefix_blocks(int(t) - 1)))

    def release_stds(self) -> np.ndarray:
        """``release_std(t)`` for every t < T."""
        return np.asarray([self.release_std(t) for t in range(self.horizon)])

    def fresh_sigma(self) -> float:
        """Today's fresh-noise σ = √T σ_BW(ε, δ) Δ at the same (ε, δ, T, m, β), for comparison."""
        return math.sqrt(self.horizon) * analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)


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
        self._v = honaker_level_variances(max(accountant.horizon - 1, 1), accountant.sigma)
        self._first = np.zeros(0)

    @property
    def releases(self) -> int:
        """Releases published so far."""
        return self._t

    def publish(self, centre: Any) -> np.ndarray:
        """Publish the next release for the centre c_t; returns the released vector (c_t plus the noise).

        Release 0 is c_0 + N(0, σ₀²I); release t ≥ 1 adds Honaker's estimate of c_t − c_0 from the tree nodes.

        Raises
        ------
        ValueError
            Past the horizon, or a centre of another shape than the first, or not finite (nothing changes).
        """
        c = np.array(centre, dtype=np.float64, copy=True).ravel()
        t = self._t
        if t >= self.accountant.horizon:
            raise ValueError(f"releases must be <= horizon = {self.accountant.horizon}; this would be release {t}")
        if t and c.shape != self._first.shape:
            raise ValueError(f"centre must have shape {self._first.shape}, got {c.shape}")
        if not np.all(np.isfinite(c)):
            raise ValueError("centre must be finite")
        if t == 0:
            self._first = c + self.accountant.sigma_first * np.asarray(self._rng.standard_normal(c.shape))
            self._centres[0] = c
            self._t = 1
            return self._first.copy()
        sigma, s2 = self.accountant.sigma, self.accountant.sigma**2
        leaf = t - 1  # leaf i is the increment c_{i+1} − c_i
        new: dict[tuple[int, int], np.ndarray] = {}
        for level in range((leaf + 1).bit_length()):
            width = 1 << level
            if (leaf + 1) % width:
                break
            j = (leaf + 1) // width - 1
            prev = self._centres[j * width]  # c_{a−1} for the node of increments a = j·width + 1 … t
            noisy = c - prev + sigma * np.asarray(self._rng.standard_normal(c.shape))
            if level == 0:
                new[(0, j)] = noisy
            else:
                left = self._refined[(level - 1, 2 * j)]
                right = new[(level - 1, 2 * j + 1)]
                vk = 2.0 * self._v[level - 1]
                new[(level, j)] = (noisy / s2 + (left + right) / vk) / (1.0 / s2 + 1.0 / vk)
        self._refined.update(new)
        self._centres[t] = c
        self._t = t + 1
        # forget the centres no future node needs: c_i starts nodes of increments i + 1 … i + 2^ν, 2^ν ‖ i
        for i in list(self._centres):
            nu = ((i & -i).bit_length() - 1) if i else 62
            if i + (1 << nu) < self._t:
                del self._centres[i]
        return self.released(t)

    def released(self, t: int) -> np.ndarray:
        """Release t recomputed from the noisy values held (release 0 plus the refined prefix of t increments):
        post-processing only, the same arithmetic as :meth:`publish` (used to check a stored stream)."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self._t:
            raise ValueError(f"t must be a published release in [0, {self._t}), got {t!r}")
        if t == 0:
            return self._first.copy()
        return self._first + sum((self._refined[(lv, a >> lv)] for lv, a, _ in prefix_blocks(int(t) - 1)),
                                 np.zeros_like(self._first))

    def copy(self) -> TreeRelease:
        """An independent copy of the stream's state sharing the noise source (a transaction publishes on the copy
        and keeps it only if the operation commits)."""
        out = object.__new__(TreeRelease)
        out.accountant, out.private, out._rng, out._t = self.accountant, self.private, self._rng, self._t
        out._centres = {k: v.copy() for k, v in self._centres.items()}
        out._refined = {k: v.copy() for k, v in self._refined.items()}
        out._v, out._first = self._v, self._first.copy()
        return out

    def to_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, meta) of the stream's state for a file: the noisy release 0, the refined nodes (noisy, public
        once their releases are) and the true centres later nodes still need (SECRET, like the model's centre)."""
        d = self._first.shape[0]
        nodes = sorted(self._refined)
        centres = sorted(self._centres)
        arrays = {"tree_first": self._first.copy(),
                  "tree_nodes": (np.vstack([self._refined[k] for k in nodes]) if nodes else np.zeros((0, d))),
                  "tree_centres": (np.vstack([self._centres[k] for k in centres]) if centres
                                   else np.zeros((0, d)))}
        return arrays, {"releases": self._t, "nodes": [list(k) for k in nodes], "centres": centres}

    @classmethod
    def from_state(cls, accountant: TreeReleaseAccountant, arrays: dict[str, Any], meta: dict[str, Any],
                   random_state: Any = None) -> TreeRelease:
        """Inverse of :meth:`to_state`, checked: the nodes and centres held are exactly those ``releases``
        publications leave, every vector finite and of one width (``ValueError`` naming the first that fails)."""
        out = cls(accountant, random_state=random_state)
        t = meta.get("releases")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t <= accountant.horizon:
            raise ValueError(f"the tree's releases must be an integer in [0, horizon = {accountant.horizon}]. "
                             f"Found {t!r}.")
        t = int(t)
        first = np.asarray(arrays["tree_first"], dtype=np.float64)
        nodes_a = np.asarray(arrays["tree_nodes"], dtype=np.float64)
        centres_a = np.asarray(arrays["tree_centres"], dtype=np.float64)
        d = first.shape[0] if first.ndim == 1 else -1
        if t == 0:
            if first.size or nodes_a.size or centres_a.size:
                raise ValueError("a tree with no release must hold no values.")
            return out
        if first.ndim != 1 or nodes_a.ndim != 2 or centres_a.ndim != 2 or (
                nodes_a.shape[0] and nodes_a.shape[1] != d) or (centres_a.shape[0] and centres_a.shape[1] != d):
            raise ValueError(f"the tree's arrays must be vectors of one width; found shapes {first.shape}, "
                             f"{nodes_a.shape}, {centres_a.shape}.")
        if not (np.all(np.isfinite(first)) and np.all(np.isfinite(nodes_a)) and np.all(np.isfinite(centres_a))):
            raise ValueError("the tree's values must be finite.")
        nodes = [tuple(int(v) for v in k) for k in meta.get("nodes", [])]
        centres = [int(v) for v in meta.get("centres", [])]
        if sorted(nodes) != sorted(_published_nodes(t)) or len(nodes) != nodes_a.shape[0]:
            raise ValueError(f"the tree's nodes are not those {t} releases publish.")
        if sorted(centres) != sorted(_kept_centres(t)) or len(centres) != centres_a.shape[0]:
            raise ValueError(f"the tree's centres are not those {t} releases keep.")
        out._t, out._first = t, first.copy()
        out._refined = {k: nodes_a[i].copy() for i, k in enumerate(nodes)}  # type: ignore[misc]
        out._centres = {k: centres_a[i].copy() for i, k in enumerate(centres)}
        return out


def _published_nodes(releases: int) -> list[tuple[int, int]]:
    """The (level, index) of the nodes published by ``releases`` releases (leaves: increments 1 … releases − 1)."""
    out = []
    for leaf in range(max(releases - 1, 0)):
        for level in range((leaf + 1).bit_length()):
            if (leaf + 1) % (1 << level):
                break
            out.append((level, (leaf + 1) // (1 << level) - 1))
    return out


def _kept_centres(releases: int) -> set[int]:
    """The centres c_i still needed after ``releases`` releases: c_i starts the nodes of increments
    i + 1 … i + 2^ν (2^ν the largest power of two dividing i; any for i = 0), needed until release i + 2^ν."""
    kept = set()
    for i in range(releases):
        nu = ((i & -i).bit_length() - 1) if i else 62
        if i + (1 << nu) >= releases:
            kept.add(i)
    return kept
