"""Immutable certificates of Noisy-GD learning and unlearning operations (frozen, JSON-serialisable)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["NoisyGDCertificate"]


@dataclass(frozen=True)
class NoisyGDCertificate:
    """What one learning (A) or unlearning (Ā) run guarantees, by which theorem, and what it cost.

    Attributes
    ----------
    operation : str
        ``"learn"`` (A, Eq. 16) or ``"edit"`` (Ā, Eq. 17).
    step : int
        Edit step i (0 for learning).
    theorem : str
        The results the numbers come from.
    q : float
        Rényi order.
    epsilon_dp : float
        The model published after this operation is (q, ε_dp)-Rényi DP w.r.t. each record of the current database,
        counting every Noisy-GD step since learning (Thm G.7; min(G.7, G.9) if convex). For the convex schedule of
        Thm 5.1 this stays ≤ ε_dp however many edits are made; for the Lipschitz-only mode it grows.
    epsilon_dd : float or None
        (q, ε_dd)-deletion privacy (Def. 4.1) of the records this edit replaced, under non-adaptive requesters;
        None for learning.
    p : int
        Requester adaptivity assumed (number of published models it may see).
    epsilon_dd_adaptive : float or None
        ε_dd + p·ε_dp (Thm 4.3): deletion privacy under p-adaptive requesters; None for learning. The p·ε_dp term
        is the RDP of the releases the requester saw (min of p·4qL²/(λσ²n²) and G.7 over the trajectory in the
        convex mode, G.7 over the trajectory otherwise).
    steps : int
        Noisy-GD iterations run (K_A or K_Ā).
    gradient_evaluations : int
        Per-example gradient evaluations (n per iteration).
    n : int
        Database size.
    r : int
        Records replaced by this edit (0 for learning).
    assumptions : tuple of str
        What the numbers rely on (loss constants, row-norm bound, initialisation).
    """

    operation: str
    step: int
    theorem: str
    q: float
    epsilon_dp: float
    epsilon_dd: float | None
    p: int
    epsilon_dd_adaptive: float | None
    steps: int
    gradient_evaluations: int
    n: int
    r: int
    assumptions: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        return d

    def to_json(self) -> str:
        """JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NoisyGDCertificate:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on missing or unknown keys."""
        names = {f.name for f in fields(cls)}
        if set(d) != names:
            raise ValueError(f"certificate keys must be {sorted(names)}. Found {sorted(d)}.")
        return cls(**{**d, "assumptions": tuple(d["assumptions"])})
