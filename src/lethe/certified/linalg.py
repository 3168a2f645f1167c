"""Dense d × d kernels shared by the solvers: preconditioners (Cholesky factor, float32 inverse, Jacobi diagonal),
symmetric products and preconditioned CG on a maintained matrix. Preconditioners and initial guesses only: no
certificate relies on their accuracy (every solver measures its solve error)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.linalg import LinAlgError, cho_factor
from scipy.linalg.blas import dsymv, dtrsv, ssymv
from scipy.linalg.lapack import dpotri

from lethe.certified.bounds import (
    vnorm,
)


def cho_solve(F: tuple[np.ndarray, bool | None], b: np.ndarray, check_finite: bool = False) -> np.ndarray:
    """Solve with a Cholesky factor (from :func:`scipy.linalg.cho_factor`) by two BLAS triangular solves (the
    LAPACK wrapper's overhead is significant at O(d²) per removal), or apply the explicit float32 inverse of
    :func:`precond_factor` (``lower`` is ``None``) by one symmetric matrix-vector product. Used only for
    preconditioners and initial guesses: certificates never rely on the accuracy of this solve."""
    c, lower = F
    if c.ndim == 1:  # :func:`jacobi_preconditioner`: the inverse diagonal
        return c * b
    if lower is None:
        scale = float(np.abs(b).max(initial=0.0))  # the product is linear: scale into float32's range
        if scale == 0.0 or not np.isfinite(scale):
            return np.zeros_like(b) if scale == 0.0 else np.full_like(b, np.nan)
        x = ssymv(1.0, c, np.asarray(b / scale, dtype=np.float32), lower=0)
        return np.asarray(x, dtype=np.float64) * scale
    if lower:
        return np.asarray(dtrsv(c, dtrsv(c, b, lower=1, trans=0), lower=1, trans=1))
    return np.asarray(dtrsv(c, dtrsv(c, b, lower=0, trans=1), lower=0, trans=0))


MATRIX_FREE_MAX_ITER = 500


def jacobi_preconditioner(diag: np.ndarray) -> tuple[np.ndarray, None]:
    """The Jacobi preconditioner diag(H)⁻¹ in the form :func:`cho_solve` applies (a 1-D array: O(d) memory and
    time). For matrix-free solves only; certificates never depend on it (the solve error is measured)."""
    diag = np.asarray(diag, dtype=np.float64)
    safe = np.where(diag > 0.0, diag, float(np.max(diag, initial=1.0)) or 1.0)
    return 1.0 / safe, None


def precond_factor(M: np.ndarray) -> tuple[np.ndarray, None]:
    """The inverse of the symmetric matrix in the upper triangle of M (Cholesky factorisation, then LAPACK
    ``potri``), upper triangle stored in float32: applying it costs one ``ssymv``, a quarter of the memory traffic
    of two double-precision triangular solves. For use as a preconditioner only. Should the factorisation fail (M
    numerically indefinite after many downdates), a growing multiple of the identity is added: any SPD matrix is
    a valid preconditioner, and certificates never depend on it."""
    jitter = 0.0
    scale = float(np.max(np.abs(np.diag(M)), initial=1.0))
    for _ in range(8):
        try:
            A = M if jitter == 0.0 else M + jitter * np.eye(M.shape[0])
            c, _ = cho_factor(A, lower=False, check_finite=False)
            inv, info = dpotri(c, lower=0, overwrite_c=1)
            if info != 0:
                raise LinAlgError(f"potri failed (info = {info}).")
            return np.asfortranarray(inv, dtype=np.float32), None
        except LinAlgError:
            jitter = max(jitter * 100.0, 1e-10 * scale)
    raise LinAlgError("The anchor matrix could not be factorised even with a diagonal shift.")


def sym_mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A x for the symmetric matrix stored in the upper triangle of A."""
    return np.asarray(dsymv(1.0, A, x, lower=0))


def dense_pcg(mv: Callable[[np.ndarray], np.ndarray], F: tuple[np.ndarray, bool | None], rhs: np.ndarray,
               v: np.ndarray, e: np.ndarray, tol: float, max_it: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Preconditioned CG on M v = rhs from v (e = M v − rhs; ``mv`` applies M), preconditioner F⁻¹; O(d²) per
    iteration.

    Returns (v, e, iterations); ``e`` is the recursively updated residual (callers that certify it recompute it).
    """
    it = 0
    rz_old = 0.0
    p = v  # replaced by the first iteration's direction (zc) before it is read
    while it < max_it and vnorm(e) > tol:
        r = -e
        zc = cho_solve(F, r, check_finite=False)
        rz = float(r @ zc)
        p = zc if it == 0 else zc + (rz / rz_old) * p
        rz_old = rz
        q = mv(p)
        pq = float(p @ q)
        if not pq > 0.0:
            break
        alpha = rz / pq
        v = v + alpha * p
        e = e + alpha * q
        it += 1
    return v, e, it


def fro_sym_upper(A: np.ndarray) -> float:
    """‖A‖_F of the symmetric matrix whose upper triangle is stored in A."""
    up = np.triu(A)
    dg = np.diag(A)
    return math.sqrt(max(2.0 * float(np.einsum("ij,ij->", up, up)) - float(dg @ dg), 0.0))
