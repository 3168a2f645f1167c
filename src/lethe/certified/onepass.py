"""The solver ``"onepass"``: the anchor system of ``"anchor"`` plus one single-precision pass a ≈ X′v per removal
(with a proven error bound, :mod:`lethe.certified.single`): the mismatch X′ᵀ((ℓ''(z) − ŝ) ⊙ a) is then known
exactly as an n-vector and, in tight mode, kept as a pending vector P (charged ‖X′‖₂‖P‖) that a periodic
double-precision pass applies exactly (docs/tighter_bounds.md §5b).
"""

from __future__ import annotations

import math

import numpy as np

from lethe.certified.anchor_system import build_anchor, downdate, mv_maintained, solve_maintained
from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import evaluation_slack, gamma_k, vnorm, worst_case_bound
from lethe.certified.cache import AnchorSystem, NewtonCache, work_buffers
from lethe.certified.common import (
    RemovalConfig,
    StepResult,
    carry_start,
    compute_margins,
    local_curvature,
    mask_before,
    max_row_norm,
    policy_due,
    remainder_terms,
    removed_gradient,
    x_norm_upper,
)
from lethe.certified.data import DataMatrix, backend_of
from lethe.certified.linalg import cho_solve
from lethe.certified.single import column_groups, representatives, single_pass_margins, single_pass_transpose
from lethe.certified.state import ModelState


class OnepassState(AnchorSystem):
    """The state of the ``onepass`` solver: the anchor system (tracked M: it enters the certificate), the margins z
    at the current w (error η) and at a reference point w_ref (double precision, error η_ref), the float32 copy of
    the data (one column per group of identical columns; possibly shared, :class:`SharedFloat32Data`), the pending
    mismatch vector P of docs/tighter_bounds.md §5b with its error bound, and the flush counters. Written by this
    module (and the anchor system's by :mod:`lethe.certified.anchor_system`)."""

    kind = "onepass"

    def __init__(self) -> None:
        super().__init__()
        self.z: np.ndarray | None = None
        self.eta = math.inf
        self.X32: np.ndarray | None = None
        self.col_groups: np.ndarray | None = None
        self.P: np.ndarray | None = None
        self.p_err = 0.0
        self.since_flush = 0
        self.flushes = 0
        self.z_ref: np.ndarray | None = None
        self.w_ref: np.ndarray | None = None
        self.eta_ref = math.inf


def _state(cache: NewtonCache) -> OnepassState:
    st = cache.state
    assert isinstance(st, OnepassState)
    return st


def _flush(cache: NewtonCache, X: DataMatrix, w: np.ndarray, x_norm: float, rho: float, *, margins: bool) -> None:
    """Apply the pending mismatch: ē = E + X′ᵀP becomes E ← fl(E + q̃), q̃ ≈ X′ᵀP from one single-precision pass
    (:func:`single_pass_transpose`, its error added to the carried error bound), P ← 0; and recompute the margins
    at w: with ``margins`` as z = fl(X w) (one double-precision pass, error the dot-product bound; also the new
    reference point), else as z_ref + X32 (w − w_ref) from the last reference (one single-precision pass)."""
    st = _state(cache)
    assert st.P is not None and cache.carry_e is not None and st.X32 is not None
    P = st.P
    if float(np.max(np.abs(P), initial=0.0)) > 0.0:
        # P is zero outside the active rows, and so are the removed rows of X32
        q, q_err = single_pass_transpose(st.X32, P, rho, groups=st.col_groups)
        E = cache.carry_e + q
        cache.carry_err += (x_norm * st.p_err + q_err
                            + 2 * U * (vnorm(E) + vnorm(q)))
        cache.carry_e = E
    st.P = np.zeros_like(P)  # a new vector: a transaction's snapshot keeps the old one (NewtonCache.begin)
    st.p_err = 0.0
    if margins or st.z_ref is None or st.w_ref is None:
        st.z, st.eta = compute_margins(X, w, rho)
        st.z_ref, st.w_ref, st.eta_ref = st.z.copy(), w.copy(), st.eta
    else:
        # re-base: z = z_ref + X32 (w − w_ref), one single-precision pass whose error grows with ‖w − w_ref‖
        # instead of with the sum of the steps' ‖v‖ (fl(w − w_ref) is within u|w − w_ref| of the exact difference)
        dw = w - st.w_ref
        a, zeta32 = single_pass_margins(st.X32, dw, rho, groups=st.col_groups)
        z = np.add(st.z_ref, a, out=a)
        st.z = z
        st.eta = (st.eta_ref + zeta32 + 1.01 * U * rho * vnorm(dw)
                  + 1.01 * U * float(max(np.max(z, initial=0.0), -np.min(z, initial=0.0))))
    st.since_flush = 0
    st.flushes += 1


def prime_onepass(cfg: RemovalConfig, w: np.ndarray, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                   cache: NewtonCache, gram: np.ndarray | None = None, *, removing: np.ndarray | None = None) -> None:
    """Anchor system at w (tracked M), margins, float32 copy of the active rows, empty pending vector. With a shared
    copy, rows of ``removing`` (the step about to run) may already be zeroed in it by another model. ``gram`` is not
    used (no Gram matrix)."""
    rho = max_row_norm(cfg, X, cache)
    st = cache.state = OnepassState()
    st.z, st.eta = compute_margins(X, w, rho)
    build_anchor(cfg, w, X, y, active, cache, with_gram=False, margins=st.z)
    st.z_ref, st.w_ref, st.eta_ref = st.z.copy(), np.array(w, dtype=np.float64), st.eta
    found = cache.shared.lookup(X, active, removing) if cache.shared is not None else None
    if found is not None:
        X32, groups = found
    else:
        groups = column_groups(X)
        X32 = (X if groups is None else X[:, representatives(groups)]).astype(np.float32)
        X32[~active] = 0.0
        if cache.shared is not None:
            cache.shared.store(X, X32, groups, active)
    st.X32 = X32
    st.col_groups = groups
    st.P = np.zeros(X.shape[0])
    st.p_err = 0.0
    st.since_flush = 0


def onepass_step(cfg: RemovalConfig, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray,
                 idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton step with the anchor Hessian M and the *exact* mismatch, one single-precision pass (§5b).

    H′v = M̂′v + X′ᵀ(δ ⊙ a) with δᵢ = ℓ''(zᵢ) − ŝᵢ (an identity: the λn′I terms cancel). M̂′v − rhs is measured in
    O(d²); a = X′v comes from one float32 pass (ζ-accurate); δ ⊙ a is computed exactly up to tracked rounding and,
    in tight mode, *added to the pending vector P* instead of being bounded: the carried error is ē = E + X′ᵀP,
    charged as ‖E‖ + ‖X′‖₂‖P‖ until a flush makes it exact (and the next step corrects it). In paper mode the
    mismatch is charged at once, ‖X′ᵀ(δ ⊙ a)‖ ≤ ‖X′‖₂‖δ ⊙ a‖.
    """
    loss, lam, w = cfg.loss_, cfg.lam, state.w
    n_rows, d = X.shape
    n_new, m = int(np.count_nonzero(keep)), int(idx.size)
    cache = NewtonCache() if cache is None else cache
    cm, passes, refreshed = cache.cost_model, 0.0, ""
    active_before = mask_before(keep, idx)
    rho = max_row_norm(cfg, X, cache)
    x_norm = x_norm_upper(state, n_rows, rho)
    refresh_cost = cm.hessian(n_rows, d) + cm.cholesky(d)
    old = cache.state
    synced = (isinstance(old, OnepassState) and cache.matches(X, w, active_before, old.kind)
              and old.X32 is not None and old.P is not None and old.z is not None and old.M is not None
              and (cache.shared is None or cache.shared.usable_for_step(old.X32, active_before, idx)))
    cache.invalidate()  # before anything is changed: a step that does not finish leaves a cache that matches nothing
    if not synced:
        cache.reset()
        prime_onepass(cfg, w, X, y, active_before, cache, removing=idx)
        refreshed = "anchor"
        passes += d / 4.0 + 1
    elif policy_due(cfg, cache, refresh_cost):
        build_anchor(cfg, w, X, y, active_before, cache, with_gram=False)  # P, E and z keep their meaning
        refreshed = "anchor"
        passes += d / 4.0
    elif cache.iter_cost >= cm.cholesky(d):
        refreshed = cache.refactorize()
    cache.invalidate()
    st = _state(cache)
    X32, P, z, eta = st.X32, st.P, st.z, st.eta
    assert X32 is not None and P is not None and z is not None

    Delta, err_Delta = removed_gradient(cfg, w, backend_of(X).take(X, idx), y[idx], rho)
    delta_norm = vnorm(Delta)
    e_old, eps_old, S_old = carry_start(cfg, state, cache, synced, d)
    if e_old is not None:
        # fold the pending entries of the removed rows into E while they are still in the data: X_Dᵀ P =
        # X_D′ᵀ P + Σ_{j∈R} Pⱼ xⱼ
        PR = P[idx]
        if np.any(PR != 0.0):
            fold = backend_of(X).take(X, idx).T @ PR
            e_old = e_old + fold
            eps_old += (rho * math.sqrt(m) * st.p_err + gamma_k(m + 2) * rho * float(np.sum(np.abs(PR)))
                        + 2 * U * (vnorm(e_old) + vnorm(fold)))
            cache.carry_e, cache.carry_err = e_old, eps_old
        P[idx] = 0.0
    if cache.shared is not None:
        cache.shared.zero(idx)  # the single-precision copy forgets removed rows at once
    else:
        X32[idx] = 0.0
    rhs = Delta if e_old is None else Delta - e_old
    err_rhs = err_Delta + (0.0 if e_old is None else U * vnorm(rhs))
    downdate(cache, X, idx, lam, track=True)

    # -- v from the anchor system (O(d²))
    F = st.factor
    assert F is not None
    target = max(cache.rtol * delta_norm, cache.budget_share * cache.last_remainder)
    if e_old is not None:
        target = max(target, cache.carry_share * cfg.budget)
    v = cho_solve(F, rhs, check_finite=False)
    q, err_q = mv_maintained(cache, v)
    v, e, it, refac = solve_maintained(cache, rhs, v, q - rhs, target, d)
    refreshed = refreshed or refac
    if it or refac:  # measured directly for the final v (PCG only updates it recursively; a refactorisation folds)
        q, err_q = mv_maintained(cache, v)
        e = q - rhs
    w_new = w + v
    wn_new = vnorm(w_new)
    vn = vnorm(v)
    v_ub = vn + 1.01 * U * wn_new  # ≥ ‖v_true‖, v_true = w_new − w exactly
    e_norm = vnorm(e)
    fro_M = st.fro_M + 2.0 * st.eps_M  # ≥ ‖M̃‖_F and ≥ ‖M̂‖₂, after any fold in the solve
    err_e = 2.0 * (U * e_norm + gamma_k(d + 2) * fro_M * vn + st.eps_M * v_ub + fro_M * 1.01 * U * wn_new
                   + err_rhs + err_q)

    # -- the single-precision pass: margins of the step
    buf = work_buffers(cache, n_rows)
    a, zeta32 = single_pass_margins(X32, v, rho, buf, st.col_groups)
    passes += 0.5
    zeta = 2.0 * (zeta32 + 1.01 * U * rho * wn_new)  # max |ãᵢ − xᵢᵀ v_true| on the rows of D′
    # -- exact mismatch g = δ ⊙ a on D′ (δᵢ = ℓ''(zᵢ) − ŝᵢ; ŝ is zero on removed rows, s̃ masked to D′); ã is
    # exactly 0 on removed rows (their float32 rows are zero)
    assert st.s_hat is not None
    delta_c = local_curvature(loss, z, y, buf.f[4])
    delta_c *= keep
    s_max = float(np.max(delta_c, initial=0.0))
    tau_s = float(loss.gamma) * eta + 8 * U * (1.0 + s_max)  # |s̃ᵢ − ℓ''(xᵢᵀw)|
    delta_c -= st.s_hat
    g = np.multiply(delta_c, a, out=buf.f[5])
    g_norm = vnorm(g)
    d_norm = vnorm(delta_c)
    a_norm = vnorm(a)
    # per row |g̃ᵢ − δᵢaᵢ| ≤ |δ̃ᵢ|ζ + (τ_s + u|δ̃ᵢ|)(|ãᵢ| + ζ) + u|g̃ᵢ| on D′; its 2-norm, by the triangle inequality
    # and ‖|δ̃| ⊙ |ã|‖ = ‖g̃‖ up to u: ≤ (1+u)ζ‖δ̃‖ + τ_s(‖ã‖ + ζ√n′) + 3u‖g̃‖
    g_err = ((1.0 + U) * zeta * d_norm + tau_s * (a_norm + zeta * math.sqrt(n_new)) + 3 * U * g_norm
             ) * evaluation_slack(n_rows)
    mis = x_norm * (g_norm + g_err) * evaluation_slack(n_rows)
    if cfg.refresh == "auto" and e_old is not None and cfg.budget > 0.0:
        # rent-or-buy, the budget side: the permanent charge that grows as the anchor goes stale (‖X′‖₂ ζ‖δ‖ of
        # the mismatch's error bound), priced at one retraining per budget ε′ as for ``anchor``
        cache.excess_cost += cm.training(n_rows, d, state.train_iterations) / cfg.budget * x_norm * zeta * d_norm

    rem, cands = remainder_terms(cfg, keep, z, eta, a, zeta, v_ub, x_norm, rho, buf)
    cache.last_remainder = rem

    acc: float | None
    z_fresh = False  # whether the margins were recomputed at w_new in this step
    if e_old is None:  # paper accounting: the step's mismatch is charged at once
        acc, carried, e_step, err_step = None, 0.0, e_norm, err_e
        st.since_flush += 1
        if st.since_flush >= cache.flush_every:  # refresh the margins (their error grows by ζ per step)
            st.z, st.eta = compute_margins(X, w_new, rho)
            st.since_flush = 0
            z_fresh = True
            passes += 1.0
    else:
        P = P + g  # a new vector: a transaction's snapshot keeps the old one (NewtonCache.begin)
        st.P = P
        p_norm = vnorm(P)
        st.p_err += g_err + U * p_norm
        e_delta = e - e_old  # M̂′v − Δ as computed
        e_step = vnorm(e_delta)
        err_step = err_e + 2 * U * e_step
        cache.carry_e = e
        cache.carry_err = eps_old + err_e
        cache.carry_bound = S_old + rem
        st.since_flush += 1

        def accumulated(p_norm: float) -> tuple[float, float]:
            assert cache.carry_e is not None
            pend = x_norm * (p_norm + st.p_err)
            return ((cache.carry_bound + vnorm(cache.carry_e) + cache.carry_err + pend)
                    * evaluation_slack(n_rows)), pend

        acc, pend = accumulated(p_norm)
        over = cfg.noise != "none" and acc > cfg.budget
        if over or st.since_flush >= cache.flush_every or pend > cache.flush_share * cfg.budget:
            forced = over or (st.since_flush < cache.flush_every)
            full = st.flushes % cache.margins_every == cache.margins_every - 1
            _flush(cache, X, w_new, x_norm, rho, margins=full)
            z_fresh = True
            passes += 1.5 if full else 1.0  # single-precision passes count ½
            if forced:
                cache.excess_cost += cm.data_pass(n_rows, d)
            acc, _ = accumulated(0.0)  # the flush emptied P and its error bound
        carried = vnorm(cache.carry_e)
    step = e_step + err_step + mis + rem

    if not z_fresh:  # advance the margins to w_new (unless just refreshed): z + ã, with the tracked error
        z = z + a  # a new vector: a transaction's snapshot keeps the old one (NewtonCache.begin)
        st.z = z
        st.eta = eta + zeta + 1.01 * U * float(max(np.max(z, initial=0.0), -np.min(z, initial=0.0)))
    cache.advance(X, w_new, keep)
    cache.removals_since_refresh += 1
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(solver=cfg.solver, w_new=w_new, step_bound=step, solve_error=e_step, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=mis, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)
