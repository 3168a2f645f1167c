"""The one row-normalisation rule and the intercept augmentation keep every row in the unit ball (property tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lethe._validation import check_unit_rows, normalize_rows, row_norms
from lethe.estimators import CertifiedLogisticRegression

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _exact_norms(X):
    """Row norms in 60-digit decimal arithmetic (independent of lethe; no overflow or underflow)."""
    from decimal import Context, Decimal

    ctx = Context(prec=60, Emax=10**6, Emin=-10**6)
    return np.array([float(ctx.sqrt(sum((ctx.multiply(Decimal(float(v)), Decimal(float(v))) for v in row),
                                        Decimal(0)))) for row in X])


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=finite))
def test_normalize_rows_lands_in_the_unit_ball_and_never_zeroes_a_row(X):
    Y = normalize_rows(X)
    assert np.all(np.isfinite(Y))
    assert np.all(row_norms(Y) <= 1.0 + 1e-9)
    nonzero = np.any(X != 0, axis=1)
    assert np.all(np.any(Y[nonzero] != 0, axis=1))  # 1e200 entries do not overflow to a zero row
    inside = row_norms(X) <= 1.0
    np.testing.assert_array_equal(Y[inside], X[inside])  # rows inside the ball are unchanged
    # the direction is kept: Y = X / c with c > 0 per row
    for x, yv in zip(X[nonzero], Y[nonzero], strict=True):
        j = int(np.argmax(np.abs(x)))
        assert np.sign(yv[j]) == np.sign(x[j])
        np.testing.assert_allclose(yv / yv[j], x / x[j], rtol=1e-12, atol=1e-300)


@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 5)),
              elements=st.floats(-1e150, 1e150, allow_nan=False)))
def test_row_norms_match_exact_arithmetic(X):
    np.testing.assert_allclose(row_norms(X), _exact_norms(X), rtol=1e-14)


@given(arrays(np.float64, st.tuples(st.integers(2, 6), st.integers(1, 6)), elements=finite),
       st.sampled_from(["float64", "float32"]))
def test_check_unit_rows_either_refuses_or_returns_rows_in_the_ball(X, dtype):
    with np.errstate(over="ignore"):  # float64 → float32 overflows to inf for huge entries: skipped below
        X = X.astype(dtype).astype(np.float64)
    if not np.all(np.isfinite(X)):
        return
    try:
        Y = check_unit_rows(X.copy(), source_dtype=dtype)
    except ValueError as exc:
        assert "Row" in str(exc) and "norm" in str(exc)
        assert np.max(row_norms(X)) > 1.0 + 1e-9
        return
    assert np.all(row_norms(Y) <= 1.0 + 1e-9)


@given(st.integers(0, 2**31 - 1), st.integers(1, 30), st.floats(0.0, 1.0))
def test_intercept_rows_stay_in_the_unit_ball(seed, d, scale):
    """Claim (docs/estimators.md): ‖[x/√2, 1/√2]‖ ≤ 1 whenever ‖x‖ ≤ 1, including rows on the sphere."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(20, d))
    X = normalize_rows(X * 1e3) * np.r_[1.0, rng.uniform(0, scale, size=19)][:, None]  # row 0 on the sphere
    clf = CertifiedLogisticRegression(fit_intercept=True)
    Xa = clf._validate_X(X, reset=True, params=clf._current_params())
    assert Xa.shape == (20, d + 1)
    assert np.all(_exact_norms(Xa) <= 1.0 + 1e-15)
