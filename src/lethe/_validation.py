"""Parameter checks whose errors say name, rule and value."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp

T = TypeVar("T")


def store_init_args(estimator: Any, args: Mapping[str, Any]) -> None:
    """Keep every argument of ``type(estimator).__init__`` as an attribute of the same name, unchanged.

    scikit-learn's estimator convention: ``__init__`` stores its arguments and does nothing else (no validation, no
    logic), and ``get_params``/``clone`` read them back by the names in the signature. Every estimator's
    ``__init__`` calls ``store_init_args(self, locals())`` instead of one assignment per parameter, so the stored
    attributes and the signature agree by construction.
    """
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for name, p in inspect.signature(type(estimator).__init__).parameters.items():
        if name != "self" and p.kind not in skip:
            setattr(estimator, name, args[name])


def check_real(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise ``TypeError``/``ValueError`` if it is not a finite real."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number. Found {value!r} of type {type(value).__name__}.")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite. Found {value}.")
    return v


def _check_real_in(name: str, value: Any, inside: Callable[[float], bool], rule: str) -> float:
    """:func:`check_real`, then ``ValueError("<name> must be <rule>. Found <value>.")`` unless ``inside(v)``."""
    v = check_real(name, value)
    if not inside(v):
        raise ValueError(f"{name} must be {rule}. Found {value}.")
    return v


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    return _check_real_in(name, value, lambda v: v > 0, "> 0")


def check_nonnegative(name: str, value: Any) -> float:
    """A finite real number >= 0."""
    return _check_real_in(name, value, lambda v: v >= 0, ">= 0")


def check_open_unit(name: str, value: Any) -> float:
    """A real number in the open interval (0, 1) (e.g. δ)."""
    return _check_real_in(name, value, lambda v: 0.0 < v < 1.0, "in the open interval (0, 1)")


def check_positive_int(name: str, value: Any) -> int:
    """An integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer. Found {value!r} of type {type(value).__name__}.")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1. Found {value}.")
    return int(value)


def check_nonnegative_int(name: str, value: Any) -> int:
    """An integer >= 0 (anything with ``__index__`` but a bool, e.g. a count of steps)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer. Found {value!r} of type {type(value).__name__}.")
    k = int(value)
    if k < 0:
        raise ValueError(f"{name} must be >= 0. Found {k}.")
    return k


def check_each(check: Callable[[str, Any], T], **values: Any) -> tuple[T, ...]:
    """``check(name, value)`` for each keyword argument, in order; the checked values as a tuple.

    >>> lipschitz, sigma2 = check_each(check_positive, lipschitz=1, sigma2=0.5)
    >>> lipschitz, sigma2
    (1.0, 0.5)
    """
    return tuple(check(name, value) for name, value in values.items())


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}. Found {value!r}.")
    return str(value)


def check_finite_matrix(name: str, X: Any, *, ndim: int = 2) -> np.ndarray:
    """A float64 array of the given rank with only finite values."""
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric array-like. Could not convert: {exc}") from exc
    if A.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array. Found shape {A.shape}.")
    # one pass without an n × d temporary: NaN and ±inf propagate to the sum; only if it is not finite (which huge
    # finite values can also cause) are the entries examined one by one
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(A))
    if not math.isfinite(total) and not np.all(np.isfinite(A)):
        bad = np.argwhere(~np.isfinite(A))[0]
        where = tuple(int(i) for i in bad)
        raise ValueError(f"{name} must contain only finite values. Found {A[where]} at index {where}.")
    return A


def check_renyi_order(name: str, q: Any) -> float:
    """A Rényi order q > 1 (finite)."""
    q = check_positive(name, q)
    if q <= 1.0:
        raise ValueError(f"{name} (Rényi order) must be > 1. Found {q}.")
    return q


# -- rows in the unit ball ------------------------------------------------------------------------------------------
#: Rows are accepted with ‖xᵢ‖₂ ≤ 1 + ROW_NORM_TOLERANCE (float64 data; the certified bounds assume ρ = 1 + this,
#: :data:`lethe.certified.bounds.ROW_NORM_TOLERANCE`).
_ROW_NORM_TOLERANCE = 1e-9
#: The largest rounding slack accepted for data that arrives in a lower precision (float32: (d + 2) ε₃₂).
_MAX_ROUNDING_SLACK = 1e-3


def row_norms(X: Any) -> np.ndarray:
    """Euclidean norms of the rows of X without overflow or underflow: ‖xᵢ‖ = mᵢ ‖xᵢ/mᵢ‖ with mᵢ = maxⱼ |xᵢⱼ|.

    A row with entries ~1e200 has a finite norm here (squaring would overflow to inf); a norm that is itself above
    the float64 range is returned as ``inf``. A SciPy sparse matrix gets the same rule on its stored values.
    """
    if sp.issparse(X):
        canonical = sp.isspmatrix_csr(X) and X.dtype == np.float64 and X.has_canonical_format
        return _sparse_row_norms(X if canonical else canonical_csr(X))[0]
    X = np.asarray(X, dtype=np.float64)
    # Unscaled first (one read of X, no n × d temporary): Σⱼ xᵢⱼ² neither overflows nor loses accuracy to
    # underflow when it lies in [2⁻⁹⁰⁰, 2⁹⁰⁰] (each xᵢⱼ² ≤ the sum, so none overflows; the squares that underflow are
    # < 2⁻¹⁰²² each, at most d·2⁻¹⁰²² ≪ 2⁻⁹⁰⁰·u in all). Other rows (and non-finite sums) take the scaled rule.
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        sq = np.einsum("ij,ij->i", X, X)
    out = np.sqrt(sq)
    odd = ~((sq >= 2.0 ** -900) & (sq <= 2.0 ** 900))  # a zero sum may hide nonzero entries whose squares underflow
    if odd.any():
        Xo = X[odd]
        m = np.max(np.abs(Xo), axis=1) if X.shape[1] else np.zeros(Xo.shape[0])
        safe = np.where(m > 0, m, 1.0)
        S = Xo / safe[:, None]
        with np.errstate(over="ignore"):
            out[odd] = safe * np.sqrt(np.einsum("ij,ij->i", S, S)) * (m > 0)
    return out


def _sparse_row_norms(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a CSR matrix: (‖xᵢ‖, mᵢ, ‖xᵢ/mᵢ‖) per row by the dense rule of :func:`row_norms` (mᵢ = maxⱼ |xᵢⱼ| over
    the stored values; zero rows have norm 0), without forming a dense copy."""
    n = X.shape[0]
    counts = np.diff(X.indptr)
    rows = np.repeat(np.arange(n), counts)
    a = np.abs(X.data)
    m = np.zeros(n)
    np.maximum.at(m, rows, a)
    safe = np.where(m > 0, m, 1.0)
    q = X.data / safe[rows]
    s = np.sqrt(np.bincount(rows, weights=q * q, minlength=n))
    with np.errstate(over="ignore"):
        return safe * s * (m > 0), m, s


def _scale_sparse_rows_onto_sphere(X: sp.csr_matrix, which: np.ndarray) -> None:
    """In place: xᵢ ↦ (xᵢ/mᵢ)/‖xᵢ/mᵢ‖ for the rows ``which`` (bool mask) of a CSR matrix (the rule of
    :func:`normalize_rows`, same arithmetic)."""
    _, m, s = _sparse_row_norms(X)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    sel = which[rows] & (m[rows] > 0)
    X.data[sel] = (X.data[sel] / m[rows[sel]]) / s[rows[sel]]


def rounding_slack(dtype: Any, d: int) -> float:
    """How far above 1 the computed norm of a row normalised in ``dtype`` can come out: (d + 2) ε(dtype), at least
    the float64 tolerance 1e-9 and at most 1e-3 (normalising costs at most d additions, a square root and a
    division, each with relative error ≤ ε)."""
    try:
        eps = float(np.finfo(np.dtype(dtype)).eps) if np.issubdtype(np.dtype(dtype), np.floating) else 0.0
    except TypeError:
        eps = 0.0
    return float(min(max(_ROW_NORM_TOLERANCE, (d + 2) * eps), _MAX_ROUNDING_SLACK))


def unit_row_error(name: str, row: int, norm: float, how: str = "normalize_rows=True") -> ValueError:
    """The one message for a row outside the unit ball (Guo et al. 2020, Thm 1 needs ‖xᵢ‖ ≤ 1): which row of
    ``name``, its norm, and ``how`` to normalise."""
    return ValueError(f"Every row of {name} must have L2 norm <= 1 (Guo et al. 2020, Thm 1). Row {row} has norm "
                      f"{format_norm(norm)}; rescale the features or ask for row normalisation ({how}).")


def format_norm(v: float) -> str:
    """A norm printed so that a value just above 1 does not print as "1" (e.g. ``"1 + 2e-09"``)."""
    s = f"{v:.6g}"
    if 1.0 < v and float(s) <= 1.0:
        return f"1 + {v - 1.0:.3g}"
    return s


def canonical_csr(X: Any, name: str = "X", *, copy: bool = True) -> sp.csr_matrix:
    """A canonical float64 CSR matrix (sorted indices, duplicates summed) with finite stored values: a new copy, or
    with ``copy=False`` possibly sharing ``X``'s arrays (the one check of sparse input, for the estimators and for
    :func:`lethe.certified.data.check_data_matrix`)."""
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix. Found shape {X.shape}.")
    try:
        A = sp.csr_matrix(X, dtype=np.float64, copy=copy)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric sparse matrix. Could not convert: {exc}") from exc
    A.sum_duplicates()
    A.sort_indices()
    if not np.all(np.isfinite(A.data)):
        bad = int(np.flatnonzero(~np.isfinite(A.data))[0])
        row = int(np.searchsorted(A.indptr, bad, side="right") - 1)
        raise ValueError(f"{name} must contain only finite values. Found {A.data[bad]} at index "
                         f"({row}, {int(A.indices[bad])}).")
    return A


def normalize_rows(X: Any) -> np.ndarray:
    """xᵢ ↦ xᵢ / max(1, ‖xᵢ‖₂): the one row-normalisation rule of lethe (fit, predict, the service).

    Rows inside the unit ball are returned unchanged (so the same map can be applied at prediction); zero rows stay
    zero; rows with huge entries (‖xᵢ‖ would overflow, e.g. entries ~1e200) are scaled correctly, never zeroed:
    the division uses xᵢ/mᵢ and ‖xᵢ/mᵢ‖ with mᵢ = maxⱼ |xᵢⱼ| (:func:`row_norms`). Returns a new float64 array.
    Non-finite entries raise ``ValueError``.

    A SciPy sparse matrix is handled by the same rule on its stored values and returned as a new canonical float64
    CSR matrix (never densified).

    >>> normalize_rows(np.array([[3e200, 4e200], [0.3, 0.4], [0.0, 0.0]])).tolist()
    [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]
    """
    if sp.issparse(X):
        A = canonical_csr(X)
        norms = _sparse_row_norms(A)[0]
        with np.errstate(over="ignore"):
            _scale_sparse_rows_onto_sphere(A, norms > 1.0)
        return A
    X = np.array(X, dtype=np.float64, copy=True)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array. Found shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[0]
        raise ValueError(f"X must contain only finite values. Found {X[tuple(bad)]} at index {tuple(bad)}.")
    if X.shape[0] == 0 or X.shape[1] == 0:
        return X
    m = np.max(np.abs(X), axis=1)
    big = m > 0
    S = X[big] / m[big, None]
    s = np.sqrt(np.einsum("ij,ij->i", S, S))  # ‖xᵢ/mᵢ‖ ∈ [1, √d]
    with np.errstate(over="ignore", divide="ignore"):
        outside = s * m[big] > 1.0  # ‖xᵢ‖ > 1 (an overflow to inf also counts as outside)
    rows = np.flatnonzero(big)[outside]
    X[rows] = S[outside] / s[outside, None]
    return X


def check_unit_rows(X: Any, *, normalize: bool = False, source_dtype: Any = None, name: str = "X") -> Any:
    """Bring X into the unit ball, the rule behind every certificate of Guo et al. 2020 (‖xᵢ‖₂ ≤ 1, Thm 1).

    * ``normalize=True``: :func:`normalize_rows`.
    * ``normalize=False``: a row with ‖xᵢ‖ > 1 + slack raises ``ValueError`` naming the row and its norm; a row
      just above 1 but within the rounding slack of the data's own precision (``source_dtype``; float32 data
      normalised in float32 has norms up to 1 + (d + 2) ε₃₂, :func:`rounding_slack`) is a rounding artefact: it is
      scaled onto the unit sphere. Rows within 1 + 1e-9 are left as they are (the bounds allow them).

    Returns float64 rows with norm ≤ 1 + 1e-9 (X itself, modified in place where rows are scaled). A CSR matrix
    (float64, canonical) follows the same rule on its stored values and stays sparse.
    """
    norms = row_norms(X)
    over = norms > 1.0 + _ROW_NORM_TOLERANCE
    if not over.any():
        return X
    if normalize:
        return normalize_rows(X)
    slack = rounding_slack(source_dtype if source_dtype is not None else X.dtype, X.shape[1])
    bad = np.flatnonzero(norms > 1.0 + slack)
    if bad.size:
        raise unit_row_error(name, int(bad[0]), float(norms[int(bad[0])]),
                             "normalize_rows=True, or lethe.preprocessing.normalize_rows")
    if sp.issparse(X):
        _scale_sparse_rows_onto_sphere(X, over)
        return X
    X[over] = normalize_rows(X[over])
    return X
