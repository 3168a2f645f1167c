"""Zarr data planes computed on a Dask cluster (issue 14): the curator can keep a dataset's features in a Zarr store
and train and remove on a ``dask.distributed`` cluster given by its address (a ``LocalCluster`` by default).

A dataset registered with ``store="zarr"`` (``lethe dataset add --store zarr``) keeps its features in
``<data_dir>/data/<uuid>.zarr``: one uncompressed Zarr v3 array, N × d float64, in chunks of :data:`ZARR_CHUNK_ROWS`
rows (the plain ``bytes`` codec, little-endian: chunk k is the file ``c/k/0`` holding rows k·C … k·C + C − 1 as raw
float64). Its labels stay in the fixed-width ``.labels`` file of :mod:`lethe.curator.dataplane`. Everything else —
record ids, the active-row mask, publication before erasure — is the data plane's.

* **Compute.** :func:`open_features` returns ``da.from_zarr`` of the store opened *read-only*, chunked in tasks of
  :data:`TASK_ROWS` rows: every training pass and anchor rebuild is a map-reduce on the cluster
  (:mod:`lethe.certified.dask_backend`), a removal reads only the removed rows' Zarr chunks. The cluster is
  :func:`configure`-d once per process (``lethe serve --dask-address tcp://host:8786``); without an address the
  first Zarr dataset opened starts a ``LocalCluster`` of 2 worker processes on 127.0.0.1. Workers read the store by
  its path: on a multi-machine cluster the data directory must be on a file system they share.
* **Erasure.** The estimator never writes the read-only store (its row zeroing is the caller's job for a read-only
  store, :meth:`lethe.certified.dask_backend.DaskBackend.zero_rows`). After a batch is published,
  :func:`erase_rows` overwrites each removed row's 8·d bytes *in place* in its chunk file (``pwrite`` of zeros,
  fsync) — as :meth:`~lethe.curator.dataplane.MatrixStore.erase_rows` does for the fixed-width file: O(d) per
  record, the chunk is not rewritten elsewhere.
* **Limits.** Mechanisms that keep no warm state (no :attr:`~lethe.families.Capability.WARM`) gather the present rows
  into memory, as for the
  fixed-width plane; training a new model after removals copies the present rows once into a temporary Zarr store
  (the estimator's own copy, :func:`lethe.certified.dask_backend.own_zarr_copy`), deleted after training.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from lethe.curator.files import fsync_path

#: Rows per Zarr chunk: a removal reads (and erasure rewrites in place) ZARR_CHUNK_ROWS × d × 8 bytes at most.
ZARR_CHUNK_ROWS = 4096
#: Rows per Dask task of a pass over the features (a multiple of ZARR_CHUNK_ROWS; 210 MB at d = 100).
TASK_ROWS = 262_144
ZARR_SUFFIX = ".zarr"

_lock = threading.Lock()
_address: str | None = None
_client: Any = None
_cluster: Any = None


def is_zarr(relpath: str) -> bool:
    """Whether a data-plane path names a Zarr store (a directory ``<uuid>.zarr``)."""
    return str(relpath).endswith(ZARR_SUFFIX)


def configure(address: str | None) -> None:
    """Compute on the Dask scheduler at ``address`` (e.g. ``tcp://10.0.0.5:8786``); ``None``: a ``LocalCluster``
    started on first use. A client made earlier by this module is closed."""
    global _address
    if address is not None and (not isinstance(address, str) or "://" not in address):
        raise ValueError(f"dask address must be a scheduler URL such as 'tcp://127.0.0.1:8786'. Found {address!r}.")
    with _lock:
        _close_locked()
        _address = address


def configured_address() -> str | None:
    """The scheduler address given to :func:`configure` (None: a ``LocalCluster`` on first use)."""
    return _address


def client() -> Any:
    """The ``dask.distributed.Client`` Zarr planes compute on (connected or started on first use; it is the default
    scheduler of this process from then on)."""
    global _client, _cluster
    with _lock:
        if _client is not None and getattr(_client, "status", "") == "running":
            return _client
        _close_locked()
        from distributed import Client, LocalCluster

        if _address is not None:
            _client = Client(_address, set_as_default=True)
        else:
            _cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                    dashboard_address=None)
            _client = Client(_cluster, set_as_default=True)
        return _client


def close() -> None:
    """Close the client (and the ``LocalCluster``) this module started."""
    with _lock:
        _close_locked()


def _close_locked() -> None:
    global _client, _cluster
    if _client is not None:
        _client.close()
    if _cluster is not None:
        _cluster.close()
    _client = _cluster = None


def write_features(root: Path, name: str, X: np.ndarray) -> Path:
    """Write X (N × d) as a new uncompressed Zarr store ``root/<name>.zarr`` (files 0600, directories 0700; written
    under a temporary name, fsynced, then renamed). Returns its path."""
    import zarr

    n, d = X.shape
    final = root / (name + ZARR_SUFFIX)
    tmp = root / (name + ZARR_SUFFIX + ".tmp")
    old = os.umask(0o077)
    try:
        Z = zarr.create_array(str(tmp), shape=(n, d), chunks=(max(1, min(ZARR_CHUNK_ROWS, n)), max(d, 1)),
                              dtype="<f8", compressors=None, fill_value=0.0)
        step = max(ZARR_CHUNK_ROWS, (64 << 20) // max(8 * d, 1) // ZARR_CHUNK_ROWS * ZARR_CHUNK_ROWS)
        for start in range(0, n, step):
            Z[start:start + step] = np.asarray(X[start:start + step], dtype=np.float64)
    finally:
        os.umask(old)
    for dirpath, _dirs, files in os.walk(tmp):
        for f in files:
            fsync_path(Path(dirpath) / f)
        fsync_path(Path(dirpath))
    os.replace(tmp, final)
    fsync_path(root)
    return final


def _plain_layout(path: Path) -> tuple[int, int] | None:
    """(chunk rows, d) if the store is the plain layout :func:`write_features` writes (raw little-endian float64
    chunks ``c/k/0``), else None."""
    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return None
    codecs = meta.get("codecs", [])
    enc = meta.get("chunk_key_encoding", {})
    grid = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", [])
    if (meta.get("zarr_format") != 3 or meta.get("data_type") != "float64" or len(codecs) != 1
            or codecs[0].get("name") != "bytes" or codecs[0].get("configuration", {}).get("endian") != "little"
            or enc.get("name") != "default" or enc.get("configuration", {}).get("separator", "/") != "/"
            or len(grid) != 2 or int(grid[1]) != int(meta["shape"][1])):
        return None
    return int(grid[0]), int(grid[1])


def open_features(path: Path, n: int, d: int) -> Any:
    """The features as ``da.from_zarr`` of the store opened read-only (tasks of :data:`TASK_ROWS` rows), on the
    configured cluster."""
    import dask.array as da
    import zarr

    client()
    Z = zarr.open_array(str(path), mode="r")
    if tuple(Z.shape) != (n, d):
        raise ValueError(f"The Zarr store {path.name} holds {tuple(Z.shape)}; the dataset has {(n, d)}.")
    return da.from_zarr(Z, chunks=(max(1, min(TASK_ROWS, n)), d))


def erase_rows(path: Path, rows: np.ndarray) -> int:
    """Overwrite each row of ``rows`` with zeros in place in its chunk file (``pwrite`` of 8·d zero bytes at the
    row's offset; each file touched is fsynced): O(d) per row. A chunk never written holds no data (Zarr's fill
    value). Refuses a store that is not in the plain layout (the bytes could not be located). Returns rows erased."""
    layout = _plain_layout(path)
    if layout is None:
        raise ValueError(f"The Zarr store {path.name} is not in lethe's plain layout (uncompressed float64 chunks): "
                         "its rows cannot be erased in place.")
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    C, d = layout
    from lethe.certified.dask_backend import forget_cached_passes
    zeros = bytes(8 * d)
    for k in np.unique(rows // C).tolist():
        chunk = path / "c" / str(k) / "0"
        try:
            fd = os.open(chunk, os.O_WRONLY)
        except FileNotFoundError:
            continue
        try:
            for r in rows[rows // C == k].tolist():
                os.pwrite(fd, zeros, (r - k * C) * 8 * d)
            os.fsync(fd)
        finally:
            os.close(fd)
    forget_cached_passes()  # memoised passes of arrays over this store hold the values of before
    return int(rows.size)


#: Estimator options that rewrite the rows (a constant column, a row normalisation): a Zarr store is read-only to
#: the estimator (its rows are erased in place by :func:`erase_rows`), so they cannot be applied to it.
ROW_REWRITING = ("fit_intercept", "normalize_rows")


def row_options(defaults: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of a model trained on a Zarr dataset: ``params`` over the ``defaults`` without the options
    that rewrite rows (:data:`ROW_REWRITING`; a tabular dataset's default ``fit_intercept=True`` is dropped, so the
    model trains without an intercept); an explicit ``fit_intercept=true`` or ``normalize_rows=true`` is refused with
    the fix (``ValueError``)."""
    asked = [k for k in ROW_REWRITING if params.get(k) is True]
    if asked:
        fix = (f"Train with --param {asked[0]}=false (the default for Zarr datasets)"
               + ("; for an intercept, add a column holding 1 to the table and declare it in the schema "
                  "({name: one, type: numeric, lower: 0, upper: 1}), or register the dataset with --store files"
                  if asked[0] == "fit_intercept" else "; normalise the rows before registering them"))
        raise ValueError(f"{asked[0]} must be false for a dataset kept in Zarr (--store zarr): the estimator cannot "
                         f"rewrite the rows of its read-only store. Found {asked[0]}=true. {fix}.")
    return {**{k: v for k, v in defaults.items() if k not in ROW_REWRITING}, **params}


def active_rows(X: Any, active: np.ndarray) -> Any:
    """The present rows: a lazy selection for Dask data (never gathered), a NumPy copy otherwise."""
    from lethe.certified.data import backend_of

    if backend_of(X).name == "dask":
        return backend_of(X).subset(X, active)
    return np.asarray(X[active])


__all__ = ["TASK_ROWS", "ZARR_CHUNK_ROWS", "active_rows", "client", "close", "configure", "configured_address",
           "erase_rows", "is_zarr", "ROW_REWRITING", "row_options", "open_features", "write_features"]
