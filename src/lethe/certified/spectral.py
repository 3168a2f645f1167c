"""Certified upper bounds on ‖X‖₂ from matrix-vector products only, for any backend of the data interface
(:mod:`lethe.certified.data`, :mod:`lethe.certified.dask_backend`). A module of its own below both, so that the
Dask backend reaches them without importing :mod:`lethe.certified.data` (which imports the Dask backend lazily):
no import cycle."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import gamma_k


class Products(Protocol):
    """The part of :class:`~lethe.certified.data.DataBackend` these bounds use."""

    def matvec(self, X: Any, v: np.ndarray) -> np.ndarray: ...

    def rmatvec(self, X: Any, g: np.ndarray) -> np.ndarray: ...

    def frobenius_sq(self, X: Any) -> float: ...

    def dot_terms(self, X: Any) -> int: ...


def frobenius_bound(X: Any, backend: Products) -> float:
    """‖X‖₂ ≤ ‖X‖_F, with the computed ‖X‖_F² inflated by its rounding (γ_{nd}) and the square root's."""
    n, d = (int(s) for s in X.shape)
    fro2 = backend.frobenius_sq(X)
    return math.sqrt(fro2 * (1.0 + 2.0 * gamma_k(n * max(d, 1) + 2))) * (1.0 + 2 * U)


def collatz_wielandt_bound(X: Any, backend: Products, iterations: int = 30) -> float:
    """A certified upper bound on ‖X‖₂ with matrix-vector products only (no Xᵀ X, no d × d matrix).

    Theory. ‖X‖₂² = ρ(XᵀX) ≤ ρ(B) with B = |X|ᵀ|X| entrywise non-negative, since |XᵀX| ≤ B entrywise and the
    spectral radius is monotone on non-negative matrices (Horn & Johnson, Thm 8.1.18). For every vector u > 0 the
    Collatz–Wielandt inequality (Horn & Johnson, Thm 8.1.26) gives ρ(B) ≤ maxⱼ (Bu)ⱼ/uⱼ. Every u > 0 gives a valid
    bound; power iteration on B only makes it smaller (to ρ(B), = ‖X‖₂² when X ≥ 0, e.g. TF-IDF features). The
    minimum over the iterates is returned. A *lower* estimate (a Rayleigh quotient) is never used.

    Rounding. t̃ = fl(|X|u) and s̃ = fl(|X|ᵀt̃) are sums of non-negative terms, so fl ≥ (1 − γ)·exact:
    (Bu)ⱼ ≤ (s̃ⱼ + τ)/((1 − γ_k)(1 − γ_n)), τ covering underflow (≤ 2⁻¹⁰⁷⁴ per operation, at most n(k + 1)
    operations per entry times the largest factor); the ratio, maximum, square root and final product add ≤ 4u.
    """
    n, d = (int(s) for s in X.shape)
    if n == 0 or d == 0:
        return 0.0
    A = abs(X)
    k = backend.dot_terms(X)
    u = np.ones(d)
    shrink = (1.0 - gamma_k(k + 1)) * (1.0 - gamma_k(n + 1))
    xmax = float(_abs_max(X))
    if xmax == 0.0:
        return 0.0
    best = math.inf
    for _ in range(max(iterations, 1)):
        t = backend.matvec(A, u)
        s = backend.rmatvec(A, t)
        tau = 2.0**-1070 * n * (k + 1) * max(xmax, 1.0) ** 2 * max(float(np.max(u)), 1.0)
        ratio = float(np.max((s + tau) / u)) / shrink * (1.0 + 4 * U)
        best = min(best, ratio)
        top = float(np.max(s))
        if not top > 0.0 or not math.isfinite(top):
            break
        # next positive iterate: s/‖s‖∞, floored so that u > 0 (zero columns of |X| would leave zeros)
        u = np.maximum(s / top, 1e-12)
    return math.sqrt(best) * (1.0 + 2 * U)


def _abs_max(X: Any) -> float:
    if sp.issparse(X):
        return float(np.max(np.abs(X.data), initial=0.0))
    return float(np.max(abs(X)))
