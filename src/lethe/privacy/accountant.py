"""A privacy accountant: a ledger of frozen, serializable events checked against an (ε, δ) budget.

``spend`` validates the event, computes the guarantee the ledger *would* have with it, and raises
:class:`lethe.exceptions.BudgetExceededError` (a ``ValueError``) if that exceeds the budget — recording
nothing. Only then is the event appended to the ledger and the running state updated (the order of
Google's dp_accounting ``compose``).

Two composition rules:

* ``"basic"`` — basic adaptive composition (lecture 9): the total is (Σ ε_i, Σ δ_i). Accepts
  :class:`ApproxDPEvent` and :class:`LaplaceEvent` (ε = count·Δ₁/b, δ = 0).
* ``"rdp"`` — Rényi composition at each order of ``orders`` (Chourasia & Shah 2023, Thm B.3), converted
  to (ε, δ_budget)-DP with the tight conversion, minimised over orders. Accepts :class:`GaussianEvent`,
  :class:`LaplaceEvent` and pure :class:`ApproxDPEvent` (δ = 0; RDP ≤ min(ε, αε²/2)). The δ of the
  guarantee is always the budget's δ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar, Literal, cast

import numpy as np

from lethe._validation import check_choice, check_nonnegative, check_positive, check_positive_int
from lethe.exceptions import BudgetExceededError
from lethe.privacy.rdp import DEFAULT_ORDERS, best_dp_over_orders, gaussian_rdp, laplace_rdp, pure_dp_rdp

__all__ = [
    "ApproxDPEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyAccountant",
    "PrivacyEvent",
    "event_from_dict",
]


def _check_label(label: Any) -> str:
    if not isinstance(label, str):
        raise TypeError(f"label must be a str. Found {label!r} of type {type(label).__name__}.")
    return label


def _check_unit_closed(name: str, value: Any) -> float:
    v = check_nonnegative(name, value)
    if v > 1.0:
        raise ValueError(f"{name} must be in [0, 1]. Found {value}.")
    return v


class _Event:
    """What the three events share: validated fields stored on the frozen dataclass, and ``to_dict``."""

    kind: ClassVar[str]
    label: str

    def _store(self, **checked: Any) -> None:
        """Store the checked field values (the dataclasses are frozen), then check ``label``."""
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        _check_label(self.label)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record, including ``kind``."""
        return {"kind": self.kind, **asdict(cast(Any, self))}


@dataclass(frozen=True)
class ApproxDPEvent(_Event):
    """A mechanism known to be (ε, δ)-DP.

    Examples
    --------
    >>> ApproxDPEvent(0.5, 1e-6, label="query 1").to_dict()
    {'kind': 'approx_dp', 'epsilon': 0.5, 'delta': 1e-06, 'label': 'query 1'}
    """

    kind: ClassVar[str] = "approx_dp"
    epsilon: float
    delta: float = 0.0
    label: str = ""

    def __post_init__(self) -> None:
        self._store(epsilon=check_nonnegative("epsilon", self.epsilon),
                    delta=_check_unit_closed("delta", self.delta))


class _RunsEvent(_Event):
    """``count`` ≥ 1 runs of a noise mechanism on a function of sensitivity ``sensitivity`` ≥ 0; the first field is
    the noise scale (> 0)."""

    sensitivity: float
    count: int

    def __post_init__(self) -> None:
        noise = dataclass_fields(cast(Any, self))[0].name
        self._store(**{noise: check_positive(noise, getattr(self, noise))},
                    sensitivity=check_nonnegative("sensitivity", self.sensitivity),
                    count=check_positive_int("count", self.count))


@dataclass(frozen=True)
class LaplaceEvent(_RunsEvent):
    """``count`` runs of the Laplace mechanism with scale b on a function of L1 sensitivity Δ₁.

    Examples
    --------
    >>> LaplaceEvent(scale=2.0, sensitivity=1.0, count=3).to_dict()["kind"]
    'laplace'
    """

    kind: ClassVar[str] = "laplace"
    scale: float
    sensitivity: float = 1.0
    count: int = 1
    label: str = ""


@dataclass(frozen=True)
class GaussianEvent(_RunsEvent):
    """``count`` runs of the Gaussian mechanism with std σ on a function of L2 sensitivity Δ₂.

    Examples
    --------
    >>> GaussianEvent(sigma=4.0, count=10).to_dict()
    {'kind': 'gaussian', 'sigma': 4.0, 'sensitivity': 1.0, 'count': 10, 'label': ''}
    """

    kind: ClassVar[str] = "gaussian"
    sigma: float
    sensitivity: float = 1.0
    count: int = 1
    label: str = ""


PrivacyEvent = ApproxDPEvent | LaplaceEvent | GaussianEvent
_EVENT_TYPES: dict[str, type] = {cls.kind: cls for cls in (ApproxDPEvent, LaplaceEvent, GaussianEvent)}


def event_from_dict(data: Mapping[str, Any]) -> PrivacyEvent:
    """Rebuild (and re-validate) an event from :meth:`to_dict` output.

    Examples
    --------
    >>> event_from_dict({"kind": "gaussian", "sigma": 2.0})
    GaussianEvent(sigma=2.0, sensitivity=1.0, count=1, label='')
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"event data must be a mapping. Found {type(data).__name__}.")
    fields = dict(data)
    kind = fields.pop("kind", None)
    if kind not in _EVENT_TYPES:
        raise ValueError(f"event kind must be one of {tuple(_EVENT_TYPES)}. Found {kind!r}.")
    try:
        event: PrivacyEvent = _EVENT_TYPES[kind](**fields)
    except TypeError as exc:
        raise ValueError(f"event fields for kind {kind!r} are invalid: {exc}. Found {sorted(fields)}.") from exc
    return event


class PrivacyAccountant:
    """Track the privacy spent by a sequence of (adaptively chosen) mechanisms against an (ε, δ) budget.

    Parameters
    ----------
    epsilon_budget : float
        ε budget > 0.
    delta_budget : float
        δ budget in [0, 1) for ``"basic"``; in (0, 1) for ``"rdp"`` (the conversion's δ).
    composition : {"basic", "rdp"}, default="basic"
    orders : sequence of float, optional
        Rényi orders for ``"rdp"`` (default :data:`lethe.privacy.rdp.DEFAULT_ORDERS`).

    Examples
    --------
    >>> acc = PrivacyAccountant(1.0, 1e-5)
    >>> acc.spend(ApproxDPEvent(0.4, 1e-6))
    (0.4, 1e-06)
    >>> acc.spend(ApproxDPEvent(0.7, 0.0))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lethe.exceptions.BudgetExceededError: spending ... (epsilon=1.1, delta=1e-06), over the budget ... recorded.
    >>> len(acc.ledger)
    1
    >>> rdp = PrivacyAccountant(2.0, 1e-5, composition="rdp")
    >>> eps, delta = rdp.spend(GaussianEvent(sigma=20.0, count=50))
    >>> round(eps, 3), delta
    (1.478, 1e-05)
    >>> PrivacyAccountant.from_json(rdp.to_json()).spent == rdp.spent
    True
    """

    def __init__(
        self,
        epsilon_budget: float,
        delta_budget: float,
        *,
        composition: Literal["basic", "rdp"] = "basic",
        orders: Sequence[float] | None = None,
    ) -> None:
        self._composition = check_choice("composition", composition, ("basic", "rdp"))
        self._epsilon_budget = check_positive("epsilon_budget", epsilon_budget)
        d = check_nonnegative("delta_budget", delta_budget)
        if self._composition == "rdp" and not 0.0 < d < 1.0:
            raise ValueError(
                f"delta_budget must be in the open interval (0, 1) for composition='rdp'. Found {delta_budget}."
            )
        if d >= 1.0:
            raise ValueError(f"delta_budget must be < 1. Found {delta_budget}.")
        self._delta_budget = d
        raw_orders = DEFAULT_ORDERS if orders is None else tuple(orders)
        if len(raw_orders) == 0:
            raise ValueError("orders must be non-empty. Found 0 orders.")
        for j, a in enumerate(raw_orders):
            if not check_positive(f"orders[{j}]", a) > 1.0:
                raise ValueError(f"orders[{j}] (a Rényi order) must be > 1. Found {a}.")
        self._orders = tuple(float(a) for a in raw_orders)
        self._ledger: list[PrivacyEvent] = []
        self._rdp = np.zeros(len(self._orders))
        self._spent: tuple[float, float] = (0.0, 0.0)

    # ------------------------------------------------------------------ read-only state
    @property
    def composition(self) -> str:
        """The composition rule, ``"basic"`` or ``"rdp"``."""
        return self._composition

    @property
    def budget(self) -> tuple[float, float]:
        """(ε budget, δ budget)."""
        return self._epsilon_budget, self._delta_budget

    @property
    def orders(self) -> tuple[float, ...]:
        """Rényi orders used by ``"rdp"`` composition."""
        return self._orders

    @property
    def ledger(self) -> tuple[PrivacyEvent, ...]:
        """The recorded events, oldest first (immutable view)."""
        return tuple(self._ledger)

    @property
    def spent(self) -> tuple[float, float]:
        """The (ε, δ) guarantee of everything recorded so far ((0, 0) when empty)."""
        return self._spent

    @property
    def remaining(self) -> tuple[float, float]:
        """Budget minus spent, per coordinate (for ``"rdp"`` the δ coordinate is 0 once anything is spent)."""
        return self._epsilon_budget - self._spent[0], self._delta_budget - self._spent[1]

    # ------------------------------------------------------------------ pure computations
    def _validate(self, event: Any) -> PrivacyEvent:
        if not isinstance(event, ApproxDPEvent | LaplaceEvent | GaussianEvent):
            raise TypeError(
                f"event must be an ApproxDPEvent, LaplaceEvent or GaussianEvent. Found {type(event).__name__}."
            )
        if self._composition == "basic" and isinstance(event, GaussianEvent):
            raise ValueError(
                "composition='basic' cannot account a GaussianEvent (it has no single (epsilon, delta)); "
                "use composition='rdp' or record ApproxDPEvent(epsilon, delta) of its calibration. "
                f"Found {event!r}."
            )
        if self._composition == "rdp" and isinstance(event, ApproxDPEvent) and event.delta > 0:
            raise ValueError(
                "composition='rdp' accepts ApproxDPEvent only with delta == 0 (an (epsilon, delta>0) guarantee "
                f"implies no Rényi bound). Found delta={event.delta}."
            )
        return event

    def _event_rdp(self, event: PrivacyEvent) -> np.ndarray:
        if isinstance(event, GaussianEvent):
            if event.sensitivity == 0.0:
                return np.zeros(len(self._orders))
            return np.array([event.count * gaussian_rdp(a, event.sensitivity, event.sigma) for a in self._orders])
        if isinstance(event, LaplaceEvent):
            return np.array([event.count * laplace_rdp(a, event.sensitivity, event.scale) for a in self._orders])
        return np.array([pure_dp_rdp(a, event.epsilon) for a in self._orders])

    @staticmethod
    def _event_dp(event: PrivacyEvent) -> tuple[float, float]:
        if isinstance(event, LaplaceEvent):
            return event.count * event.sensitivity / event.scale, 0.0
        if isinstance(event, ApproxDPEvent):
            return event.epsilon, event.delta
        raise AssertionError("unreachable: GaussianEvent is rejected in basic mode")  # pragma: no cover

    def _guarantee(self, events: Sequence[PrivacyEvent]) -> tuple[float, float, np.ndarray]:
        """(ε, δ, rdp vector) of a list of events, computed from scratch (no state touched)."""
        if self._composition == "basic":
            pairs = [self._event_dp(e) for e in events]
            return math.fsum(p[0] for p in pairs), math.fsum(p[1] for p in pairs), self._rdp
        rdp = np.zeros(len(self._orders))
        for e in events:
            rdp = rdp + self._event_rdp(e)
        if not events:
            return 0.0, 0.0, rdp
        eps, _ = best_dp_over_orders(self._orders, rdp.tolist(), self._delta_budget)
        return eps, self._delta_budget, rdp

    def guarantee_if(self, event: PrivacyEvent) -> tuple[float, float]:
        """The (ε, δ) the ledger would have after ``event`` (validates; changes nothing)."""
        ev = self._validate(event)
        eps, delta, _ = self._guarantee([*self._ledger, ev])
        return eps, delta

    def can_spend(self, event: PrivacyEvent) -> bool:
        """Whether :meth:`spend` would accept ``event`` (validates; changes nothing)."""
        eps, delta = self.guarantee_if(event)
        return eps <= self._epsilon_budget and delta <= self._delta_budget

    # ------------------------------------------------------------------ the one mutating operation
    def spend(self, event: PrivacyEvent) -> tuple[float, float]:
        """Validate ``event``, check the budget, record it, update the state; return the new (ε, δ).

        Raises
        ------
        TypeError, ValueError
            If ``event`` is not an event or is not supported by this composition rule.
        lethe.exceptions.BudgetExceededError
            If the guarantee after ``event`` would exceed the budget; nothing is recorded.
        """
        ev = self._validate(event)
        eps, delta, rdp = self._guarantee([*self._ledger, ev])
        if not (eps <= self._epsilon_budget and delta <= self._delta_budget):
            raise BudgetExceededError(
                f"spending {ev!r} would bring the guarantee to (epsilon={eps:.6g}, delta={delta:.6g}), over the "
                f"budget (epsilon={self._epsilon_budget!r}, delta={self._delta_budget!r}). Nothing was recorded."
            )
        self._ledger.append(ev)
        self._rdp = rdp
        self._spent = (eps, delta)
        return self._spent

    # ------------------------------------------------------------------ serialization (JSON, no pickle)
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: budget, rule, orders and the ledger (the totals are recomputed on load)."""
        return {
            "epsilon_budget": self._epsilon_budget,
            "delta_budget": self._delta_budget,
            "composition": self._composition,
            "orders": list(self._orders),
            "ledger": [e.to_dict() for e in self._ledger],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyAccountant:
        """Rebuild an accountant by replaying its ledger through :meth:`spend` (so everything is re-validated)."""
        acc = cls(
            data["epsilon_budget"], data["delta_budget"], composition=data["composition"], orders=data["orders"]
        )
        for item in data["ledger"]:
            acc.spend(event_from_dict(item))
        return acc

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PrivacyAccountant:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def __repr__(self) -> str:
        return (
            f"PrivacyAccountant(budget=({self._epsilon_budget}, {self._delta_budget}), "
            f"composition={self._composition!r}, events={len(self._ledger)}, spent={self._spent})"
        )
