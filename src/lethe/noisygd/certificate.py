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

    # -- the Certificate protocol (lethe.protocols): derived, never stored, so no field's value changes --------
    @property
    def epsilon(self) -> float:
        """The Rényi ε at order ``q`` that this certificate promises: ε_dd + p·ε_dp (``epsilon_dd_adaptive``, equal
        to ``epsilon_dd`` for p = 0) for an edit, ``epsilon_dp`` for learning. Not an (ε, δ) ε: see :attr:`delta`."""
        if self.operation == "learn" or self.epsilon_dd_adaptive is None:
            return float(self.epsilon_dp)
        return float(self.epsilon_dd_adaptive)

    @property
    def delta(self) -> None:
        """None: a Rényi guarantee has no single δ. :meth:`to_dp` converts it to (ε, δ) for a δ of your choice
        (Chourasia & Shah, Thm B.1); reading :attr:`epsilon` as (ε, 0)-DP would be false."""
        return None

    def to_dp(self, delta: float, *, tight: bool = False) -> float:
        """The ε of the (ε, ``delta``) guarantee implied by :attr:`epsilon` at order ``q``
        (:func:`lethe.noisygd.guarantees.deletion_privacy_to_dp`: Thm B.1, or the tighter conversion)."""
        from lethe.noisygd.guarantees import deletion_privacy_to_dp

        return deletion_privacy_to_dp(self.q, self.epsilon, delta, tight=tight)

    @property
    def guarantee(self) -> str:
        """What is promised, by which theorem."""
        if self.operation == "learn":
            return (f"(q={self.q!r}, eps={self.epsilon_dp!r})-Renyi DP of the model after learning, with respect to "
                    f"each record of the database; {self.theorem}")
        return (f"(q={self.q!r}, eps={self.epsilon!r})-deletion privacy (Def. 4.1) of the {self.r} record(s) this "
                f"edit replaced, against a {self.p}-adaptive requester (eps_dd + p*eps_dp, Thm 4.3); "
                f"{self.theorem}")

    @property
    def observer(self) -> str:
        """Whom the promise covers: Def. 4.1 compares the curator's model state Θ̂_i after the edit (hence every
        publication f_pub(Θ̂_i) of it) with that of a curator that never held the record, for a requester whose
        edits were fixed in advance (p = 0) or chosen after seeing at most p earlier publications (Thm 4.3).
        Learning: anyone who sees the model after learning (Rényi DP, Thm G.7/G.9)."""
        if self.operation == "learn":
            return "anyone who sees the model after learning (one version)"
        if self.p == 0:
            return ("the model state after this edit (and every publication of it), against a non-adaptive "
                    "requester (edits fixed in advance)")
        return (f"the model state after this edit (and every publication of it), against a {self.p}-adaptive "
                f"requester that saw at most {self.p} earlier published models")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the fields, plus the protocol's derived ``guarantee``, ``observer``,
        ``epsilon`` and ``delta`` (:meth:`from_dict` checks them against the fields)."""
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        d.update(guarantee=self.guarantee, observer=self.observer, epsilon=self.epsilon, delta=self.delta)
        return d

    def to_json(self) -> str:
        """JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NoisyGDCertificate:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on missing or unknown keys, and when a derived key
        (guarantee, observer, epsilon, delta) disagrees with the fields. Dicts without the derived keys (written
        before they existed) are accepted."""
        names = {f.name for f in fields(cls)}
        core = {k: v for k, v in d.items() if k not in _DERIVED}
        if set(core) != names:
            raise ValueError(f"certificate keys must be {sorted(names)}. Found {sorted(d)}.")
        cert = cls(**{**core, "assumptions": tuple(core["assumptions"])})
        derived = {k: getattr(cert, k) for k in _DERIVED}
        for k in _DERIVED:
            if k in d and d[k] != derived[k]:
                raise ValueError(f"certificate key {k!r} must be {derived[k]!r} for these fields. Found {d[k]!r}.")
        return cert


_DERIVED = ("guarantee", "observer", "epsilon", "delta")
