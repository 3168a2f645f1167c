"""The certificate of one operation of certified removal (Guo et al. 2020): what it guaranteed, by which result,
with which numbers, at what cost — and the one function that fills it in from a mechanism's configuration and a
state (:func:`certify`), used by the binary mechanism, its one-vs-all form and the addition of rows."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from lethe.certified.common import StepResult
from lethe.certified.noise import epsilon_spent
from lethe.certified.solvers import SOLVERS
from lethe.certified.state import ModelState


@dataclass(frozen=True)
class Certificate:
    """What one operation (train, remove, retrain) guaranteed, by which result, with which numbers, at what cost.

    ``epsilon``/``delta`` are the guarantee that holds for the published model after the operation
    (delta = 0 for pure ε-removal; epsilon = delta = 0 for exact removal). ``step_bound`` is the sum of
    ``solve_error`` (measured), ``error_allowance`` (rounding and matrix-drift allowances), ``remainder_bound``
    (Taylor remainder) and ``mismatch_bound`` (anchor solver only); ``bound_mode``, ``calibration`` and
    ``solver`` name the configuration (docs/tighter_bounds.md). With ``bound="tight"`` the new ``residual_bound``
    may be smaller than the old one plus ``step_bound``: it also uses the measured error vector, of norm
    ``carried_error``, which the next removal corrects (docs/tighter_bounds.md §4).

    ``observer`` states whom the guarantee covers: Guo et al.'s certificate is about ONE published version (the
    model after this operation against a model retrained without the removed rows). An observer of two versions sees
    their difference, in which the secret b cancels; the sequence of releases is covered by
    :mod:`lethe.release` (docs/release_privacy.md), not by this certificate.
    """

    operation: str
    guarantee: str
    epsilon: float
    delta: float
    noise: str
    bound: str
    step_bound: float
    residual_bound: float
    budget: float
    budget_left: float
    epsilon_spent: float
    retrained: bool
    n_removed: int
    n_remaining: int
    worst_case_bound: float
    solve_error: float
    seconds: float
    removed_indices: tuple[int, ...] = field(default=())
    bound_mode: str = "paper"
    calibration: str = "paper"
    solver: str = "cholesky"
    remainder_bound: float = math.nan
    mismatch_bound: float = 0.0
    error_allowance: float = 0.0
    iterations: int = 0
    refreshed: str = ""
    carried_error: float = 0.0
    observer: str = "one published version"

    def to_dict(self) -> dict[str, Any]:
        """A strictly JSON-serialisable dict: non-finite numbers (e.g. an undefined worst-case bound) become ``None``
        (standard JSON, and PostgreSQL's JSON type, have no NaN or Infinity)."""
        d = dataclasses.asdict(self)
        d["removed_indices"] = list(self.removed_indices)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Certificate:
        """The certificate :meth:`to_dict` wrote (a model file's last certificate): ``None`` in a float field reads as
        NaN again; an unknown field or a missing one raises ``ValueError`` naming it."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ValueError(f"A certificate has unknown field(s) {unknown}.")
        kw: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in d:
                continue
            v = d[name]
            if v is None and f.type in ("float", float):
                v = math.nan
            kw[name] = tuple(int(i) for i in v) if name == "removed_indices" else v
        try:
            return cls(**kw)
        except TypeError as exc:
            raise ValueError(f"A certificate is incomplete: {exc}") from None


class _ComputedOnFirstRead:
    """A dataclass field whose value may be handed over as a deferred computation (a :class:`functools.partial`),
    evaluated once, the first time the field is read (by attribute, ``to_dict``, ``repr``, comparison, copy or
    pickle), and then stored.

    Used for :attr:`Certificate.epsilon_spent`: the ε that β certifies under the analytic calibration is the root of
    the exact privacy profile, verified against it (:func:`lethe.certified.noise.epsilon_spent`, ~0.04 ms), which
    would otherwise be a sixth of a default removal's cost at n = 10⁶ (issue 25's hot path) whether or not anyone
    reads it. The value read is the one an eager computation gives, bit for bit (the same function, the same
    arguments, fixed when the certificate is made). The certificate stays frozen: the dataclass's ``__setattr__``
    refuses assignment before this descriptor is reached."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_value"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if isinstance(value, functools.partial):
            value = float(value())
            obj.__dict__[self.slot] = value  # idempotent: two threads reading at once compute the same float
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


# installed after the dataclass is made: the generated __init__ assigns the field through it (a descriptor given
# as a field's default would make every field after it need a default)
_EPSILON_SPENT = _ComputedOnFirstRead()
_EPSILON_SPENT.__set_name__(Certificate, "epsilon_spent")
setattr(Certificate, "epsilon_spent", _EPSILON_SPENT)  # noqa: B010 (a class attribute the type checker must not see)


def bound_description(bound: str, solver: str) -> str:
    """The certificate's ``bound`` text for a removal step of ``solver`` under ``bound`` ("paper" or "tight")."""
    if bound == "paper":
        text = "data-dependent: Cor. 1/Cor. 2 + solve error (Guo et al. 2020)"
    else:
        text = "tight: min of proven remainder bounds + solve error (docs/tighter_bounds.md)"
    spec = SOLVERS.get(solver)
    return text + (spec.certificate_text if spec is not None else "")


def certify(cfg: Any, operation: str, state: ModelState, *, step: float, retrained: bool,
            removed: tuple[int, ...], worst: float, solve_error: float, seconds: float,
            result: StepResult | None = None) -> Certificate:
    """The :class:`Certificate` of ``operation`` ("train", "remove", "retrain", "add") that left ``state``: the
    guarantee of ``cfg`` while β = ``state.residual_bound`` ≤ ε′ (the caller's budget decision,
    :meth:`~lethe.certified.mechanism.CertifiedRemoval.within_budget`, came first), the ε that β certifies and the
    step's terms from ``result``. ``cfg``: a :class:`~lethe.certified.mechanism.CertifiedRemoval` (read through its
    public attributes: this module sits below the mechanism)."""
    eps, delta = cfg.eps_delta()
    # the solver that computed the step (an anchor step that fell back to pcg names pcg)
    solver = result.solver if result is not None and result.solver else cfg.solver
    bound = ("training residual (Guo et al. 2020, footnote 1)" if operation == "train" else
             bound_description(cfg.bound, solver))
    if operation == "retrain":
        bound = "budget exceeded (Alg. 2 line 16): retrained with fresh b; bound = training residual"
    budget = cfg.budget
    extra: dict[str, Any] = {}
    if result is not None:
        extra = dict(remainder_bound=float(result.remainder_bound), mismatch_bound=float(result.mismatch_bound),
                     error_allowance=float(result.error_allowance), iterations=int(result.iterations),
                     refreshed=result.refreshed, carried_error=float(result.carried_error))
    return Certificate(
        operation=operation, guarantee=cfg.guarantee, epsilon=eps, delta=delta, noise=cfg.noise, bound=bound,
        step_bound=float(step), residual_bound=float(state.residual_bound), budget=float(budget),
        budget_left=float(max(budget - state.residual_bound, 0.0)) if cfg.noise != "none" else 0.0,
        # computed when first read (_ComputedOnFirstRead): the same function on the same arguments
        epsilon_spent=functools.partial(epsilon_spent, float(state.residual_bound), cfg.sigma, cfg.delta, cfg.noise,
                                        calibration=cfg.calibration)  # type: ignore[arg-type]
        if cfg.noise != "none" else 0.0,
        retrained=retrained, n_removed=len(removed), n_remaining=state.n, worst_case_bound=float(worst),
        solve_error=float(solve_error), seconds=float(seconds), removed_indices=removed, bound_mode=cfg.bound,
        calibration=cfg.calibration, solver=solver, **extra)


__all__ = ["Certificate", "bound_description", "certify"]
