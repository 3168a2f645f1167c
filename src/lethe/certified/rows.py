"""Checks of the rows a certified-removal operation reads: the unit-ball rule of Guo et al. 2020 (Thm 1) and the
row positions of a removal."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lethe._validation import unit_row_error
from lethe.certified.bounds import ROW_NORM_TOLERANCE
from lethe.certified.data import DataMatrix, backend_of

#: Scale of the features and of the constant feature when ``fit_intercept=True`` for the logistic loss: the row
#: [xᵢ/√2, 1/√2] has ‖·‖² = ‖xᵢ‖²/2 + 1/2 ≤ 1 whenever ‖xᵢ‖ ≤ 1, so the augmented data keep Thm 1's assumption.
INTERCEPT_SCALE = 1.0 / math.sqrt(2.0)


def check_row_norms(X: DataMatrix, name: str = "X") -> None:
    """Raise ``ValueError`` naming the first row with ‖xᵢ‖₂ > 1 (the theory of Guo et al. 2020 needs ‖xᵢ‖ ≤ 1)."""
    norms = np.sqrt(backend_of(X).row_sq_norms(X))
    bad = np.flatnonzero(norms > 1.0 + ROW_NORM_TOLERANCE)
    if bad.size:
        raise unit_row_error(name, int(bad[0]), float(norms[int(bad[0])]))


def check_indices(indices: Any, n: int, active: np.ndarray, n_active: int | None = None, *,
                  training: bool = False) -> np.ndarray:
    """``indices`` as distinct int64 positions of active rows, leaving at least one; ``n_active`` is the number of
    rows ``active`` marks (the caller has counted them; None: not checked). ``training=True``: the messages say
    "training-row" (the estimators' :func:`lethe.estimator_data.removal_rows`)."""
    rows, row = ("training-row indices in", "Training row") if training else ("in", "Row")
    idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1:
        raise ValueError(f"indices must be a 1-D sequence of row indices. Found shape {idx.shape}.")
    if idx.size == 0:
        raise ValueError("indices must name at least one row. Found an empty sequence.")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be integers. Found dtype {idx.dtype}.")
    if idx.size == 1:  # one row (the hot path of a removal): accepted on Python ints; else the checks below say why
        i = int(idx[0])
        if 0 <= i < n and active[i] and (n_active is None or n_active > 1):
            return np.array([i], dtype=np.int64)
    if idx.min() < 0 or idx.max() >= n:  # (the first offender is named; scalar checks first: the one-row case)
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        raise ValueError(f"indices must be {rows} [0, {n}). Found {int(idx[bad[0]])}.")
    if idx.size > 1:
        uniq, counts = np.unique(idx, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(f"indices must be distinct. Found {int(uniq[counts > 1][0])} more than once.")
    if not active[idx].all():
        gone = np.flatnonzero(~active[idx])
        raise ValueError(f"{row} {int(idx[gone[0]])} was already removed.")
    if n_active is not None and idx.size >= n_active:
        raise ValueError(f"Cannot remove all {n_active} remaining rows: one must remain.")
    return idx.astype(np.int64)


def owned_mask(mask: np.ndarray) -> np.ndarray:
    """``mask`` made read-only and returned: the estimators' ``active_`` is written only by the model itself
    (:func:`set_rows`, under its lock, together with its solver caches), so ``model.active_[i] = ...`` from outside
    raises instead of desynchronising them, and a removal may skip comparing it in full with its cache's copy
    (:meth:`lethe.certified.cache.NewtonCache.synced_count` with ``owned``)."""
    mask.flags.writeable = False
    return mask


def set_rows(mask: np.ndarray, idx: np.ndarray, value: bool) -> None:
    """``mask[idx] = value``, also on a mask its owner keeps read-only (made writable for the change and read-only
    again: :meth:`lethe.certified.mechanism.CertifiedRemoval.remove` with ``clear_active``, the estimators'
    ``active_``)."""
    if mask.flags.writeable:
        mask[idx] = value
        return
    mask.flags.writeable = True
    try:
        mask[idx] = value
    finally:
        mask.flags.writeable = False


def squared_loss_rounding_floor(X: Any, y: np.ndarray, lam: float) -> float:
    """A tolerance the direct solve of ridge least squares can reach in float64, where 1e-9 λn may not be.

    The minimiser of Σ(wᵀxᵢ − yᵢ)² + λn/2‖w‖² has λn/2‖w‖² ≤ ‖y‖² (compare with w = 0), so ‖w‖ ≤ W = ‖y‖√(2/(λn)).
    A backward-stable solve of Hw = 2Xᵀy with H = 2XᵀX + λnI, H and Xᵀy formed in float64, leaves a gradient of
    norm about (n + d) u ((2‖X‖_F² + λn) W + 2‖X‖_F ‖y‖) (u = 2⁻⁵³; Higham, Thm 10.4 and §3.5); we allow 8× that.
    This only sets where training stops: the certificate charges the residual actually measured.
    """
    n, d = X.shape
    u = float(np.finfo(np.float64).eps) / 2
    fro = float(np.linalg.norm(X)) if isinstance(X, np.ndarray) else math.sqrt(backend_of(X).frobenius_sq(X))
    ny = float(np.linalg.norm(y))
    W = ny * math.sqrt(2.0 / (lam * n))
    return 8.0 * (n + d) * u * ((2 * fro * fro + lam * n) * W + 2 * fro * ny)


__all__ = ["INTERCEPT_SCALE", "check_indices", "check_row_norms", "owned_mask", "set_rows",
           "squared_loss_rounding_floor"]
