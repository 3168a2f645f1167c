"""Tree-aggregated release noise for :class:`~lethe.release.ReleasedLogisticRegression` (issue 39): the stream's
ledger (:class:`TreeStreamAccountant`), its certificate (:class:`TreeReleaseCertificate`) and the choice between
fresh noise and the tree from public parameters only (:func:`stream_accountant`).

The mechanism and its proof are :mod:`lethe.privacy.tree` and :mod:`lethe.privacy.drift` (docs/release_drift.md):
release 0 is c_0 + N(0, σ₀²I), and every dyadic block of increments of the centre is published once with fresh
N(0, σ²I) noise; release t is release 0 plus Honaker's refined estimates of the blocks partitioning increments
1 … t. The whole sequence of T releases is μ-GDP with μ = 1/σ_BW(ε, δ) — (ε, δ)-DP by Balle & Wang's exact
conversion — under three published premises: the others number at least ``n_floor`` at every release (as for
fresh noise), the held rows' Gram matrix has λ_max ≤ ``gram_cap`` (checked at ``fit``: removals only shrink it),
and at most ``rows_per_release`` rows are removed between two releases (enforced by ``remove``).

**Spent so far.** The first k releases publish release 0 and the nodes complete within increments 1 … k − 1: the
tree of horizon k with the same (σ₀, σ). Their μ is μ_k = √(Δ²/σ₀² + S_k²/σ²) with S_k² the maximum over the
target's deletion time of the node sensitivities published so far (:func:`lethe.privacy.tree.tree_squared_sensitivity`
at horizon k), and ε spent at δ is Balle & Wang's ε of μ_k-GDP. μ_T = μ.

**The choice** (``noise_mechanism="auto"``) compares the worst release's noise standard deviation of the two
accountants at the configured horizon — fresh σ = √T σ_BW(ε, δ) Δ against max_t of the tree's σ₀² + Σ v_ℓ — both
functions of (ε, δ, T, λ, n_floor, β_cap, gram_cap, rows_per_release) alone: the choice is a function of the
published parameters, never of the data beyond them, so the guarantee of the chosen mechanism holds as stated.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lethe._validation import check_nonnegative_int
from lethe.privacy.gaussian import analytic_gaussian_epsilon
from lethe.privacy.release import HorizonLedger, ReleaseAccountant, ReleaseCertificate
from lethe.privacy.tree import TreeReleaseAccountant, tree_squared_sensitivity

__all__ = ["NOISE_MECHANISMS", "TREE_ARRAYS", "TREE_GUARANTEE", "TREE_THEOREMS", "TreeReleaseCertificate",
           "TreeStreamAccountant", "accountant_from_dict", "certificate_from_dict", "restore_tree", "stream_accountant",
           "row_count_gram_cap", "tree_certificate_fields"]

#: The values of ``noise_mechanism``.
NOISE_MECHANISMS = ("fresh", "tree", "auto")

TREE_GUARANTEE = ("(epsilon, delta)-differential privacy of the whole sequence of releases with respect to adding or "
                  "removing any one record (tree-aggregated Gaussian noise over the removal stream with Honaker's "
                  "refinement, exact mu-GDP accounting and the proven drift bound; docs/release_drift.md), given the "
                  "release schedule (the releases' times and count are published and are not covered: see "
                  "schedule_reveals) and the published premises n_floor, gram_cap and rows_per_release")

TREE_THEOREMS = (
    "sensitivity of the unperturbed regularised minimiser (docs/release_privacy.md §2; "
    "lethe.certified.bounds.release_sensitivity)",
    "drift bound on the target's influence over K removed rows under the Gram cap (docs/release_drift.md §2; "
    "lethe.privacy.drift.drift_bound)",
    "tree aggregation with Honaker's refinement (TPDP workshop, 2015); each node a Gaussian mechanism (Dwork et al. "
    "2010; Chan et al. 2011; lethe.privacy.tree)",
    "adaptive composition of Gaussian mechanisms into mu-GDP, mu^2 = Delta^2/sigma_0^2 + max_tau sum s^2/sigma^2 "
    "(Dong, Roth & Su 2019, Cor. 3.3); (epsilon, delta) by Balle & Wang 2018, Thm 8",
    "post-processing (releases and predictions are functions of the noisy nodes)",
)


@dataclass(frozen=True)
class TreeReleaseCertificate(ReleaseCertificate):
    """The certificate of a release of a tree stream: the fields of
    :class:`~lethe.privacy.release.ReleaseCertificate` (``sigma`` is THIS release's noise standard deviation per
    coordinate, ``noise_multiplier`` = sigma / sensitivity) and the tree's own figures and premises."""

    theorems: tuple[str, ...] = TREE_THEOREMS
    #: "tree" (fresh-noise certificates are plain ReleaseCertificates)
    mechanism: str = "tree"
    #: μ of the whole horizon's μ-GDP (= 1/σ_BW(ε, δ)) and of the releases so far
    mu: float = 0.0
    mu_spent: float = 0.0
    #: σ₀ of release 0 and σ of every tree node; the largest release standard deviation over the horizon
    sigma_first: float = 0.0
    sigma_node: float = 0.0
    worst_release_std: float = 0.0
    #: the premises: the public cap on λ_max of the held rows' Gram matrix (checked at fit), and on rows removed
    #: between two releases (enforced by remove)
    gram_cap: float | None = 0.0
    rows_per_release: int = 0


def certificate_from_dict(data: Mapping[str, Any]) -> ReleaseCertificate:
    """A certificate from its :meth:`~lethe.privacy.release.ReleaseCertificate.to_dict` (a tree certificate when
    it names ``mechanism: "tree"``)."""
    c = dict(data)
    c["theorems"] = tuple(c["theorems"])
    if c.get("mechanism") == "tree":
        return TreeReleaseCertificate(**c)
    if "mechanism" in c:
        raise ValueError(f"a release certificate's mechanism must be 'tree' or absent. Found {c['mechanism']!r}.")
    return ReleaseCertificate(**c)


@functools.lru_cache(maxsize=64)
def _tree(epsilon: float, delta: float, horizon: int, rows_per_release: int, lam: float, n_floor: int,
          gram_cap: float | None, residual_cap: float) -> tuple[TreeReleaseAccountant, float]:
    acc = TreeReleaseAccountant(epsilon, delta, horizon, rows_per_release, lam, n_floor, gram_cap, residual_cap)
    return acc, float(acc.release_stds().max())


@functools.lru_cache(maxsize=4096)
def _prefix_s2(k: int, rows_per_release: int, lam: float, n_floor: int, gram_cap: float | None,
               residual_cap: float) -> float:
    return tree_squared_sensitivity(k, rows_per_release, lam, n_floor, gram_cap, residual_cap)


@dataclass(frozen=True)
class TreeStreamAccountant(HorizonLedger):
    """The ledger of a tree stream, with the interface of :class:`~lethe.privacy.release.ReleaseAccountant`
    (``record``, ``remaining``, ``epsilon_spent``, ``sigma``, ``to_dict``/``from_dict``).

    Immutable; every figure is recomputed from the public parameters (nothing noise-related is stored, so a stored
    ledger cannot carry too little noise), and ``sensitivity`` must be the Δ those parameters give.
    ``sigma`` is the worst release's noise standard deviation over the horizon (each release's is
    :meth:`release_std`).
    """

    epsilon: float
    delta: float
    horizon: int
    sensitivity: float
    rows_per_release: int
    lam: float
    n_floor: int
    gram_cap: float | None
    residual_cap: float
    releases: int = 0
    mechanism: str = "tree"

    def __post_init__(self) -> None:
        if self.mechanism != "tree":
            raise ValueError(f"mechanism must be 'tree'. Found {self.mechanism!r}.")
        k = check_nonnegative_int("releases", self.releases)
        if k > self.horizon:
            raise ValueError(f"releases must be <= horizon ({self.horizon}). Found {k}.")
        tree, worst = _tree(float(self.epsilon), float(self.delta), int(self.horizon), int(self.rows_per_release),
                            float(self.lam), int(self.n_floor), _cap(self.gram_cap), float(self.residual_cap))
        if self.sensitivity != tree.sensitivity:
            raise ValueError(f"sensitivity {self.sensitivity!r} is not the one the parameters give "
                             f"({tree.sensitivity!r}).")
        if tree.epsilon_at(self.delta) > self.epsilon * (1.0 + 1e-9):  # by construction; checked, not assumed
            raise ValueError(f"the tree's noise gives epsilon {tree.epsilon_at(self.delta)!r} > {self.epsilon!r}.")
        object.__setattr__(self, "_acc", tree)
        object.__setattr__(self, "_worst", worst)

    @classmethod
    def calibrated(cls, epsilon: float, delta: float, horizon: int, rows_per_release: int, lam: float,
                   n_floor: int, gram_cap: float | None, residual_cap: float) -> TreeStreamAccountant:
        """A fresh ledger (its Δ from the parameters)."""
        tree, _ = _tree(float(epsilon), float(delta), int(horizon), int(rows_per_release), float(lam),
                        int(n_floor), _cap(gram_cap), float(residual_cap))
        return cls(float(epsilon), float(delta), int(horizon), tree.sensitivity, int(rows_per_release), float(lam),
                   int(n_floor), _cap(gram_cap), float(residual_cap))

    @property
    def tree(self) -> TreeReleaseAccountant:
        """The mechanism's accountant (σ₀, σ, μ, per-release standard deviations)."""
        return self._acc  # type: ignore[attr-defined,no-any-return]

    @property
    def sigma(self) -> float:
        """The largest release noise standard deviation per coordinate over the horizon."""
        return self._worst  # type: ignore[attr-defined,no-any-return]

    @property
    def mu(self) -> float:
        """μ of the whole horizon."""
        return self.tree.mu

    def mu_spent(self, releases: int | None = None) -> float:
        """μ_k of the first k releases (module docstring; k = ``releases`` so far by default); 0 for k = 0."""
        k = self.releases if releases is None else check_nonnegative_int("releases", releases)
        if k > self.horizon:
            raise ValueError(f"releases must be <= horizon ({self.horizon}). Found {k}.")
        if k == 0:
            return 0.0
        if k == self.horizon:
            return self.mu
        s2 = _prefix_s2(k, int(self.rows_per_release), float(self.lam), int(self.n_floor), _cap(self.gram_cap),
                        float(self.residual_cap))
        t = self.tree
        return math.sqrt(t.sensitivity**2 / t.sigma_first**2 + s2 / t.sigma**2)

    def epsilon_spent(self) -> float:
        """ε spent at ``delta`` by the releases so far (Balle & Wang's ε of μ_k-GDP); 0 before any release."""
        mu = self.mu_spent()
        return 0.0 if mu == 0.0 else analytic_gaussian_epsilon(self.delta, 1.0, mu)

    def release_std(self, t: int) -> float:
        """Noise standard deviation per coordinate of release t."""
        return self.tree.release_std(t)


def accountant_from_dict(data: Mapping[str, Any]) -> ReleaseAccountant | TreeStreamAccountant:
    """The ledger stored by ``to_dict``: a tree stream's when it names ``mechanism: "tree"``, else fresh noise's."""
    if isinstance(data, Mapping) and data.get("mechanism") == "tree":
        return TreeStreamAccountant.from_dict(data)
    return ReleaseAccountant.from_dict(data)


def _cap(gram_cap: Any) -> float | None:
    """The Gram cap as a float, or None (no Gram premise)."""
    return None if gram_cap is None else float(gram_cap)


def check_noise_params(noise_mechanism: Any, gram_cap: Any, rows_per_release: Any) -> None:
    """``ValueError`` naming the parameter, the rule and the value."""
    if noise_mechanism not in NOISE_MECHANISMS:
        raise ValueError(f"noise_mechanism must be one of {NOISE_MECHANISMS}. Found {noise_mechanism!r}.")
    if gram_cap is not None and (isinstance(gram_cap, bool) or not isinstance(gram_cap, int | float)
                                 or not (math.isfinite(gram_cap) and gram_cap > 0)):
        raise ValueError(f"gram_cap must be None or a finite number > 0. Found {gram_cap!r}.")
    if rows_per_release is not None and (isinstance(rows_per_release, bool)
                                         or not isinstance(rows_per_release, int | np.integer)
                                         or rows_per_release < 1):
        raise ValueError(f"rows_per_release must be None or an integer >= 1. Found {rows_per_release!r}.")


def stream_accountant(noise_mechanism: str, *, epsilon: float, delta: float, horizon: int, sensitivity: float,
                      lam: float, n_floor: int, residual_cap: float, gram_cap: float | None,
                      rows_per_release: int) -> ReleaseAccountant | TreeStreamAccountant:
    """The ledger of a new stream: fresh noise's, the tree's, or (``"auto"``) whichever gives the smaller worst
    release noise standard deviation at the horizon — public parameters only (module docstring). Without a
    ``gram_cap`` the tree's drift bound is its self-concordance form alone (:func:`lethe.privacy.drift.drift_bound`,
    step (iii′)): no Gram premise."""
    check_noise_params(noise_mechanism, gram_cap, rows_per_release)
    fresh = ReleaseAccountant.calibrated(epsilon, delta, horizon, sensitivity)
    if noise_mechanism == "fresh":
        return fresh
    tree = TreeStreamAccountant.calibrated(epsilon, delta, horizon, int(rows_per_release), lam, n_floor,
                                           _cap(gram_cap), residual_cap)
    if tree.sensitivity != sensitivity:
        raise ValueError(f"the tree's sensitivity {tree.sensitivity!r} differs from the stream's {sensitivity!r}.")
    if noise_mechanism == "tree" or tree.sigma < fresh.sigma:
        return tree
    return fresh


def tree_certificate_fields(acc: TreeStreamAccountant, version: int) -> dict[str, Any]:
    """The tree's figures and premises a certificate of release ``version`` states (the service's certificates
    and summaries; the library's :class:`TreeReleaseCertificate` carries the same): this release's noise std
    (``sigma``), μ of the horizon and of the releases so far, σ₀, the node σ, the worst release's std, the
    premises."""
    t = acc.tree
    return {"noise_mechanism": "tree", "sigma": acc.release_std(version), "mu": acc.mu,
            "mu_spent": acc.mu_spent(), "sigma_first": t.sigma_first, "sigma_node": t.sigma,
            "worst_release_std": acc.sigma, "gram_cap": _cap(acc.gram_cap),
            "rows_per_release": int(acc.rows_per_release), "guarantee": TREE_GUARANTEE}


def restore_tree(acc: TreeStreamAccountant, arrays: Mapping[str, Any], meta: Any) -> Any:
    """The stream's :class:`~lethe.privacy.tree.TreeRelease` from a stored state (checked; later releases draw
    the operating system's CSPRNG)."""
    from lethe.privacy.tree import TreeRelease

    if not isinstance(meta, Mapping):
        raise ValueError("a tree stream's state must hold the tree's record.")
    return TreeRelease.from_state(acc.tree, dict(arrays), dict(meta))


TREE_ARRAYS = ("tree_first", "tree_nodes", "tree_centres")


def row_count_gram_cap(n_floor: int) -> float:
    """A Gram cap that holds for EVERY data set whose ``auto_n_floor`` is ``n_floor``, so it is as public as
    ``n_floor``: rows of norm ≤ ρ = 1 + 1e-9 give λ_max(XᵀX) ≤ tr(XᵀX) = Σ‖xᵢ‖² ≤ n ρ², and
    :func:`~lethe.privacy.release.auto_n_floor` (n) = m implies n ≤ 1.2 m + 2 (its 4 significant bits of 15n/16:
    15n/16 < 9m/8 + 1). Loose — the tree rarely beats fresh noise with it — but never a premise that can fail.

    Examples
    --------
    >>> from lethe.privacy.release import auto_n_floor
    >>> all(row_count_gram_cap(auto_n_floor(n)) >= n for n in range(1, 5000))
    True
    """
    m = check_nonnegative_int("n_floor", n_floor)
    return (1.2 * m + 2.0) * (1.0 + 3e-9)
