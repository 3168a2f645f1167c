"""Gradient-residual bounds of the Newton removal step (Guo et al. 2020, Thm 1, 4; Cor. 1, 2) and lethe's tighter ones.

Setting: L(·; D′) is the objective on the remaining data D′ (n′ = n − m rows, data matrix X′), w the current model,
Δ = m λ w + Σ_{removed} ∇ℓ(wᵀxⱼ, yⱼ), H = ∇²L(w; D′), and the step w⁻ = w + v with v ≈ H⁻¹Δ.

Derivation used by :func:`data_dependent_bound` (a slightly more careful form of Cor. 1/2). With
G(w) = ∇L_b(w; D′) and the integral form of Taylor's theorem (the mean-value form in the paper's proof is not an
identity for vector-valued G, the integral form is),

    G(w + v) = G(w) + H̄ v,    H̄ = ∫₀¹ H(w + t v) dt,
    G(w)     = u − Δ,          u = ∇L_b(w; D) the residual before the removal,

so  G(w⁻) = u + (H̄ − H) v + (H v − Δ).  Here H̄ − H = X′ᵀ(D̄ − D)X′ with diagonal entries
κᵢ = ∫₀¹ [ℓ''((w + t v)ᵀxᵢ) − ℓ''(wᵀxᵢ)] dt, each at most γ |xᵢᵀ v| ≤ γ ‖v‖ in absolute value (‖xᵢ‖ ≤ 1). Hence

    ‖G(w⁻)‖ ≤ ‖u‖ + γ ‖X′‖₂ ‖v‖ ‖X′ v‖ + ‖H v − Δ‖.

The middle term is Cor. 1 (m = 1) / Cor. 2 (m > 1) of the paper; the last is the linear-solve error, which the
paper takes as 0 (exact inverse) and which lethe measures with one Hessian-vector product. ‖X′‖₂ may be replaced
by any upper bound, e.g. ‖X‖₂ of the data before removals (removing rows never increases the spectral norm).
Accumulating over removals gives the paper's induction (§3.2, "Multiple removals"), starting at the training
solver's own residual ‖∇L_b(w₀; D)‖ rather than 0 (footnote 1).

The worst-case bounds of Thm 1/Thm 4 are reported for comparison only: their proof bounds ‖w‖ ≤ C/λ, which fails
under the perturbation b (the paper's errata), so they certify nothing here.

Tighter bounds (``bound="tight"``). :func:`remainder_bound_tight` and :func:`anchor_bounds` bound the same vectors:
the Taylor remainder r = (H̄ − H) v = Σᵢ κᵢ aᵢ xᵢ (aᵢ = xᵢᵀv) and, for the no-data-pass solver, the anchor mismatch
(H(w) − M) v. Proofs: ``docs/tighter_bounds.md``; each docstring states its inequality chain. All inputs are
*upper bounds* of the quantities named (callers inflate computed values by their rounding error) and every bound is
monotone in its inputs, so a bound evaluated at upper bounds is still a bound.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import eigvalsh
from scipy.linalg.blas import dnrm2, ssyrk

EPS = float(np.finfo(np.float64).eps)
#: Unit roundoff u of float64 (half the machine epsilon): fl(a ∘ b) = (a ∘ b)(1 + θ), |θ| ≤ u.
UNIT_ROUNDOFF = EPS / 2.0
#: Rows are accepted with ‖xᵢ‖₂ ≤ 1 + ROW_NORM_TOLERANCE (see :func:`lethe.certified.mechanism.check_row_norms`).
ROW_NORM_TOLERANCE = 1e-9
#: The largest row norm ρ the bounds assume for losses that require ‖xᵢ‖ ≤ 1.
ROW_NORM_MAX = 1.0 + ROW_NORM_TOLERANCE


#: Unit roundoff of float32.
UNIT_ROUNDOFF_32 = float(np.finfo(np.float32).eps) / 2.0
#: Rows per single-precision Gram block (:func:`spectral_norm_upper_bound` with ``single=True``).
GRAM_BLOCK_32 = 1024


def _gamma32(k: int) -> float:
    ku = k * UNIT_ROUNDOFF_32
    if ku >= 0.5:
        return math.inf
    return ku / (1.0 - ku)


def _lambda_max_upper(G: np.ndarray, allowance: float) -> float:
    """λ_max of the symmetric matrix whose upper triangle is G, plus ``allowance``."""
    G = np.triu(G) + np.triu(G, 1).T
    return float(eigvalsh(G, subset_by_index=[G.shape[0] - 1, G.shape[0] - 1])[0]) + allowance


def spectral_norm_upper_bound_single(X: np.ndarray, block: int = GRAM_BLOCK_32) -> float:
    """A certified upper bound on ‖X‖₂ (d ≤ n) from a Gram matrix formed in single precision, block by block: about
    half the time of the double-precision product, at a slightly looser bound.

    With s a power of two (max |s xᵢⱼ| < 1; exact), X̃ = fl32(s X) (as float64 values) and E = X̃ − s X,
    |Eᵢⱼ| ≤ u₃₂ |s xᵢⱼ| + η (η = 2⁻¹⁴⁹ covers underflow), so ‖sX‖₂ ≤ ‖X̃‖₂ + u₃₂‖sX‖_F + η√(nd). The Gram matrix
    Ĝ = Σ_b fl64(fl32(X̃_bᵀX̃_b)) over blocks of k rows: each block's product is within γ_k^{(32)}|X̃_b|ᵀ|X̃_b| + 2kη
    entrywise (Higham, Thm 3.5, any summation order, plus underflowing products; no overflow since |x̃| ≤ 1 and
    k < 2¹²⁷), and the float64 sum of the B blocks within γ_B Σ_b|Ĝ_b|; in the 2-norm (≤ Frobenius, ‖|A|ᵀ|A|‖_F ≤
    ‖A‖_F²) ‖Ĝ − X̃ᵀX̃‖₂ ≤ A = (γ_k^{(32)} + γ_B(1 + γ_k^{(32)}))F + 2ndη with F ≥ ‖X̃‖_F². The symmetric eigensolver
    adds ≤ 4 d ε ‖Ĝ‖_F (as :func:`spectral_norm_upper_bound`). So ‖X̃‖₂² ≤ λ̂ + A + 4dε(F + A). The result is
    capped by the Frobenius norm's upper bound.
    """
    gram_bound, fro_bound = _spectral_single_parts(X, block)
    return min(gram_bound, fro_bound)


def _spectral_single_parts(X: np.ndarray, block: int) -> tuple[float, float]:
    """(the Gram-based bound, the Frobenius bound) of :func:`spectral_norm_upper_bound_single`, each ≥ ‖X‖₂."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    amax = max(float(np.max(X, initial=0.0)), -float(np.min(X, initial=0.0)))  # no n × d temporary
    if amax == 0.0:
        return 0.0, 0.0
    if not math.isfinite(amax):
        raise ValueError(f"X must be finite to bound its spectral norm. Found max |x| = {amax}.")
    _, e = math.frexp(amax)  # amax < 2**e
    scale = math.ldexp(1.0, -e)
    G = np.zeros((d, d))
    blocks = 0
    fro2 = 0.0
    for i in range(0, n, block):
        Xb = X[i:i + block] * scale  # exact (powers of two), up to float64 underflow, covered by η
        fro2 += float(np.einsum("ij,ij->", Xb, Xb))
        Xb32 = Xb.astype(np.float32)
        G += ssyrk(1.0, Xb32.T, trans=0, lower=0)  # upper triangle of X̃_bᵀ X̃_b in float32
        blocks += 1
    # ‖sX‖_F² as computed: a sum of nd non-negative terms (γ_{nd}) plus the blocks' sum (γ_B); underflowing squares
    # lose at most nd·2⁻¹⁰⁷⁴
    fro_s = math.sqrt(fro2 * (1.0 + 2.0 * gamma_k(n * d + blocks + 1)) + n * d * 2.0**-1074) * (1.0 + 2.0 * EPS)
    eta = 2.0**-149
    fro_t = fro_s * (1.0 + UNIT_ROUNDOFF_32) + eta * math.sqrt(n * d)  # ≥ ‖X̃‖_F
    F = fro_t * fro_t * (1.0 + 4.0 * EPS)
    gk = _gamma32(min(block, n))
    A = (gk + gamma_k(blocks + 1) * (1.0 + gk)) * F + 2.0 * n * d * eta
    lam = _lambda_max_upper(G, A + 4.0 * d * EPS * (F + A))
    norm_t = math.sqrt(max(lam, 0.0)) * (1.0 + 4.0 * EPS)
    norm_s = (norm_t + UNIT_ROUNDOFF_32 * fro_s + eta * math.sqrt(n * d)) * (1.0 + 4.0 * EPS)
    return norm_s / scale * (1.0 + 2.0 * EPS), fro_s / scale * (1.0 + 2.0 * EPS)


def spectral_norm_upper_bound(X: np.ndarray, gram: np.ndarray | None = None) -> float:
    """A certified upper bound on ‖X‖₂ (largest singular value).

    Computed as √(λ_max(G) + r) with G the smaller Gram matrix (XᵀX or XXᵀ) and r a rounding allowance covering
    the error of forming G in floating point (|fl(G) − G| ≤ k u ‖X‖_F² entrywise, k the inner dimension) and of
    the symmetric eigensolver (backward stable: error ≤ p(d) u ‖G‖₂); the result is then capped by the Frobenius
    norm ‖X‖_F, itself an upper bound. Power iteration is *not* used: from a random start it gives a lower bound.

    ``gram`` may pass a precomputed fl(XᵀX) (only used when d ≤ n; the allowance covers its rounding).

    Removing rows never increases ‖X‖₂ (XᵀX loses positive semi-definite terms), so the bound computed at training
    stays valid for every later subset of the rows: lethe computes it once per (re)training.

    >>> X = np.diag([3.0, 1.0])
    >>> 3.0 <= spectral_norm_upper_bound(X) < 3.0 + 1e-9
    True
    """
    X = np.asarray(X, dtype=np.float64)
    if X.size == 0:
        return 0.0
    n, d = X.shape
    fro2 = float(np.einsum("ij,ij->", X, X))
    if gram is not None and d <= n:
        G = np.triu(gram) + np.triu(gram, 1).T
    else:
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


#: Largest absolute error of one rounded product or quotient that underflows (gradual underflow, round to nearest:
#: half the smallest subnormal, bounded here by the smallest subnormal itself).
UNDERFLOW_ERROR = 2.0**-1074

#: Relative error of one evaluation of a loss derivative ℓ'(z) at a float z, as a multiple of u: the logistic
#: loss's −y·expit(−yz) (exp within 1 ulp, one addition, one division: < 4u), the squared loss's 2(z − y) (one
#: subtraction: u). A new loss must meet it (docs/tighter_bounds.md §0a).
D1_EVAL_ULPS = 8
#: Absolute error allowed on top of :data:`D1_EVAL_ULPS` for values below the normal range: an expit whose exp
#: overflows returns 0 for a true value below e^{−709.78} < 2⁻¹⁰²², and subnormal results lose ≤ 2⁻¹⁰⁷⁴.
D1_EVAL_ABS = 2.0**-1021


def gradient_rounding_allowance(*, sum_terms: int, dot_terms: int, n: int, d: int, fro: float, d1_norm: float,
                                reg_norm: float, b_norm: float, d2_sup: float, w_norm: float,
                                g_norm: float) -> float:
    """A bound on ‖g̃ − ∇L_b(w; D)‖ for g̃ = fl(fl(Xᵀ d̃) + fl(fl(λn)·w)) + b, d̃ = fl(ℓ'(fl(Xw))), plus the rounding
    of ‖g̃‖ itself: the allowance added to a measured gradient norm (β₀ of training, the anchor's re-measure).
    Derivation: docs/tighter_bounds.md §0a (Higham 2002, §3.1: a sum whose every term passes through at most K
    roundings — its own product and the additions on its way to the result, in ANY order or tree — is within
    γ_K Σ|terms| of the exact sum). With every input an upper bound of the quantity named:

        γ_K (F D + R + B)              the sum Xᵀd̃ + λn w + b, K = max(S + 2, 4)
      + 2 D1_EVAL_ULPS u F D + 2 F a √n   ℓ' evaluated at the computed margins (relative error; a = D1_EVAL_ABS)
      + s₂ F (γ_k F W + k η √n)        the margins' errors |fl(xᵢᵀw) − xᵢᵀw| ≤ γ_k ‖xᵢ‖‖w‖ (+ underflow) through ℓ'
      + η n √d                         products xᵢⱼd̃ᵢ that underflow (outside Higham's model)
      + γ_{d+2} G + √(d η)             the computed norm ‖g̃‖ (relative error γ_{d+2}; squares that underflow)

    times :func:`evaluation_slack`. Parameters: ``sum_terms`` S ≥ the roundings any product xᵢⱼd̃ᵢ passes through in
    fl(Xᵀd̃) (the backend's ``sum_terms``: n dense, the largest column count sparse, largest chunk + #chunks − 1
    chunked); ``dot_terms`` k ≥ the products in one margin; F ≥ ‖X‖_F; D ≥ ‖d̃‖; R ≥ λn‖w‖; B ≥ ‖b‖; s₂ ≥ sup ℓ'';
    W ≥ ‖w‖; G = the computed ‖g̃‖. Monotone in every input.

    >>> a = gradient_rounding_allowance(sum_terms=1000, dot_terms=10, n=1000, d=10, fro=30.0, d1_norm=10.0,
    ...                                 reg_norm=1.0, b_norm=1.0, d2_sup=0.25, w_norm=5.0, g_norm=1.0)
    >>> 3.5e-11 < a < 3.6e-11  # ≈ γ_1002 · 302
    True
    """
    S = max(int(sum_terms), 1)
    K = max(S + 2, 4)
    k = max(int(dot_terms), 1)
    eta = UNDERFLOW_ERROR
    rt_n = math.sqrt(n)
    total = (gamma_k(K) * (fro * d1_norm + reg_norm + b_norm)
             + 2.0 * D1_EVAL_ULPS * UNIT_ROUNDOFF * fro * d1_norm + 2.0 * fro * D1_EVAL_ABS * rt_n
             + d2_sup * fro * (gamma_k(k) * fro * w_norm + k * eta * rt_n)
             + eta * n * math.sqrt(d)
             + gamma_k(d + 2) * g_norm + math.sqrt(d * eta))
    return total * evaluation_slack(8)


def inflate_norm(computed: float, terms: int) -> float:
    """An upper bound on the exact 2-norm of a vector of ``terms`` floats from its computed norm
    (:func:`vnorm`: relative error ≤ γ_{terms+2}; a root of a sum of squares, whose squares that underflow lose at
    most η each, hence √(terms·η) on the root): computed·(1 + 2γ_{terms+2}) + √(terms·η)."""
    return computed * (1.0 + 2.0 * gamma_k(terms + 2)) + math.sqrt(max(terms, 1) * UNDERFLOW_ERROR)


def vnorm(x: np.ndarray) -> float:
    """‖x‖₂ of a vector without underflow or overflow: BLAS ``dnrm2`` (a scaled algorithm in the reference BLAS and
    OpenBLAS), recomputed as s √((x/s)·(x/s)) with s = max|xᵢ| when the result is below 1e-100 or not finite, so
    that even a BLAS that squares naively cannot return a norm too small to enter an upper bound (squares of
    entries below 1e-154 underflow). Relative error ≤ γ_n, which the bounds' evaluation slack covers.

    >>> vnorm(np.array([3e-200, 4e-200])), round(vnorm(np.array([3e200, 4e200])) / 1e200, 12), vnorm(np.ones(4))
    (5e-200, 5.0, 2.0)
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    r = float(dnrm2(x)) if x.size else 0.0
    if 1e-100 <= r < math.inf:
        return r
    s = float(np.max(np.abs(x), initial=0.0))
    if s == 0.0 or not math.isfinite(s):
        return s if s == 0.0 or math.isnan(s) else math.inf
    xs = x / s
    return s * math.sqrt(float(np.dot(xs, xs)))


def gamma_k(k: int | float) -> float:
    """Higham's γ_k = k u / (1 − k u): |fl(Σⱼ aⱼbⱼ) − Σ aⱼbⱼ| ≤ γ_k Σ |aⱼbⱼ| for k terms, any summation order.

    (Higham 2002, §3.1; also holds with fused multiply-adds.) Raises ``ValueError`` if k u ≥ 1/2.

    >>> gamma_k(10) > 10 * UNIT_ROUNDOFF
    True
    """
    ku = float(k) * UNIT_ROUNDOFF
    if ku >= 0.5:
        raise ValueError(f"gamma_k needs k u < 1/2. Found k = {k}.")
    return ku / (1.0 - ku)


def evaluation_slack(n_terms: int) -> float:
    """A factor ≥ 1 covering the floating-point evaluation of a bound formula that sums ``n_terms`` non-negative
    terms and takes a few products and square roots: 1 + 2 γ_{n+16}."""
    return 1.0 + 2.0 * gamma_k(n_terms + 16)


# -- tighter bounds (docs/tighter_bounds.md) -------------------------------------------------------------------------


def remainder_bound_paper(gamma: float, x_norm: float, row_norm: float, v_norm: float, a_norm: float) -> float:
    """Guo et al. 2020, Cor. 1/2 with the row-norm bound explicit: γ ‖X′‖₂ ρ ‖v‖ ‖X′v‖.

    Proof (docs/tighter_bounds.md §2): |κᵢ| ≤ sup_t |ℓ''(zᵢ + t aᵢ) − ℓ''(zᵢ)| ≤ γ |aᵢ| ≤ γ ρ ‖v‖ (ρ ≥ maxᵢ ‖xᵢ‖),
    and ‖X′ᵀ diag(κ) a‖ ≤ ‖X′‖₂ maxᵢ|κᵢ| ‖a‖. This is the paper's bound (it takes ρ = 1).

    >>> round(remainder_bound_paper(0.25, 2.0, 1.0, 0.1, 0.3), 12)
    0.015
    """
    return gamma * x_norm * row_norm * v_norm * a_norm


def remainder_bound_tight(a_abs: np.ndarray, lipschitz: np.ndarray | float, x_norm: float,
                          row_norm: float, out: np.ndarray | None = None) -> tuple[float, dict[str, float]]:
    """The tight bound on ‖r‖, r = Σᵢ κᵢ aᵢ xᵢ (Taylor remainder of the Newton step), and its candidates.

    Parameters
    ----------
    a_abs : ndarray (n,)
        Upper bounds āᵢ ≥ |aᵢ| = |xᵢᵀv| (0 for rows not in D′).
    lipschitz : ndarray (n,) or float
        Γᵢ ≥ sup |ℓ'''| on the segment between zᵢ and zᵢ + aᵢ (a local Lipschitz constant of ℓ''), or the global
        γ = sup |ℓ'''| (1/(6√3) for the logistic loss).
    x_norm : float
        An upper bound on ‖X′‖₂.
    row_norm : float
        ρ ≥ maxᵢ ‖xᵢ‖₂.
    out : ndarray (n,), optional
        Work space for Γ ⊙ ā² (may be ``lipschitz`` itself); avoids temporaries on the per-removal path.

    Returns
    -------
    (bound, candidates)
        ``bound`` is the smallest candidate times :func:`evaluation_slack`. The candidates, both valid:

        * ``"spectral"``: ½ ‖X′‖₂ ‖Γ ⊙ ā²‖₂ — from |κᵢ| ≤ ∫₀¹ Γᵢ t |aᵢ| dt = Γᵢ|aᵢ|/2 and ‖X′ᵀg‖ ≤ ‖X′‖₂‖g‖;
          with Γᵢ = γ this is (γ/2) ‖X′‖₂ ‖a‖₄².
        * ``"triangle"``: ½ ρ Σᵢ Γᵢ āᵢ² — the triangle inequality over rows, ‖Σᵢ gᵢ xᵢ‖ ≤ Σᵢ |gᵢ| ‖xᵢ‖.

        With Γᵢ ≤ γ both are ≤ (γ/2) ‖X′‖₂ ρ ‖v‖ ‖a‖₂ (since ‖a‖₄² ≤ ‖a‖_∞‖a‖₂ ≤ ρ‖v‖‖a‖₂), which is half the
        paper's bound at the same γ (docs/tighter_bounds.md §3).

    >>> b, c = remainder_bound_tight(np.array([0.1, 0.2]), 0.25, 1.0, 1.0)
    >>> sorted(c), round(b, 6)
    (['spectral', 'triangle'], 0.005154)
    """
    a_abs = np.asarray(a_abs, dtype=np.float64)
    t = np.multiply(np.asarray(lipschitz, dtype=np.float64), a_abs, out=out)
    t *= a_abs
    spectral = 0.5 * x_norm * float(np.sqrt(np.dot(t, t)))
    triangle = 0.5 * row_norm * float(np.sum(t))
    cands = {"spectral": spectral, "triangle": triangle}
    return min(cands.values()) * evaluation_slack(a_abs.size), cands


def anchor_bounds(*, gamma: float, tau: float, x_norm: float, row_norm: float, n_rows: int, v_norm: float,
                  a_norm: float, dw_norm: float, c_norm: float, mode: str) -> tuple[float, float, dict[str, float]]:
    """Bounds for a step solved with an anchor Hessian M = X′ᵀ diag(ŝ) X′ + λ n′ I (ŝᵢ ≈ ℓ''(xᵢᵀw_a)), computable
    without a pass over the data (docs/tighter_bounds.md §5).

    The step's residual increment is (Mv − Δ) + (H(w) − M) v + r. The first term is measured by the caller; this
    function bounds the other two.

    * Mismatch (H(w) − M) v = X′ᵀ diag(ℓ''(zᵢ) − ŝᵢ) a with |ℓ''(zᵢ) − ŝᵢ| ≤ γ |cᵢ| + τ, cᵢ = xᵢᵀ(w − w_a):

      - ``"mismatch/triangle"``: ρ (γ ‖c‖₂ + τ √n′) ‖a‖₂ (triangle inequality over rows, Cauchy–Schwarz);
      - ``"mismatch/spectral-dw"``: ‖X′‖₂ (γ ρ ‖w − w_a‖ + τ) ‖a‖₂ (|cᵢ| ≤ ρ ‖w − w_a‖);
      - ``"mismatch/spectral-v"``: ‖X′‖₂ (γ ‖c‖₂ ρ ‖v‖ + τ ‖a‖₂) (‖c ⊙ a‖₂ ≤ ‖c‖₂ ‖a‖_∞ ≤ ‖c‖₂ ρ ‖v‖).

    * Taylor remainder r with |κᵢ| ≤ γ |aᵢ| / 2:

      - ``"remainder/triangle"``: ½ γ ρ ‖a‖₂²;
      - ``"remainder/spectral"``: ½ γ ‖X′‖₂ ρ ‖v‖ ‖a‖₂.

    ``mode="paper"`` keeps the Cor. 1 form with the mean-value factor 1 for both: mismatch
    γ ‖X′‖₂ ρ ‖w − w_a‖ ‖a‖₂ + τ ‖X′‖₂ ‖a‖₂, remainder γ ‖X′‖₂ ρ ‖v‖ ‖a‖₂. ``mode="tight"`` takes the smallest
    candidate of each group. Inputs are upper bounds: ``a_norm`` ≥ ‖X′v‖, ``c_norm`` ≥ ‖X′(w − w_a)‖,
    ``dw_norm`` ≥ ‖w − w_a‖, ``tau`` ≥ maxᵢ |ŝᵢ − ℓ''(xᵢᵀw_a)| (the curvature evaluation error).

    Returns (mismatch bound, remainder bound, candidates); both bounds include :func:`evaluation_slack`.

    >>> m, r, _ = anchor_bounds(gamma=0.1, tau=0.0, x_norm=10.0, row_norm=1.0, n_rows=100, v_norm=0.01,
    ...                         a_norm=0.05, dw_norm=0.02, c_norm=0.1, mode="tight")
    >>> round(m, 8), round(r, 8)
    (0.0005, 0.000125)
    """
    slack = evaluation_slack(16)
    if mode == "paper":
        mismatch = gamma * x_norm * row_norm * dw_norm * a_norm + tau * x_norm * a_norm
        remainder = gamma * x_norm * row_norm * v_norm * a_norm
        return mismatch * slack, remainder * slack, {"mismatch/paper": mismatch, "remainder/paper": remainder}
    cands = {
        "mismatch/triangle": row_norm * (gamma * c_norm + tau * math.sqrt(n_rows)) * a_norm,
        "mismatch/spectral-dw": x_norm * (gamma * row_norm * dw_norm + tau) * a_norm,
        "mismatch/spectral-v": x_norm * (gamma * c_norm * row_norm * v_norm + tau * a_norm),
        "remainder/triangle": 0.5 * gamma * row_norm * a_norm * a_norm,
        "remainder/spectral": 0.5 * gamma * x_norm * row_norm * v_norm * a_norm,
    }
    mismatch = min(cands["mismatch/triangle"], cands["mismatch/spectral-dw"], cands["mismatch/spectral-v"])
    remainder = min(cands["remainder/triangle"], cands["remainder/spectral"])
    return mismatch * slack, remainder * slack, cands


def release_sensitivity(lam: float, n_floor: int, residual_cap: float, grad_bound: float = 1.0,
                        row_norm: float = ROW_NORM_MAX, loss_at_zero: float | None = None) -> float:
    """Δ = (Cρ + a + 2β_cap) / (λ m), a = min(Cρ, √(2λ ℓ(0))): the L2 sensitivity of the released centre.

    Setting (docs/release_privacy.md §2). L_0(w; D) = Σ_{i∈D} ℓ(wᵀxᵢ, yᵢ) + (λ|D|/2)‖w‖² (Guo et al. 2020's
    objective with b = 0), ℓ convex with |ℓ'| ≤ C and ‖xᵢ‖ ≤ ρ; w̃(D) is ANY point with ‖∇L_0(w̃(D); D)‖ ≤ β_cap
    (the certified residual of :class:`~lethe.certified.mechanism.CertifiedRemoval` with ``residual_cap``).
    Neighbours: D = S ∪ {z}, |S| = m.

    Claim. ‖w̃(D) − w̃(S)‖ ≤ (Cρ + a + 2β_cap)/(λ m) with a = Cρ, or a = min(Cρ, √(2λ ℓ(0))) when ℓ ≥ 0 and
    ``loss_at_zero`` ≥ sup_y ℓ(0, y) is given (log 2 for the logistic loss). With a = Cρ this is 2(Cρ + β)/(λm).

    Proof. (i) λ‖w*(S)‖ ≤ a. Optimality: Σ_S ℓ'ᵢ xᵢ + λ m w* = 0, so λ m ‖w*‖ ≤ m C ρ. And if ℓ ≥ 0:
    (λm/2)‖w*‖² ≤ L_0(w*; S) ≤ L_0(0; S) ≤ m ℓ(0), so λ‖w*‖ ≤ √(2λ ℓ(0)).
    (ii) L_0(·; D) = L_0(·; S) + h with h(w) = ℓ_z(w) + (λ/2)‖w‖² (the regulariser grows with |D|), so
    ∇L_0(w*(S); D) = ∇h(w*(S)) = ℓ'_z x_z + λ w*(S), of norm ≤ Cρ + a.
    (iii) L_0(·; D) is λ(m+1)-strongly convex, hence for any w, ‖w − w*(D)‖ ≤ ‖∇L_0(w; D)‖/(λ(m+1)); at
    w = w*(S): ‖w*(S) − w*(D)‖ ≤ (Cρ + a)/(λ(m+1)).
    (iv) The same strong convexity gives ‖w̃(D) − w*(D)‖ ≤ β_cap/(λ(m+1)) and ‖w̃(S) − w*(S)‖ ≤ β_cap/(λm).
    Triangle inequality: ‖w̃(D) − w̃(S)‖ ≤ (Cρ + a + β_cap)/(λ(m+1)) + β_cap/(λm) ≤ (Cρ + a + 2β_cap)/(λm). ∎

    The bound holds for every pair of approximate minimisers, whatever the internal history (Newton steps,
    retraining times) that produced them, which is what lets the release mechanism mix over hidden state. The λw
    term is needed in general: for a loss whose slope stays −C up to a large margin (ℓ(0) large, so a = Cρ), one
    point repeated m times and z of the opposite label reach 2Cρ/(λ(m+1)) (tests/privacy/test_release.py). For the
    logistic loss at λ = 1e-3, a = √(2·10⁻³ log 2) ≈ 0.037: Δ ≈ (1.037 + 2β)/(λm) instead of 2(1 + β)/(λm).

    Parameters
    ----------
    lam : float
        λ > 0.
    n_floor : int
        m ≥ 1: a PUBLIC lower bound on the rows of the smaller of the two neighbouring data sets.
    residual_cap : float
        β_cap ≥ 0, the certified residual of both approximate minimisers.
    grad_bound : float, default=1.0
        C, sup |ℓ'| (1 for the logistic loss).
    row_norm : float, default=ROW_NORM_MAX
        ρ ≥ sup ‖xᵢ‖ (rows are accepted up to 1 + 1e-9).
    loss_at_zero : float or None, default=None
        An upper bound on ℓ(0, y) over the labels, for a loss ℓ ≥ 0 (log 2 for the logistic loss); None: a = Cρ.

    Returns
    -------
    float
        Δ (rounded up).

    Examples
    --------
    >>> round(release_sensitivity(1e-3, 10**6, 0.0, row_norm=1.0), 12)
    0.002
    >>> round(release_sensitivity(1e-3, 10**6, 0.0, row_norm=1.0, loss_at_zero=math.log(2)), 6)
    0.001037
    """
    if not (isinstance(lam, int | float) and lam > 0 and math.isfinite(lam)):
        raise ValueError(f"lam must be a finite number > 0. Found {lam!r}.")
    if isinstance(n_floor, bool) or not isinstance(n_floor, int | np.integer) or n_floor < 1:
        raise ValueError(f"n_floor must be an integer >= 1. Found {n_floor!r}.")
    if not (isinstance(residual_cap, int | float) and residual_cap >= 0 and math.isfinite(residual_cap)):
        raise ValueError(f"residual_cap must be a finite number >= 0. Found {residual_cap!r}.")
    if not (isinstance(grad_bound, int | float) and grad_bound > 0 and math.isfinite(grad_bound)):
        raise ValueError(f"grad_bound must be a finite number > 0. Found {grad_bound!r}.")
    if not (isinstance(row_norm, int | float) and row_norm > 0 and math.isfinite(row_norm)):
        raise ValueError(f"row_norm must be a finite number > 0. Found {row_norm!r}.")
    c_rho = grad_bound * row_norm
    a = c_rho
    if loss_at_zero is not None:
        if not (isinstance(loss_at_zero, int | float) and loss_at_zero >= 0 and math.isfinite(loss_at_zero)):
            raise ValueError(f"loss_at_zero must be a finite number >= 0. Found {loss_at_zero!r}.")
        a = min(c_rho, math.sqrt(2.0 * lam * loss_at_zero) * (1.0 + 4.0 * EPS))
    # rounded up: a few correctly rounded operations, each within (1 + u) of the exact value
    return (c_rho + a + 2.0 * residual_cap) / (lam * int(n_floor)) * (1.0 + 8.0 * EPS)
