"""The (perturbed) objective of a linear model and its derivatives: the only kernels that touch the data.

Guo et al. 2020, §3.1:

    L_b(w; D) = Σᵢ ℓ(wᵀxᵢ, yᵢ) + (λ n / 2) ‖w‖² + bᵀw,

with n = |D| (the regulariser scales with the current data size, so removing m rows removes m λ w / 1 from the
gradient: Δ = m λ w + Σ_{removed} ∇ℓ, Eq. 6). Symbols → arguments: w → ``w``, X = [x₁ … x_n]ᵀ → ``X``, y → ``y``,
λ → ``lam``, b → ``b``, ℓ → ``loss``.

Every function takes an optional boolean ``mask``: rows with ``mask[i] == False`` are treated as absent (weight 0,
and n counts only the present rows). This lets removal proceed without copying the data matrix.

Every data-touching operation is one of X v, Xᵀ g or Xᵀ diag(s) X of the data interface
(:mod:`lethe.certified.data`), so X may be a NumPy array, a SciPy CSR matrix or any other backend's matrix.
"""

from __future__ import annotations

import numpy as np

from lethe.certified.data import DataMatrix, backend_of
from lethe.losses import Loss


def _weights(X: DataMatrix, mask: np.ndarray | None) -> tuple[np.ndarray | None, int]:
    if mask is None:
        return None, X.shape[0]
    return mask.astype(np.float64), int(np.count_nonzero(mask))


def objective_value(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float,
                    b: np.ndarray | None = None, mask: np.ndarray | None = None) -> float:
    """L_b(w; D) (Guo et al. 2020, §3.1)."""
    wt, n = _weights(X, mask)
    vals = loss.value(backend_of(X).matvec(X, w), y)
    val = float(np.sum(vals if wt is None else vals * wt)) + 0.5 * lam * n * float(w @ w)
    if b is not None:
        val += float(b @ w)
    return val


def objective_grad(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float,
                   b: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
    """∇L_b(w; D) = Xᵀ ℓ'(Xw, y) + λ n w + b (Guo et al. 2020, Eq. 5)."""
    wt, n = _weights(X, mask)
    B = backend_of(X)
    d1 = loss.d1(B.matvec(X, w), y)
    g = B.rmatvec(X, d1 if wt is None else d1 * wt) + lam * n * w
    if b is not None:
        g = g + b
    return g


def value_and_grad(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float,
                   b: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """(L_b(w; D), ∇L_b(w; D)) with a single pass over X (for the optimiser)."""
    n = X.shape[0]
    lsum, lgrad = backend_of(X).loss_pass(X, y, w, loss)  # one pass (a map-reduce for chunked data)
    val = lsum + 0.5 * lam * n * float(w @ w)
    g = lgrad + lam * n * w
    if b is not None:
        val += float(b @ w)
        g = g + b
    return val, g


def hessian(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float,
            mask: np.ndarray | None = None) -> np.ndarray:
    """∇²L(w; D) = Xᵀ D_w X + λ n I with (D_w)ᵢᵢ = ℓ''(wᵀxᵢ, yᵢ) (Guo et al. 2020, §3.2). b does not enter.

    Built with the backend's ``gram`` (dense: a symmetric rank-k update, BLAS ``syrk``, n d² flops).
    """
    B = backend_of(X)
    if mask is not None:
        X, y = B.subset(X, mask), y[mask]
    n, d = X.shape
    s = loss.d2(B.matvec(X, w), y)
    if np.any(s < 0):
        raise ValueError("The loss's second derivative is negative: the loss is not convex.")
    H = B.gram(X, s)  # upper triangle of Xᵀ diag(s) X
    H = np.triu(H) + np.triu(H, 1).T
    H[np.diag_indices(d)] += lam * n
    return H


def curvature(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss,
              mask: np.ndarray | None = None) -> np.ndarray:
    """The diagonal of D_w: ℓ''(wᵀxᵢ, yᵢ), zero on masked-out rows."""
    s = loss.d2(backend_of(X).matvec(X, w), y)
    return s if mask is None else s * mask


def hvp(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float, v: np.ndarray,
        mask: np.ndarray | None = None) -> np.ndarray:
    """Hessian-vector product ∇²L(w; D) v = Xᵀ(ℓ''(Xw) ⊙ Xv) + λ n v, in O(nd) without forming the Hessian."""
    _, n = _weights(X, mask)
    B = backend_of(X)
    return B.rmatvec(X, curvature(w, X, y, loss, mask) * B.matvec(X, v)) + lam * n * v


def loss_gradients_sum(w: np.ndarray, X: DataMatrix, y: np.ndarray, loss: Loss) -> np.ndarray:
    """Σᵢ ∇ℓ(wᵀxᵢ, yᵢ) = Xᵀ ℓ'(Xw, y) over the rows given."""
    B = backend_of(X)
    return B.rmatvec(X, loss.d1(B.matvec(X, w), y))
