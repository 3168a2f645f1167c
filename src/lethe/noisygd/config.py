"""The hyperparameters of the Noisy-GD data curator (A, Ā) and the constants its certificates rely on:
:class:`CuratorConfig` (Chourasia & Shah 2023, Def. 5.1; Thm 5.1, 5.2, G.7, G.9). Used by
:class:`lethe.noisygd.edit_stream.NoisyGDCurator`, which re-exports it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lethe._validation import check_positive
from lethe.io import JsonRecord
from lethe.noisygd.schedule import (
    ConvexSchedule,
    NonConvexSchedule,
    nonconvex_eta_max,
)

__all__ = ["CuratorConfig"]


@dataclass(frozen=True)
class CuratorConfig(JsonRecord):
    """Hyperparameters of (A, Ā) and the constants their certificates rely on.

    Attributes
    ----------
    eta, sigma2, lam : float
        η, σ², λ.
    k_learn, k_unlearn : int
        K_A, K_Ā.
    init_std : float
        ρ = N(0, init_std² I_d).
    q : float
        Rényi order of the certificates.
    lipschitz : float
        L: ‖∇ℓ(θ; x)‖ ≤ L for every record of norm ≤ ``row_bound`` (or clipping to L when ``clip``).
    row_bound : float
        R: every record must have ‖x‖ ≤ R (checked on learn and on every edit).
    guarantee : {"convex", "lipschitz", "nonconvex"}
        ``"convex"``: Thm G.9 + G.15 (needs a convex model, β = ``smoothness``, η < 1/(λ+β) and
        init_std² = σ²/(λ(1 − ηλ/2))). ``"lipschitz"``: Thm G.7 only, deletion via
        :func:`~lethe.noisygd.guarantees.exposure_deletion_epsilon`. ``"nonconvex"``: Thm 5.2 (DP by G.7,
        deletion by G.22 + G.23 via :func:`~lethe.noisygd.schedule.nonconvex_deletion_epsilon`); needs a model
        whose loss is σ² log(B)/4-bounded, L-Lipschitz and β-smooth over all θ (checked against the model's
        proven constants), η ≤ λ/(64Bq²(β+λ)²), init_std² = σ²/λ and edits of at most ``max_edit_size``
        records.
    smoothness : float or None
        β (convex and nonconvex).
    B : float or None
        Thm 5.2's B > 1 (nonconvex only).
    max_edit_size : int or None
        r: the largest edit the nonconvex certificate covers; larger edits are rejected (nonconvex only).
    clip : bool
        Clip per-example gradients to L (Remark 5.3).
    p : int
        Default adaptivity for Thm 4.3.
    """

    eta: float
    sigma2: float
    lam: float
    k_learn: int
    k_unlearn: int
    init_std: float
    q: float
    lipschitz: float
    row_bound: float
    guarantee: str = "convex"
    smoothness: float | None = None
    clip: bool = False
    p: int = 0
    B: float | None = None
    max_edit_size: int | None = None

    def __post_init__(self) -> None:
        check_positive("eta", self.eta)
        check_positive("sigma2", self.sigma2)
        check_positive("lam", self.lam)
        check_positive("init_std", self.init_std)
        check_positive("lipschitz", self.lipschitz)
        check_positive("row_bound", self.row_bound)
        if self.q <= 1:
            raise ValueError(f"q must be > 1. Found {self.q}.")
        for name in ("k_learn", "k_unlearn", "p"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0. Found {v!r}.")
        if self.guarantee not in ("convex", "lipschitz", "nonconvex"):
            raise ValueError(f"guarantee must be 'convex', 'lipschitz' or 'nonconvex'. Found {self.guarantee!r}.")
        if self.guarantee == "nonconvex":
            if self.smoothness is None or self.B is None or self.max_edit_size is None:
                raise ValueError("guarantee='nonconvex' needs smoothness (β), B and max_edit_size. Found None.")
            if not self.B > 1.0:
                raise ValueError(f"guarantee='nonconvex' needs B > 1 (Thm 5.2). Found {self.B!r}.")
            if isinstance(self.max_edit_size, bool) or not isinstance(self.max_edit_size, int) or (
                    self.max_edit_size < 1):
                raise ValueError(f"max_edit_size must be an integer >= 1. Found {self.max_edit_size!r}.")
            eta_max = nonconvex_eta_max(lam=self.lam, B=self.B, q=self.q, smoothness=self.smoothness)
            if self.eta > eta_max * (1.0 + 1e-12):
                raise ValueError(
                    f"guarantee='nonconvex' needs eta <= lam/(64 B q^2 (beta+lam)^2) = {eta_max!r} (Thm G.22). "
                    f"Found {self.eta!r}."
                )
            if not math.isclose(self.init_std**2, self.sigma2 / self.lam, rel_tol=1e-9):
                raise ValueError(
                    f"guarantee='nonconvex' needs init_std**2 = sigma2/lam = {self.sigma2 / self.lam!r} (Thm 5.2). "
                    f"Found {self.init_std**2!r}."
                )
        if self.guarantee == "convex":
            if self.smoothness is None:
                raise ValueError("guarantee='convex' needs smoothness (β). Found None.")
            if not self.eta < 1.0 / (self.lam + self.smoothness):
                raise ValueError(
                    f"guarantee='convex' needs eta < 1/(lam + smoothness) = {1.0 / (self.lam + self.smoothness)!r}"
                    f" (Thm G.15). Found {self.eta!r}."
                )
            rho = self.sigma2 / (self.lam * (1.0 - self.eta * self.lam / 2.0))
            if not math.isclose(self.init_std**2, rho, rel_tol=1e-9):
                raise ValueError(
                    "guarantee='convex' needs init_std**2 = sigma2/(lam(1 - eta*lam/2)) = "
                    f"{rho!r} (Thm G.15). Found {self.init_std**2!r}."
                )

    @classmethod
    def from_convex_schedule(
        cls, schedule: ConvexSchedule, *, clip: bool = False, p: int = 0, row_bound: float = 1.0
    ) -> CuratorConfig:
        """The configuration of Thm 5.1's schedule (η, σ², ρ, K_A, K_Ā, L, β)."""
        return cls(
            eta=schedule.eta, sigma2=schedule.sigma2, lam=schedule.lam, k_learn=schedule.k_learn,
            k_unlearn=schedule.k_unlearn, init_std=math.sqrt(schedule.init_variance), q=schedule.q,
            lipschitz=schedule.lipschitz, row_bound=row_bound, guarantee="convex", smoothness=schedule.smoothness,
            clip=clip, p=p,
        )

    @classmethod
    def from_nonconvex_schedule(
        cls, schedule: NonConvexSchedule, *, clip: bool = False, p: int = 0, row_bound: float = 1.0,
        k_learn: int | None = None, k_unlearn: int | None = None,
    ) -> CuratorConfig:
        """The configuration of Thm 5.2's schedule (η, σ², ρ = N(0, σ²/λ I), K_A, K_Ā, L, β, B, r).

        ``k_learn`` / ``k_unlearn`` override the step counts (σ², η, ρ stay the theorem's); certificates then
        report the ε_dd those counts certify (:func:`~lethe.noisygd.schedule.nonconvex_deletion_epsilon`).
        """
        return cls(
            eta=schedule.eta, sigma2=schedule.sigma2, lam=schedule.lam,
            k_learn=schedule.k_learn if k_learn is None else int(k_learn),
            k_unlearn=schedule.k_unlearn if k_unlearn is None else int(k_unlearn),
            init_std=math.sqrt(schedule.init_variance), q=schedule.q, lipschitz=schedule.lipschitz,
            row_bound=row_bound, guarantee="nonconvex", smoothness=schedule.smoothness, clip=clip, p=p,
            B=schedule.B, max_edit_size=schedule.r,
        )
