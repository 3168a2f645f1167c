"""The data and record keys of the certified estimators' fits (:mod:`lethe.certified.estimators`): which inputs are
accepted (dense, SciPy CSR, Dask arrays and DataFrames), the estimator's own copy of its training rows (removal zeroes
rows of
it), the arrays a model file stores them in, and the ONE meaning of ``remove(indices=None, *, keys=None)``
(:func:`removal_rows`) shared by every :class:`lethe.protocols.Unlearner`. No math: validation and bookkeeping."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from lethe.certified.data import check_data_matrix
from lethe.certified.rows import check_indices
from lethe.keymap import key_rows


# -- data backends (issue 14): fit/predict accept a SciPy sparse matrix; the mechanisms read it through
# lethe.certified.data. Only these helpers, ``_validate_X`` and ``add`` know about it.
def n_rows(X: Any) -> int:
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)


def is_dask(X: Any) -> bool:
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "compute")


def is_dask_frame(X: Any) -> bool:
    """A Dask DataFrame: turned into a Dask array by ``to_dask_array(lengths=True)`` (never into NumPy)."""
    return type(X).__module__.startswith("dask.") and hasattr(X, "to_dask_array")


def validate_input(est: BaseEstimator, X: Any, y: Any = "no_validation", **kw: Any) -> Any:
    """sklearn's ``validate_data`` accepting CSR; a Dask array is validated lazily by the data interface (one
    distributed pass) and never gathered: only ``n_features_in_`` is set (on fit) or checked (on predict)."""
    if not (is_dask(X) or is_dask_frame(X)):
        return validate_data(est, X, y, accept_sparse="csr", **kw)
    Xd = check_data_matrix("X", X)
    if kw.get("reset", True):
        est.n_features_in_ = int(Xd.shape[1])
    elif Xd.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {Xd.shape[1]} features, but {type(est).__name__} is expecting "
                         f"{est.n_features_in_} features as input.")
    if isinstance(y, str) and y == "no_validation":
        return Xd
    kw.pop("reset", None)
    yv = validate_data(est, X="no_validation", y=y, reset=False, **kw)
    if yv.shape[0] != Xd.shape[0]:
        raise ValueError(f"X and y must have the same number of rows. Found {Xd.shape[0]} and {yv.shape[0]}.")
    return Xd, yv


def margins(X: Any, W: np.ndarray) -> np.ndarray:
    """X Wᵀ as a NumPy array (a Dask product is computed on its cluster)."""
    out = X @ W
    return np.asarray(out.compute() if is_dask(out) else out)


def own_copy(X: Any) -> Any:
    """Our own float64 copy of validated training data (removal zeroes rows of it): C-ordered dense or CSR. A Dask
    array that is exactly ``da.from_zarr`` of a store is not copied: a writable store has its removed rows erased in
    place; a store opened read-only is its writer's to erase (e.g. the curator's Zarr plane, erased once a removal is
    published). Any other Dask array (a Dask DataFrame's columns, a computed array) is copied once into a Zarr store
    of our own on disk, written chunk by chunk on the cluster (``own_zarr_copy``), whose rows removal then erases."""
    if is_dask(X):
        from lethe.certified.dask_backend import own_zarr_copy, zarr_source

        return X if zarr_source(X) is not None else own_zarr_copy(X)
    if sp.issparse(X):
        return check_data_matrix("X", sp.csr_matrix(X, dtype=np.float64, copy=True))
    return np.array(X, dtype=np.float64, order="C", copy=True)


def data_arrays(X: Any) -> dict[str, np.ndarray]:
    """The arrays that store training data in a model file: ``X``, or the parts of a CSR matrix."""
    if is_dask(X):
        raise TypeError("A model trained on a Dask array cannot be saved with its data: the data stay in their "
                        "Zarr store. Found a Dask array in X_.")
    if sp.issparse(X):
        return {"X_data": X.data, "X_indices": X.indices, "X_indptr": X.indptr, "X_shape": np.asarray(X.shape)}
    return {"X": X}


def same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(type(a) is type(b) and a == b) or (
            isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
            and not isinstance(b, bool) and float(a) == float(b))
    except Exception:  # noqa: BLE001 - incomparable values are different values
        return False


def check_sample_ids(sample_ids: Any, n: int) -> np.ndarray:
    """Record keys for ``fit(..., sample_ids=...)`` of any :class:`lethe.protocols.Unlearner`: 1-D, one per row,
    distinct, integers or strings (saved without pickle). TypeError / ValueError otherwise."""
    return check_keys(sample_ids, n)


def keys_of(X: Any, sample_ids: Any) -> np.ndarray | None:
    """The record keys of a fit: ``sample_ids`` if given, else a DataFrame's index, else None (no keys)."""
    if sample_ids is not None:
        return check_keys(sample_ids, n_rows(X))
    if hasattr(X, "columns") and hasattr(X, "index") and not is_dask_frame(X):
        return check_keys(np.asarray(X.index), n_rows(X))
    return None


def removal_rows(indices: Any, keys: Any, *, active: np.ndarray, record_keys: np.ndarray | None,
                 owner: Any = None) -> np.ndarray:
    """The ONE meaning of ``remove(indices=None, *, keys=None)`` for every :class:`lethe.protocols.Unlearner`:
    distinct ORIGINAL row positions of the fit's X (rows added later get the next positions) that are still
    active, given either as ``indices`` or as record ``keys`` (``record_keys``: one per original row, removed
    ones blanked). Exactly one of the two. Returns int64 positions; raises ValueError/TypeError naming the rule.
    ``owner``: the model, whose key → row map (:func:`lethe.keymap.key_rows`) is kept between calls, so a key
    costs O(1) amortised (None: a map built for this call, O(n))."""
    if (indices is None) == (keys is None):
        raise ValueError("Give exactly one of indices (training-row positions) and keys (record keys). "
                         f"Found indices={indices!r}, keys={'None' if keys is None else '...'}.")
    if keys is not None:
        if record_keys is None:
            raise ValueError("keys: this model was fitted without record keys; pass sample_ids= to fit (or fit on "
                             "a DataFrame, whose index names the records), or remove by row index.")
        ks = np.asarray(keys)
        if ks.ndim == 0:
            ks = ks.reshape(1)
        if ks.ndim != 1 or ks.size == 0:
            raise ValueError(f"keys must be a non-empty 1-D sequence of record keys. Found shape {ks.shape}.")
        idx, missing = key_rows(owner, ks, record_keys, active)
        if missing is not None:
            raise ValueError(f"Key {missing.key!r} is not a record of this model (unknown, or already removed).")
    else:
        idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be a non-empty 1-D sequence of training-row indices. Found {indices!r}.")
    return check_indices(idx, active.shape[0], active, training=True)


def check_keys(sample_ids: Any, n: int) -> np.ndarray:
    """Record keys: 1-D, one per row, distinct, integers or strings (saved without pickle)."""
    keys = np.asarray(sample_ids)
    if keys.ndim != 1 or keys.shape[0] != n:
        raise ValueError(f"sample_ids must be a 1-D sequence with one key per row ({n}). Found shape {keys.shape}.")
    if keys.dtype == object:
        if all(isinstance(k, str) for k in keys):
            keys = keys.astype(str)
        elif all(isinstance(k, int | np.integer) and not isinstance(k, bool) for k in keys):
            keys = keys.astype(np.int64)
    if keys.dtype.kind not in "iuU":
        raise TypeError(f"sample_ids must be integers or strings. Found dtype {keys.dtype}.")
    uniq, counts = np.unique(keys, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"sample_ids must be distinct. Found {uniq[counts > 1][0]!r} more than once.")
    return keys.copy()


def check_new_keys(keys: np.ndarray, record_keys: np.ndarray, active: np.ndarray) -> None:
    """``ValueError`` if a key of rows being added is the key of a record the model holds (``record_keys`` of the
    ``active`` rows): an added row needs a key of its own."""
    taken = set(record_keys[active].tolist())
    clash = [k for k in keys.tolist() if k in taken]
    if clash:
        raise ValueError(f"sample_ids must be new keys. Found {clash[0]!r}, a record of this model.")


def check_sample_weight(sample_weight: Any, n: int) -> None:
    """``fit``'s ``sample_weight``: None or all ones (the certified objective is unweighted); ValueError otherwise."""
    if sample_weight is None:
        return
    sw = np.asarray(sample_weight, dtype=np.float64)
    if sw.shape != (n,) or not np.all(sw == 1.0):
        raise ValueError(
            "sample_weight is not supported except all ones: the certified removal of Guo et al. 2020 "
            "(and lethe's solvers and bounds) use the unweighted loss Σ ℓ(wᵀxᵢ, yᵢ). Repeat or drop rows instead. "
            f"Found weights of shape {sw.shape} with values in [{sw.min() if sw.size else 0:g}, "
            f"{sw.max() if sw.size else 0:g}].")


__all__ = ["check_keys", "check_new_keys", "check_sample_ids", "check_sample_weight", "data_arrays", "is_dask",
           "is_dask_frame", "keys_of", "margins", "n_rows", "own_copy", "removal_rows", "same_value", "validate_input"]
