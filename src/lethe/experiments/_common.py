"""Shared pieces of the reproduction runs: profiles, progress bars, plotting set-up, timing, JSON output, the
remove-until-retrained loop, MNIST 3 vs 8 at a profile's size."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from lethe.io import JsonRecord

T = TypeVar("T")


@dataclass(frozen=True)
class Profile(JsonRecord):
    """Sizes of one reproduction run. ``quick`` runs in minutes (tests); ``full`` uses the papers' sizes."""

    name: str
    n_train: int | None  # None: the whole training set
    n_test: int | None
    lambdas: tuple[float, ...]
    sigmas: tuple[float, ...]
    probe_removals: int  # removals measured per (λ, σ) to estimate the mean certified step (Fig. 1)
    fig1_epsilons: tuple[float, ...]
    fig1_lambdas: tuple[float, ...]
    fig1_removals: int  # Fig. 1 middle: "supporting 100 removals"
    fig2_removals: int  # Fig. 2: points removed (single) and in batches of 10
    table1_removals: int
    table1_cholesky_removals: int
    ngd_n_train: int | None
    ngd_edits: int
    ngd_epsilon_dds: tuple[float, ...]
    audit: dict[str, Any] = field(default_factory=dict)
    downsample: int = 1  # average-pool MNIST images by this factor (quick: 2, i.e. 14 x 14 pixels)


QUICK = Profile(
    name="quick", n_train=1000, n_test=500, lambdas=(1e-3, 1e-2, 1e-1), sigmas=(1.0, 10.0),
    probe_removals=4, fig1_epsilons=(0.5, 2.0), fig1_lambdas=(1e-2,), fig1_removals=5,
    fig2_removals=20, table1_removals=5, table1_cholesky_removals=1, ngd_n_train=300, ngd_edits=2,
    ngd_epsilon_dds=(0.5, 0.1), audit={"n_train": 50, "n_removed": 10, "trials": 3, "shadows": 8},
    downsample=2,
)
FULL = Profile(
    name="full", n_train=None, n_test=None, lambdas=(1e-4, 1e-3, 1e-2, 1e-1),
    sigmas=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), probe_removals=30,
    fig1_epsilons=(0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0), fig1_lambdas=(1e-3, 1e-2, 1e-1), fig1_removals=100,
    fig2_removals=1000, table1_removals=200, table1_cholesky_removals=20, ngd_n_train=1000, ngd_edits=5,
    ngd_epsilon_dds=(1.0, 0.25, 0.05), audit={"n_train": 50, "n_removed": 10, "trials": 100, "shadows": 64},
)
PROFILES = {"quick": QUICK, "full": FULL}


def progress(it: Iterable[T], desc: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """A tqdm progress bar on stderr if tqdm is installed (and ``enabled``), else the bare iterable."""
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:  # progress bars are optional
            pass
        else:
            yield from tqdm(it, desc=desc, total=total, leave=False, dynamic_ncols=True)
            return
    yield from it


def pyplot() -> Any:
    """matplotlib.pyplot with the non-interactive Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("The reproduction needs matplotlib: pip install 'lethe[plots]'.") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def integer_ticks(axis: Any) -> None:
    """Only integer ticks on a matplotlib axis (``ax.xaxis``) that counts something (removals, edits)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))


class Timer:
    """Wall-clock seconds of a ``with`` block (``time.perf_counter``)."""

    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        self.seconds = math.nan
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        f = float(obj)
        return None if math.isnan(f) else f
    return obj


def write_json(path: Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (NaN becomes null)."""
    path.write_text(json.dumps(_jsonable(obj), indent=1) + "\n", encoding="utf-8")
    return path


def stratified_subset(y: np.ndarray, n: int | None, rng: np.random.Generator) -> np.ndarray:
    """Indices of a class-stratified random subset of size ``n`` (all indices, shuffled, if n is None)."""
    if n is None or n >= y.shape[0]:
        return rng.permutation(y.shape[0])
    classes, codes = np.unique(y, return_inverse=True)
    out = []
    for k in range(classes.size):
        rows = np.flatnonzero(codes == k)
        take = int(round(n * rows.size / y.shape[0]))
        out.append(rng.choice(rows, size=min(take, rows.size), replace=False))
    return rng.permutation(np.concatenate(out))


def remove_until_retrained(clf: Any, order: Iterable[Any], cap: int | None = None) -> tuple[list[Any], Any]:
    """Remove ``order[0], order[1], …`` from a fitted certified estimator one row at a time (Alg. 2, |B_j| = 1)
    until a removal retrains or ``cap`` rows are gone.

    Returns the certificates of the removals done by Newton steps, in order, and the certificate of the removal
    that retrained (None if none did).
    """
    done: list[Any] = []
    for i in itertools.islice(order, cap):
        cert = clf.remove([int(i)])
        if cert.retrained:
            return done, cert
        done.append(cert)
    return done, None


def pool_images(X: np.ndarray, k: int) -> np.ndarray:
    """Average-pool square images (rows of X) by k x k, then L2-normalise the rows again (‖x‖ = 1)."""
    side = int(round(np.sqrt(X.shape[1])))
    s2 = side // k
    img = X.reshape(-1, side, side)[:, :s2 * k, :s2 * k].reshape(-1, s2, k, s2, k).mean(axis=(2, 4))
    out = img.reshape(X.shape[0], -1)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def load_mnist38(profile: Profile, data_dir: str | None, seed: int) -> tuple[np.ndarray, ...]:
    """MNIST 3 vs 8 (Guo et al. §4.1), subsampled (stratified) to the profile's sizes."""
    from lethe.datasets import load_mnist_binary

    X, y, Xt, yt = load_mnist_binary(3, 8, data_dir=data_dir)
    if profile.downsample > 1:
        X, Xt = pool_images(X, profile.downsample), pool_images(Xt, profile.downsample)
    rng = np.random.default_rng(seed)
    i = stratified_subset(y, profile.n_train, rng)
    j = stratified_subset(yt, profile.n_test, rng)
    return X[i], y[i], Xt[j], yt[j]
