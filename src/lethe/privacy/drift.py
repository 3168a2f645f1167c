"""The drift bound: how much one record changes the removal stream's increments (issue 39; docs/release_drift.md).

A correlated-noise release (tree aggregation, :mod:`lethe.privacy.tree`) publishes noisy sums of the increments
w̃_b − w̃_{a−1} of the released centre over blocks of releases [a, b]. Its privacy rests on a bound on how much the
presence of one target record z changes such a block sum:

    s[a, b] = ‖d̃_b − d̃_{a−1}‖,   d̃_t = w̃_t(S_t ∪ {z}) − w̃_t(S_t),

where S_t are the *other* records held at release t (the same in both worlds: only the target's presence differs)
and w̃_t(D) is any point whose gradient residual ‖∇L_0(w̃; D)‖ is at most β (L_0 below). This module proves and
computes such bounds; the release mechanism and its accountant are in :mod:`lethe.privacy.tree`.

Setting (that of :func:`lethe.certified.bounds.release_sensitivity`):
L_0(w; D) = Σ_{i∈D} ℓ(wᵀxᵢ, yᵢ) + (λ|D|/2)‖w‖², ℓ(·, y) convex and three times differentiable with
|ℓ'| ≤ C, 0 ≤ ℓ'' ≤ c₂ and |ℓ'''| ≤ γ (logistic loss: C = 1, c₂ = 1/4, γ = 1/(6√3) ≈ 0.0962, ℓ(0) = log 2),
and optionally generalised self-concordant, |ℓ'''| ≤ κℓ'' at every margin (logistic loss, labels ±1:
ℓ''' = ℓ''·(1 − 2σ) up to sign, so κ = 1; κ = ∞ when not assumed); rows ‖xᵢ‖ ≤ ρ (an intercept is a constant
column inside the unit ball, regularised like the weights, as in ``fit_intercept``; an *unregularised* intercept
is not covered). G = Cρ + a with a = min(Cρ, √(2λℓ(0))).

**Theorem (drift of the exact difference).** Let S_b ⊆ S_a (R = S_a \\ S_b, |R| = K rows removed between the two
releases), |S_b| ≥ m ≥ 1, and Λ ≥ λ_max(Σ_{i∈S_a∪{z}} xᵢxᵢᵀ). With w* the exact minimisers and
d*(S) = w*(S ∪ {z}) − w*(S):

    ‖d*(S_a) − d*(S_b)‖ ≤ D(K) = K G/(λm)² · [ 2(c₂ρ² + λ) + ρ G · min(κ/4, γΛ/(λm)) ].

(Without κ, min(κ/4, γΛ/(λm)) = γΛ/(λm): the bound D(K) = K G/(λm)² [2(c₂ρ² + λ) + γρΛG/(λm)] of step (iii).)

*Proof.* For s, t ∈ [0, 1] let F(w; s, t) = L_0(w; S_b) + t·g_R(w) + s·h_z(w), g_R(w) = Σ_{i∈R} ℓᵢ(w) + (λK/2)‖w‖²,
h_z(w) = ℓ_z(w) + (λ/2)‖w‖², and w(s, t) its minimiser. Then w(0,0) = w*(S_b), w(1,0) = w*(S_b ∪ z),
w(0,1) = w*(S_a), w(1,1) = w*(S_a ∪ z), so

    d*(S_a) − d*(S_b) = w(1,1) − w(0,1) − w(1,0) + w(0,0) = ∫₀¹∫₀¹ ∂²w/∂t∂s ds dt.

(i) F is a weighted L_0 (weights 1 on S_b, t on R, s on z, regulariser λN/2 with N the total weight ≥ m), so its
Hessian A(s, t) ⪰ λm I, and λ‖w(s,t)‖ ≤ a: optimality Σ cᵢℓ'ᵢxᵢ + λNw = 0 gives λ‖w‖ ≤ Cρ, and for ℓ ≥ 0
(λN/2)‖w‖² ≤ F(0) ≤ Nℓ(0). Hence ‖∇h_z(w)‖ ≤ G and ‖∇g_R(w)‖ ≤ KG.
(ii) Implicit differentiation (A is invertible and ℓ ∈ C³): ∂w/∂s = −A⁻¹∇h_z(w), ∂w/∂t = −A⁻¹∇g_R(w), so
‖∂w/∂t‖ ≤ KG/(λm), and

    ∂²w/∂t∂s = A⁻¹ (∂A/∂t) A⁻¹ ∇h_z(w) − A⁻¹ ∇²h_z(w) ∂w/∂t,
    ∂A/∂t = ∇²g_R(w) + Σ_i cᵢ ℓ'''ᵢ (xᵢᵀ ∂w/∂t) xᵢxᵢᵀ   (sum over S_b ∪ R ∪ {z} with their weights cᵢ ≤ 1).

(iii) ‖∇²g_R‖ ≤ K(c₂ρ² + λ), ‖∇²h_z‖ ≤ c₂ρ² + λ, and −γρ‖v‖ Σ xᵢxᵢᵀ ⪯ Σ cᵢℓ'''ᵢ(xᵢᵀv)xᵢxᵢᵀ ⪯ γρ‖v‖ Σ xᵢxᵢᵀ,
so the last term has norm ≤ γρΛ‖∂w/∂t‖. With v = ∂w/∂t and u = A⁻¹∇h_z (‖u‖ ≤ G/(λm)) the third-derivative
part of the integrand, T = A⁻¹ r with r = Σ cᵢℓ'''ᵢ(xᵢᵀv)(xᵢᵀu)xᵢ, has ‖T‖ ≤ γρΛ KG²/(λm)³. Putting the norms
together: ‖∂²w/∂t∂s‖ ≤ (1/(λm))² G K(c₂ρ² + λ) + ‖T‖ + (1/(λm))(c₂ρ² + λ) KG/(λm).
(iii′) A second bound on ‖T‖, free of Λ, when |ℓ'''| ≤ κℓ''. For ‖y‖ = 1, yᵀr = Σ cᵢℓ'''ᵢ(xᵢᵀv)(xᵢᵀu)(xᵢᵀy), so
(cᵢ ≥ 0, |xᵢᵀy| ≤ ρ, then Cauchy–Schwarz with the weights cᵢℓ''ᵢ ≥ 0)

    ‖r‖ ≤ ρκ Σ cᵢℓ''ᵢ|xᵢᵀv||xᵢᵀu| ≤ ρκ √(Σ cᵢℓ''ᵢ(xᵢᵀv)²) · √(Σ cᵢℓ''ᵢ(xᵢᵀu)²).

Since A = Σ cᵢℓ''ᵢxᵢxᵢᵀ + λN·I, Σ cᵢℓ''ᵢ(xᵢᵀv)² = vᵀ(A − λN I)v = ∇g_Rᵀ(A⁻¹ − λN A⁻²)∇g_R, and the eigenvalues
(μ − λN)/μ² of A⁻¹ − λN A⁻² (μ ≥ λN an eigenvalue of A) are at most 1/(4λN) (at μ = 2λN); so that sum is
≤ (KG)²/(4λN), and likewise Σ cᵢℓ''ᵢ(xᵢᵀu)² ≤ G²/(4λN). Hence ‖r‖ ≤ ρκ KG²/(4λm) and ‖T‖ ≤ ‖A⁻¹‖‖r‖ ≤
ρκ KG²/(4(λm)²). Both bounds hold at every point of the square, so ‖T‖ ≤ ρKG²/(λm)² · min(κ/4, γΛ/(λm)), and
‖∂²w/∂t∂s‖ ≤ D(K). ∎

**Corollary (block sensitivity of the approximate centres).** ‖w̃(D) − w*(D)‖ ≤ β/(λ|D|) ≤ β/(λm) by strong
convexity, so each d̃ is within 2β/(λm) of d*, and with Δ = :func:`~lethe.certified.bounds.release_sensitivity`
(the bound on one ‖d̃_t‖ while the target is held):

* a block [0, b] starting at the first release (d̃_{−1} := 0): s ≤ Δ while held at b; ≤ 2β/(λm) once deleted;
* a block with the target held at a − 1 and at b, K rows of others removed inside: s ≤ min(2Δ, D(K) + 4β/(λm));
* a block in which the target's own deletion falls (held at a − 1, gone at b): s ≤ Δ + 2β/(λm);
* a block after the deletion: s ≤ 4β/(λm) (both worlds hold the same rows; only the hidden histories differ).

These hold for every pair of hidden histories (Newton iterates, re-solves, retraining points), because they use
only the residual of each centre: the mixture argument of docs/release_privacy.md §2 carries over.

**What the bound is in numbers.** Relative to Δ ≈ G/(λm), the per-row drift is D(1)/Δ = [2(c₂ + λ) +
G·min(κ/4, γΛ/(λm))]/(λm) (ρ = 1). With isotropic rows Λ ≈ n/d and γΛ/(λm) is usually below κ/4; with rows that
share a direction (MNIST's pixels, Adult's one-hot and constant columns) Λ is a sizeable fraction of n, the Λ form
would dominate (the docs' old rough estimate, 0.03–0.09 Δ per row) and step (iii′) caps it at κ/4: MNIST 3 vs 8
(λ = 10⁻²) 0.086 → 0.0074, Adult 0.022 → 0.0027 (docs/release_drift.md §2). Measured drifts
(tests/privacy/test_drift.py) are still 1–2 orders of magnitude smaller: the bound takes A at its smallest
eigenvalue λm and the curvature of the removed rows and of the target at c₂ together with the gradients at G.

**Premises the caller must publish.** m is the public floor ``n_floor`` (as for Δ), Λ a public cap ``gram_cap``
on λ_max of the Gram matrix of the rows *with* the target: the guarantee covers every history whose other records
have λ_max(Σ xxᵀ) ≤ Λ − ρ²; the Gram matrix only shrinks as rows are removed, so one check at ``fit``
(refusing Λ_held > Λ) enforces it for the whole stream (:func:`check_gram_cap`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lethe._validation import check_nonnegative, check_nonnegative_int, check_positive, check_positive_int

__all__ = [
    "LOGISTIC_CURVATURE",
    "LOGISTIC_SELF_CONCORDANCE",
    "LOGISTIC_THIRD",
    "centre_error",
    "check_gram_cap",
    "drift_bound",
    "gram_lambda_max",
]

#: sup ℓ'' of the logistic loss.
LOGISTIC_CURVATURE = 0.25
#: sup |ℓ'''| of the logistic loss: σ(1−σ)(1−2σ) peaks at 1/(6√3) (σ = 1/2 − 1/(2√3)).
LOGISTIC_THIRD = 1.0 / (6.0 * math.sqrt(3.0))
#: κ with |ℓ'''| ≤ κ ℓ'' for the logistic loss (labels ±1): ℓ''' = ℓ''·(1 − 2σ) up to sign, |1 − 2σ| ≤ 1.
LOGISTIC_SELF_CONCORDANCE = 1.0


def _g(lam: float, grad_bound: float, row_norm: float, loss_at_zero: float | None) -> float:
    """G = Cρ + a, a = min(Cρ, √(2λℓ(0))) (a = Cρ without ``loss_at_zero``)."""
    c_rho = grad_bound * row_norm
    a = c_rho if loss_at_zero is None else min(c_rho, math.sqrt(2.0 * lam * loss_at_zero))
    return c_rho + a


def drift_bound(rows_removed: int, lam: float, n_floor: int, gram_cap: float | None, *, grad_bound: float = 1.0,
                row_norm: float = 1.0 + 1e-9, curvature: float = LOGISTIC_CURVATURE,
                third: float = LOGISTIC_THIRD, loss_at_zero: float | None = math.log(2.0),
                self_concordance: float | None = LOGISTIC_SELF_CONCORDANCE) -> float:
    """D(K) = K G/(λm)² [2(c₂ρ² + λ) + ρG·min(κ/4, γΛ/(λm))]: the drift of the exact difference over K removed rows.

    Bounds ‖d*(S_a) − d*(S_b)‖ for S_b = S_a minus K rows, |S_b| ≥ m = ``n_floor``, and
    Λ = ``gram_cap`` ≥ λ_max(Σ_{S_a ∪ z} xxᵀ) (module docstring: statement and proof, steps (iii) and (iii′)).

    Parameters
    ----------
    rows_removed : int
        K ≥ 0, rows of *other* records removed between the two releases.
    lam : float
        λ > 0.
    n_floor : int
        m ≥ 1, a public lower bound on the other records held at either release.
    gram_cap : float or None
        Λ > 0, a public upper bound on the largest eigenvalue of Σ xᵢxᵢᵀ over the rows held (target included).
        None: no such premise — the bound is step (iii′)'s alone (Λ = ∞ in the minimum), which needs
        ``self_concordance``.
    grad_bound, row_norm, curvature, third : float
        C ≥ sup|ℓ'|, ρ ≥ sup‖x‖, c₂ ≥ sup ℓ'', γ ≥ sup|ℓ'''| (defaults: the logistic loss, ρ = 1 + 1e-9).
    loss_at_zero : float or None, default=log 2
        An upper bound on ℓ(0, y) for a loss ℓ ≥ 0; None uses a = Cρ.
    self_concordance : float or None, default=1 (the logistic loss)
        κ ≥ 0 with |ℓ'''(m, y)| ≤ κ ℓ''(m, y) at every margin m and label y (generalised self-concordance; the
        logistic loss with labels ±1: κ = 1). Like the other loss constants it defaults to the logistic loss: pass
        the loss's own κ, or None for a loss without one — then only the Λ form γΛ/(λm) of step (iii) is used
        (the bound as it was before step (iii′), reproduced exactly).

    Returns
    -------
    float
        D(K) (0 for K = 0).

    Examples
    --------
    >>> drift_bound(0, 1e-2, 1000, 100.0)
    0.0
    >>> round(drift_bound(2, 1e-2, 1000, 100.0) / drift_bound(1, 1e-2, 1000, 100.0), 12)
    2.0
    >>> drift_bound(1, 1e-2, 1000, 5000.0) < drift_bound(1, 1e-2, 1000, 5000.0, self_concordance=None)
    True
    >>> drift_bound(1, 1e-2, 1000, None) == drift_bound(1, 1e-2, 1000, 1e300)
    True
    """
    K = check_nonnegative_int("rows_removed", rows_removed)
    lam_ = check_positive("lam", lam)
    m = check_positive_int("n_floor", n_floor)
    big_lambda = None if gram_cap is None else check_positive("gram_cap", gram_cap)
    C = check_nonnegative("grad_bound", grad_bound)
    rho = check_positive("row_norm", row_norm)
    c2 = check_nonnegative("curvature", curvature)
    gamma = check_nonnegative("third", third)
    sc = None if self_concordance is None else check_nonnegative("self_concordance", self_concordance)
    G = _g(lam_, C, rho, None if loss_at_zero is None else check_nonnegative("loss_at_zero", loss_at_zero))
    kappa = 1.0 / (lam_ * m)
    if big_lambda is None:
        if sc is None:
            raise ValueError("gram_cap=None (no cap on the rows' Gram matrix) needs the loss's self_concordance: "
                             "without either the drift is not bounded. Found self_concordance=None.")
        third_term = 0.25 * sc * rho * G  # step (iii′) alone
    elif sc is None or gamma * big_lambda * kappa <= 0.25 * sc:  # step (iii), the Λ form (float expression as before)
        third_term = gamma * rho * big_lambda * G * kappa
    else:  # step (iii′), generalised self-concordance: free of Λ
        third_term = 0.25 * sc * rho * G
    return K * G * kappa**2 * (2.0 * (c2 * rho**2 + lam_) + third_term)


def centre_error(lam: float, n_floor: int, residual: float) -> float:
    """β/(λm): how far a centre with gradient residual ≤ β can be from the exact minimiser (strong convexity).

    Examples
    --------
    >>> centre_error(0.5, 4, 1.0)
    0.5
    """
    beta = check_nonnegative("residual", residual)
    return beta / (check_positive("lam", lam) * check_positive_int("n_floor", n_floor))


def gram_lambda_max(X: Any) -> float:
    """λ_max(XᵀX) of the rows held (float64, dense or scipy sparse), rounded *up* by a relative 1e-9 + 1e-12.

    Computed from the d × d Gram matrix with numpy's symmetric eigensolver (backward stable: the error is a small
    multiple of machine precision times ‖XᵀX‖, well inside the margin).
    """
    Xa = X
    if hasattr(Xa, "toarray") and not isinstance(Xa, np.ndarray):
        gram = np.asarray((Xa.T @ Xa).toarray(), dtype=np.float64)
    else:
        Xa = np.asarray(Xa, dtype=np.float64)
        gram = Xa.T @ Xa
    top = float(np.linalg.eigvalsh(gram)[-1]) if gram.size else 0.0
    return top * (1.0 + 1e-9) + 1e-12


def check_gram_cap(X: Any, gram_cap: float) -> float:
    """Refuse rows whose Gram matrix's largest eigenvalue passes the public cap Λ; return that eigenvalue.

    Removing rows only shrinks Σ xxᵀ (in the PSD order), so checking at ``fit`` covers the whole stream.

    Raises
    ------
    ValueError
        Naming ``gram_cap``, the rule and both values.
    """
    cap = check_positive("gram_cap", gram_cap)
    top = gram_lambda_max(X)
    if top > cap:
        raise ValueError(f"gram_cap must be >= the largest eigenvalue of the held rows' Gram matrix X^T X; "
                         f"got gram_cap={cap!r}, largest eigenvalue {top!r}")
    return top
