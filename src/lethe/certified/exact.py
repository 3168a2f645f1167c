"""Solvers with the exact Hessian (``CertifiedRemoval.solver``):

``"cholesky"``
    The paper: rebuild H on D′ and factorise it at every removal (O(nd² + d³)).
``"refine"`` / ``"pcg"``
    Solve H v = Δ with a cached factorisation F of an earlier Hessian as preconditioner: iterative refinement
    (v ← v − F⁻¹(Hv − Δ)) or preconditioned conjugate gradients; each iteration is one Hessian-vector product,
    O(nd). The solve error e = H v − Δ is *measured* (HVP with the exact curvature at w) and charged. For a
    matrix-free backend (sparse or distributed data with many features) the preconditioner is the Jacobi
    diagonal of H (O(d) memory).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_factor

from lethe.certified import objective as obj
from lethe.certified.anchor_system import build_anchor, downdate
from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import gamma_k, vnorm, worst_case_bound
from lethe.certified.cache import AnchorSystem, CostModel, NewtonCache, work_buffers
from lethe.certified.common import (
    RemovalConfig,
    StepResult,
    carry_finish,
    carry_start,
    compute_margins,
    max_row_norm,
    policy_due,
    remainder_terms,
    removed_gradient,
    x_norm_upper,
)
from lethe.certified.data import DataMatrix, backend_of
from lethe.certified.linalg import MATRIX_FREE_MAX_ITER, cho_solve, dense_pcg, jacobi_preconditioner, sym_mv
from lethe.certified.state import ModelState


class FactorState(AnchorSystem):
    """The state of the exact-Hessian solvers (``cholesky``, ``refine``, ``pcg``): the margins z = X w at the
    current w with their error bound η, and — ``refine``/``pcg`` on data that may keep d × d matrices — the anchor
    system at an anchor point as preconditioner and initial guess (``factor`` = Cholesky factor of an earlier M; on
    matrix-free data the Jacobi diagonal of an earlier Hessian). Written by this module (and the anchor system's by
    :mod:`lethe.certified.anchor_system`)."""

    kind = "exact"

    def __init__(self) -> None:
        super().__init__()
        self.z: np.ndarray | None = None
        self.eta = math.inf


def prime_exact(cfg: RemovalConfig, w: np.ndarray, X: DataMatrix, y: np.ndarray, active: np.ndarray,
                cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """A fresh :class:`FactorState` for the model at w on the rows ``active``: the margins, and for a solver that
    reuses its factorisation on data that may keep d × d matrices the anchor system (the Hessian at w, also when
    training left one formed at an earlier point: a cache primed after training and one primed after loading the
    model are then the same, so a service's removals reproduce the estimator's bounds). ``gram`` is not used."""
    rho = max_row_norm(cfg, X, cache)
    st = cache.state = FactorState()
    st.z, st.eta = compute_margins(X, w, rho)
    if cfg.solver_spec.reuses_factorisation and not backend_of(X).matrix_free(X):
        build_anchor(cfg, w, X, y, active, cache, with_gram=False, margins=st.z)


def precondition_training(cfg: RemovalConfig, w_c: np.ndarray, X: DataMatrix, y: np.ndarray,
                          cache: NewtonCache) -> tuple[np.ndarray, bool | None]:
    """The factorised anchor system at w_c on all rows of X, formed in a reset cache (a fresh :class:`FactorState`):
    the preconditioner of the last training iterations (chord steps); the removals' is formed again at the final w
    when the cache is primed."""
    cache.reset()
    st = cache.state = FactorState()
    build_anchor(cfg, w_c, X, y, np.ones(X.shape[0], dtype=bool), cache, with_gram=False)
    F: tuple[np.ndarray, bool | None] = st.factor
    assert F is not None
    return F


def exact_hessian_step(cfg: RemovalConfig, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray,
                       idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton step with the exact Hessian at w: measured solve error + remainder bound (module docstring).

    ``refine``/``pcg``: the initial guess solves the downdated anchor system M v = Δ by a few O(d²) PCG
    iterations (preconditioner: the cached factor F); the outer iterations (iterative refinement or PCG on the exact
    H, preconditioner F, one Hessian-vector product = two data passes each) run only while the *measured* solve
    error exceeds ``budget_share`` of the remainder bound.

    Matrix-free (``backend_of(X).matrix_free(X)``: sparse or distributed data with many features): no d × d matrix;
    the preconditioner is the Jacobi diagonal of H (O(d)) and PCG iterates until the measured solve error meets
    the same target (at most :data:`MATRIX_FREE_MAX_ITER` Hessian-vector products). The certificate is the same:
    it never depends on the preconditioner.
    """
    loss, lam = cfg.loss_, cfg.lam
    spec = cfg.solver_spec
    n_rows, d = X.shape
    B = backend_of(X)
    matrix_free = B.matrix_free(X)
    n_new = int(np.count_nonzero(keep))
    m = int(idx.size)
    w = state.w
    rho = max_row_norm(cfg, X, cache)
    x_norm = x_norm_upper(state, n_rows, rho)
    x_fro = math.sqrt(n_rows) * rho
    gd, gn = gamma_k(d + 2), gamma_k(n_rows + 2)
    cm = cache.cost_model if cache is not None else CostModel()
    passes = 0.0
    refreshed = ""

    Delta, err_Delta = removed_gradient(cfg, w, backend_of(X).take(X, idx), y[idx], rho)
    delta_norm = vnorm(Delta)

    active_before = keep.copy()
    active_before[idx] = True
    held = cache.state if cache is not None else None
    st = held if isinstance(held, FactorState) else None  # this kind's state (None: none, or another solver's)
    synced = cache is not None and st is not None and cache.matches(X, w, active_before, st.kind) and st.z is not None
    if cache is not None:
        cache.invalidate()  # before anything is changed: a step that does not finish leaves a cache matching nothing
    if synced:
        assert st is not None and st.z is not None
        z, eta = st.z, st.eta
    else:
        z, eta = compute_margins(X, w, rho)
        passes += 1
        if cache is not None:
            if st is None or (st.factor is not None and st.factor[0].shape != (d, d)):
                cache.reset()
                st = cache.state = FactorState()
            st.M = None  # the downdated anchor system is only trusted in sync; F stays as a preconditioner
            st.s_hat = None
    if cache is not None:
        cache.invalidate()
    # tight accounting: solve H v = Δ − ē, correcting the carried measured error ē (docs/tighter_bounds.md §4)
    e_old, eps_old, S_old = carry_start(cfg, state, cache, synced, d)
    rhs = Delta if e_old is None else Delta - e_old
    err_rhs = err_Delta + (0.0 if e_old is None else U * vnorm(rhs))

    s = np.where(keep, loss.d2(z, y), 0.0)
    s_max = float(np.max(s, initial=0.0))
    tau_s = float(loss.gamma) * eta + 8 * U * (1.0 + s_max)  # |s̃ᵢ − ℓ''(xᵢᵀw)|
    s_sup = s_max + tau_s
    lam_n = lam * n_new
    H_ub = s_sup * x_norm**2 + lam_n
    sqrt_n = math.sqrt(n_new)

    def hvp(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        ap = B.matvec(X, p)
        g = s * ap
        q = B.rmatvec(X, g) + lam_n * p
        p_norm = vnorm(p)
        ap_err = gd * rho * p_norm * sqrt_n  # ‖ã_p − X′p‖ on the rows of D′ (others carry s = 0)
        ap_ub = vnorm(ap[keep]) + ap_err
        g_norm = vnorm(g)
        g_err = tau_s * ap_ub + s_sup * ap_err + U * g_norm
        err = x_norm * g_err + gn * x_fro * g_norm + 2 * U * (lam_n * p_norm + vnorm(q))
        return ap, q, err

    buf = work_buffers(cache, n_rows)

    def remainder(a: np.ndarray, zeta: float, v_ub: float) -> tuple[float, dict[str, float]]:
        return remainder_terms(cfg, keep, z, eta, a, zeta, v_ub, x_norm, rho, buf)

    # -- preconditioner F and initial guess v₀
    refresh_cost = cm.hessian(n_new, d) + cm.cholesky(d)
    fresh = False
    if matrix_free:
        if st is not None and st.factor is not None and st.factor[0].shape == (d,):
            F = st.factor  # the Jacobi diagonal of an earlier Hessian: still a preconditioner
        else:
            F = jacobi_preconditioner(B.diag_gram(X, s) + lam_n)
            passes += 1
            if cache is not None and st is not None:
                st.factor = F
                cache.refreshes += 1
    elif not spec.reuses_factorisation or cache is None or st is None:
        F = cho_factor(obj.hessian(w, X, y, loss, lam, mask=keep), check_finite=False)
        passes += d / 4.0
        fresh = True
    else:
        if st.factor is None or policy_due(cfg, cache, refresh_cost):
            build_anchor(cfg, w, X, y, keep, cache, with_gram=False)  # the exact Hessian on D′ at w
            refreshed = "hessian"
            passes += d / 4.0
            fresh = True
        elif st.M is not None:
            downdate(cache, X, idx, lam, track=False)
            if cache.iter_cost >= cm.cholesky(d):  # stale factor: refactorise the maintained M (no data pass)
                refreshed = cache.refactorize()
        assert st.factor is not None
        F = st.factor
    max_it = 0 if not spec.reuses_factorisation or cache is None else cache.max_sweeps
    if matrix_free:
        max_it = MATRIX_FREE_MAX_ITER
    rtol = cache.rtol if cache is not None else 1e-12
    share = cache.budget_share if cache is not None else 1e-2

    carry_target = (cache.carry_share * cfg.budget) if (cache is not None and e_old is not None) else 0.0
    v = cho_solve(F, rhs, check_finite=False)
    if not fresh and cache is not None and st is not None and st.M is not None:
        e_M = sym_mv(st.M, v) - rhs
        tol_in = max(rtol * delta_norm, 0.1 * max(share * cache.last_remainder, carry_target))
        M = st.M
        v, _, k_in = dense_pcg(lambda p: sym_mv(M, p), F, rhs, v, e_M, tol_in, 4 * cache.max_sweeps)
        cache.iter_cost += k_in * 2 * cm.dense_op(d)

    def finish(v: np.ndarray, P: float, zeta_comb: float) -> tuple[np.ndarray, float, float, float]:
        w_new = w + v
        wn_new = vnorm(w_new)
        v_ub = vnorm(v) + 1.01 * U * wn_new  # ‖v_true‖, v_true = w_new − w exactly
        zeta = 2.0 * (gd * rho * P + zeta_comb + 1.01 * U * rho * wn_new)  # max |ãᵢ − xᵢᵀ v_true|
        return w_new, wn_new, v_ub, zeta

    def solve_from(v: np.ndarray, max_it: int) -> tuple:
        a, q, errq = hvp(v)
        e = q - rhs  # = ē_new in tight accounting (H v − Δ + ē_old), = H v − Δ otherwise
        err_e = errq + err_rhs + U * vnorm(e)
        P = vnorm(v)  # ‖v₀‖ + Σ|α|‖p‖ (for the matvec error of ã)
        zeta_comb = 0.0
        it = 0
        rz_old = 0.0
        p = np.zeros(d)
        w_new, wn_new, v_ub, zeta = finish(v, P, zeta_comb)
        rem = None
        target = max(rtol * delta_norm, carry_target)
        if vnorm(e) > target:
            rem = remainder(a, zeta, v_ub)
            target = max(target, share * rem[0])
        while vnorm(e) > target and it < max_it:
            r = -e
            zc = cho_solve(F, r, check_finite=False)
            rz = float(r @ zc)
            if spec.conjugate:
                p = zc if it == 0 else zc + (rz / rz_old) * p
            else:
                p = zc
            rz_old = rz
            ap, qp, errp = hvp(p)
            alpha = rz / float(p @ qp) if spec.conjugate else 1.0
            if not math.isfinite(alpha):
                break
            v = v + alpha * p
            a = a + alpha * ap
            e = e + alpha * qp
            pa = abs(alpha) * vnorm(p)
            P += pa
            vn = vnorm(v)
            err_e += (abs(alpha) * errp + 2 * U * (vnorm(e) + abs(alpha) * vnorm(qp))
                      + H_ub * 2 * U * (vn + pa))
            zeta_comb += (2 * U * (float(np.max(np.abs(a), initial=0.0))
                                   + abs(alpha) * float(np.max(np.abs(ap), initial=0.0))) + 2 * U * rho * (vn + pa))
            it += 1
            w_new, wn_new, v_ub, zeta = finish(v, P, zeta_comb)
            rem = remainder(a, zeta, v_ub)
            target = max(rtol * delta_norm, carry_target, share * rem[0])
        if rem is None:
            rem = remainder(a, zeta, v_ub)
        return v, a, e, err_e, w_new, wn_new, zeta, rem, it, target

    v, a, e, err_e, w_new, wn_new, zeta, rem_c, it, target = solve_from(v, max_it)
    passes += 2 + 2 * it
    if cache is not None and st is not None and matrix_free and vnorm(e) > target and cfg.refresh != "never":
        # a fresh Jacobi diagonal at w for the next removals (this step's bound already covers its error)
        st.factor = jacobi_preconditioner(B.diag_gram(X, s) + lam_n)
        cache.refreshes += 1
        passes += 1
    elif (cache is not None and not fresh and not matrix_free and vnorm(e) > target and cfg.refresh != "never"):
        # the preconditioner has gone stale: rebuild the anchor system at the current point and solve again
        build_anchor(cfg, w, X, y, keep, cache, with_gram=False)
        refreshed = "hessian"
        passes += d / 4.0
        assert st is not None and st.factor is not None
        F = st.factor
        v, a, e, err_e, w_new, wn_new, zeta, rem_c, it2, target = solve_from(cho_solve(F, rhs, check_finite=False), 0)
        passes += 2
        it += it2
    rem, cands = rem_c
    if cache is not None:
        cache.sweeps_total += it
        if spec.reuses_factorisation:
            cache.removals_since_refresh += 1
            cache.excess_cost += it * 2 * cm.data_pass(n_rows, d)
        cache.last_remainder = rem

    err_e = 2.0 * (err_e + H_ub * 1.01 * U * wn_new)
    acc, carried, e_norm, err_step = carry_finish(cache, e, e_old, eps_old, S_old, err_e, rem)
    step = rem + e_norm + err_step

    if cache is not None and st is not None:  # advance the margins to w_new: X′w_new = z + a up to the tracked error
        z_new = z + a
        st.z = z_new
        st.eta = eta + zeta + 1.01 * U * float(np.max(np.abs(z_new), initial=0.0))
        cache.advance(X, w_new, keep)
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(solver=cfg.solver, w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=0.0, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)
