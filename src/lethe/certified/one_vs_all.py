"""Alg. 2 for a one-vs-all model (Guo et al. 2020, §4.2): K independent binary models under ONE budget.

The K binary models use independent perturbations b_k (b_k ~ N(0, σ² I_d) or Laplace-type), so the whole model is
one mechanism in R^{Kd} whose gradient residual (u_1, …, u_K) has norm ≤ √(Σ_k β_k²) for Gaussian b (one Gaussian
mechanism of sensitivity √(Σ_k β_k²)), and Σ_k β_k for Laplace-type b (densities multiply: ε adds up). The (ε, δ)
guarantee of Guo et al. 2020, Thm 3 therefore holds for the whole model while that *joint* bound stays within the
budget ε′ (:func:`joint_residual`, judged by :meth:`CertifiedRemoval.within_budget`). This module is the one place
where the joint bound is computed and decided: the estimator
(:class:`lethe.certified.estimators.CertifiedLogisticRegression`), the curator's adapter and its artifact checks call
it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lethe.certified.cache import NewtonCache
from lethe.certified.certificate import Certificate
from lethe.certified.mechanism import CertifiedRemoval
from lethe.certified.noise import epsilon_spent
from lethe.certified.state import ModelState


def joint_residual(bounds: Any, noise: str) -> float:
    """The joint residual bound of independent binary models: √(Σ β_k²) for Gaussian b (one Gaussian mechanism in
    R^{Kd}), Σ β_k for Laplace-type b (ε adds up)."""
    r = np.asarray(bounds, dtype=np.float64)
    return float(r.sum()) if noise == "laplace" else float(np.sqrt(np.sum(r * r)))


@dataclass(frozen=True)
class MulticlassCertificate:
    """Certificate of one removal from a one-vs-all model.

    The K binary models use independent perturbations b_k ~ N(0, σ² I_d), so the whole model is one Gaussian
    mechanism in R^{Kd} whose gradient residual (u_1, …, u_K) has norm ≤ √(Σ_k β_k²). The (ε, δ) guarantee of
    Guo et al. 2020, Thm 3 therefore holds for the whole model while that joint bound stays within the budget
    ε′ = σ ε / c; ``per_class`` lists each class's own certificate (``None`` if the row was not in its subsample).
    For Laplace-type noise the joint bound is Σ_k β_k (densities multiply: ε adds up).
    """

    epsilon: float
    delta: float
    residual_bound: float
    budget: float
    budget_left: float
    epsilon_spent: float
    retrained_classes: tuple[int, ...]
    per_class: tuple[Certificate | None, ...]
    n_removed: int
    seconds: float
    removed_indices: tuple[int, ...] = field(default=())
    n_added: int = 0

    @property
    def retrained(self) -> bool:
        """Whether any class was retrained."""
        return bool(self.retrained_classes)

    @property
    def guarantee(self) -> str:
        """What is promised, by which theorem (the :class:`lethe.protocols.Certificate` protocol)."""
        if self.epsilon == 0.0 and self.delta == 0.0:
            return "exact removal of the one-vs-all model (Guo et al. 2020, §3.2)"
        return (f"({self.epsilon!r}, {self.delta!r})-certified removal of the whole one-vs-all model: the K "
                "independent perturbations make one mechanism whose joint gradient residual stays within the "
                "budget (Guo et al. 2020, Thm 3, §4.2)")

    @property
    def observer(self) -> str:
        """Whom it covers: one published version, the model after this operation against a model retrained without
        the removed rows (Guo et al. 2020, Thm 3); an observer of two versions is not covered."""
        return "one published version"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (with ``guarantee`` and ``observer``)."""
        return {
            "guarantee": self.guarantee, "observer": self.observer,
            "epsilon": self.epsilon, "delta": self.delta, "residual_bound": self.residual_bound,
            "budget": self.budget, "budget_left": self.budget_left, "epsilon_spent": self.epsilon_spent,
            "retrained_classes": list(self.retrained_classes), "n_removed": self.n_removed, "seconds": self.seconds,
            "removed_indices": list(self.removed_indices), "n_added": self.n_added,
            "per_class": [None if c is None else c.to_dict() for c in self.per_class],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MulticlassCertificate:
        """The certificate :meth:`to_dict` wrote (``guarantee`` and ``observer`` are derived, not read)."""
        try:
            return cls(epsilon=float(d["epsilon"]), delta=float(d["delta"]), residual_bound=float(d["residual_bound"]),
                       budget=float(d["budget"]), budget_left=float(d["budget_left"]),
                       epsilon_spent=float(d["epsilon_spent"]),
                       retrained_classes=tuple(int(k) for k in d["retrained_classes"]),
                       per_class=tuple(None if c is None else Certificate.from_dict(c) for c in d["per_class"]),
                       n_removed=int(d["n_removed"]), seconds=float(d["seconds"]),
                       removed_indices=tuple(int(i) for i in d.get("removed_indices", ())),
                       n_added=int(d.get("n_added", 0)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"A one-vs-all certificate is incomplete or malformed: {exc!r}") from None


@dataclass(frozen=True)
class OneVsAllRemoval:
    """Alg. 2 for K binary models of one mechanism under one joint budget (module docstring).

    Parameters
    ----------
    mechanism : CertifiedRemoval
        The binary models' mechanism (its concrete solver: :meth:`CertifiedRemoval.resolved`).
    """

    mechanism: CertifiedRemoval

    # -- the joint bound and its decision ---------------------------------------------------------------------------
    def joint(self, bounds: Sequence[float] | Sequence[ModelState]) -> float:
        """The joint residual bound of the binary models' bounds (or states): :func:`joint_residual`."""
        betas = [b.residual_bound if isinstance(b, ModelState) else b for b in bounds]
        return joint_residual(betas, self.mechanism.noise)

    def within_budget(self, bounds: Sequence[float] | Sequence[ModelState]) -> bool:
        """Alg. 2, line 16 for the whole model: the joint bound ≤ ε′ (:meth:`CertifiedRemoval.within_budget`)."""
        return self.mechanism.within_budget(self.joint(bounds))

    def share(self, k: int) -> float:
        """Each of ``k`` classes' share of the budget that keeps the joint bound within it when every class stays
        within its share: ε′/k (Laplace-type b), ε′/√k (Gaussian b)."""
        mech = self.mechanism
        return mech.budget / k if mech.noise == "laplace" else mech.budget / math.sqrt(k)

    def check_training(self, states: Sequence[ModelState]) -> None:
        """Refuse (RuntimeError) training residuals whose joint bound exceeds the budget."""
        if len(states) > 1 and not self.within_budget(states):
            mech = self.mechanism
            raise RuntimeError(f"The joint training residual of the {len(states)} one-vs-all models, "
                               f"{self.joint(states):.6g}, exceeds the budget ε′ = {mech.budget:.6g}; lower tol.")

    def check_stored(self, bounds: Sequence[float]) -> None:
        """Refuse (ValueError naming the bound and the budget) stored bounds β_k whose joint bound a state within the
        budget cannot have (a model file or an artifact that was edited)."""
        if not self.within_budget(bounds):
            mech = self.mechanism
            raise ValueError(f"the residual bound {self.joint(bounds)!r} exceeds the budget {mech.budget!r} that "
                             f"sigma={mech.sigma!r}, epsilon={mech.epsilon!r}, delta={mech.delta!r} allow.")

    def settle(self, proposed: list[ModelState], order: Sequence[int], retrain: Callable[[int], ModelState],
               what: str) -> tuple[list[ModelState], list[int], float]:
        """Alg. 2, lines 16–17 for the joint budget: retrain classes in ``order`` (``retrain(k)`` returns class k's
        retrained state) until the joint bound is within the budget. Returns (states, retrained classes, joint
        bound); RuntimeError if every class was retrained and the bound is still above (nothing is kept: the
        caller has not changed its state)."""
        states = list(proposed)
        retrained: list[int] = []
        for k in order:
            if self.within_budget(states):
                break
            states[k] = retrain(k)
            retrained.append(k)
        beta = self.joint(states)
        if not self.mechanism.within_budget(beta):
            raise RuntimeError(f"The joint residual bound {beta:.6g} exceeds the budget ε′ = "
                               f"{self.mechanism.budget:.6g} even after retraining every class; lower tol. "
                               f"Nothing was {what}.")
        return states, retrained, beta

    def certificate(self, beta: float, retrained: Sequence[int], per_class: Sequence[Certificate | None], *,
                    n_removed: int, seconds: float, removed: tuple[int, ...] = (),
                    n_added: int = 0) -> MulticlassCertificate:
        """The whole model's certificate for the joint bound ``beta`` (within the budget: :meth:`settle`)."""
        mech = self.mechanism
        eps, delta = mech.eps_delta()
        return MulticlassCertificate(
            epsilon=eps, delta=delta, residual_bound=beta, budget=mech.budget,
            budget_left=max(mech.budget - beta, 0.0),
            epsilon_spent=epsilon_spent(beta, mech.sigma, mech.delta, mech.noise, calibration=mech.calibration),
            retrained_classes=tuple(retrained), per_class=tuple(per_class), n_removed=n_removed,
            seconds=seconds, removed_indices=removed, n_added=n_added)

    # -- removal ----------------------------------------------------------------------------------------------------
    def remove(self, states: Sequence[ModelState], X: Any, Y: np.ndarray, active: np.ndarray,
               members: np.ndarray | None, idx: np.ndarray, caches: Sequence[NewtonCache],
               rng: np.random.Generator, labels: Any) -> tuple[list[ModelState], MulticlassCertificate]:
        """Remove the validated rows ``idx`` (active, distinct) from every binary model that holds them, as one
        batch: each class's Newton step (:meth:`CertifiedRemoval.propose`, no budget decision; ``auto``'s anchor
        falls back to pcg for a class whose step passes its :meth:`share`), then classes retrained — the touched
        ones first, each group by decreasing bound — until the joint bound fits (:meth:`settle`).

        ``Y`` (K, n) holds the ±1 targets of each binary model; ``members`` (K, n) the rows of each model's
        subsample (None: all); ``labels`` the class labels (for messages). Returns the new states and the
        certificate; the caller's states, mask and caches' meaning are unchanged on error (the caches rebuild; under
        the estimator's transaction, :mod:`lethe.certified.transaction`, they are restored bit for bit)."""
        t0 = time.perf_counter()
        mech = self.mechanism
        K = len(states)
        share = self.share(K)
        proposals: list[tuple[ModelState, Certificate] | None] = []
        for k in range(K):
            rows = active if members is None else active & members[k]
            mine = idx[rows[idx]]
            if mine.size == 0:
                proposals.append(None)
                continue
            if mine.size >= np.count_nonzero(rows):
                raise ValueError(f"Removing these rows would empty the binary model of class {labels[k]!r}.")
            keep = rows.copy()
            keep[mine] = False
            new, r = mech.propose(states[k], X, Y[k], keep, mine, caches[k], limit=share)
            cert = mech.certify("remove", new, step=r.step_bound, retrained=False,
                                removed=tuple(int(i) for i in mine), worst=r.worst_case,
                                solve_error=r.solve_error, seconds=0.0, result=r)
            proposals.append((new, cert))
        proposed = [p[0] if p is not None else states[k] for k, p in enumerate(proposals)]
        touched = [k for k, p in enumerate(proposals) if p is not None]
        order = sorted(touched, key=lambda k: -proposed[k].residual_bound)
        order += sorted((k for k in range(K) if k not in touched), key=lambda k: -proposed[k].residual_bound)
        keep_all = active.copy()
        keep_all[idx] = False

        def retrain(k: int) -> ModelState:
            rows = keep_all if members is None else keep_all & members[k]
            return mech.retrain(states[k], X, Y[k], rows, rng, caches[k])

        new_states, retrained, beta = self.settle(proposed, order, retrain, "removed")
        per_class: list[Certificate | None] = []
        for k, p in enumerate(proposals):
            if p is None:
                per_class.append(None)
            elif k in retrained:
                per_class.append(mech.certify("retrain", new_states[k], step=p[1].step_bound, retrained=True,
                                              removed=p[1].removed_indices, worst=p[1].worst_case_bound,
                                              solve_error=p[1].solve_error, seconds=0.0))
            else:
                per_class.append(p[1])
        return new_states, self.certificate(beta, retrained, per_class, n_removed=idx.size,
                                            seconds=time.perf_counter() - t0,
                                            removed=tuple(int(i) for i in idx))


def next_batch_cap(remainder: float, m: int, budget_left: float, share: float) -> int:
    """The largest batch whose remainder, extrapolated from a batch of ``m`` removals that spent ``remainder``,
    spends at most ``share`` of ``budget_left``: Guo et al. 2020, Cor. 2 bounds a batch's remainder by
    γ‖X‖₂‖H⁻¹Δ‖² with Δ a sum of m gradients, so it grows like m² — the next batch of m′ rows spends about
    remainder·(m′/m)², and m′ = max(1, ⌊√(share · budget_left · m² / remainder)⌋). Only sets a batch SIZE (no
    certificate depends on it: every batch is certified by its own measured and bounded terms)."""
    per = remainder / (m * m)
    return max(1, int(math.sqrt(share * budget_left / per)))


__all__ = ["MulticlassCertificate", "OneVsAllRemoval", "joint_residual", "next_batch_cap"]
