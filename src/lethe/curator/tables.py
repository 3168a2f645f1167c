"""Reading a dataset to register: CSV, Parquet or ``.npz`` (no pickle) with a key column and a label column."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUFFIXES = (".csv", ".parquet", ".pq", ".npz")
MAX_KEY_LENGTH = 512


@dataclass(frozen=True, eq=False)
class Table:
    """Keys (strings), features X (n, d) float64, labels y (n,) — float64, or str for text labels — and the feature
    names."""

    keys: list[str]
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]


def read_table(path: str | Path, *, key: str, label: str, features: list[str] | None = None) -> Table:
    """Read ``path`` and validate it.

    Parameters
    ----------
    path : file name ending in ``.csv``, ``.parquet``/``.pq`` or ``.npz``
    key, label : names of the key and label columns (for ``.npz``: names of 1-D arrays)
    features : feature columns (default: every other column). For ``.npz``: the names of 1-D arrays, or one name of
        a 2-D array (default ``"X"``).

    Raises ``ValueError`` naming the rule and the offending value (duplicate or empty key, non-finite value, missing
    column, unsupported suffix); ``FileNotFoundError`` if the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Dataset file {str(path)!r} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"The dataset file must end in one of {SUFFIXES}. Found {path.name!r}.")
    if suffix == ".npz":
        keys_raw, X, y, names = _read_npz(path, key, label, features)
    else:
        keys_raw, X, y, names = _read_frame(path, suffix, key, label, features)
    keys = [_key_text(k) for k in keys_raw]
    _check_keys(keys, key)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = _labels(np.asarray(y).reshape(-1))
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"Features must form a 2-D array with at least one column. Found shape {X.shape}.")
    if X.shape[0] != y.shape[0] or X.shape[0] != len(keys):
        raise ValueError(f"Keys, features and labels must have the same number of rows. Found {len(keys)}, "
                         f"{X.shape[0]} and {y.shape[0]}.")
    if X.shape[0] < 2:
        raise ValueError(f"A dataset needs at least 2 records. Found {X.shape[0]}.")
    for name, arr in (("features", X), ("labels", y if y.dtype.kind == "f" else np.zeros(0))):
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            row = int(bad[0][0])
            raise ValueError(f"{name} must be finite. Found a non-finite value in the row with key {keys[row]!r}.")
    return Table(keys=keys, X=X, y=y, feature_names=names)


def _labels(y: np.ndarray) -> np.ndarray:
    """Numeric labels as float64; text labels (any non-numeric value) as str, refused if empty."""
    if y.dtype.kind in "iufb":
        return y.astype(np.float64)
    try:
        return y.astype(np.float64)
    except (TypeError, ValueError):
        pass
    out = np.asarray([v.decode() if isinstance(v, bytes) else str(v) for v in y.tolist()])
    empty = np.flatnonzero(np.char.str_len(out) == 0) if out.size else np.zeros(0, dtype=int)
    if empty.size:
        raise ValueError(f"Labels must not be empty. Found an empty label in row {int(empty[0])}.")
    return out


def _key_text(k: object) -> str:
    if isinstance(k, bytes):
        return k.decode()
    if isinstance(k, float | np.floating) and float(k).is_integer():
        return str(int(k))
    return str(k)


def _check_keys(keys: list[str], column: str) -> None:
    seen: set[str] = set()
    for k in keys:
        if not k or k.strip() == "" or k == "nan":
            raise ValueError(f"Key column {column!r} must not contain empty values. Found {k!r}.")
        if len(k) > MAX_KEY_LENGTH:
            raise ValueError(f"Keys must have at most {MAX_KEY_LENGTH} characters. Found one with {len(k)}.")
        if k in seen:
            raise ValueError(f"Key column {column!r} must hold unique keys. Found {k!r} more than once.")
        seen.add(k)


def _read_frame(path: Path, suffix: str, key: str, label: str,
                features: list[str] | None) -> tuple[list[object], np.ndarray, np.ndarray, list[str]]:
    import pandas as pd

    if suffix == ".csv":
        df = pd.read_csv(path, dtype={key: str}, keep_default_na=False)
    else:
        df = pd.read_parquet(path)
    cols = [str(c) for c in df.columns]
    df.columns = cols
    for name in (key, label, *(features or [])):
        if name not in cols:
            raise ValueError(f"Column {name!r} is not in {path.name}. Columns: {cols}.")
    if features is None:
        features = [c for c in cols if c not in (key, label)]
    if not features:
        raise ValueError(f"{path.name} has no feature columns besides {key!r} and {label!r}.")
    try:
        X = df[features].to_numpy(dtype=np.float64)
        y = df[label].to_numpy()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Feature and label columns must be numeric: {exc}") from exc
    return list(df[key].tolist()), X, y, list(features)


def _read_npz(path: Path, key: str, label: str,
              features: list[str] | None) -> tuple[list[object], np.ndarray, np.ndarray, list[str]]:
    with np.load(path, allow_pickle=False) as z:
        names = list(z.files)
        features = features or ["X"]
        for name in (key, label, *features):
            if name not in names:
                raise ValueError(f"Array {name!r} is not in {path.name}. Arrays: {names}.")
        try:
            keys = z[key]
            y = z[label]
            if len(features) == 1 and z[features[0]].ndim == 2:
                X = z[features[0]]
                fnames = [f"{features[0]}{j}" for j in range(X.shape[1])]
            else:
                X = np.column_stack([z[f] for f in features])
                fnames = list(features)
        except ValueError as exc:  # object arrays need pickle: refused
            raise ValueError(f"{path.name}: arrays must not need pickle (object dtype): {exc}") from exc
    if keys.ndim != 1:
        raise ValueError(f"Key array {key!r} must be 1-D. Found shape {keys.shape}.")
    if not np.issubdtype(X.dtype, np.number) or not (np.issubdtype(y.dtype, np.number) or y.dtype.kind in "US"):
        raise ValueError(f"Feature arrays must be numeric and labels numeric or text. Found {X.dtype} and {y.dtype}.")
    return list(keys.tolist()), X, y, fnames


def normalize_rows(X: np.ndarray) -> np.ndarray:
    """xᵢ / max(1, ‖xᵢ‖₂): rows already inside the unit ball are unchanged (the same map is applied at predict)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    return X / np.maximum(norms, 1.0)[:, None]


__all__ = ["Table", "normalize_rows", "read_table"]
