"""Row checks of the data plane: an altered kept row is a fault operators see, not a silent failure of every batch.

At registration each row of a fixed-width data plane gets a 64-bit check value — a linear sketch of its features'
and label's float64 bit patterns, ``Σ_j bits_j · a_j mod 2^64`` with fixed odd multipliers ``a`` — kept beside the
features file (``<uuid>.features.rows``, 8 bytes per row, owner-only). A row erased after its deletion is all zeros
(check value 0). :func:`altered_rows` recomputes every value (O(N d), in chunks; the caller caches the result per
file state) and counts the present rows whose value changed: an edit of a kept row changes it unless the edit is
crafted against these multipliers (this detects alteration, not forgery by someone able to rewrite both files).
Datasets registered before this check (no ``.rows`` file) and Zarr stores are not checked.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

SUFFIX = ".rows"
_CHUNK = 1 << 16


def _multipliers(d: int) -> np.ndarray:
    rng = np.random.default_rng(0x1E7E_0035)
    return rng.integers(0, np.iinfo(np.uint64).max, size=d + 1, dtype=np.uint64, endpoint=True) | np.uint64(1)


def sketch(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The check value of each row of (X, y) (float64): uint64, 0 for an all-zero row."""
    X = np.ascontiguousarray(X, dtype="<f8")
    y = np.ascontiguousarray(y, dtype="<f8").reshape(-1)
    a = _multipliers(X.shape[1])
    out = np.empty(X.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, X.shape[0], _CHUNK):
            xb = X[start:start + _CHUNK].view(np.uint64)
            yb = y[start:start + _CHUNK].view(np.uint64)
            out[start:start + _CHUNK] = (xb * a[:-1]).sum(axis=1, dtype=np.uint64) + yb * a[-1]
    return out


def write(features: Path, X: np.ndarray, y: np.ndarray) -> Path:
    """Write the check values of a new data plane beside its features file (atomically, owner-only)."""
    path = features.with_name(features.name + SUFFIX)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, sketch(X, y).astype("<u8").tobytes())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def altered_rows(features: Path, labels: Path, n: int, d: int, active: np.ndarray) -> int | None:
    """The number of present rows (``active``) whose check value changed since registration; None when the plane
    has no check values (registered before them)."""
    path = features.with_name(features.name + SUFFIX)
    if not path.exists():
        return None
    stored = np.fromfile(path, dtype="<u8")
    if stored.size != n:
        return int(np.count_nonzero(active)) or 1
    X = np.memmap(features, dtype="<f8", mode="r", shape=(n, d)) if n else np.zeros((0, d))
    y = np.fromfile(labels, dtype="<f8", count=n)
    bad = 0
    for start in range(0, n, _CHUNK):
        now = sketch(np.asarray(X[start:start + _CHUNK]), y[start:start + _CHUNK])
        bad += int(np.count_nonzero((now != stored[start:start + _CHUNK]) & active[start:start + _CHUNK]))
    return bad


__all__ = ["SUFFIX", "altered_rows", "sketch", "write"]
