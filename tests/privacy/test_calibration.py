"""lethe.privacy.calibration.bisect_boundary: the end it keeps is always on the feasible side of the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.privacy.calibration import bisect_boundary


@pytest.mark.parametrize("side", ["lo", "hi"])
def test_the_kept_end_is_feasible_and_the_bracket_tight_over_random_thresholds(side):
    rng = np.random.default_rng(0)
    for _ in range(500):
        lo, hi = sorted(rng.uniform(-5.0, 5.0, size=2))
        t = float(rng.uniform(lo, hi))
        rel_tol = float(10 ** rng.uniform(-14, -3))

        def feasible(v, t=t):
            return v <= t if side == "lo" else v >= t

        a, b = bisect_boundary(feasible, lo, hi, feasible_side=side, rel_tol=rel_tol)
        kept, other = (a, b) if side == "lo" else (b, a)
        assert feasible(kept) and not feasible(other) or kept == t  # the boundary lies between the ends
        assert lo <= a <= t <= b <= hi
        assert b - a <= rel_tol * abs(b) or b - a <= 2.0**-50 * max(abs(a), abs(b))  # tolerance or float spacing


def test_a_loop_without_a_limit_is_refused():
    with pytest.raises(ValueError, match="rel_tol > 0 or a max_iter"):
        bisect_boundary(lambda v: v < 0.5, 0.0, 1.0, feasible_side="lo")
    with pytest.raises(ValueError, match="feasible_side must be 'lo' or 'hi'"):
        bisect_boundary(lambda v: v < 0.5, 0.0, 1.0, feasible_side="low", rel_tol=1e-3)  # type: ignore[arg-type]


def test_max_iter_counts_the_halvings():
    calls = []
    lo, hi = bisect_boundary(lambda v: calls.append(v) or v <= 0.3, 0.0, 1.0, feasible_side="lo", max_iter=10)
    assert len(calls) == 10 and hi - lo == 2.0**-10 and lo <= 0.3 < hi
