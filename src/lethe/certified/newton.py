"""Newton removal steps (Guo et al. 2020, Eq. 3, 6): solvers, their certified residual increments, and the cache.

Every solver returns a step v and a certified upper bound on ‖G(w + v) − u‖, the increment of the gradient
residual (G = ∇L_b(·; D′), u = ∇L_b(w; D) the residual before the removal). With Δ = m λ w + Σ_{removed} ∇ℓ and
H = ∇²L(w; D′) the increment is exactly (docs/tighter_bounds.md §2)

    G(w + v) − u = (H v − Δ) + r,     r = (H̄ − H) v,  H̄ = ∫₀¹ H(w + t v) dt.

Solvers (``CertifiedRemoval.solver``):

``"cholesky"``
    The paper: rebuild H on D′ and factorise it at every removal (O(nd² + d³)).
``"refine"`` / ``"pcg"``
    Solve H v = Δ with a cached factorisation F of an earlier Hessian as preconditioner: iterative refinement
    (v ← v − F⁻¹(Hv − Δ)) or preconditioned conjugate gradients; each iteration is one Hessian-vector product,
    O(nd). The solve error e = H v − Δ is *measured* (HVP with the exact curvature at w) and charged.
``"anchor"``
    No pass over the data: solve with an anchor Hessian M = X′ᵀ diag(ŝ) X′ + λ n′ I (ŝ the curvature at an anchor
    point w_a) kept as a dense matrix and downdated for removed rows (rank-one updates, O(d²) each), with the
    Gram matrix X′ᵀX′ kept the same way for exact norms ‖X′v‖. The anchor residual Mv − Δ is measured
    (O(d²)); the mismatch (H(w) − M) v and the remainder r are *bounded* (:func:`~lethe.certified.bounds.anchor_bounds`)
    from ‖X‖₂, γ, ‖w − w_a‖, ‖X′(w − w_a)‖, ‖v‖, ‖X′v‖. Per removal: O(d² m + d²·iterations).

Rounding. Every computed quantity that enters a certificate is inflated by an explicit floating-point error bound
(Higham's γ_k for dot products; docs/tighter_bounds.md §7). They are many orders of magnitude below the step
bounds but keep the certificate a bound on the exact-arithmetic quantity.

Refresh policy (``CertifiedRemoval.refresh``): a deterministic cost model (:class:`CostModel`, flop counts, so
seeded runs stay bit-for-bit reproducible) prices each option in seconds. ``"auto"`` is a rent-or-buy rule: the
cost that staleness causes is accumulated (extra solver iterations for ``refine``/``pcg``; for ``anchor`` the
budget spent on the mismatch term, converted to time at the rate of one retraining per budget ε′) and the
factorisation / anchor is refreshed once that accumulated cost reaches the cost of a refresh. ``"never"`` never
refreshes with a data pass; an integer k refreshes every k removals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.linalg.blas import dsymv, dsyr, dsyrk

from lethe.certified import objective as obj
from lethe.certified.bounds import (
    ROW_NORM_MAX,
    UNIT_ROUNDOFF,
    anchor_bounds,
    evaluation_slack,
    gamma_k,
    remainder_bound_paper,
    remainder_bound_tight,
    worst_case_bound,
)

if TYPE_CHECKING:  # pragma: no cover
    from lethe.certified.mechanism import CertifiedRemoval, ModelState

SOLVERS = ("cholesky", "refine", "pcg", "anchor")
BOUNDS = ("paper", "tight")
U = UNIT_ROUNDOFF


@dataclass(frozen=True)
class CostModel:
    """Deterministic prices (seconds on a nominal machine) of the operations the refresh policy trades off.

    Memory-bound kernels (X @ v, Xᵀ g, symmetric matrix-vector products, triangular solves) run at
    ``blas2_flops``; compute-bound ones (the Hessian's rank-k update, Cholesky) at ``blas3_flops``. Only ratios
    matter to the policy. Flop counts rather than wall-clock time keep seeded runs reproducible.
    """

    blas2_flops: float = 5e9
    blas3_flops: float = 4e10

    def data_pass(self, n: int, d: int) -> float:
        """One product with the n × d data matrix."""
        return 2.0 * n * d / self.blas2_flops

    def hessian(self, n: int, d: int) -> float:
        """Forming Xᵀ diag(s) X (symmetric rank-n update)."""
        return float(n) * d * d / self.blas3_flops

    def cholesky(self, d: int) -> float:
        """A d × d Cholesky factorisation."""
        return d**3 / 3.0 / self.blas3_flops

    def dense_op(self, d: int) -> float:
        """A d × d matrix-vector product or a pair of triangular solves."""
        return 2.0 * d * d / self.blas2_flops

    def training(self, n: int, d: int, iterations: int) -> float:
        """Retraining: ~3 data passes per L-BFGS iteration plus the Gram matrix for ‖X‖₂."""
        return 3.0 * max(iterations, 1) * self.data_pass(n, d) + self.hessian(n, d)


def _sync_key(X: np.ndarray, w: np.ndarray, active: np.ndarray) -> tuple[Any, ...]:
    """What a cache must match to be reused: the data array, the exact bytes of w, and the active-row mask."""
    return (id(X), X.shape, hash(np.ascontiguousarray(w).tobytes()), active.shape[0],
            hash(np.packbits(active).tobytes()))


class NewtonCache:
    """In-memory state that makes removals fast: a factorisation, margins, or the anchor system.

    Held by the caller, one per model and data set, never serialised (it is derived from the data, including rows
    removed since it was formed). After each step it is keyed to the data array, the exact new weights and the new
    active-row mask; a removal that starts from anything else (a retrained model, another mask, another array)
    rebuilds it, so a stale cache can cost time but never soundness. Use one cache per model and data set, and
    do not modify the active rows of the data array in between. What it holds depends on the solver:

    * ``refine``/``pcg``: ``factor`` — Cholesky factor of an earlier Hessian (a preconditioner only: the solve
      error is measured against the exact Hessian); ``z`` — margins X w at the current w with their error bound.
    * ``anchor``: the anchor point w_a, the dense anchor Hessian M and Gram matrix X′ᵀX′ (upper triangles,
      downdated per removed row), their rounding-error bounds, curvatures ŝ at w_a, and ``factor`` = Cholesky of an
      earlier M (a preconditioner only: the anchor residual Mv − Δ is measured).

    Parameters
    ----------
    rtol : float
        Iterations stop once ‖solve error‖ ≤ rtol ‖Δ‖ ...
    budget_share : float
        ... or once it is at most this share of the step's other bound terms.
    max_sweeps : int
        Iterations per removal before the preconditioner counts as stale and is refreshed.
    cost_model : CostModel, optional
        Prices used by ``refresh="auto"``.
    """

    def __init__(self, rtol: float = 1e-12, budget_share: float = 1e-2, max_sweeps: int = 4, *,
                 cost_model: CostModel | None = None) -> None:
        self.rtol = rtol
        self.budget_share = budget_share
        self.max_sweeps = max_sweeps
        self.cost_model = cost_model if cost_model is not None else CostModel()
        self.factor: tuple[np.ndarray, bool] | None = None
        self.refreshes = 0  # factorisations formed from the data (Hessian builds, anchor builds)
        self.refactorizations = 0  # anchor: refactorisations of the maintained M (no data pass)
        self.sweeps_total = 0
        self._clear_state()

    def _clear_state(self) -> None:
        self.kind: str | None = None
        self._key: tuple[Any, ...] | None = None
        self.z: np.ndarray | None = None
        self.eta = math.inf
        self.row_norm_max: float | None = None
        self.excess_cost = 0.0
        self.iter_cost = 0.0
        self.removals_since_refresh = 0
        # anchor
        self.w_anchor: np.ndarray | None = None
        self.s_hat: np.ndarray | None = None
        self.M: np.ndarray | None = None
        self.G: np.ndarray | None = None
        self.eps_M = math.inf
        self.eps_G = math.inf
        self.fro_M = math.inf
        self.fro_G = math.inf
        self.tau = math.inf

    def refresh(self, H: np.ndarray) -> None:
        """Factorise a new Hessian (used as preconditioner)."""
        self.factor = cho_factor(H, check_finite=False)
        self.refreshes += 1

    def reset(self) -> None:
        """Forget everything tied to a model state (after retraining or on misuse). Counters are kept."""
        self.factor = None
        self._clear_state()

    def matches(self, X: np.ndarray, w: np.ndarray, active: np.ndarray, kind: str) -> bool:
        """Whether the cache was last advanced, by a ``kind`` solver, to exactly these weights, rows and data."""
        return self.kind == kind and self._key is not None and self._key == _sync_key(X, w, active)

    def _mark_dirty(self) -> None:
        self._key = None

    def _advance(self, X: np.ndarray, w: np.ndarray, active: np.ndarray) -> None:
        self._key = _sync_key(X, w, active)


@dataclass(frozen=True)
class StepResult:
    """One Newton removal step and its certificate terms (see module docstring).

    ``step_bound`` ≥ ‖G(w_new) − u‖ in exact arithmetic; it is the sum of ``solve_error`` (the measured norm of
    the solve/anchor residual), ``error_allowance`` (its rounding allowance plus, for ``anchor``, the drift of the
    maintained matrices), ``remainder_bound`` and ``mismatch_bound`` (anchor only).
    """

    w_new: np.ndarray
    step_bound: float
    solve_error: float
    error_allowance: float
    remainder_bound: float
    mismatch_bound: float
    worst_case: float
    iterations: int
    refreshed: str
    data_passes: float
    candidates: dict[str, float] = field(default_factory=dict)


# -- shared pieces ---------------------------------------------------------------------------------------------------


def _row_norm_max(cfg: CertifiedRemoval, X: np.ndarray, cache: NewtonCache | None) -> float:
    """ρ ≥ maxᵢ ‖xᵢ‖: 1 + tolerance when the loss needs unit rows (checked at input), else computed once."""
    if cfg.loss_.gamma != 0.0:
        return ROW_NORM_MAX
    if cache is not None and cache.row_norm_max is not None:
        return cache.row_norm_max
    rho = math.sqrt(float(np.max(np.einsum("ij,ij->i", X, X), initial=0.0))) * (1.0 + 4.0 * U * X.shape[1]) + 1e-300
    if cache is not None:
        cache.row_norm_max = rho
    return rho


def _x_norm(state: ModelState, n_rows: int, rho: float) -> float:
    """Upper bound on ‖X′‖₂: the training-time bound (item 4), or √n ρ (Frobenius) for states without one."""
    x = state.x_norm_bound
    fro = math.sqrt(n_rows) * rho
    return min(float(x), fro) if math.isfinite(x) else fro


def _removed_gradient(cfg: CertifiedRemoval, w: np.ndarray, XR: np.ndarray, yR: np.ndarray,
                      rho: float) -> tuple[np.ndarray, float]:
    """Δ = m λ w + X_Rᵀ ℓ'(X_R w, y_R) (Eq. 6) and a bound on the error of its computed value."""
    loss, lam = cfg.loss_, cfg.lam
    m, d = XR.shape
    d1 = loss.d1(XR @ w, yR)
    Delta = m * lam * w + XR.T @ d1
    lip1 = float(getattr(loss, "d2_sup", 0.25 if loss.gamma else 2.0))
    wn = float(np.linalg.norm(w))
    d1_abs = float(np.max(np.abs(d1), initial=0.0))
    # margins: ≤ γ_d ρ ‖w‖ each; ℓ' Lipschitz with ℓ'' ≤ lip1; evaluation ≤ 8u(1 + |ℓ'|); Xᵀ(·) and the sum.
    d1_err = lip1 * gamma_k(d + 1) * rho * wn + 8 * U * (1.0 + d1_abs)
    err = (m * rho * d1_err + gamma_k(m + 1) * math.sqrt(m) * rho * float(np.linalg.norm(d1))
           + 3 * U * m * lam * wn + 2 * U * float(np.linalg.norm(Delta)))
    return Delta, 2.0 * err


def _policy_due(cfg: CertifiedRemoval, cache: NewtonCache, refresh_cost: float) -> bool:
    """Whether a data-pass refresh is due now (rent-or-buy for ``"auto"``, every k removals for an int)."""
    if cfg.refresh == "never":
        return False
    if isinstance(cfg.refresh, int):
        return cache.removals_since_refresh >= cfg.refresh
    return cache.excess_cost >= refresh_cost


# -- solvers with the exact Hessian (cholesky, refine, pcg) --------------------------------------------------------


def exact_hessian_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                       idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton step with the exact Hessian at w: measured solve error + remainder bound (module docstring)."""
    loss, lam = cfg.loss_, cfg.lam
    n_rows, d = X.shape
    n_new = int(np.count_nonzero(keep))
    m = int(idx.size)
    w = state.w
    rho = _row_norm_max(cfg, X, cache)
    x_norm = _x_norm(state, n_rows, rho)
    x_fro = math.sqrt(n_rows) * rho
    gd, gn = gamma_k(d + 2), gamma_k(n_rows + 2)
    cm = cache.cost_model if cache is not None else CostModel()
    passes = 0.0
    refreshed = ""

    Delta, err_Delta = _removed_gradient(cfg, w, X[idx], y[idx], rho)
    delta_norm = float(np.linalg.norm(Delta))

    active_before = keep.copy()
    active_before[idx] = True
    if cache is not None and cache.matches(X, w, active_before, "exact") and cache.z is not None:
        z, eta = cache.z, cache.eta
    else:
        if cache is not None and cache.kind not in (None, "exact"):
            cache.reset()
        z = X @ w
        eta = gd * rho * float(np.linalg.norm(w))
        passes += 1
    if cache is not None:
        cache._mark_dirty()
        cache.kind = "exact"

    s = np.where(keep, loss.d2(z, y), 0.0)
    s_max = float(np.max(s, initial=0.0))
    tau_s = float(loss.gamma) * eta + 8 * U * (1.0 + s_max)  # |s̃ᵢ − ℓ''(xᵢᵀw)|
    s_sup = s_max + tau_s
    lam_n = lam * n_new
    H_ub = s_sup * x_norm**2 + lam_n
    sqrt_n = math.sqrt(n_new)

    def hvp(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        ap = X @ p
        g = s * ap
        q = X.T @ g + lam_n * p
        p_norm = float(np.linalg.norm(p))
        ap_err = gd * rho * p_norm * sqrt_n  # ‖ã_p − X′p‖ on the rows of D′ (others carry s = 0)
        ap_ub = float(np.linalg.norm(ap[keep])) + ap_err
        g_norm = float(np.linalg.norm(g))
        g_err = tau_s * ap_ub + s_sup * ap_err + U * g_norm
        err = x_norm * g_err + gn * x_fro * g_norm + 2 * U * (lam_n * p_norm + float(np.linalg.norm(q)))
        return ap, q, err

    # -- preconditioner / factorisation
    refresh_cost = cm.hessian(n_new, d) + cm.cholesky(d) + cm.data_pass(n_rows, d)
    if cfg.solver == "cholesky" or cache is None:
        F = cho_factor(obj.hessian(w, X, y, loss, lam, mask=keep), check_finite=False)
        passes += d / 4.0
    else:
        if cache.factor is None or _policy_due(cfg, cache, refresh_cost):
            cache.refresh(obj.hessian(w, X, y, loss, lam, mask=keep))
            cache.excess_cost = 0.0
            cache.removals_since_refresh = 0
            refreshed = "hessian"
            passes += d / 4.0
        assert cache.factor is not None
        F = cache.factor

    max_it = 0 if cfg.solver == "cholesky" or cache is None else cache.max_sweeps
    rtol = cache.rtol if cache is not None else 1e-12
    share = cache.budget_share if cache is not None else 1e-2
    lip_fn = getattr(loss, "d2_lipschitz_on", None)
    gamma_tight = float(getattr(loss, "gamma_exact", loss.gamma))

    def remainder(a: np.ndarray, zeta: float, v_ub: float) -> tuple[float, dict[str, float]]:
        a_abs = np.where(keep, np.abs(a) + zeta, 0.0)
        if cfg.bound == "paper":
            b = remainder_bound_paper(float(loss.gamma), x_norm, rho, v_ub, float(np.linalg.norm(a_abs)))
            return b * evaluation_slack(n_rows), {"paper": b}
        if loss.gamma == 0.0:
            return 0.0, {"spectral": 0.0, "triangle": 0.0}
        if lip_fn is not None:
            za = z + a
            slack = eta + zeta + 4 * U * (np.abs(z) + np.abs(a))
            lip = lip_fn(np.minimum(z, za) - slack, np.maximum(z, za) + slack)
        else:
            lip = gamma_tight
        return remainder_bound_tight(a_abs, lip, x_norm, rho)

    def solve_from(F: tuple[np.ndarray, bool], max_it: int) -> tuple:
        v = cho_solve(F, Delta, check_finite=False)
        a, q, errq = hvp(v)
        e = q - Delta
        err_e = errq + err_Delta + U * float(np.linalg.norm(e))
        P = float(np.linalg.norm(v))  # ‖v₀‖ + Σ|α|‖p‖ (for the matvec error of ã)
        zeta_comb = 0.0
        it = 0
        rz_old = 0.0
        p = np.zeros(d)
        target = max(rtol * delta_norm, share * remainder(a, 0.0, P)[0])
        while float(np.linalg.norm(e)) > target and it < max_it:
            r = -e
            zc = cho_solve(F, r, check_finite=False)
            rz = float(r @ zc)
            if cfg.solver == "pcg":
                p = zc if it == 0 else zc + (rz / rz_old) * p
            else:
                p = zc
            rz_old = rz
            ap, qp, errp = hvp(p)
            alpha = rz / float(p @ qp) if cfg.solver == "pcg" else 1.0
            if not math.isfinite(alpha):
                break
            v = v + alpha * p
            a = a + alpha * ap
            e = e + alpha * qp
            pa = abs(alpha) * float(np.linalg.norm(p))
            P += pa
            vn = float(np.linalg.norm(v))
            err_e += (abs(alpha) * errp + 2 * U * (float(np.linalg.norm(e)) + abs(alpha) * float(np.linalg.norm(qp)))
                      + H_ub * 2 * U * (vn + pa))
            zeta_comb += (2 * U * (float(np.max(np.abs(a), initial=0.0)) + abs(alpha) * float(np.max(np.abs(ap),
                                                                                                         initial=0.0)))
                          + 2 * U * rho * (vn + pa))
            it += 1
            target = max(rtol * delta_norm, share * remainder(a, 0.0, P)[0])
        return v, a, e, err_e, P, zeta_comb, it, target

    v, a, e, err_e, P, zeta_comb, it, target = solve_from(F, max_it)
    passes += 2 + 2 * it
    if (cache is not None and cfg.solver != "cholesky" and float(np.linalg.norm(e)) > target
            and cfg.refresh != "never"):
        # the preconditioner has gone stale: refresh it at the current point and solve again
        cache.refresh(obj.hessian(w, X, y, loss, lam, mask=keep))
        cache.excess_cost = 0.0
        cache.removals_since_refresh = 0
        refreshed = "hessian"
        passes += d / 4.0
        assert cache.factor is not None
        v, a, e, err_e, P, zeta_comb, it2, target = solve_from(cache.factor, 0)
        passes += 2
        it += it2
    if cache is not None:
        cache.sweeps_total += it
        if cfg.solver != "cholesky":
            cache.removals_since_refresh += 1
            cache.excess_cost += it * 2 * cm.data_pass(n_rows, d)

    w_new = w + v
    wn_new = float(np.linalg.norm(w_new))
    v_ub = float(np.linalg.norm(v)) + 1.01 * U * wn_new  # ‖v_true‖, v_true = w_new − w exactly
    zeta = 2.0 * (gd * rho * P + zeta_comb + 1.01 * U * rho * wn_new)  # max |ãᵢ − xᵢᵀ v_true|
    err_e = 2.0 * (err_e + H_ub * 1.01 * U * wn_new)
    e_norm = float(np.linalg.norm(e))
    rem, cands = remainder(a, zeta, v_ub)
    step = rem + e_norm + err_e

    if cache is not None:  # advance the margins to w_new: X′w_new = z + a up to the tracked error
        z_new = z + a
        cache.z = z_new
        cache.eta = eta + zeta + 1.01 * U * float(np.max(np.abs(z_new), initial=0.0))
        cache._advance(X, w_new, keep)
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err_e, remainder_bound=rem,
                      mismatch_bound=0.0, worst_case=worst, iterations=it, refreshed=refreshed, data_passes=passes,
                      candidates=cands)


# -- the no-data-pass solver (anchor) -------------------------------------------------------------------------------


def _fro_sym_upper(A: np.ndarray) -> float:
    """‖A‖_F of the symmetric matrix whose upper triangle is stored in A."""
    up = np.triu(A)
    dg = np.diag(A)
    return math.sqrt(max(2.0 * float(np.einsum("ij,ij->", up, up)) - float(dg @ dg), 0.0))


def build_anchor(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                 cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """Form the anchor system at w_a = state.w on the rows ``active`` (one O(n d²) pass) and factorise it.

    M̃ = fl(Zᵀ Z) + λ n′ I with Z = √ŝ ⊙ X′, ŝᵢ = fl(ℓ''(fl(xᵢᵀ w_a))) (stored; used again to downdate row i);
    G̃ = fl(X′ᵀ X′) unless ``gram`` (a previously computed fl(X′ᵀX′) for exactly these rows) is given. Error bounds
    (docs/tighter_bounds.md §7): ‖M̃ − M̂‖_F ≤ (γ_n + 6u) max ŝ ‖X′‖_F² + 2u(λ n′ √d + ‖M̃‖_F), with M̂ the exact
    matrix for the stored ŝ; ‖G̃ − X′ᵀX′‖_F ≤ γ_n ‖X′‖_F²; |ŝᵢ − ℓ''(xᵢᵀw_a)| ≤ γ γ_d ρ ‖w_a‖ + 8u(1 + max ŝ).
    """
    loss, lam = cfg.loss_, cfg.lam
    n_rows, d = X.shape
    n_act = int(np.count_nonzero(active))
    w = state.w
    rho = _row_norm_max(cfg, X, cache)
    all_rows = bool(active.all())
    Xa = X if all_rows else X[active]
    z = Xa @ w
    s_act = loss.d2(z, y if all_rows else y[active])
    s_hat = np.zeros(n_rows)
    s_hat[active] = s_act
    Zt = (np.sqrt(s_act)[:, None] * Xa).T  # d × n′, Fortran-contiguous view of a C array: no copy for BLAS
    M = dsyrk(1.0, Zt, trans=0, lower=0)
    M[np.diag_indices(d)] += lam * n_act
    if gram is None:
        G = dsyrk(1.0, Xa.T, trans=0, lower=0)
    else:
        G = np.array(gram, dtype=np.float64, order="F", copy=True)
    fro2 = float(np.einsum("ij,ij->", Xa, Xa))
    s_max = float(np.max(s_act, initial=0.0))
    gn = gamma_k(n_act + 2)
    cache.reset()
    cache.kind = "anchor"
    cache.row_norm_max = rho
    cache.w_anchor = w.copy()
    cache.s_hat = s_hat
    cache.M = np.asfortranarray(M)
    cache.G = np.asfortranarray(G)
    cache.fro_M = _fro_sym_upper(cache.M) * (1.0 + 1e-10)
    cache.fro_G = _fro_sym_upper(cache.G) * (1.0 + 1e-10)
    cache.eps_M = 1.01 * (gn + 6 * U) * s_max * fro2 + 2 * U * (lam * n_act * math.sqrt(d) + cache.fro_M)
    cache.eps_G = 1.01 * gn * fro2
    cache.tau = float(loss.gamma) * gamma_k(d + 2) * rho * float(np.linalg.norm(w)) + 8 * U * (1.0 + s_max)
    cache.factor = cho_factor(cache.M, lower=False, check_finite=False)
    cache.refreshes += 1


def anchor_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton-type step with the maintained anchor Hessian, certified without a pass over the data."""
    loss, lam = cfg.loss_, cfg.lam
    n_rows, d = X.shape
    n_new = int(np.count_nonzero(keep))
    m = int(idx.size)
    w = state.w
    if cache is None:
        cache = NewtonCache()
    cm = cache.cost_model
    passes = 0.0
    refreshed = ""
    active_before = keep.copy()
    active_before[idx] = True
    anchor_cost = cm.hessian(n_rows, d) + cm.cholesky(d) + cm.data_pass(n_rows, d)
    if not cache.matches(X, w, active_before, "anchor") or _policy_due(cfg, cache, anchor_cost):
        build_anchor(cfg, state, X, y, active_before, cache)
        refreshed = "anchor"
        passes += d / 2.0
    elif cache.iter_cost >= cm.cholesky(d):
        cache.factor = cho_factor(cache.M, lower=False, check_finite=False)
        cache.refactorizations += 1
        cache.iter_cost = 0.0
        refreshed = "factor"
    cache._mark_dirty()
    assert cache.M is not None and cache.G is not None and cache.s_hat is not None and cache.w_anchor is not None
    rho = _row_norm_max(cfg, X, cache)
    x_norm = _x_norm(state, n_rows, rho)

    Delta, err_Delta = _removed_gradient(cfg, w, X[idx], y[idx], rho)
    delta_norm = float(np.linalg.norm(Delta))

    # downdate M̃ and G̃ for the removed rows (rank-one updates of the upper triangles, in place)
    M, G = cache.M, cache.G
    for j in idx:
        xj = np.ascontiguousarray(X[j])
        sj = float(cache.s_hat[j])
        xx = float(xj @ xj)
        if sj != 0.0:
            M = dsyr(-sj, xj, lower=0, a=M, overwrite_a=1)
        G = dsyr(-1.0, xj, lower=0, a=G, overwrite_a=1)
        cache.s_hat[j] = 0.0
        cache.eps_M += U * (2.0 * (cache.fro_M + 2.0 * cache.eps_M) + 3.0 * sj * xx)
        cache.eps_G += U * (2.0 * (cache.fro_G + 2.0 * cache.eps_G) + 3.0 * xx)
    M[np.diag_indices(d)] -= lam * m
    cache.eps_M += U * (2.0 * (cache.fro_M + 2.0 * cache.eps_M) + 2.0 * lam * m * math.sqrt(d))
    cache.M, cache.G = M, G
    fro_M = cache.fro_M + 2.0 * cache.eps_M  # ≥ ‖M̃‖_F and ≥ ‖M̂‖₂ (the exact matrices only lose PSD terms)
    fro_G = cache.fro_G + 2.0 * cache.eps_G

    def mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.asarray(dsymv(1.0, A, x, lower=0))

    # mismatch/remainder for the stopping rule, from the current iterate
    gamma = float(loss.gamma) if cfg.bound == "paper" else float(getattr(loss, "gamma_exact", loss.gamma))
    dw = w - cache.w_anchor
    dw_norm = float(np.linalg.norm(dw)) * (1.0 + 4 * U)
    gq = gamma_k(d + 2) * fro_G + cache.eps_G
    c_sq = float(dw @ mv(G, dw)) + gq * dw_norm**2
    c_norm = min(math.sqrt(max(c_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 2 * U * dw_norm, x_norm * dw_norm)

    def terms(v: np.ndarray, w_new_norm: float) -> tuple[float, float, float, float, dict[str, float]]:
        v_ub = float(np.linalg.norm(v)) + 1.01 * U * w_new_norm
        a_sq = float(v @ mv(G, v)) + gq * v_ub**2
        a_norm = min(math.sqrt(max(a_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 1.01 * U * w_new_norm, x_norm * v_ub)
        mis, rem, cands = anchor_bounds(gamma=gamma, tau=cache.tau, x_norm=x_norm, row_norm=rho, n_rows=n_new,
                                        v_norm=v_ub, a_norm=a_norm, dw_norm=dw_norm, c_norm=c_norm, mode=cfg.bound)
        return mis, rem, v_ub, a_norm, cands

    F = cache.factor
    assert F is not None
    v = cho_solve(F, Delta, check_finite=False)
    e = mv(M, v) - Delta
    it = 0
    mis, rem, _, _, _ = terms(v, float(np.linalg.norm(w)))
    target = max(cache.rtol * delta_norm, cache.budget_share * (mis + rem))
    for attempt in range(2):
        rz_old = 0.0
        p = np.zeros(d)
        k = 0
        while float(np.linalg.norm(e)) > target and k < cache.max_sweeps:
            r = -e
            zc = cho_solve(F, r, check_finite=False)
            rz = float(r @ zc)
            p = zc if k == 0 else zc + (rz / rz_old) * p
            rz_old = rz
            qp = mv(M, p)
            pq = float(p @ qp)
            if not pq > 0.0:
                break
            alpha = rz / pq
            v = v + alpha * p
            e = e + alpha * qp
            k += 1
        it += k
        cache.iter_cost += k * (cm.dense_op(d) * 2)
        if float(np.linalg.norm(e)) <= target or attempt == 1:
            break
        # stale preconditioner: refactorise the maintained M̃ (O(d³), no data pass) and solve again
        cache.factor = F = cho_factor(M, lower=False, check_finite=False)
        cache.refactorizations += 1
        cache.iter_cost = 0.0
        refreshed = refreshed or "factor"
        v = cho_solve(F, Delta, check_finite=False)
        e = mv(M, v) - Delta
    cache.sweeps_total += it

    w_new = w + v
    wn_new = float(np.linalg.norm(w_new))
    e = mv(M, v) - Delta  # measured directly for the final v
    e_norm = float(np.linalg.norm(e))
    mis, rem, v_ub, a_norm, cands = terms(v, wn_new)
    vn = float(np.linalg.norm(v))
    # ‖M̂ v_true − Δ‖ ≤ ‖ẽ‖ + symv/subtraction rounding + ‖M̃ − M̂‖ ‖v‖ + ‖M̂‖ ‖v_true − ṽ‖ + error of Δ̃
    err = (U * e_norm + gamma_k(d + 2) * fro_M * vn + cache.eps_M * v_ub + fro_M * 1.01 * U * wn_new + err_Delta)
    err *= 2.0
    step = e_norm + err + mis + rem

    cache._advance(X, w_new, keep)
    cache.removals_since_refresh += 1
    if cfg.refresh == "auto" and loss.gamma != 0.0 and cfg.budget > 0.0:
        # rent-or-buy: the budget spent on the anchor mismatch, priced at one retraining per budget ε′
        kappa = cm.training(n_rows, d, state.train_iterations) / cfg.budget
        cache.excess_cost += kappa * mis
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err, remainder_bound=rem,
                      mismatch_bound=mis, worst_case=worst, iterations=it, refreshed=refreshed, data_passes=passes,
                      candidates=cands)


def compute_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                 idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Dispatch on ``cfg.solver``. On an exception the cache is reset (its in-place updates may be half done)."""
    try:
        if cfg.solver == "anchor":
            return anchor_step(cfg, state, X, y, keep, idx, cache)
        return exact_hessian_step(cfg, state, X, y, keep, idx, cache)
    except BaseException:
        if cache is not None:
            cache.reset()
        raise


def prime_cache(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """Prepare ``cache`` for removals from ``state`` (after training), so the first removal is fast.

    ``anchor``: builds the anchor system (O(n d²)). ``refine``/``pcg``: factorises the Hessian and stores the
    margins. ``cholesky``: stores the margins only.
    """
    cache.reset()
    if cfg.solver == "anchor":
        build_anchor(cfg, state, X, y, active, cache, gram=gram)
    else:
        n_rows, d = X.shape
        rho = _row_norm_max(cfg, X, cache)
        cache.kind = "exact"
        cache.z = X @ state.w
        cache.eta = gamma_k(d + 2) * rho * float(np.linalg.norm(state.w))
        if cfg.solver != "cholesky":
            cache.refresh(obj.hessian(state.w, X, y, cfg.loss_, cfg.lam, mask=None if active.all() else active))
    cache._advance(X, state.w, active)


__all__ = ["BOUNDS", "SOLVERS", "CostModel", "NewtonCache", "StepResult", "anchor_step", "build_anchor",
           "compute_step", "exact_hessian_step", "prime_cache"]
