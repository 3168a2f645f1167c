"""The no-data-pass solver ``"anchor"``: solve with an anchor Hessian M = X′ᵀ diag(ŝ) X′ + λ n′ I (ŝ the
curvature at an anchor point w_a) kept as a dense matrix and downdated for removed rows (rank-one updates, O(d²)
each), with the Gram matrix X′ᵀX′ kept the same way for exact norms ‖X′v‖. The anchor residual Mv − Δ is measured
(O(d²)); the mismatch (H(w) − M) v and the remainder r are *bounded*
(:func:`~lethe.certified.bounds.anchor_bounds`) from ‖X‖₂, γ, ‖w − w_a‖, ‖X′(w − w_a)‖, ‖v‖, ‖X′v‖. Per removal:
O(d² m + d²·iterations).
"""

from __future__ import annotations

import math

import numpy as np

from lethe.certified.anchor_system import (
    AnchorState,
    build_anchor,
    downdate,
    mv_maintained,
    removed_rows,
    solve_maintained,
)
from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import anchor_bounds, gamma_k, vnorm, worst_case_bound
from lethe.certified.cache import NewtonCache
from lethe.certified.common import (
    RemovalConfig,
    StepResult,
    carry_finish,
    carry_start,
    mask_before,
    max_row_norm,
    measured_residual,
    policy_due,
    removed_gradient,
    x_norm_upper,
)
from lethe.certified.data import DataMatrix, is_dense
from lethe.certified.linalg import cho_solve, sym_mv
from lethe.certified.state import ModelState

#: The share of rows left below which build_anchor forms its products from a copy of the remaining rows; measurements
#: (:func:`_measure`) follow the same rule.
_SUBSET_SHARE = 0.7


def _measure(cfg: RemovalConfig, w: np.ndarray, b: np.ndarray, X: DataMatrix, y: np.ndarray,
             active: np.ndarray) -> tuple[np.ndarray, float]:
    """:func:`~lethe.certified.common.measured_residual` on the rows ``active``. With most rows of dense X gone it
    is computed on a copy of the n′ remaining rows, all active: the same gradient over D (the inactive rows only add
    exact zeros to the full-X computation), its allowance that of the n′-row data (γ_S with S = n′, ‖X′‖_F² ≤ n′ρ²),
    and n′/n of the two passes' reads (§5c; at the end of the benchmark's MNIST run 1/10)."""
    n_act = int(np.count_nonzero(active))
    if is_dense(X) and n_act < _SUBSET_SHARE * X.shape[0]:
        return measured_residual(cfg, w, b, X[active], y[active], np.ones(n_act, dtype=bool))
    return measured_residual(cfg, w, b, X, y, active)


def prime_anchor(cfg: RemovalConfig, w: np.ndarray, X: DataMatrix, y: np.ndarray, active: np.ndarray,
                 cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """A fresh :class:`~lethe.certified.anchor_system.AnchorState` for the model at w on the rows ``active``: the
    anchor system with its Gram matrix (O(n d²); ``gram``: fl(XᵀX) for exactly these rows, formed at training)."""
    cache.state = AnchorState()
    build_anchor(cfg, w, X, y, active, cache, with_gram=True, gram=gram)


def synced_gram(cache: NewtonCache, X: DataMatrix, w: np.ndarray, active: np.ndarray) -> np.ndarray | None:
    """The Gram matrix G̃ = fl(XᵀX) over all rows of dense X that an ``anchor`` cache synced to (w, ``active``) holds
    with every row active (formed when it was primed; never downdated), else None."""
    st = cache.state
    if (isinstance(st, AnchorState) and st.G is not None and is_dense(X) and bool(np.all(active))
            and cache.matches(X, w, active, st.kind)):
        return st.G
    return None


def anchor_step(cfg: RemovalConfig, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray,
                idx: np.ndarray, cache: NewtonCache | None, *, _reanchor: bool = False) -> StepResult:
    """Newton-type step with the maintained anchor Hessian, certified without a pass over the data.

    Tight mode with ``refresh="auto"``: a step from a stale anchor whose bound would push the accumulated bound over
    the budget is taken again from an anchor formed at w (and the residual measured, §5c) before the mechanism
    falls back to a retraining (``_reanchor``: that second attempt; docs/tighter_bounds.md §5d)."""
    loss, lam, w = cfg.loss_, cfg.lam, state.w
    n_rows, d = X.shape
    m = int(idx.size)
    cache = NewtonCache() if cache is None else cache
    cm, passes, refreshed = cache.cost_model, 0.0, ""
    # in sync with (w, rows before): the cache's own mask is compared with keep ∪ idx (one word-wise O(n)
    # comparison) and its row count gives n′; the mask of the rows before is formed only when it is needed
    n_synced = None if _reanchor else cache.matches_removal(X, w, keep, idx, AnchorState.kind)
    cache.invalidate()  # before anything is changed: a step that does not finish leaves a cache that matches nothing
    n_new = n_synced if n_synced is not None else int(np.count_nonzero(keep))
    before: list[np.ndarray] = []

    def rows_before() -> np.ndarray:
        if not before:
            before.append(mask_before(keep, idx))
        return before[0]

    # with most rows gone, a build and a measurement read only the n′ rows left (build_anchor, _measure): priced so
    n_eff = n_new + m if is_dense(X) and n_new + m < _SUBSET_SHARE * n_rows else n_rows
    anchor_cost = cm.hessian(n_eff, d) + cm.cholesky(d) + cm.data_pass(n_eff, d)
    # the second attempt: the first one (from a cache synced to (w, rows before)) advanced the cache; what it
    # changed — M, its queue and factor, h̃, the carried accounting — is formed again below, G̃ was not changed
    synced = _reanchor or (n_synced is not None and isinstance(cache.state, AnchorState)
                           and cache.state.G is not None)
    tight = cfg.bound == "tight"
    # tight mode: the bound before this step; past ``remeasure_share`` of the budget the anchor is formed again
    # and the residual measured (docs/tighter_bounds.md §5c), instead of letting the budget force a retraining
    spent = (cache.carry_bound + vnorm(cache.carry_e) + cache.carry_err
             if tight and synced and cache.carry_e is not None else 0.0)
    over = tight and cfg.refresh != "never" and cfg.budget > 0.0 and spent > cache.remeasure_share * cfg.budget
    measured = False
    measure_cost = 2.0 * cm.data_pass(n_eff, d)
    if (over and synced and not _reanchor and loss.gamma != 0.0 and cfg.refresh == "auto"
            and cache.excess_cost + measure_cost < anchor_cost):
        # measure only (two passes, no anchor build): the accounting restarts from the measured residual (§5c);
        # the anchor's drift stays, so the next measurement comes sooner. The measurements are the rent of the
        # stale anchor: it is formed again once they cost as much as a build (rent-or-buy, §8)
        g_meas, g_err = _measure(cfg, w, state.b, X, y, rows_before())
        cache.carry_e, cache.carry_err, cache.carry_bound = g_meas, g_err, 0.0
        cache.remeasures += 1
        cache.excess_cost += measure_cost
        measured = True
        passes += 2.0
        refreshed = "measure"
    elif not synced or over or _reanchor or policy_due(cfg, cache, anchor_cost):
        if not synced:
            cache.reset()
            cache.state = AnchorState()
        # a re-anchor keeps the Gram matrix (independent of w) and the carried accounting
        build_anchor(cfg, w, X, y, rows_before(), cache, with_gram=True if not synced else None)
        refreshed = "anchor"
        passes += d / 2.0
        if tight and loss.gamma != 0.0:
            # restart the vector accounting from the measured residual at w on D (two passes): ē = fl(∇L_b(w; D))
            # with its rounding allowance, nothing bounded yet (S = 0); the next solve corrects ē (§4)
            g_meas, g_err = _measure(cfg, w, state.b, X, y, rows_before())
            cache.carry_e, cache.carry_err, cache.carry_bound = g_meas, g_err, 0.0
            cache.remeasures += 1
            measured = True
            passes += 2.0
    elif cache.iter_cost >= cm.cholesky(d):
        refreshed = cache.refactorize()
    cache.invalidate()
    st = cache.state
    assert isinstance(st, AnchorState) and st.w_anchor is not None
    rho = max_row_norm(cfg, X, cache)
    x_norm = x_norm_upper(state, n_rows, rho)

    XR = removed_rows(X, idx)  # read once: for Δ, then (a batch) overwritten by downdate with its rows √ŝⱼ xⱼ
    Delta, err_Delta = removed_gradient(cfg, w, XR, y[idx], rho)
    delta_norm = vnorm(Delta)
    e_old, eps_old, S_old = carry_start(cfg, state, cache, synced or measured, d)
    rhs = Delta if e_old is None else Delta - e_old
    err_rhs = err_Delta + (0.0 if e_old is None else U * vnorm(rhs))
    downdate(cache, X, idx, lam, track=True, rows=XR)
    del XR
    G = st.G
    assert G is not None
    fro_G = st.fro_G + 2.0 * st.eps_G

    gamma = float(loss.gamma) if cfg.bound == "paper" else float(getattr(loss, "gamma_exact", loss.gamma))
    dw = w - st.w_anchor
    dw_norm = vnorm(dw) * (1.0 + 4 * U)
    gq = gamma_k(d + 2) * fro_G + st.eps_G
    h = st.h_G  # ≈ G̃ (w − w_a), carried from step to step (no product with G here)
    assert h is not None
    if dw_norm > 0.0:
        # dwᵀG̃dw = dwᵀh̃ + dwᵀ(G̃dw − h̃), ‖G̃dw − h̃‖ ≤ h_err + ‖G̃‖ ‖dw − (w − w_a)‖; the dot's rounding; G̃ vs G
        c_sq = (float(dw @ h) + gamma_k(d + 2) * dw_norm * vnorm(h)
                + dw_norm * (st.h_err + 2 * U * fro_G * dw_norm) + st.eps_G * dw_norm**2)
        c_norm = min(math.sqrt(max(c_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 2 * U * dw_norm, x_norm * dw_norm)
    else:
        c_norm = 0.0

    def terms(v: np.ndarray, w_new_norm: float) -> tuple[float, float, float, dict[str, float], np.ndarray]:
        """The step's bounds for v, and fl(G̃v) (it also advances the carried h̃)."""
        v_ub = vnorm(v) + 1.01 * U * w_new_norm
        gv = sym_mv(G, v)
        a_sq = float(v @ gv) + gq * v_ub**2
        a_norm = min(math.sqrt(max(a_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 1.01 * U * w_new_norm, x_norm * v_ub)
        mis, rem, cands = anchor_bounds(gamma=gamma, tau=st.tau, x_norm=x_norm, row_norm=rho, n_rows=n_new,
                                        v_norm=v_ub, a_norm=a_norm, dw_norm=dw_norm, c_norm=c_norm, mode=cfg.bound)
        return mis, rem, v_ub, cands, gv

    F = st.factor
    assert F is not None
    v = cho_solve(F, rhs, check_finite=False)
    q, err_q = mv_maintained(cache, v)
    e = q - rhs
    w_new = w + v
    mis, rem, v_ub, cands, gv = terms(v, vnorm(w_new))
    target = max(cache.rtol * delta_norm, cache.budget_share * (mis + rem))
    if e_old is not None:  # tight accounting: the measured error is carried and corrected, not accumulated
        target = max(target, cache.carry_share * cfg.budget)
    v, e, it, refac = solve_maintained(cache, rhs, v, e, target, d)
    refreshed = refreshed or refac
    if it or refac:  # v changed (iterations, or a restart from a refactorised preconditioner)
        w_new = w + v
        q, err_q = mv_maintained(cache, v)  # measured directly for the final v
        e = q - rhs
        mis, rem, v_ub, cands, gv = terms(v, vnorm(w_new))
    wn_new = vnorm(w_new)
    e_norm = vnorm(e)
    vn = vnorm(v)
    # after the solve: a refactorisation in it folds the queued rows and grows ε_M
    fro_M = st.fro_M + 2.0 * st.eps_M  # ≥ ‖M̃‖_F and ≥ ‖M̂‖₂ (the exact matrices only lose PSD terms)
    # ‖M̂ v_true − rhs‖ vs ‖ẽ‖: symv/subtraction rounding + ‖M̃ − M̂‖ ‖v‖ + ‖M̂‖ ‖v_true − ṽ‖ + error of rhs
    # + the queued rows' correction (mv_maintained)
    err = 2.0 * (U * e_norm + gamma_k(d + 2) * fro_M * vn + st.eps_M * v_ub + fro_M * 1.01 * U * wn_new
                 + err_rhs + err_q)
    acc, carried, e_norm, err_step = carry_finish(cache, e, e_old, eps_old, S_old, err, mis + rem)
    step = e_norm + err_step + mis + rem
    # h̃ ← fl(h̃ + fl(G̃v)) tracks G̃(w_new − w_a): + the symv's rounding, G̃(v − v_true) and the addition's rounding
    h = h + gv  # a new vector: a transaction's snapshot keeps the old one (NewtonCache.begin)
    st.h_G = h
    st.h_err += (gamma_k(d + 2) * fro_G * vn + fro_G * 1.01 * U * wn_new
                 + 1.01 * U * vnorm(h))

    cache.advance(X, w_new, keep, removed=idx if synced else None)
    cache.removals_since_refresh += 1
    if cfg.refresh == "auto" and loss.gamma != 0.0 and cfg.budget > 0.0:
        # rent-or-buy: the budget spent on the anchor mismatch, priced at one retraining per budget ε′
        kappa = cm.training(n_rows, d, state.train_iterations) / cfg.budget
        if not tight:  # tight mode: a re-anchor recovers the budget spent (§5c); it happens at remeasure_share
            cache.excess_cost += kappa * mis
    if (tight and synced and not _reanchor and refreshed != "anchor" and cfg.refresh == "auto"
            and loss.gamma != 0.0 and cfg.budget > 0.0 and dw_norm > 0.0
            and min(state.residual_bound + step, math.inf if acc is None else acc) > cfg.budget):
        # over budget from a stale anchor: its mismatch term (first order in the drift w − w_a) is what a fresh
        # anchor removes; take the step again from one before the mechanism retrains (§5d)
        cache.reanchor_retries += 1
        return anchor_step(cfg, state, X, y, keep, idx, cache, _reanchor=True)
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(solver=cfg.solver, w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=mis, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)
