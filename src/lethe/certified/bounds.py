"""Gradient-residual bounds of the Newton removal step (Guo et al. 2020, Thm 1, 4; Cor. 1, 2).

Setting: L(·; D′) is the objective on the remaining data D′ (n′ = n − m rows, data matrix X′), w the current model,
Δ = m λ w + Σ_{removed} ∇ℓ(wᵀxⱼ, yⱼ), H = ∇²L(w; D′), and the step w⁻ = w + v with v ≈ H⁻¹Δ.

Derivation used by :func:`data_dependent_bound` (a slightly more careful form of Cor. 1/2). With
G(w) = ∇L_b(w; D′) and the integral form of Taylor's theorem (the mean-value form in the paper's proof is not an
identity for vector-valued G, the integral form is),

    G(w + v) = G(w) + H̄ v,    H̄ = ∫₀¹ H(w + t v) dt,
    G(w)     = u − Δ,          u = ∇L_b(w; D) the residual before the removal,

so  G(w⁻) = u + (H̄ − H) v + (H v − Δ).  Here H̄ − H = X′ᵀ(D̄ − D)X′ with diagonal entries
∫₀¹ [ℓ''((w + t v)ᵀxᵢ) − ℓ''(wᵀxᵢ)] dt, each at most γ |xᵢᵀ v| ≤ γ ‖v‖ in absolute value (‖xᵢ‖ ≤ 1). Hence

    ‖G(w⁻)‖ ≤ ‖u‖ + γ ‖X′‖₂ ‖v‖ ‖X′ v‖ + ‖H v − Δ‖.

The middle term is Cor. 1 (m = 1) / Cor. 2 (m > 1) of the paper; the last is the linear-solve error, which the
paper takes as 0 (exact inverse) and which lethe measures with one Hessian-vector product. ‖X′‖₂ may be replaced
by any upper bound, e.g. ‖X‖₂ of the data before removals (removing rows never increases the spectral norm).
Accumulating over removals gives the paper's induction (§3.2, "Multiple removals"), starting at the training
solver's own residual ‖∇L_b(w₀; D)‖ rather than 0 (footnote 1).

The worst-case bounds of Thm 1/Thm 4 are reported for comparison only: their proof bounds ‖w‖ ≤ C/λ, which fails
under the perturbation b (the paper's errata), so they certify nothing here.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import eigvalsh

EPS = float(np.finfo(np.float64).eps)


def spectral_norm_upper_bound(X: np.ndarray) -> float:
    """A certified upper bound on ‖X‖₂ (largest singular value).

    Computed as √(λ_max(G) + r) with G the smaller Gram matrix (XᵀX or XXᵀ) and r a rounding allowance covering
    the error of forming G in floating point (|fl(G) − G| ≤ k u ‖X‖_F² entrywise, k the inner dimension) and of
    the symmetric eigensolver (backward stable: error ≤ p(d) u ‖G‖₂); the result is then capped by the Frobenius
    norm ‖X‖_F, itself an upper bound. Power iteration is *not* used: from a random start it gives a lower bound.

    >>> X = np.diag([3.0, 1.0])
    >>> 3.0 <= spectral_norm_upper_bound(X) < 3.0 + 1e-9
    True
    """
    X = np.asarray(X, dtype=np.float64)
    if X.size == 0:
        return 0.0
    n, d = X.shape
    fro2 = float(np.einsum("ij,ij->", X, X))
    G = X.T @ X if d <= n else X @ X.T
    k = max(n, d)
    lam_max = float(eigvalsh(G, subset_by_index=[G.shape[0] - 1, G.shape[0] - 1])[0])
    allowance = 4.0 * (k + G.shape[0]) * EPS * fro2
    fro = math.sqrt(fro2) * (1.0 + 4.0 * k * EPS)
    return min(math.sqrt(max(lam_max, 0.0) + allowance), fro)


def data_dependent_bound(gamma: float, x_norm: float, v_norm: float, Xv_norm: float) -> float:
    """γ ‖X′‖₂ ‖v‖₂ ‖X′v‖₂ — Guo et al. 2020, Cor. 1 (single removal) and Cor. 2 (batch), ``x_norm`` ≥ ‖X′‖₂."""
    return gamma * x_norm * v_norm * Xv_norm


def worst_case_bound(gamma: float, grad_bound: float | None, lam: float, n_remaining: int, m: int = 1) -> float:
    """4 γ m² C² / (λ² (n − m)) — Guo et al. 2020, Thm 1 (m = 1) and Thm 4 (batch of m).

    For comparison only: by the paper's errata it does not hold under the objective perturbation b.
    Returns ``nan`` when C is unbounded (least squares: γ = 0 anyway gives 0).
    """
    if gamma == 0.0:
        return 0.0
    if grad_bound is None:
        return math.nan
    return 4.0 * gamma * m * m * grad_bound**2 / (lam * lam * n_remaining)


def rounding_allowance(n: int, d: int, *magnitudes: float) -> float:
    """A floating-point allowance for a computed norm of a sum of n·d terms: 16 u (n + d) Σ magnitudes.

    Standard error analysis of dot products (Higham 2002, §3.1): |fl(Σ aᵢ) − Σ aᵢ| ≤ γ_k Σ |aᵢ|, γ_k ≈ k u.
    Added to computed residual norms so that a certificate never rests on round-off in lethe's favour.
    """
    return 16.0 * EPS * (n + d) * float(sum(abs(m) for m in magnitudes))
