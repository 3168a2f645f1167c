"""Pieces every Newton removal step shares: the step's result (:class:`StepResult`), the configuration it reads
(:class:`RemovalConfig`), Δ with its error bound, margins, the remainder bound and the tight accounting of the
carried error (docs/tighter_bounds.md §2–4).

Every solver returns a step v and a certified upper bound on ‖G(w + v) − u‖, the increment of the gradient
residual (G = ∇L_b(·; D′), u = ∇L_b(w; D) the residual before the removal). With Δ = m λ w + Σ_{removed} ∇ℓ and
H = ∇²L(w; D′) the increment is exactly (docs/tighter_bounds.md §2)

    G(w + v) − u = (H v − Δ) + r,     r = (H̄ − H) v,  H̄ = ∫₀¹ H(w + t v) dt.

Rounding. Every computed quantity that enters a certificate is inflated by an explicit floating-point error bound
(Higham's γ_k for dot products; docs/tighter_bounds.md §7). They are many orders of magnitude below the step
bounds but keep the certificate a bound on the exact-arithmetic quantity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from lethe.certified.bounds import (
    ROW_NORM_MAX,
    evaluation_slack,
    gamma_k,
    gradient_rounding_allowance,
    inflate_norm,
    remainder_bound_paper,
    remainder_bound_tight,
    vnorm,
)
from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.cache import NewtonCache, WorkBuffers
from lethe.certified.data import DataMatrix, backend_of
from lethe.certified.state import ModelState
from lethe.losses import LogisticLoss, Loss


class SolverTraits(Protocol):
    """What a solver module reads of its own entry in the solver table (:class:`lethe.certified.solvers.Solver`,
    which satisfies it): the solvers sit below the table and never import it."""

    @property
    def exact_hessian(self) -> bool: ...
    @property
    def reuses_factorisation(self) -> bool: ...
    @property
    def conjugate(self) -> bool: ...


class RemovalConfig(Protocol):
    """What a solver reads from the mechanism's configuration (:class:`~lethe.certified.mechanism.CertifiedRemoval`
    satisfies it): solvers sit below the mechanism and never import it."""

    @property
    def loss_(self) -> Loss: ...
    @property
    def lam(self) -> float: ...
    @property
    def solver(self) -> str: ...
    @property
    def solver_spec(self) -> SolverTraits: ...
    @property
    def bound(self) -> str: ...
    @property
    def refresh(self) -> str | int: ...
    @property
    def noise(self) -> str: ...
    @property
    def budget(self) -> float: ...


@dataclass(frozen=True)
class StepResult:
    """One Newton removal step and its certificate terms (see module docstring).

    ``step_bound`` ≥ ‖G(w_new) − u‖ in exact arithmetic; it is the sum of ``solve_error`` (the measured norm of
    the solve/anchor residual), ``error_allowance`` (its rounding allowance plus, for ``anchor``, the drift of the
    maintained matrices), ``remainder_bound`` and ``mismatch_bound`` (anchor only). ``accumulated_bound``
    (tight mode with a cache, else ``None``) is a second bound on the *new* residual ‖G(w_new)‖ itself, from the
    vector accounting of docs/tighter_bounds.md §4; ``carried_error`` = ‖ē‖ after the step.
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
    accumulated_bound: float | None = None
    carried_error: float = 0.0
    solver: str = ""  # the solver that computed the step (each solver names itself)


def max_row_norm(cfg: RemovalConfig, X: DataMatrix, cache: NewtonCache | None) -> float:
    """ρ ≥ maxᵢ ‖xᵢ‖: 1 + tolerance when the loss needs unit rows (checked at input), else computed once."""
    if cfg.loss_.gamma != 0.0:
        return ROW_NORM_MAX
    if cache is not None and cache.row_norm_max is not None:
        return cache.row_norm_max
    sq = backend_of(X).row_sq_norms(X)
    # squares that underflow lose ≤ 2⁻¹⁰⁷⁵ each (a row of entries below 1e-154 can sum to 0): + √(d 2⁻¹⁰⁷⁴)
    rho = (math.sqrt(float(np.max(sq, initial=0.0))) * (1.0 + 4.0 * U * X.shape[1])
           + 2.0 * math.sqrt(X.shape[1] * 2.0**-1074))
    if cache is not None:
        cache.row_norm_max = rho
    return rho


def compute_margins(X: DataMatrix, w: np.ndarray, rho: float) -> tuple[np.ndarray, float]:
    """Margins z = fl(X w) computed afresh and η ≥ maxᵢ |z̃ᵢ − xᵢᵀw| (Higham: γ_{d+2} ρ ‖w‖ for rows ‖xᵢ‖ ≤ ρ)."""
    return backend_of(X).matvec(X, w), gamma_k(X.shape[1] + 2) * rho * vnorm(w)


def x_norm_upper(state: ModelState, n_rows: int, rho: float) -> float:
    """Upper bound on ‖X′‖₂: the training-time bound (item 4), or √n ρ (Frobenius) for states without one."""
    x = state.x_norm_bound
    fro = math.sqrt(n_rows) * rho
    return min(float(x), fro) if math.isfinite(x) else fro


def removed_gradient(cfg: RemovalConfig, w: np.ndarray, XR: np.ndarray, yR: np.ndarray,
                      rho: float) -> tuple[np.ndarray, float]:
    """Δ = m λ w + X_Rᵀ ℓ'(X_R w, y_R) (Eq. 6) and a bound on the error of its computed value."""
    loss, lam = cfg.loss_, cfg.lam
    m, d = XR.shape
    d1 = loss.d1(XR @ w, yR)
    Delta = m * lam * w + XR.T @ d1
    lip1 = float(getattr(loss, "d2_sup", 0.25 if loss.gamma else 2.0))
    wn = vnorm(w)
    d1_abs = float(np.abs(d1).max(initial=0.0))
    # margins: ≤ γ_d ρ ‖w‖ each; ℓ' Lipschitz with ℓ'' ≤ lip1; evaluation ≤ 8u(1 + |ℓ'|); Xᵀ(·) and the sum.
    d1_err = lip1 * gamma_k(d + 1) * rho * wn + 8 * U * (1.0 + d1_abs)
    err = (m * rho * d1_err + gamma_k(m + 1) * math.sqrt(m) * rho * vnorm(d1)
           + 3 * U * m * lam * wn + 2 * U * vnorm(Delta))
    return Delta, 2.0 * err


def policy_due(cfg: RemovalConfig, cache: NewtonCache, refresh_cost: float) -> bool:
    """Whether a data-pass refresh is due now (rent-or-buy for ``"auto"``, every k removals for an int)."""
    if cfg.refresh == "never":
        return False
    if isinstance(cfg.refresh, int):
        return cache.removals_since_refresh >= cfg.refresh
    return cache.excess_cost >= refresh_cost


def mask_before(keep: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The active-row mask before removing ``idx`` from it (``keep`` is the mask after)."""
    before = keep.copy()
    before[idx] = True
    return before


def carry_start(cfg: RemovalConfig, state: ModelState, cache: NewtonCache | None, synced: bool,
                 d: int) -> tuple[np.ndarray | None, float, float]:
    """The carried measured error ē, its error bound and the bounded part S (tight mode with a cache), else None.

    Out of sync (another state, or the first step) the carry restarts from the state's own bound: ē = 0,
    S = β, which is valid because ‖u‖ ≤ β.
    """
    if cache is None or cfg.bound != "tight":
        return None, 0.0, math.nan
    if not synced or cache.carry_e is None or not math.isfinite(cache.carry_bound):
        cache.carry_e = np.zeros(d)
        cache.carry_err = 0.0
        cache.carry_bound = float(state.residual_bound)
    return cache.carry_e, cache.carry_err, cache.carry_bound


def measured_residual(cfg: RemovalConfig, w: np.ndarray, b: np.ndarray, X: DataMatrix, y: np.ndarray,
                      active: np.ndarray) -> tuple[np.ndarray, float]:
    """g̃ = fl(∇L_b(w; D)) on the rows ``active`` of X, and a bound on ‖g̃ − ∇L_b(w; D)‖ (two data passes).

    Computed as training computes its residual β₀ (``objective_grad``: margins, ℓ', Xᵀℓ' + λn w + b, the rows
    outside D given ℓ' = 0 exactly) with the same rounding allowance
    (:func:`~lethe.certified.bounds.gradient_rounding_allowance` with the backend's summation length S,
    docs/tighter_bounds.md §0a), its magnitudes taken over all n rows of X (a superset of D), with ‖X‖_F² ≤ n ρ².
    Used to restart the vector accounting of §4 from a measured residual
    (docs/tighter_bounds.md §5c): ‖∇L_b(w; D)‖ ≤ ‖g̃‖ + allowance, the same kind of fact as β₀."""
    loss, lam = cfg.loss_, cfg.lam
    B = backend_of(X)
    n_rows, d = X.shape
    n_act = int(np.count_nonzero(active))
    d1 = loss.d1(B.matvec(X, w), y)
    d1[~active] = 0.0
    g = B.rmatvec(X, d1) + lam * n_act * w
    g = g + b
    rho = max_row_norm(cfg, X, None)
    fro_sq = n_rows * rho * rho * (1.0 + 4 * U)  # ≥ ‖X‖_F² (rows ‖xᵢ‖ ≤ ρ), no pass
    fro = math.sqrt(fro_sq) * (1.0 + 2 * U)
    return g, gradient_allowance(X, loss, reg_coef=lam * n_act, fro=fro, d1_norm=vnorm(d1), w=w, b=b,
                                 g_norm=vnorm(g))


def gradient_allowance(X: DataMatrix, loss: Any, *, reg_coef: float, fro: float, d1_norm: float, w: np.ndarray,
                       b: np.ndarray, g_norm: float) -> float:
    """The rounding allowance of a measured g̃ = fl(Xᵀ fl(ℓ'(fl(Xw))) + fl(reg_coef·w)) + b (β₀ of training,
    :func:`measured_residual`): :func:`~lethe.certified.bounds.gradient_rounding_allowance` with X's backend's
    summation lengths, from the computed norms ``d1_norm`` = ‖fl(ℓ')‖ over the n rows of X, ‖w‖ and ‖b‖, each
    raised to an upper bound of its exact norm (:func:`~lethe.certified.bounds.inflate_norm`); ``fro`` ≥ ‖X‖_F,
    ``g_norm`` = the computed ‖g̃‖, ``reg_coef`` = λ times the rows of D (a product of two floats: + 4u)."""
    B = backend_of(X)
    n, d = X.shape
    w_norm = inflate_norm(vnorm(w), d)
    return gradient_rounding_allowance(
        sum_terms=B.sum_terms(X), dot_terms=B.dot_terms(X), n=n, d=d, fro=fro,
        d1_norm=inflate_norm(d1_norm, n), reg_norm=reg_coef * w_norm * (1.0 + 4 * U),
        b_norm=inflate_norm(vnorm(b), d), d2_sup=float(getattr(loss, "d2_sup", 1.0)), w_norm=w_norm,
        g_norm=g_norm)


def carry_finish(cache: NewtonCache | None, e: np.ndarray, e_old: np.ndarray | None, eps_old: float, S_old: float,
                  err_e: float, bounded: float) -> tuple[float | None, float, float, float]:
    """Close the step's accounting (docs/tighter_bounds.md §4).

    ``e`` is the computed residual of the solved system (H v − rhs, or M v − rhs for ``anchor``) and ``err_e`` a
    bound on its error (including that of Δ and of rhs = fl(Δ − ē_old)). Returns (accumulated bound or None,
    ‖ē_new‖, ‖H v − Δ‖ as computed, its error bound) — the last two give the triangle-inequality step bound.
    """
    if e_old is None or cache is None:
        return None, 0.0, vnorm(e), err_e
    e_delta = e - e_old  # H v − Δ
    e_delta_norm = vnorm(e_delta)
    err_step = err_e + 2 * U * e_delta_norm
    carried = vnorm(e)
    cache.carry_e = e
    cache.carry_err = eps_old + err_e
    cache.carry_bound = S_old + bounded
    acc = (cache.carry_bound + carried + cache.carry_err) * evaluation_slack(e.size)
    return acc, carried, e_delta_norm, err_step


def local_curvature(loss: Any, z: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """ℓ''(z, y) into ``out`` (without a temporary for the logistic loss)."""
    if isinstance(loss, LogisticLoss):
        return loss.d2(z, y, out=out)
    out[:] = loss.d2(z, y)
    return out


def remainder_terms(cfg: RemovalConfig, keep: np.ndarray, z: np.ndarray, eta: float, a: np.ndarray, zeta: float,
                    v_ub: float, x_norm: float, rho: float,
                    buf: WorkBuffers | None = None) -> tuple[float, dict[str, float]]:
    """Bound on the Taylor remainder ‖r‖ of a step with computed margins ã ≈ X v (|ãᵢ − xᵢᵀv| ≤ ζ) from margins
    z̃ ≈ X w (|z̃ᵢ − xᵢᵀw| ≤ η): Cor. 1/2 in paper mode, Theorem 1 with local Lipschitz constants in tight mode
    (docs/tighter_bounds.md §2–3). Γᵢ bounds |ℓ'''| on [cᵢ − rᵢ, cᵢ + rᵢ] with the midpoint cᵢ = z̃ᵢ + ãᵢ/2 and the
    radius rᵢ = |ãᵢ|/2 + sᵢ, sᵢ = (η + ζ)(1 + 8u) + 5u(|z̃ᵢ| + |ãᵢ|): the interval between xᵢᵀw and xᵢᵀ(w + v),
    widened by the errors of z̃ and ã and the roundings of forming cᵢ, rᵢ and |cᵢ| ± rᵢ; āᵢ = |ãᵢ| + ζ on D′, 0
    elsewhere. Returns (bound, candidates).
    ``buf`` (n-vectors, not aliasing the inputs) avoids temporaries."""
    loss = cfg.loss_
    b0, b1, b2, b3 = (buf if buf is not None else WorkBuffers(a.size)).f[:4]
    a_abs = np.abs(a, out=b0)
    lip: np.ndarray | float = float(getattr(loss, "gamma_exact", loss.gamma))
    lip_abs = getattr(loss, "d2_lipschitz_abs", None)
    lip_on = getattr(loss, "d2_lipschitz_on", None)
    if cfg.bound != "paper" and loss.gamma != 0.0 and (lip_abs is not None or lip_on is not None):
        r = np.abs(z, out=b1)
        r += a_abs
        r *= 5 * U
        r += (eta + zeta) * (1 + 8 * U)
        r += np.multiply(a_abs, 0.5, out=b2)  # radius
        c = np.multiply(a, 0.5, out=b2)
        c += z
        if lip_abs is not None:
            c_abs = np.abs(c, out=b2)
            hi_abs = np.add(c_abs, r, out=b3)  # |ξ| over [c − r, c + r] fills [max(|c| − r, 0), |c| + r]
            lo_abs = np.subtract(c_abs, r, out=b2)  # may be negative: the Lipschitz function clips at ξ* > 0 first
            lip = lip_abs(lo_abs, hi_abs, out=b1, tmp=b3)
        else:
            assert lip_on is not None
            lip = np.asarray(lip_on(c - r, c + r), dtype=np.float64)  # rounding of c ± r: in the slack
    a_abs += zeta
    a_abs *= keep  # rows outside D′ (their ã need not be 0 for the O(nd) solvers)
    if cfg.bound == "paper":
        b = remainder_bound_paper(float(loss.gamma), x_norm, rho, v_ub, vnorm(a_abs))
        return b * evaluation_slack(a.size), {"paper": b}
    if loss.gamma == 0.0:
        return 0.0, {"spectral": 0.0, "triangle": 0.0}
    return remainder_bound_tight(a_abs, lip, x_norm, rho, out=b1)
