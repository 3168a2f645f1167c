"""The toy family's library estimator: a nearest-centroid classifier that forgets exactly."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lethe.io import open_model_file, save_model_file


@dataclass(frozen=True)
class ExactRecomputation:
    """The toy's certificate (a :class:`lethe.protocols.Certificate`)."""

    operation: str
    n_removed: int
    guarantee: str = "exact removal: the class means of the remaining records"
    observer: str = "one published version"
    epsilon: float = 0.0
    delta: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def centroids(X: np.ndarray, y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The mean of each class's rows (zeros for a class without rows)."""
    out = np.zeros((classes.size, X.shape[1]))
    for k, c in enumerate(classes):
        rows = X[y == c]
        if rows.size:
            out[k] = rows.mean(axis=0)
    return out


class CentroidUnlearner:
    """Nearest centroids; ``remove`` drops the rows (kept nowhere else) and recomputes the means."""

    supports_add = False

    def __init__(self) -> None:
        self.certificate_: ExactRecomputation | None = None

    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> CentroidUnlearner:
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
        self.classes_ = np.unique(y)
        self.X_, self.y_ = X.copy(), y.copy()
        self.pos_ = np.arange(X.shape[0])  # original positions of the kept rows
        self.keys_ = [str(k) for k in sample_ids] if sample_ids is not None else None
        self.means_ = centroids(X, y, self.classes_)
        return self

    def _positions(self, indices: Any, keys: Any) -> np.ndarray:
        if (indices is None) == (keys is None):
            raise ValueError("Give exactly one of indices or keys.")
        if keys is not None:
            held = dict(zip(self.keys_ or [], self.pos_.tolist(), strict=True))
            try:
                return np.array([held[str(k)] for k in keys], dtype=np.int64)
            except KeyError:
                raise ValueError("A key is not a record of this model (unknown, or already removed).") from None
        idx = np.asarray(indices, dtype=np.int64)
        if not np.isin(idx, self.pos_).all():
            raise ValueError("A row is not a record of this model (unknown, or already removed).")
        return idx

    def remove(self, indices: Any = None, *, keys: Any = None) -> ExactRecomputation:
        idx = self._positions(indices, keys)
        keep = ~np.isin(self.pos_, idx)
        X, y, pos = self.X_[keep], self.y_[keep], self.pos_[keep]
        ks = [k for k, kp in zip(self.keys_, keep, strict=True) if kp] if self.keys_ is not None else None
        means = centroids(X, y, self.classes_)
        cert = ExactRecomputation("remove", int(idx.size))
        self.X_, self.y_, self.pos_, self.keys_, self.means_, self.certificate_ = X, y, pos, ks, means, cert
        return cert

    def add(self, X: Any, y: Any, sample_ids: Any = None) -> ExactRecomputation:
        raise NotImplementedError("CentroidUnlearner cannot add records (supports_add = False).")

    def predict(self, X: Any) -> np.ndarray:
        d = ((np.asarray(X, dtype=np.float64)[:, None, :] - self.means_[None]) ** 2).sum(-1)
        return self.classes_[np.argmin(d, axis=1)]

    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        meta = {"keys": self.keys_, "classes": self.classes_.tolist(),
                "certificate": self.certificate_.to_dict() if self.certificate_ else None}
        return save_model_file(path, {"X": self.X_, "y": self.y_, "pos": self.pos_, "means": self.means_},
                               json.loads(json.dumps(meta)), key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None) -> CentroidUnlearner:
        f = open_model_file(path, key=key)  # authenticated: an edited or untagged file is refused
        arrays, meta = f.arrays, f.meta
        est = cls()
        est.X_, est.y_, est.pos_, est.means_ = arrays["X"], arrays["y"], arrays["pos"], arrays["means"]
        est.keys_, est.classes_ = meta["keys"], np.asarray(meta["classes"])
        est.certificate_ = ExactRecomputation(**meta["certificate"]) if meta["certificate"] else None
        return est
