"""Small synthetic data sets shared by test modules (imported as ``from ._data import ...``)."""

from __future__ import annotations

import numpy as np


def unit_rows(n: int = 300, d: int = 6, seed: int = 0, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """n rows of norm 1; labels ±1 from a fixed hyperplane (``classes=2``) or the argmax of the first ``classes``
    coordinates."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    if classes == 2:
        y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, -1)
    else:
        y = np.argmax(X[:, :classes], axis=1)
    return X, y
