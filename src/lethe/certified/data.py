"""The data interface: every operation the certified-removal mechanisms perform on the data matrix X.

Solvers, bounds and training never touch X except through a :class:`DataBackend` (``backend_of(X)``), so the same
mechanism runs on

* a dense NumPy array (:class:`DenseBackend`, the original code moved here),
* a SciPy CSR matrix (:class:`SparseBackend`, memory O(nnz + d), matrix-free for large d),
* a Dask array (:mod:`lethe.certified.dask_backend`, map-reduce over row chunks on a ``dask.distributed`` cluster;
  Dask is imported only when a Dask array arrives).

A backend is stateless: its methods take the data matrix as their first argument. The matrix object itself keys the
caches of :mod:`lethe.certified.cache` (a weak reference), exactly as before.

Rounding (Higham 2002, §3.1, any summation order or tree, with or without fused multiply-add; γ_k = k u/(1 − k u),
u = 2⁻⁵³; ρ ≥ maxᵢ ‖xᵢ‖; ``k = dot_terms(X)`` ≤ d the number of products in one entry of X v; ``S = sum_terms(X)``
≤ n the number of roundings any product passes through in Xᵀg: n dense, the largest column count for CSR, the
largest chunk + #chunks − 1 for chunked data, docs/tighter_bounds.md §0a):

========================  ======================================================================================
operation                 error bound of the computed value (exact-arithmetic quantity on the right)
========================  ======================================================================================
``matvec(X, v)``          |fl(Xv)ᵢ − xᵢᵀv| ≤ γ_k Σⱼ|xᵢⱼ vⱼ| ≤ γ_k ρ ‖v‖ per entry
``rmatvec(X, g)``         ‖fl(Xᵀg) − Xᵀg‖₂ ≤ γ_S ‖ |X|ᵀ|g| ‖₂ ≤ γ_S ‖X‖_F ‖g‖, S = ``sum_terms(X)`` ≤ n
``gram(X, s)``            ‖fl(Xᵀ diag(s) X) − Xᵀ diag(s) X‖_F ≤ (γ_{n+2} + 6u) max s ‖X‖_F² (s ≥ 0)
``row_sq_norms(X)``       |fl(‖xᵢ‖²) − ‖xᵢ‖²| ≤ γ_k ‖xᵢ‖²
``frobenius_sq(X)``       |fl(‖X‖_F²) − ‖X‖_F²| ≤ γ_{nd} ‖X‖_F²
``spectral_norm_bound``   an upper bound on ‖X‖₂ (never an estimate): see each implementation
``take(X, rows)``         exact (a copy of the rows)
``diag_gram(X, s)``       only a preconditioner: no bound needed (certificates never rely on it)
========================  ======================================================================================

The single-precision passes of the ``onepass`` solver (:mod:`lethe.certified.single`) read a float32 copy made by
``to_float32``; their error bounds are derived there.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import dsyrk

from lethe._validation import canonical_csr, check_finite_matrix
from lethe.certified import _limits
from lethe.certified.bounds import spectral_norm_upper_bound
from lethe.certified.spectral import collatz_wielandt_bound, frobenius_bound
from lethe.losses import Loss

#: Any data matrix a backend accepts (numpy.ndarray, scipy.sparse CSR matrix or array, dask.array.Array).
DataMatrix = Any

#: Above this many features, non-dense backends use matrix-free solvers (no d × d matrix is formed). Reads and sets
#: the one setting :data:`lethe.certified._limits.MATRIX_FREE_MIN_FEATURES` that every backend reads at each call
#: (``lethe.certified.data.MATRIX_FREE_MIN_FEATURES = 4096`` changes it for all of them, the Dask backend included).
MATRIX_FREE_MIN_FEATURES: int


#: Work space of the dense weighted Gram matrix: rows are scaled and accumulated in blocks of this many bytes.
GRAM_BLOCK_BYTES = 8 * 2**20


@runtime_checkable
class DataBackend(Protocol):
    """The operations on X that the mechanisms need (module docstring: their rounding bounds)."""

    name: str

    def matvec(self, X: DataMatrix, v: np.ndarray) -> np.ndarray:
        """X v as a NumPy n-vector."""

    def rmatvec(self, X: DataMatrix, g: np.ndarray) -> np.ndarray:
        """Xᵀ g as a NumPy d-vector."""

    def gram(self, X: DataMatrix, s: np.ndarray | None = None) -> np.ndarray:
        """Xᵀ diag(s) X (s ≥ 0; XᵀX if ``s`` is None): a d × d Fortran array whose *upper* triangle is valid."""

    def diag_gram(self, X: DataMatrix, s: np.ndarray) -> np.ndarray:
        """The diagonal of Xᵀ diag(s) X, Σᵢ sᵢ xᵢⱼ² (for preconditioners only)."""

    def row_sq_norms(self, X: DataMatrix) -> np.ndarray:
        """‖xᵢ‖² for every row."""

    def frobenius_sq(self, X: DataMatrix) -> float:
        """‖X‖_F²."""

    def spectral_norm_bound(self, X: DataMatrix, gram: np.ndarray | None = None) -> float:
        """A certified upper bound on ‖X‖₂."""

    def take(self, X: DataMatrix, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` as a dense float64 (m × d) array (a removal reads only these)."""

    def subset(self, X: DataMatrix, mask: np.ndarray) -> DataMatrix:
        """The rows where ``mask`` is true, in the same representation (retraining on D′)."""

    def zero_rows(self, X: DataMatrix, rows: np.ndarray) -> None:
        """Overwrite the rows ``rows`` with zeros in place (the data of removed records is destroyed)."""

    def dot_terms(self, X: DataMatrix) -> int:
        """k: an upper bound on the number of products in one entry of X v (d for dense rows)."""

    def sum_terms(self, X: DataMatrix) -> int:
        """S: an upper bound on the roundings any one product xᵢⱼgᵢ passes through in fl(Xᵀg) — its multiplication
        and the additions on its way to the result, in whatever order the kernel adds (n for dense rows; the
        largest column count for CSR; the largest chunk + #chunks − 1 for chunked data). fl(Xᵀg) is then within
        γ_S |X|ᵀ|g| entrywise (Higham 2002, §3.1; docs/tighter_bounds.md §0a)."""

    def matrix_free(self, X: DataMatrix) -> bool:
        """Whether solvers must avoid d × d matrices for this X."""

    def to_float32(self, X: DataMatrix) -> DataMatrix:
        """A single-precision copy for the single-precision passes."""

    def loss_pass(self, X: DataMatrix, y: np.ndarray, w: np.ndarray, loss: Loss) -> tuple[float, np.ndarray]:
        """(Σᵢ ℓ(xᵢᵀw, yᵢ), Xᵀ ℓ'(Xw, y)): the optimiser's value and gradient of the loss in one pass (the
        products' bounds as for ``matvec``/``rmatvec``; training certifies its residual separately)."""


def _loss_pass(B: DataBackend, X: DataMatrix, y: np.ndarray, w: np.ndarray, loss: Loss) -> tuple[float, np.ndarray]:
    z = B.matvec(X, w)
    return float(np.sum(loss.value(z, y))), B.rmatvec(X, loss.d1(z, y))


class DenseBackend:
    """NumPy arrays: BLAS products; the spectral bound from the eigenvalues of the smaller Gram matrix
    (:func:`~lethe.certified.bounds.spectral_norm_upper_bound`)."""

    name = "dense"

    def matvec(self, X: np.ndarray, v: np.ndarray) -> np.ndarray:
        return X @ v

    def rmatvec(self, X: np.ndarray, g: np.ndarray) -> np.ndarray:
        return X.T @ g

    def gram(self, X: np.ndarray, s: np.ndarray | None = None) -> np.ndarray:
        # symmetric rank-n update (BLAS syrk, n d² flops); Xᵀ is a Fortran-contiguous view: no copy for BLAS. With
        # weights, blocks of rows √sᵢ xᵢ are accumulated (c ← c + ZᵀZ), so the scaled copy is one block, not n × d
        # (the sum is still one summation tree over the n rows; rows with sᵢ = 0 add exact zeros)
        if s is None:
            return np.asfortranarray(dsyrk(1.0, X.T, trans=0, lower=0))
        n, d = X.shape
        block = min(n, max(256, GRAM_BLOCK_BYTES // (8 * max(d, 1))))
        M = np.zeros((d, d), order="F")
        buf = np.empty((block, d))  # the one scaled block, reused (a fresh product per block kept two alive)
        root = np.empty(block)
        for start in range(0, n, block):
            m = min(block, n - start)
            np.sqrt(s[start:start + m], out=root[:m])
            Z = np.multiply(X[start:start + m], root[:m, None], out=buf[:m])
            M = dsyrk(1.0, Z.T, beta=1.0, c=M, trans=0, lower=0, overwrite_c=1)
        return np.asfortranarray(M)

    def diag_gram(self, X: np.ndarray, s: np.ndarray) -> np.ndarray:
        return np.asarray(np.einsum("ij,ij,i->j", X, X, s))

    def row_sq_norms(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(np.einsum("ij,ij->i", X, X))

    def frobenius_sq(self, X: np.ndarray) -> float:
        return float(np.einsum("ij,ij->", X, X))

    def spectral_norm_bound(self, X: np.ndarray, gram: np.ndarray | None = None) -> float:
        return spectral_norm_upper_bound(X, gram=gram)

    def take(self, X: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(X[rows], dtype=np.float64)

    def subset(self, X: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return X[mask]

    def zero_rows(self, X: np.ndarray, rows: np.ndarray) -> None:
        X[rows] = 0.0

    def dot_terms(self, X: np.ndarray) -> int:
        return int(X.shape[1])

    def sum_terms(self, X: np.ndarray) -> int:
        # BLAS gemv: each entry of Xᵀg is a dot product of n terms, in an order (and blocking) of the BLAS's choosing
        return max(int(X.shape[0]), 1)

    def matrix_free(self, X: np.ndarray) -> bool:
        return False

    def loss_pass(self, X: np.ndarray, y: np.ndarray, w: np.ndarray, loss: Loss) -> tuple[float, np.ndarray]:
        return _loss_pass(self, X, y, w, loss)

    def to_float32(self, X: np.ndarray) -> np.ndarray:
        return X.astype(np.float32)


class SparseBackend:
    """SciPy CSR matrices (float64, canonical: sorted indices, no duplicates). Memory O(nnz + d): no dense copy,
    and for d > :data:`MATRIX_FREE_MIN_FEATURES` no d × d matrix either (:meth:`matrix_free`).

    The products are SciPy's CSR kernels: each entry of X v is a dot product over the row's stored entries
    (k = max nnz per row ≤ d terms), each entry of Xᵀ g a sum over ≤ n rows; the bounds of the module docstring
    hold with these k and n. ``spectral_norm_bound`` is the matrix-free Collatz–Wielandt bound
    (:func:`collatz_wielandt_bound`) capped by the Frobenius norm.
    """

    name = "sparse"

    def matvec(self, X: sp.csr_matrix, v: np.ndarray) -> np.ndarray:
        return np.asarray(X @ v, dtype=np.float64)

    def rmatvec(self, X: sp.csr_matrix, g: np.ndarray) -> np.ndarray:
        return np.asarray(X.T @ g, dtype=np.float64)

    def gram(self, X: sp.csr_matrix, s: np.ndarray | None = None) -> np.ndarray:
        # each entry Σᵢ sᵢ xᵢⱼ xᵢₖ is a sum of ≤ n products of three factors: the dense bound holds
        Z = X if s is None else sp.csr_matrix(sp.diags(np.sqrt(s)) @ X)
        G = (Z.T @ Z).toarray()
        return np.asfortranarray(G)

    def diag_gram(self, X: sp.csr_matrix, s: np.ndarray) -> np.ndarray:
        return np.asarray(X.multiply(X).T @ s, dtype=np.float64).ravel()

    def row_sq_norms(self, X: sp.csr_matrix) -> np.ndarray:
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()

    def frobenius_sq(self, X: sp.csr_matrix) -> float:
        return float(np.dot(X.data, X.data))

    def spectral_norm_bound(self, X: sp.csr_matrix, gram: np.ndarray | None = None) -> float:
        return min(collatz_wielandt_bound(X, self), frobenius_bound(X, self))

    def take(self, X: sp.csr_matrix, rows: np.ndarray) -> np.ndarray:
        return np.asarray(X[np.asarray(rows)].toarray(), dtype=np.float64)

    def subset(self, X: sp.csr_matrix, mask: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix(X[np.flatnonzero(mask)])

    def zero_rows(self, X: sp.csr_matrix, rows: np.ndarray) -> None:
        # the stored values of the rows become 0 (the sparsity pattern, not the values, stays: O(nnz of the rows))
        for i in np.asarray(rows):
            X.data[X.indptr[i]:X.indptr[i + 1]] = 0.0

    def dot_terms(self, X: sp.csr_matrix) -> int:
        return max(int(np.max(np.diff(X.indptr), initial=0)), 1)

    def sum_terms(self, X: sp.csr_matrix) -> int:
        # entry j of Xᵀg sums the products of column j's stored entries only (whatever the kernel's order; a kernel
        # that also multiplied the implicit zeros would add exact zeros, which round nothing): the largest number of
        # stored entries in a column, ≤ n
        counts = np.bincount(np.asarray(X.indices), minlength=int(X.shape[1]))
        return max(int(np.max(counts, initial=0)), 1)

    def matrix_free(self, X: sp.csr_matrix) -> bool:
        return int(X.shape[1]) > _limits.MATRIX_FREE_MIN_FEATURES

    def loss_pass(self, X: sp.csr_matrix, y: np.ndarray, w: np.ndarray, loss: Loss) -> tuple[float, np.ndarray]:
        return _loss_pass(self, X, y, w, loss)

    def to_float32(self, X: sp.csr_matrix) -> sp.csr_matrix:
        return sp.csr_matrix(X, dtype=np.float32)


DENSE = DenseBackend()
SPARSE = SparseBackend()


def _is_dask(X: Any) -> bool:
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "compute")


def _is_dask_frame(X: Any) -> bool:
    return type(X).__module__.startswith("dask.") and hasattr(X, "to_dask_array")


def backend_of(X: DataMatrix) -> DataBackend:
    """The backend for a data matrix: dense NumPy, SciPy sparse, or Dask (imported only when a Dask array comes)."""
    if isinstance(X, np.ndarray):
        return DENSE
    if sp.issparse(X):
        return SPARSE
    if _is_dask(X):
        from lethe.certified.dask_backend import DASK

        return DASK
    raise TypeError(f"X must be a NumPy array, a SciPy sparse matrix or a Dask array. Found {type(X).__name__}.")


def check_data_matrix(name: str, X: Any) -> DataMatrix:
    """Validate a data matrix for the mechanisms: a SciPy sparse matrix becomes a canonical float64 CSR matrix
    (sorted indices, duplicates summed) with finite stored values; a Dask array a float64 Dask array chunked by rows
    (:func:`lethe.certified.dask_backend.check_dask_matrix`); anything else a finite float64 NumPy array
    (:func:`lethe._validation.check_finite_matrix`)."""
    if sp.issparse(X):
        return canonical_csr(X, name, copy=False)
    if _is_dask(X) or _is_dask_frame(X):
        from lethe.certified.dask_backend import check_dask_matrix

        return check_dask_matrix(name, X)
    return check_finite_matrix(name, X)


def is_dense(X: DataMatrix) -> bool:
    """Whether X is a NumPy array (the solvers that keep d × d matrices and float32 copies need one)."""
    return isinstance(X, np.ndarray)


class _DataModule(types.ModuleType):
    """This module, whose ``MATRIX_FREE_MIN_FEATURES`` is the setting in :mod:`lethe.certified._limits` (read and
    set there, so that the Dask backend, which cannot import this module, sees every change)."""

    @property
    def MATRIX_FREE_MIN_FEATURES(self) -> int:  # noqa: N802 (the setting's public name)
        return _limits.MATRIX_FREE_MIN_FEATURES

    @MATRIX_FREE_MIN_FEATURES.setter
    def MATRIX_FREE_MIN_FEATURES(self, value: int) -> None:  # noqa: N802
        _limits.MATRIX_FREE_MIN_FEATURES = value


sys.modules[__name__].__class__ = _DataModule

__all__ = ["DENSE", "MATRIX_FREE_MIN_FEATURES", "SPARSE", "DataBackend", "DataMatrix", "DenseBackend",
           "SparseBackend", "backend_of", "check_data_matrix", "collatz_wielandt_bound", "frobenius_bound", "is_dense"]
