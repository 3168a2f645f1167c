"""The requesters of Algorithm 1 (Chourasia & Shah 2023, Def. 2.5): :class:`NonAdaptiveRequester` (a fixed edit
sequence) and :class:`AdaptiveRequester` (edits chosen from the published objects it observes). The loop that runs
them, :func:`lethe.noisygd.edit_stream.interact`, re-exports them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lethe.noisygd.database import EditRequest

__all__ = ["AdaptiveRequester", "NonAdaptiveRequester", "Policy", "Published"]


Published = Mapping[int, Any]
Policy = Callable[[Published, tuple[EditRequest, ...]], EditRequest]


class NonAdaptiveRequester:
    """A 0-adaptive requester: the edit sequence is fixed in advance (Def. 2.5, Remark 4.2)."""

    observable: tuple[int, ...] = ()

    def __init__(self, requests: Sequence[EditRequest]) -> None:
        self._requests = tuple(requests)
        for u in self._requests:
            if not isinstance(u, EditRequest):
                raise TypeError(f"requests must be EditRequest objects. Found {type(u).__name__}.")

    @property
    def p(self) -> int:
        """0."""
        return 0

    def __call__(self, published: Published, past: tuple[EditRequest, ...]) -> EditRequest:
        i = len(past) + 1
        if i > len(self._requests):
            raise IndexError(f"The requester has only {len(self._requests)} requests. Asked for request {i}.")
        return self._requests[i - 1]


class AdaptiveRequester:
    """A p-adaptive requester (Def. 2.5, Eq. 6): u_i = Q(φ_{s_1}, …, φ_{s_j}; u_{<i}) with s_j < i.

    Parameters
    ----------
    policy : callable
        (visible published objects {s: φ_s}, past requests) ↦ next request.
    observable : sequence of int
        The sorted observable indices s⃗ = (s_1, …, s_p); p = len(observable).
    """

    def __init__(self, policy: Policy, observable: Sequence[int]) -> None:
        obs = tuple(int(s) for s in observable)
        if list(obs) != sorted(set(obs)) or any(s < 0 for s in obs):
            raise ValueError(f"observable must be sorted distinct indices >= 0. Found {observable!r}.")
        self.policy = policy
        self.observable = obs

    @property
    def p(self) -> int:
        """p = |s⃗|."""
        return len(self.observable)

    def __call__(self, published: Published, past: tuple[EditRequest, ...]) -> EditRequest:
        i = len(past) + 1
        visible = {s: published[s] for s in self.observable if s < i}
        return self.policy(visible, past)
