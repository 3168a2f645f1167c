"""The data plane: where a dataset's features and labels live, so that a batch reads and erases one record in O(d).

A dataset registered by the curator keeps its features in one fixed-width matrix file and its labels in a second
one, both raw little-endian float64 (``<data_dir>/data/<uuid>.features``: N × d; ``<uuid>.labels``: N), mode 0600,
written once at registration (atomically: temporary file, fsync, rename, fsync of the directory). Record i of the
dataset is row i of both files; its database row has the id ``row_base + i`` (table ``data_planes``), so a deletion
request's record id gives its row without a lookup. The database keeps the keys (for requests), not the values.

Costs (N records, d features, m records in a batch):

* ingest: one sequential write of 8 N (d + 1) bytes plus N key rows in the database — O(N d);
* a batch: the worker reads the removed rows through a copy-on-write memory map (O(m d)); after the batch's
  transaction committed, :func:`erase_rows` overwrites each removed row in place with zeros in both files
  (``pwrite``, O(d) per record) and fsyncs them — O(m d), independent of N;
* purge of the database: SQLite deletes rows with ``secure_delete`` (the page content is overwritten with zeros) and
  a WAL checkpoint with truncation copies the batch's pages back and empties the WAL — O(pages the batch touched);
  no ``VACUUM``.

Rebuilding the worker's state after a restart reads the active-row mask from the database once (O(N)) and maps the
matrix (pages are read on demand).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import JSON, ForeignKey, Integer, Text
from sqlalchemy.orm import Mapped, mapped_column

from lethe.curator import rowcheck
from lethe.curator.files import fsync_path
from lethe.curator.store import Base

DATA_DIR = "data"
#: Where a dataset's features are kept: fixed-width files, or a Zarr store computed on a Dask cluster.
STORES = ("files", "zarr")


def _is_zarr(relpath: str) -> bool:
    return str(relpath).endswith(".zarr")


FEATURES_SUFFIX = ".features"
LABELS_SUFFIX = ".labels"


class DataPlane(Base):
    """Where the features and labels of one dataset live: two fixed-width files and the id of row 0."""

    __tablename__ = "data_planes"
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    features_path: Mapped[str] = mapped_column(Text)  # relative to the data directory
    labels_path: Mapped[str] = mapped_column(Text)
    row_base: Mapped[int] = mapped_column(Integer)  # record id of row 0: row = record id - row_base
    n_rows: Mapped[int] = mapped_column(Integer)
    n_features: Mapped[int] = mapped_column(Integer)
    label_classes: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # {"classes": [...]} if text


@dataclass(frozen=True, eq=False)
class DataView:
    """A dataset's whole row space: features X (N × d, a private copy-on-write map: writes to it never reach the
    file), labels y (N,), and the mask of rows whose records are present."""

    X: np.ndarray
    y: np.ndarray
    active: np.ndarray


class MatrixStore:
    """Reads, writes and erases the fixed-width files under ``<data_dir>/data``."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.root = self.data_dir / DATA_DIR

    def _dir(self) -> Path:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return self.root

    def resolve(self, relpath: str) -> Path:
        path = (self.data_dir / relpath).resolve()
        if self.root not in path.parents:
            raise ValueError(f"Data file path {relpath!r} is outside {self.root}.")
        return path

    def _write(self, path: Path, arr: np.ndarray) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                step = max(1, (64 << 20) // max(arr.itemsize * (arr.shape[1] if arr.ndim == 2 else 1), 1))
                for start in range(0, arr.shape[0], step):
                    f.write(np.ascontiguousarray(arr[start:start + step], dtype="<f8").tobytes())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def write(self, X: np.ndarray, y: np.ndarray, store: str = "files") -> tuple[str, str]:
        """Write a new pair of files; return their paths relative to the data directory. ``store="zarr"``: the
        features go to a Zarr store instead (:mod:`lethe.curator.dask_plane`)."""
        if store not in STORES:
            raise ValueError(f"store must be one of {STORES}. Found {store!r}.")
        name = uuid.uuid4().hex
        root = self._dir()
        fpath, lpath = root / (name + FEATURES_SUFFIX), root / (name + LABELS_SUFFIX)
        if store == "zarr":
            from lethe.curator import dask_plane

            fpath = dask_plane.write_features(root, name, X)
        else:
            self._write(fpath, np.asarray(X, dtype=np.float64))
        self._write(lpath, np.asarray(y, dtype=np.float64).reshape(-1, 1))
        if store == "files":  # each row's check value (lethe.curator.rowcheck): an altered kept row is a fault
            rowcheck.write(fpath, np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))
        fsync_path(root)
        return str(fpath.relative_to(self.data_dir)), str(lpath.relative_to(self.data_dir))

    def open(self, plane: DataPlane) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of a plane: X a copy-on-write memory map (N × d), y read into memory (N,)."""
        n, d = int(plane.n_rows), int(plane.n_features)
        if _is_zarr(plane.features_path):  # a Dask array over the read-only store, on the configured cluster
            from lethe.curator import dask_plane

            y = np.fromfile(self.resolve(plane.labels_path), dtype="<f8", count=n)
            return dask_plane.open_features(self.resolve(plane.features_path), n, d), y.astype(np.float64)
        X = np.memmap(self.resolve(plane.features_path), dtype="<f8", mode="c", shape=(n, d))
        y = np.fromfile(self.resolve(plane.labels_path), dtype="<f8", count=n)
        return X, y.astype(np.float64)

    def erase_rows(self, plane: DataPlane, rows: np.ndarray) -> int:
        """Overwrite rows of both files with zeros in place and fsync them (O(d) per row). Returns rows erased."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.size == 0:
            return 0
        d = int(plane.n_features)
        if rows[0] < 0 or rows[-1] >= int(plane.n_rows):
            raise ValueError(f"rows must be in [0, {plane.n_rows}). Found {int(rows[0])}..{int(rows[-1])}.")
        for relpath, width in ((plane.features_path, d), (plane.labels_path, 1)):
            if _is_zarr(relpath):
                from lethe.curator import dask_plane

                dask_plane.erase_rows(self.resolve(relpath), rows)
                continue
            zeros = bytes(8 * width)
            fd = os.open(self.resolve(relpath), os.O_WRONLY)
            try:
                for r in rows.tolist():
                    os.pwrite(fd, zeros, r * 8 * width)
                os.fsync(fd)
            finally:
                os.close(fd)
        return int(rows.size)

    def all_files(self) -> list[str]:
        """Every file under the data-plane directory (relative paths), including a crashed registration's."""
        if not self.root.exists():
            return []
        return sorted(str(p.relative_to(self.data_dir)) for p in self.root.iterdir()
                      if p.is_file() or _is_zarr(p.name))  # a Zarr store is one entry (a directory)

    @staticmethod
    def companions(relpath: str) -> list[str]:
        """The files that belong to a features file: its row check values (:mod:`lethe.curator.rowcheck`)."""
        return [] if _is_zarr(relpath) else [str(relpath) + rowcheck.SUFFIX]


__all__ = ["STORES", "DataPlane", "DataView", "MatrixStore"]
