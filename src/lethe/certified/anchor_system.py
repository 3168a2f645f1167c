"""The anchor system shared by ``refine``/``pcg`` (preconditioner), ``anchor`` and ``onepass``: the Hessian
M = X′ᵀ diag(ŝ) X′ + λ n′ I at an anchor point, kept as a dense matrix and downdated per removed row, its rounding
drift tracked (docs/tighter_bounds.md §7), and PCG on it."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg.blas import dsyr, dsyrk, ssyrk

from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import gamma_k, vnorm
from lethe.certified.cache import AnchorSystem, NewtonCache
from lethe.certified.common import RemovalConfig, max_row_norm
from lethe.certified.data import DataMatrix, backend_of, is_dense
from lethe.certified.linalg import cho_solve, dense_pcg, fro_sym_upper, precond_factor, sym_mv


class AnchorState(AnchorSystem):
    """The state of the ``anchor`` solver (:mod:`lethe.certified.anchor`): the anchor system plus the Gram matrix
    G̃ = fl(X′ᵀX′) (as built: an upper bound after removals, never downdated) with its rounding bounds, and the
    carried product h̃ ≈ G̃(w − w_a) within ``h_err`` in the 2-norm. Formed by :func:`build_anchor`, advanced by
    :func:`lethe.certified.anchor.anchor_step`."""

    kind = "anchor"

    def __init__(self) -> None:
        super().__init__()
        self.G: np.ndarray | None = None
        self.eps_G = math.inf
        self.fro_G = math.inf
        self.h_G: np.ndarray | None = None
        self.h_err = math.inf


def system_of(cache: NewtonCache) -> AnchorSystem:
    """The cache's solver state as the anchor system it holds (a state is put on the cache by the solver's
    ``prime`` before any of the functions here run)."""
    st = cache.state
    if not isinstance(st, AnchorSystem):
        raise TypeError(f"The cache's solver state ({type(st).__name__}) keeps no anchor system.")
    return st


def _gram_single(X: np.ndarray, r: np.ndarray, block: int = 2048) -> np.ndarray:
    """≈ Xᵀ diag(r²) X (upper triangle, float64, Fortran order) from single-precision blocks: for preconditioners
    only (never inside a certificate)."""
    d = X.shape[1]
    M = np.zeros((d, d), order="F")
    for i in range(0, X.shape[0], block):
        Zb = (r[i:i + block, None] * X[i:i + block]).astype(np.float32)
        M += ssyrk(1.0, Zb.T, trans=0, lower=0)
    return M


def build_anchor(cfg: RemovalConfig, w: np.ndarray, X: DataMatrix, y: np.ndarray, active: np.ndarray,
                 cache: NewtonCache, *, with_gram: bool | None, gram: np.ndarray | None = None,
                 margins: np.ndarray | None = None) -> None:
    """Form the anchor system at w_a = w on the rows ``active`` (one O(n d²) pass) and factorise it.

    M̃ = fl(Zᵀ Z) + λ n′ I with Z = √ŝ ⊙ X′, ŝᵢ = fl(ℓ''(fl(xᵢᵀ w_a))) (stored: row i is later downdated with
    exactly this value); with ``with_gram`` also G̃ = fl(X′ᵀ X′) (or ``gram``, a previously computed fl(X′ᵀX′) for
    exactly these rows); ``with_gram=None`` keeps the maintained G̃ (it does not depend on w).
    Error bounds (docs/tighter_bounds.md §7): ‖M̃ − M̂‖_F ≤ (γ_n + 6u) max ŝ ‖X′‖_F² + 2u(λ n′ √d + ‖M̃‖_F),
    with M̂ the exact matrix for the stored ŝ; ‖G̃ − X′ᵀX′‖_F ≤ γ_n ‖X′‖_F²;
    |ŝᵢ − ℓ''(xᵢᵀw_a)| ≤ γ γ_d ρ ‖w_a‖ + 8u(1 + max ŝ). Other cache fields (margins, counters) are kept.
    ``margins``: fl(X w) for all rows of X, freshly computed (:func:`compute_margins`, the error assumed above), to save
    the pass that would compute it again.
    """
    loss, lam = cfg.loss_, cfg.lam
    n_rows, d = X.shape
    n_act = int(np.count_nonzero(active))
    rho = max_row_norm(cfg, X, cache)
    all_rows = bool(active.all())
    B = backend_of(X)
    # no copy of the active rows: rows outside D′ get weight ŝᵢ = 0 (they add exact zeros to every sum)
    z = B.matvec(X, w) if margins is None else margins
    s_act = loss.d2(z if all_rows else z[active], y if all_rows else y[active])
    s_hat = np.zeros(n_rows)
    s_hat[active] = s_act
    if with_gram is False and cfg.solver_spec.exact_hessian and loss.gamma != 0.0 and is_dense(X):
        # M is only the preconditioner and initial guess of the exact-Hessian solvers (their solve error is
        # measured): a single-precision product (rows ‖xᵢ‖ ≤ 1, ŝ ≤ γ-bounded curvature: no overflow) at half the
        # time. Dense data only; other backends form it in double precision through the interface.
        M = _gram_single(X, np.sqrt(s_hat))
    elif not all_rows and n_act < 0.7 * n_rows and is_dense(X):
        # most rows removed: the product over the remaining rows only (a copy of n′ rows instead of n d² flops on
        # rows of weight 0; the same sum over D′, so the same error bound)
        Xa = X[active]
        M = B.gram(Xa, s_act)
    else:
        M = B.gram(X, s_hat)  # upper triangle of X′ᵀ diag(ŝ) X′
    M[np.diag_indices(d)] += lam * n_act
    sq = B.row_sq_norms(X)
    fro2 = float(np.sum(sq if all_rows else sq[active]))
    s_max = float(np.max(s_act, initial=0.0))
    gn = gamma_k(n_act + 2)
    st = system_of(cache)
    st.w_anchor = np.array(w, dtype=np.float64, copy=True)
    st.s_hat = s_hat
    st.M = np.asfortranarray(M)
    st.fro_M = fro_sym_upper(st.M) * (1.0 + 1e-10)
    st.eps_M = 1.01 * (gn + 6 * U) * s_max * fro2 + 2 * U * (lam * n_act * math.sqrt(d) + st.fro_M)
    st.tau = float(loss.gamma) * gamma_k(d + 2) * rho * vnorm(w) + 8 * U * (1.0 + s_max)
    st.pend_k, st.pend_S = 0, 0.0
    if with_gram:
        assert isinstance(st, AnchorState)
        if gram is not None:
            G = np.array(gram, dtype=np.float64, copy=True)
        elif all_rows:
            G = B.gram(X)
        elif n_act < 0.7 * n_rows and is_dense(X):
            G = B.gram(X[active])
        else:
            G = B.gram(X, active.astype(np.float64))
        st.G = np.asfortranarray(G)
        st.fro_G = fro_sym_upper(st.G) * (1.0 + 1e-10)
        st.eps_G = 1.01 * gn * fro2
    elif with_gram is not None and isinstance(st, AnchorState):
        st.G = None
    if isinstance(st, AnchorState):  # G̃ (w − w_a) = 0 at the anchor itself, exactly
        st.h_G, st.h_err = (np.zeros(d), 0.0) if st.G is not None else (None, math.inf)
    st.factor = precond_factor(st.M)
    cache.refreshes += 1
    cache.excess_cost = 0.0
    cache.iter_cost = 0.0
    cache.removals_since_refresh = 0


#: 2⁻¹⁰⁷⁴, the smallest positive double: a product that underflows loses at most this much.
_TINY = 2.0**-1074


def _sum_sq_upper(Z: np.ndarray) -> float:
    """S ≥ Σᵢⱼ zᵢⱼ² (exact) for a C-contiguous float64 array, from one BLAS dot product of Z with itself
    (docs/tighter_bounds.md §7c). Over N = Z.size non-negative terms, in any order and with or without fused
    multiply-adds, fl(Σ z²) ≥ (1 − γ_N) Σ z² − N·2⁻¹⁰⁷⁴ (Higham (3.5); each square that underflows loses at most
    2⁻¹⁰⁷⁴; entries with |z| ≤ 1e150 do not overflow). Hence Σ z² ≤ (fl + N·2⁻¹⁰⁷⁴)/(1 − γ_N) ≤ (fl + N·2⁻¹⁰⁷⁴)
    (1 + 2γ_N); the roundings of the sum and products below are covered by γ_{N+2} in place of γ_N where they are
    relative, and by the second N·2⁻¹⁰⁷⁴ where the result is subnormal (absolute error ≤ 2⁻¹⁰⁷⁵)."""
    N = int(Z.size)
    if N == 0:
        return 0.0
    flat = Z.reshape(-1)
    dot = float(np.dot(flat, flat))
    return (dot + 2.0 * N * _TINY) * (1.0 + 2.0 * gamma_k(N + 2))


def removed_rows(X: DataMatrix, idx: np.ndarray) -> np.ndarray:
    """X[idx] as a C-contiguous float64 array of its own (``take`` makes a copy for every backend; should one
    return memory shared with X, it is copied here: :func:`downdate` overwrites a batch's rows in place)."""
    XR = backend_of(X).take(X, idx)
    if not (XR.dtype == np.float64 and XR.flags.owndata and XR.flags.writeable and XR.flags.c_contiguous):
        XR = np.array(XR, dtype=np.float64, order="C")
    return XR


def downdate(cache: NewtonCache, X: DataMatrix, idx: np.ndarray, lam: float, *, track: bool,
              rows: np.ndarray | None = None) -> None:
    """Remove rows ``idx`` from the anchor system: M ← M − Σ ŝⱼ xⱼxⱼᵀ − λ m I, reading only those rows. Without
    ``track`` the rank-one updates of the upper triangle are applied at once (O(d²) per row). With ``track``
    (``anchor``, ``onepass``) the rows √ŝⱼ xⱼ are queued and folded into M by one rank-k update every
    ``fold_every`` rows (:meth:`NewtonCache.fold_pending`); :func:`mv_maintained` subtracts the queued rows
    explicitly until then. The λ m I term is applied at once, with ε_M grown by its rounding. The Gram matrix G is
    *not* downdated: it only enters upper bounds on ‖X′v‖² = vᵀX′ᵀX′v ≤ vᵀGv, and removing rows only subtracts
    the PSD terms xⱼxⱼᵀ.

    ``rows``: X[idx] from :func:`removed_rows`, already gathered by the caller (for Δ), so that the rows are read
    from X once; a batch overwrites it with its rows z̃ⱼ (the caller must not use it afterwards).
    A batch with ``track`` folds only its own m rows: rows already queued stay queued (they are folded with the
    queue, as after a single removal; the bound on ε_M does not depend on the order of the folds, docs §7c)."""
    st = system_of(cache)
    assert st.M is not None and st.s_hat is not None
    d = st.M.shape[0]
    if not track:
        # pcg/refine (O(nd) per step): M is downdated in a copy, so a transaction's snapshot keeps the old M
        # (:meth:`NewtonCache.begin`); with ``track`` only the diagonal is written in place (saved by the snapshot)
        st.M = st.M.copy(order="K")
    if track and (st.pend_Z is None or st.pend_Z.shape != (max(cache.fold_every, 1), d)):
        cache.fold_pending()  # queued rows first (fold_every may have changed): the new queue starts empty
        st.pend_Z = np.empty((max(cache.fold_every, 1), d))
    m = int(idx.size)
    if rows is not None and (rows.shape != (m, d) or rows.dtype != np.float64 or not rows.flags.c_contiguous
                             or not rows.flags.writeable):
        raise ValueError(f"rows must be the {m} x {d} writable C-contiguous float64 rows X[idx] "
                         f"(removed_rows). Found shape {rows.shape}, dtype {rows.dtype}.")
    XR = removed_rows(X, idx) if rows is None else rows  # only the removed rows are read
    if m > 1 and (not track or m >= cache.fold_every):
        # a batch (Eq. 6): one rank-m update instead of m rank-one updates or m/k queue folds (O(m d²) flops at
        # BLAS-3 speed); with ``track`` the rows already queued stay queued and ε_M grows as for a fold of m rows
        s_b = st.s_hat[idx]
        # z̃ⱼ = fl(√ŝⱼ) xⱼ, the rows the queue would hold; formed in place in rows the caller handed over (or in the
        # fresh copy ``take`` made): no second m × d array
        Z = np.multiply(XR, np.sqrt(s_b)[:, None], out=XR)
        if track:
            S = _sum_sq_upper(Z)  # ≥ Σ‖z̃ⱼ‖² (one dot product over the m d entries)
            cache.fold_rows(Z, S)
        else:
            # pcg/refine: M is only a preconditioner and initial guess (the solve error is measured). In double
            # precision (i15 used single): a model whose cache was primed at training and one primed after loading
            # (the service) then take the same steps to within rounding (tests/curator/test_service.py)
            st.M = dsyrk(-1.0, Z.T, beta=1.0, c=st.M, trans=0, lower=0, overwrite_c=1)
        st.s_hat[idx] = 0.0
        idx, XR = idx[:0], XR[:0]
    M = st.M
    for t, j in enumerate(idx):
        sj = float(st.s_hat[j])
        if sj != 0.0:
            xj = XR[t]
            if not track:
                M = dsyr(-sj, xj, lower=0, a=M, overwrite_a=1)
            else:
                if st.pend_k >= cache.fold_every:
                    st.M = M
                    cache.fold_pending()
                    M = st.M
                assert st.pend_Z is not None
                zj = np.multiply(xj, math.sqrt(sj), out=st.pend_Z[st.pend_k])
                st.pend_k += 1
                st.pend_S += float(zj @ zj) * (1.0 + gamma_k(d + 2))
        st.s_hat[j] = 0.0
    np.einsum("ii->i", M)[...] -= lam * m  # M's diagonal as a writable view: no index arrays
    if track:
        st.eps_M += U * (2.0 * (st.fro_M + 2.0 * st.eps_M) + 2.0 * lam * m * math.sqrt(d))
    st.M = M


def mv_maintained(cache: NewtonCache, v: np.ndarray) -> tuple[np.ndarray, float]:
    """M v for the maintained anchor matrix, queued rows included: fl(M̃v) − Zᵀ(Zv), and a bound on the error of
    the correction against Σ ŝⱼxⱼ(xⱼᵀv) plus the subtraction's rounding (the product with the stored M̃ is bounded
    by the caller: γ_{d+2}‖M̃‖_F‖v‖ + ε_M‖v‖). Zv has entries within γ_d‖zⱼ‖‖v‖, Zᵀt within γ_k‖|Z|ᵀ|t|‖ ≤
    γ_k‖Z‖_F‖t‖, and z̃z̃ᵀ vs ŝxxᵀ within 5u ŝ‖x‖²: with S ≥ ‖Z‖_F², ≤ (γ_{d+2} + γ_{k+2} + 6u) S ‖v‖."""
    st = system_of(cache)
    assert st.M is not None
    q = sym_mv(st.M, v)
    k = st.pend_k
    if k == 0 or st.pend_Z is None:
        return q, 0.0
    Z = st.pend_Z[:k]
    corr = Z.T @ (Z @ v)
    q -= corr
    d = v.shape[0]
    err = ((gamma_k(d + 2) + gamma_k(k + 2) + 6 * U) * st.pend_S * vnorm(v) * (1.0 + 4 * U)
           + 1.01 * U * vnorm(q))
    return q, err


def solve_maintained(cache: NewtonCache, rhs: np.ndarray, v: np.ndarray, e: np.ndarray,
                      target: float, d: int) -> tuple[np.ndarray, np.ndarray, int, str]:
    """PCG on the maintained system M v = rhs (O(d²) per iteration, preconditioner: the cached factor) until
    ‖Mv − rhs‖ ≤ target; once, if the cap is hit, refactorise M (O(d³), no data pass) and solve again.
    Returns (v, e, iterations, "factor" if refactorised else "")."""
    st = system_of(cache)
    F = st.factor
    assert F is not None
    it, refac = 0, ""
    def mv(p: np.ndarray) -> np.ndarray:
        return mv_maintained(cache, p)[0]

    for attempt in range(2):
        v, e, k = dense_pcg(mv, F, rhs, v, e, target, cache.max_sweeps)
        it += k
        cache.iter_cost += k * 2 * cache.cost_model.dense_op(d)
        if vnorm(e) <= target or attempt == 1:
            break
        refac = cache.refactorize()  # stale preconditioner
        F = st.factor
        assert F is not None
        v = cho_solve(F, rhs, check_finite=False)
        e = mv(v) - rhs
    cache.sweeps_total += it
    return v, e, it, refac
