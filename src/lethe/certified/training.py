"""The optimiser that trains a certified-removal model (Guo et al. 2020, Alg. 1): argmin_w L_b(w; D) by L-BFGS
(preconditioned where it pays), chord-Newton steps and Newton polishing, and the evaluation of L_b and ∇L_b it calls
(:class:`Evaluation`). Only the optimiser's path lives here: the mechanism that removes
(:mod:`lethe.certified.mechanism`) calls :func:`minimise`, then measures and charges the training residual β₀ and
decides the budget; the optimiser's path does not enter the certificate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, cholesky, solve_triangular
from scipy.linalg.blas import dsyrk
from scipy.optimize import minimize

from lethe.certified import objective as obj
from lethe.certified.bounds import gamma_k, vnorm
from lethe.certified.data import DataMatrix, backend_of
from lethe.losses import Loss

#: With a preconditioner, L-BFGS hands over to chord-Newton steps once ‖∇L_b‖ ≤ this share of its initial value
#: (MNIST 3 vs 8, measured before the merge with the data interface: 16 gradient evaluations in all instead of 25;
#: 1e-2 took 18, 1e-1 15 but then the preconditioner, formed farther from the minimiser, was kept for the removals,
#: which it no longer is: prime_cache forms it again at the final w).
_CHORD_START = 3e-2

#: Bytes of X per block of the blocked evaluation (:class:`Evaluation`): a block stays in a 1–2 MB L2 cache between
#: its two products.
_EVAL_BLOCK_BYTES = 2 << 20
_EVAL_BLOCK_MIN_ROWS = 64

#: The L-BFGS preconditioner (:func:`_lbfgs_preconditioner`): rows of the subsample, and the spread of the subsampled
#: Hessian's eigenvalues, (‖H‖_F²/d) / (tr H / d)², from which it is used (1 for a multiple of I: MNIST 3 vs 8 ≈ 26,
#: normalised Gaussian rows ≈ 1.1, where plain L-BFGS needs 9 evaluations and the preconditioned one 12–14).
_PRECOND_ROWS = 512
_PRECOND_SPREAD = 2.0


def _lbfgs_preconditioner(X: DataMatrix, y: np.ndarray, loss: Loss, lam: float) -> np.ndarray | None:
    """An upper-triangular R with RᵀR = a subsampled Hessian at w = 0, (n/m) Σ_{i∈S} ℓ''(0, yᵢ) xᵢxᵢᵀ + λ n I over m
    = :data:`_PRECOND_ROWS` evenly spaced rows S (no random draw), for L-BFGS in the variables R w / c (``minimise``) —
    or None where it does not pay: data neither a dense array nor a CSR matrix in memory, matrix-free data (many
    features: no d × d matrix is formed for them), or d² > 64 n (the O(d³) factorisation would cost more than the
    passes it saves). A nearly isotropic subsampled Hessian (eigenvalue spread below
    :data:`_PRECOND_SPREAD`) gets the scalar factor √(tr H/d) I instead: it only sets the scale of the first step.
    MNIST 3 vs 8: 11 gradient evaluations instead of 24 to the default tol; 10⁶ × 100 (scalar): 7 instead of 9.

    Only the optimiser's path depends on it: training stops on ‖∇L_b(w)‖ and β₀ is measured at the final w."""
    B = backend_of(X)
    if B.name not in ("dense", "sparse") or B.matrix_free(X):
        return None
    n, d = X.shape
    if d < 2 or d * d > 64 * n:
        return None
    m = min(n, _PRECOND_ROWS)
    k = n // m
    Xs = B.take(X, np.arange(0, k * m, k))
    s = np.asarray(loss.d2(np.zeros(Xs.shape[0]), np.asarray(y[0:k * m:k], dtype=np.float64)), dtype=np.float64)
    if not np.all(s >= 0.0):
        return None
    Z = Xs * np.sqrt(s)[:, None]
    H = dsyrk(n / Xs.shape[0], Z.T, trans=0, lower=0)  # the upper triangle (all that cholesky reads)
    H[np.diag_indices(d)] += lam * n
    mean = float(np.trace(H)) / d
    if not (mean > 0.0 and math.isfinite(mean)):
        return None
    upper = np.triu(H)
    spread = (2.0 * float(np.sum(upper * upper)) - float(np.sum(np.diag(H) ** 2))) / d / (mean * mean)
    if not spread >= _PRECOND_SPREAD:
        return math.sqrt(mean) * np.eye(d)
    try:
        return np.asarray(cholesky(H, lower=False, check_finite=False), dtype=np.float64)
    except LinAlgError:
        return None


class Evaluation:
    """L_b(w; D) and ∇L_b(w; D) = Xᵀℓ'(Xw) + λnw + b (the optimiser's objective), read through the data interface,
    remembering its last point, gradient and ‖ℓ'(Xw)‖: L-BFGS evaluates its accepted point last, so the certified
    training residual reuses that gradient instead of recomputing it.

    Sparse data: one ``matvec`` and one ``rmatvec``, the operations of
    :func:`~lethe.certified.objective.objective_grad`. Dense C-ordered float64 arrays: the same products in one
    pass over X, block by block (``blocked``: blocks of :data:`_EVAL_BLOCK_BYTES`, which stay in cache between the
    block's z_B = X_B w and its X_Bᵀ ℓ'(z_B), so X is read from memory once per evaluation instead of twice — 35 %
    less time at 10⁶ × 100). Each zᵢ is the same d-term dot product, ℓ'(z) the same elementwise map, and each
    gradient entry Σᵢ x_ij ℓ'(zᵢ) is still a sum of the same n products, accumulated in another order: a product
    passes through at most m (its block of m rows) + ⌈n/m⌉ − 1 (the running sum over blocks) ≤ n roundings, the
    dense backend's ``sum_terms``; the rounding allowance of β₀
    (:func:`~lethe.certified.bounds.gradient_rounding_allowance`, Higham's γ bound, which holds for any summation
    order) therefore applies to the stored gradient in both cases (``exact_ops``). Other backends
    (chunked Dask data) use the backend's one-pass ``loss_pass`` (one map-reduce instead of two); its gradient
    steers the optimiser only, and β₀ is computed again by ``objective_grad``.
    """

    def __init__(self, X: DataMatrix, y: np.ndarray, loss: Loss, lam: float, b: np.ndarray) -> None:
        self.X, self.y, self.loss, self.lam, self.b = X, y, loss, lam, b
        self.B = backend_of(X)
        self.exact_ops = self.B.name in ("dense", "sparse")
        self.blocked = (self.B.name == "dense" and isinstance(X, np.ndarray) and X.dtype == np.float64
                        and X.flags.c_contiguous and X.ndim == 2)
        self.rows = max(_EVAL_BLOCK_MIN_ROWS, _EVAL_BLOCK_BYTES // (8 * max(X.shape[1], 1)))
        # chunked data with a one-pass Newton kernel (Dask): each evaluation also returns the loss Hessian, and its
        # gradient is computed as objective_grad computes it (reused for β₀ like exact_ops)
        self.fused = not self.exact_ops and hasattr(self.B, "newton_pass")
        self.H: np.ndarray | None = None
        self.val = math.inf
        self.x: np.ndarray | None = None
        self.g = np.zeros(X.shape[1])
        self.g0_norm = math.inf  # ‖gradient‖ at the first point evaluated
        self.d1_norm = math.inf

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        X, B, loss, lam = self.X, self.B, self.loss, self.lam
        n = X.shape[0]
        if self.blocked:
            lsum, lgrad = self._blocked_pass(w)
        elif self.exact_ops:
            z = B.matvec(X, w)
            lsum = float(np.sum(loss.value(z, self.y)))
            d1 = loss.d1(z, self.y)
            lgrad = B.rmatvec(X, d1)
            self.d1_norm = vnorm(d1)
        elif self.fused:
            lsum, lgrad, self.H, d1sq = B.newton_pass(X, self.y, w, loss)  # type: ignore[attr-defined]  # one pass
            self.d1_norm = math.sqrt(d1sq) * (1.0 + gamma_k(n + 2))  # ≥ ‖ℓ'‖ (a sum of n squares, then a root)
        else:
            lsum, lgrad = B.loss_pass(X, self.y, w, loss)
            self.d1_norm = math.inf  # not computed: β₀ recomputes it
        val = lsum + 0.5 * lam * n * float(w @ w) + float(self.b @ w)
        g = lgrad + lam * n * w
        g = g + self.b
        self.g, self.val = g, val
        if self.x is None:
            self.g0_norm = vnorm(g)
        self.x = np.array(w, dtype=np.float64, copy=True)
        return val, g.copy()  # the optimiser's own copy: the stored gradient stays as computed

    def _blocked_pass(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """(Σᵢ ℓ(zᵢ, yᵢ), Xᵀℓ'(z)) with z = Xw, in one pass over the rows of X block by block (see the class
        docstring); ``d1_norm`` = ‖ℓ'(z)‖ of the whole vector, as the unblocked evaluation computes it."""
        X, y, loss = self.X, self.y, self.loss
        n, d = X.shape
        d1 = np.empty(n)
        lgrad = np.zeros(d)
        lsum = 0.0
        step = self.rows
        at_zero = not np.any(w)  # the first evaluation: z = X·0 = 0 exactly (finite X), without reading X for it
        for start in range(0, n, step):
            stop = min(n, start + step)
            Xb = X[start:stop]
            zb = np.zeros(stop - start) if at_zero else Xb @ w
            yb = y[start:stop]
            lsum += float(np.sum(loss.value(zb, yb)))
            d1[start:stop] = loss.d1(zb, yb)
            lgrad += Xb.T @ d1[start:stop]
        self.d1_norm = vnorm(d1)
        return lsum, lgrad

    def at(self, w: np.ndarray) -> bool:
        """Whether the last evaluation was at exactly w."""
        return self.x is not None and self.x.shape == np.shape(w) and bool(np.array_equal(self.x, w))


class TrainingConfig(Protocol):
    """What the optimiser reads from the mechanism's configuration (:class:`~lethe.certified.mechanism.CertifiedRemoval`
    satisfies it): the optimiser sits below the mechanism and never imports it."""

    @property
    def loss_(self) -> Loss: ...
    @property
    def lam(self) -> float: ...
    @property
    def max_iter(self) -> int: ...
    def train_tolerance(self, n: int) -> float: ...


def minimise(cfg: TrainingConfig, X: DataMatrix, y: np.ndarray, b: np.ndarray, w0: np.ndarray | None = None,
             precondition: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]] | None = None,
             ) -> tuple[np.ndarray, int, Evaluation]:
    """argmin_w L_b(w; D) for the mechanism ``cfg`` to ‖∇L_b(w; D)‖₂ ≤ tol (the residual is then measured and
    charged; the optimiser's path does not enter the certificate).

    L-BFGS, stopped as soon as the gradient norm itself is below the target (not L-BFGS-B's stricter ∞-norm
    criterion, which overshoots it). With ``precondition`` (a function that, given a point w_c, returns an
    approximate solver r ↦ H(w_c)⁻¹ r — the ``pcg`` cache's factorisation, which the removals need anyway)
    L-BFGS stops at 3 % of the initial gradient norm and chord-Newton steps w ← w − H(w_c)⁻¹∇L_b(w), one
    gradient each, take it to tol; a step that does not halve the gradient norm hands back to L-BFGS. Newton
    polishing with the exact Hessian last (exact for γ = 0). Returns (w, iterations, the evaluation at w: its
    gradient and ‖ℓ'‖, reused for the residual where it was computed as ``objective_grad`` computes it)."""
    n, d = X.shape
    loss, lam = cfg.loss_, cfg.lam
    tol = cfg.train_tolerance(n)
    w = np.zeros(d) if w0 is None else w0.copy()
    f = Evaluation(X, y, loss, lam, b)
    iterations = 0

    R = _lbfgs_preconditioner(X, y, loss, lam) if loss.gamma != 0.0 and not f.fused else None

    def lbfgs(w: np.ndarray, target: float) -> tuple[np.ndarray, int]:
        if R is None:
            def stop(intermediate_result: Any) -> None:
                if f.at(intermediate_result.x) and vnorm(f.g) <= max(target, coarse * f.g0_norm):
                    raise StopIteration

            res = minimize(f, w, jac=True, method="L-BFGS-B", callback=stop,
                           options={"maxiter": cfg.max_iter, "gtol": tol / math.sqrt(d) / 10, "ftol": 0.0,
                                    "maxcor": 20})
            return np.array(res.x, dtype=np.float64), int(res.nit)
        # preconditioned: L-BFGS in v = R w / c (RᵀR ≈ the Hessian at 0), with c = ‖R⁻ᵀ∇L_b(w)‖ so that its
        # first, unit-length step is the approximate Newton step −(RᵀR)⁻¹∇L_b(w); the stopping rule is on
        # ‖∇L_b(w)‖ itself, as above
        val0, g0 = f(w)
        c = vnorm(solve_triangular(R, g0, trans="T", check_finite=False))
        Rc = R / c if c > 0.0 and math.isfinite(c) else R

        def to_w(v: np.ndarray) -> np.ndarray:
            return np.asarray(solve_triangular(Rc, v, check_finite=False), dtype=np.float64)

        def to_v_grad(g: np.ndarray) -> np.ndarray:
            return np.asarray(solve_triangular(Rc, g, trans="T", check_finite=False), dtype=np.float64)

        v0 = Rc @ w
        first = (v0.copy(), val0, to_v_grad(g0))

        def fv(v: np.ndarray) -> tuple[float, np.ndarray]:
            if np.array_equal(v, first[0]):  # the point evaluated above (w), not evaluated again
                return first[1], first[2].copy()
            val, g = f(to_w(v))
            return val, to_v_grad(g)

        def stop_v(intermediate_result: Any) -> None:
            if f.at(to_w(intermediate_result.x)) and vnorm(f.g) <= max(target, coarse * f.g0_norm):
                raise StopIteration

        res = minimize(fv, v0, jac=True, method="L-BFGS-B", callback=stop_v,
                       options={"maxiter": cfg.max_iter, "gtol": 0.0, "ftol": 0.0, "maxcor": 20})
        return to_w(np.asarray(res.x, dtype=np.float64)), int(res.nit)

    coarse = _CHORD_START if precondition is not None else 0.0
    if loss.gamma != 0.0 and not f.fused:  # fused passes: Newton from the start (one pass per step)
        w, iterations = lbfgs(w, tol)  # to max(tol, coarse ‖∇L_b(w₀)‖) (the first evaluation is at w₀)
        coarse = 0.0
        if precondition is not None:
            if not f.at(w):
                f(w)
            best = vnorm(f.g)
            if best > tol:
                apply = precondition(w)
                for _ in range(30):
                    w_try = w - apply(f.g)
                    f(w_try)
                    iterations += 1
                    g_try = vnorm(f.g)
                    if not g_try <= 0.5 * best:
                        break
                    w, best = w_try, g_try
                    if best <= tol:
                        break
                if best > tol:  # the chord steps stalled: back to L-BFGS from the best point
                    w, more = lbfgs(w, tol)
                    iterations += more
    prev: tuple[np.ndarray, float] | None = None
    for _ in range(50):
        if not f.at(w):
            f(w)
        if vnorm(f.g) <= tol:
            return w, max(iterations, 1), f
        if f.fused and prev is not None and not f.val <= prev[1]:  # the full step went uphill: halve it
            w = 0.5 * (prev[0] + w)
            iterations += 1
            continue
        if f.fused and f.H is not None:
            H = f.H.copy()
            H[np.diag_indices(d)] += lam * n
        else:
            H = obj.hessian(w, X, y, loss, lam)
        prev = (w, f.val)
        w = w - cho_solve(cho_factor(H), f.g)
        iterations += 1
    if not f.at(w):
        f(w)
    if vnorm(f.g) > tol:
        raise RuntimeError(f"Training did not reach the gradient tolerance {tol:.3g}: |grad| = "
                           f"{vnorm(f.g):.3g}. Increase max_iter or tol.")
    return w, iterations, f


__all__ = ["Evaluation", "TrainingConfig", "minimise"]
