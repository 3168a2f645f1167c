"""check_finite_matrix: one pass without a temporary, falling back to the entry-wise check when the sum is not
finite (NaN/inf entries, or huge finite ones whose sum overflows)."""

from __future__ import annotations

import numpy as np
import pytest

from lethe._validation import check_finite_matrix


def test_huge_finite_values_whose_sum_overflows_are_accepted():
    X = np.full((4, 3), 1e308)
    assert not np.isfinite(X.sum())
    assert check_finite_matrix("X", X) is not None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_entries_are_refused_with_name_and_position(bad):
    X = np.ones((5, 4))
    X[3, 2] = bad
    with pytest.raises(ValueError, match=r"X must contain only finite values.*\(3, 2\)"):
        check_finite_matrix("X", X)


def test_inf_and_minus_inf_do_not_cancel():
    X = np.ones((2, 2))
    X[0, 0], X[1, 1] = np.inf, -np.inf
    with pytest.raises(ValueError, match="finite"):
        check_finite_matrix("X", X)
