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


def test_check_nonnegative_int_accepts_integers_and_rejects_the_rest():
    import numpy as _np

    from lethe._validation import check_nonnegative_int

    assert check_nonnegative_int("k", 0) == 0 and check_nonnegative_int("k", _np.int64(7)) == 7
    with pytest.raises(TypeError, match=r"k must be an integer. Found True of type bool"):
        check_nonnegative_int("k", True)
    with pytest.raises(TypeError, match=r"k must be an integer. Found 1.0"):
        check_nonnegative_int("k", 1.0)
    with pytest.raises(ValueError, match=r"k must be >= 0. Found -1"):
        check_nonnegative_int("k", -1)


def test_check_each_checks_every_value_in_order_and_names_the_first_bad_one():
    from lethe._validation import check_each, check_positive

    assert check_each(check_positive, a=1, b=2.5) == (1.0, 2.5)
    with pytest.raises(ValueError, match=r"^b must be > 0. Found 0"):
        check_each(check_positive, a=1, b=0, c=-1)
