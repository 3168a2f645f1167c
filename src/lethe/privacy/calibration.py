"""Calibration by bisection: the boundary of a monotone feasibility test, kept on its feasible side.

Calibrating a mechanism means finding the extreme parameter that still certifies a target: the largest RDP slope
whose (ε, δ) conversion is ≤ ε, the smallest σ whose δ is ≤ δ, the largest ε_dd whose conversion meets a target.
Each is a monotone yes/no test on an interval, and the answer must stay on the "yes" side so that what is returned
certifies the target (never a midpoint that might not). :func:`bisect_boundary` is that loop, written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

__all__ = ["bisect_boundary"]


def bisect_boundary(feasible: Callable[[float], bool], lo: float, hi: float, *, feasible_side: Literal["lo", "hi"],
                    rel_tol: float = 0.0, max_iter: int | None = None) -> tuple[float, float]:
    """Shrink [lo, hi] around the point where ``feasible`` changes, keeping each end on its side.

    ``feasible`` must be monotone on [lo, hi]: True on the ``feasible_side`` end's side of one boundary and False
    on the other (the caller brackets it; the ends are not evaluated). Each step evaluates the midpoint
    (lo + hi)/2 and moves the end of the same side to it, while hi − lo > ``rel_tol`` · |hi| and at most
    ``max_iter`` times (one of the two limits is required). Returns (lo, hi): the end on ``feasible_side`` is
    feasible if it was at the start.

    >>> lo, hi = bisect_boundary(lambda s: s * s <= 2.0, 1.0, 2.0, feasible_side="lo", rel_tol=1e-12)
    >>> lo * lo <= 2.0 < hi * hi, hi - lo <= 1e-12 * hi
    (True, True)
    """
    if feasible_side not in ("lo", "hi"):
        raise ValueError(f"feasible_side must be 'lo' or 'hi'. Found {feasible_side!r}.")
    if not rel_tol > 0.0 and max_iter is None:
        raise ValueError(f"bisection needs rel_tol > 0 or a max_iter to stop. Found rel_tol={rel_tol!r}, "
                         "max_iter=None.")
    keep_lo = feasible_side == "lo"
    steps = 0
    while hi - lo > rel_tol * abs(hi) and (max_iter is None or steps < max_iter):
        mid = 0.5 * (lo + hi)
        if feasible(mid) == keep_lo:
            lo = mid
        else:
            hi = mid
        steps += 1
    return lo, hi
