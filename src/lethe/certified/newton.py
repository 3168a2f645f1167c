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
``"onepass"``
    The anchor system of ``"anchor"`` plus one single-precision pass a ≈ X′v per removal (with a proven error
    bound): the mismatch X′ᵀ((ℓ''(z) − ŝ) ⊙ a) is then known exactly as an n-vector and, in tight mode, kept as a
    pending vector P (charged ‖X′‖₂‖P‖) that a periodic double-precision pass applies exactly (docs §5b).

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

import hashlib
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import LinAlgError, cho_factor
from scipy.linalg.blas import dsymv, dsyr, dsyrk, dtrsv, ssymv, ssyrk
from scipy.linalg.lapack import dpotri

from lethe.certified import objective as obj
from lethe.certified.bounds import (
    ROW_NORM_MAX,
    UNIT_ROUNDOFF,
    anchor_bounds,
    evaluation_slack,
    gamma_k,
    remainder_bound_paper,
    remainder_bound_tight,
    vnorm,
    worst_case_bound,
)
from lethe.losses import LogisticLoss

if TYPE_CHECKING:  # pragma: no cover
    from lethe.certified.mechanism import CertifiedRemoval, ModelState

SOLVERS = ("cholesky", "refine", "pcg", "anchor", "onepass")
BOUNDS = ("paper", "tight")
U = UNIT_ROUNDOFF


@dataclass(frozen=True)
class CostModel:
    """Deterministic prices (seconds on a nominal machine) of the operations the refresh policy trades off.

    Memory-bound kernels (X @ v, Xᵀ g, symmetric matrix-vector products, triangular solves) run at
    ``blas2_flops``; the Hessian's rank-n update at ``blas3_flops``; a d × d Cholesky at ``cholesky_flops``.
    Only ratios matter to the policy. Flop counts rather than wall-clock time keep seeded runs reproducible. The
    defaults were measured on the 2-core development machine (MNIST 3 vs 8: a data pass ≈ 5 ms, the Hessian
    ≈ 0.18 s, a 784 × 784 Cholesky ≈ 27 ms).
    """

    blas2_flops: float = 4e9
    blas3_flops: float = 4e10
    cholesky_flops: float = 6e9

    def data_pass(self, n: int, d: int) -> float:
        """One product with the n × d data matrix."""
        return 2.0 * n * d / self.blas2_flops

    def hessian(self, n: int, d: int) -> float:
        """Forming Xᵀ diag(s) X (symmetric rank-n update)."""
        return float(n) * d * d / self.blas3_flops

    def cholesky(self, d: int) -> float:
        """A d × d Cholesky factorisation."""
        return d**3 / 3.0 / self.cholesky_flops

    def dense_op(self, d: int) -> float:
        """A d × d matrix-vector product or a pair of triangular solves."""
        return 2.0 * d * d / self.blas2_flops

    def training(self, n: int, d: int, iterations: int) -> float:
        """Retraining: ~3 data passes per L-BFGS iteration plus XᵀX (a general product) for ‖X‖₂."""
        return 3.0 * max(iterations, 1) * self.data_pass(n, d) + 2.0 * self.hessian(n, d)


def _sync_key(X: np.ndarray, w: np.ndarray, active: np.ndarray) -> tuple[Any, ...]:
    """What a cache must match to be reused (besides the data array itself, held by weak reference): its shape,
    the exact bytes of w, and the active-row mask."""
    return (X.shape, hash(np.ascontiguousarray(w).tobytes()), active.shape[0], hash(np.packbits(active).tobytes()))


class SharedFloat32Data:
    """One single-precision copy of a data array, shared by the ``onepass`` caches of several models that train on
    the same rows of the same array (the binary models of a one-vs-all estimator): memory for one copy instead of
    one per model.

    It records which rows it has zeroed. A cache uses it only if those are exactly the rows outside its active set,
    apart from rows that the current removal takes out anyway (another model may have zeroed them first), and
    otherwise builds a new copy for its own rows. So a removal that failed half-way, after some models had zeroed
    rows that are still active, costs a rebuild, never a wrong pass.
    """

    def __init__(self) -> None:
        self.X32: np.ndarray | None = None
        self.groups: np.ndarray | None = None
        self.zeroed: np.ndarray | None = None
        self._xref: weakref.ref[np.ndarray] | None = None

    def _zeroed_ok(self, active: np.ndarray, removing: np.ndarray | None) -> bool:
        """All rows outside ``active`` are zeroed, and any other zeroed row is one being removed."""
        if self.zeroed is None or self.zeroed.shape != active.shape or np.any(~active & ~self.zeroed):
            return False
        extra = np.flatnonzero(self.zeroed & active)
        return extra.size == 0 or (removing is not None and bool(np.all(np.isin(extra, removing))))

    def lookup(self, X: np.ndarray, active: np.ndarray,
               removing: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The shared copy if it was built from ``X`` and its zeroed rows fit ``active`` (minus ``removing``)."""
        if self.X32 is None or self._xref is None or self._xref() is not X or not self._zeroed_ok(active, removing):
            return None
        return self.X32, self.groups

    def store(self, X: np.ndarray, X32: np.ndarray, groups: np.ndarray | None, active: np.ndarray) -> None:
        self.X32, self.groups, self.zeroed, self._xref = X32, groups, ~active, weakref.ref(X)

    def usable_for_step(self, X32: np.ndarray, active_before: np.ndarray, idx: np.ndarray) -> bool:
        """Whether a cache holding ``X32`` may take a step that removes ``idx`` from ``active_before``: the copy is
        still this one and its zeroed rows fit."""
        return self.X32 is X32 and self._zeroed_ok(active_before, idx)

    def zero(self, idx: np.ndarray) -> None:
        assert self.X32 is not None and self.zeroed is not None
        self.X32[idx] = 0.0
        self.zeroed[idx] = True


class NewtonCache:
    """In-memory state that makes removals fast: a factorisation, margins, or the anchor system.

    Held by the caller, one per model and data set, never serialised (it is derived from the data, including rows
    removed since it was formed). After each step it is keyed to the data array, the exact new weights and the new
    active-row mask; a removal that starts from anything else (a retrained model, another mask, another array)
    rebuilds it, so a stale cache can cost time but never soundness. Use one cache per model and data set, and
    do not modify the active rows of the data array in between. What it holds depends on the solver:

    * ``refine``/``pcg``: the Hessian at an anchor point as a dense matrix M, downdated per removed row, and
      ``factor`` = Cholesky factor of an earlier M (both only produce the initial guess and the preconditioner:
      the solve error is measured against the exact Hessian); ``z`` — margins X w at the current w with their
      error bound.
    * ``anchor``: the anchor point w_a, the dense anchor Hessian M (upper triangle, downdated per removed row) and
      Gram matrix X′ᵀX′ (as built: an upper bound after removals), their rounding-error bounds, curvatures ŝ at
      w_a, the carried product G(w − w_a), and ``factor`` = the float32 inverse of an earlier M (a preconditioner
      only: the anchor residual Mv − Δ is measured).
    * ``onepass``: the anchor system of ``anchor`` without the Gram matrix (M enters the certificate, so its
      rounding drift is tracked), the margins z, a float32 copy of the data (one single-precision pass per removal)
      and the pending mismatch vector P of docs/tighter_bounds.md §5b, with their error bounds.

    Parameters
    ----------
    rtol : float
        Iterations stop once ‖solve error‖ ≤ rtol ‖Δ‖ ...
    budget_share : float
        ... or once it is at most this share of the step's other bound terms.
    max_sweeps : int
        Iterations per removal before the preconditioner counts as stale and is refreshed.
    carry_share : float
        Tight accounting (``bound="tight"``): iterations also stop once the carried solve error ‖ē‖ (which is
        corrected by the next step instead of accumulating) is at most this share of the budget ε′.
    cost_model : CostModel, optional
        Prices used by ``refresh="auto"``.
    flush_every, flush_share : int, float
        ``onepass``: apply the pending mismatch to the data (one single-precision pass with a tracked error)
        every ``flush_every`` removals, or as soon as its charge ‖X′‖₂‖P‖ exceeds ``flush_share`` of the
        budget, or when the bound would otherwise force a retraining.
    margins_every : int
        ``onepass``: recompute the margins X w in double precision at every ``margins_every``-th flush (between
        refreshes they advance by the single-precision margins of each step, and their error bound grows).
    fold_every : int
        ``anchor``, ``onepass``: removed rows are subtracted from the anchor matrix M by one rank-k update every
        ``fold_every`` rows (one pass over M instead of one per row); until then products with M subtract them
        explicitly (O(kd)), with their rounding bounded.
    shared : SharedFloat32Data, optional
        ``onepass``: hold the float32 copy of the data in this object, shared with the caches of other models on
        the same rows (one-vs-all), instead of one copy per cache.
    """

    def __init__(self, rtol: float = 1e-12, budget_share: float = 1e-2, max_sweeps: int = 4, *,
                 carry_share: float = 1e-2, cost_model: CostModel | None = None, flush_every: int = 16,
                 flush_share: float = 2e-2, margins_every: int = 4, fold_every: int = 32,
                 shared: SharedFloat32Data | None = None) -> None:
        self.rtol = rtol
        self.budget_share = budget_share
        self.max_sweeps = max_sweeps
        self.carry_share = carry_share
        self.flush_every = flush_every
        self.flush_share = flush_share
        self.margins_every = margins_every
        self.fold_every = fold_every
        self.cost_model = cost_model if cost_model is not None else CostModel()
        self.factor: tuple[np.ndarray, bool | None] | None = None
        self.refreshes = 0  # factorisations formed from the data (Hessian builds, anchor builds)
        self.refactorizations = 0  # anchor: refactorisations of the maintained M (no data pass)
        self.sweeps_total = 0
        self.buf: _Buffers | None = None  # work space, not state: kept across resets
        self.shared = shared  # onepass: a float32 copy of the data shared with other caches (kept across resets)
        self._clear_state()

    def _clear_state(self) -> None:
        self.kind: str | None = None
        self._key: tuple[Any, ...] | None = None
        self._xref: weakref.ref[np.ndarray] | None = None
        self.z: np.ndarray | None = None
        self.eta = math.inf
        self.row_norm_max: float | None = None
        self.excess_cost = 0.0
        self.iter_cost = 0.0
        self.last_remainder = 0.0
        # tight accounting (docs/tighter_bounds.md §4): ‖u‖ ≤ carry_bound + ‖carry_e‖ + carry_err, where carry_e is
        # the measured sum of solve errors since the last sync and carry_bound the bounded parts (incl. β at sync)
        self.carry_e: np.ndarray | None = None
        self.carry_err = 0.0
        self.carry_bound = math.nan
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
        self.h_G: np.ndarray | None = None  # anchor: ≈ G̃ (w − w_a), within h_err in the 2-norm
        self.h_err = math.inf
        # onepass: float32 copy of the data, pending mismatch vector P (ē = carry_e + X′ᵀP) and its error bound
        self.X32: np.ndarray | None = None
        self.col_groups: np.ndarray | None = None  # onepass: X32 keeps one column per group of identical columns
        self.P: np.ndarray | None = None
        self.p_err = 0.0
        self.since_flush = 0
        self.flushes = 0
        self.z_ref: np.ndarray | None = None  # onepass: margins at w_ref in double precision, error eta_ref
        self.w_ref: np.ndarray | None = None
        self.eta_ref = math.inf
        # anchor, onepass: rows removed from M but not yet subtracted from the stored matrix (rows √ŝⱼ xⱼ), and
        # S_pend ≥ Σ ŝⱼ‖xⱼ‖² over them; folded into M by one rank-k update every ``fold_every`` rows
        self.pend_Z: np.ndarray | None = None
        self.pend_k = 0
        self.pend_S = 0.0

    def refresh(self, H: np.ndarray) -> None:
        """Factorise a new Hessian (used as preconditioner)."""
        self.factor = cho_factor(H, check_finite=False)
        self.refreshes += 1

    def fold_pending(self) -> None:
        """Subtract the pending rows from the stored M: M ← M − ZᵀZ by one BLAS rank-k update (``dsyrk``), with
        ε_M grown by its rounding: per entry ≤ γ_{k+1}(|Mᵢⱼ| + Σ|z_{ri} z_{rj}|), in Frobenius norm
        ≤ γ_{k+1}(‖M̃‖_F + Σ‖z_r‖²); the rows z̃ = fl(√ŝ) x differ from the exact √ŝ x by ≤ 2u relatively, so
        z̃z̃ᵀ from ŝxxᵀ by ≤ 5u ŝ‖x‖² (S_pend covers Σ‖z̃‖²)."""
        k = self.pend_k
        if k == 0 or self.M is None or self.pend_Z is None:
            return
        self._fold_rows(self.pend_Z[:k], self.pend_S)
        self.pend_k = 0
        self.pend_S = 0.0

    def _fold_rows(self, Z: np.ndarray, S: float) -> None:
        """M ← M − ZᵀZ for the k × d rows Z (z̃ = fl(√ŝ) x, S ≥ Σ‖z̃‖²) by one ``dsyrk``, ε_M grown as in
        :meth:`fold_pending` (the bound holds for any k)."""
        assert self.M is not None
        k = Z.shape[0]
        # Zᵀ is a Fortran-contiguous d × k view: C ← C − (Zᵀ)(Zᵀ)ᵀ without copying the rows
        self.M = dsyrk(-1.0, Z.T, beta=1.0, c=self.M, trans=0, lower=0, overwrite_c=1)
        self.eps_M += gamma_k(k + 1) * (self.fro_M + 2.0 * self.eps_M + S) + 5 * U * S

    def refactorize(self) -> str:
        """Refactorise the maintained matrix M (O(d³), no data pass) into the preconditioner; returns "factor"."""
        assert self.M is not None
        self.fold_pending()
        self.factor = precond_factor(self.M)
        self.refactorizations += 1
        self.iter_cost = 0.0
        return "factor"

    def reset(self) -> None:
        """Forget everything tied to a model state (after retraining or on misuse). Counters are kept."""
        self.factor = None
        self._clear_state()

    def matches(self, X: np.ndarray, w: np.ndarray, active: np.ndarray, kind: str) -> bool:
        """Whether the cache was last advanced, by a ``kind`` solver, to exactly these weights, rows and data array
        (the same object: a weak reference, so a new array at a recycled address does not match)."""
        return (self.kind == kind and self._key is not None and self._xref is not None and self._xref() is X
                and self._key == _sync_key(X, w, active))

    def _mark_dirty(self) -> None:
        self._key = None

    def _advance(self, X: np.ndarray, w: np.ndarray, active: np.ndarray) -> None:
        self._xref = weakref.ref(X)
        self._key = _sync_key(X, w, active)

    def __getstate__(self) -> dict[str, Any]:
        # a copied or unpickled cache is not tied to any data array: it rebuilds at its first use
        state = self.__dict__.copy()
        state["_xref"] = None
        state["_key"] = None
        state["buf"] = None
        state["shared"] = None
        return state


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


def _margins(X: np.ndarray, w: np.ndarray, rho: float) -> tuple[np.ndarray, float]:
    """Margins z = fl(X w) computed afresh and η ≥ maxᵢ |z̃ᵢ − xᵢᵀw| (Higham: γ_{d+2} ρ ‖w‖ for rows ‖xᵢ‖ ≤ ρ)."""
    return X @ w, gamma_k(X.shape[1] + 2) * rho * vnorm(w)


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
    wn = vnorm(w)
    d1_abs = float(np.max(np.abs(d1), initial=0.0))
    # margins: ≤ γ_d ρ ‖w‖ each; ℓ' Lipschitz with ℓ'' ≤ lip1; evaluation ≤ 8u(1 + |ℓ'|); Xᵀ(·) and the sum.
    d1_err = lip1 * gamma_k(d + 1) * rho * wn + 8 * U * (1.0 + d1_abs)
    err = (m * rho * d1_err + gamma_k(m + 1) * math.sqrt(m) * rho * vnorm(d1)
           + 3 * U * m * lam * wn + 2 * U * vnorm(Delta))
    return Delta, 2.0 * err


def _policy_due(cfg: CertifiedRemoval, cache: NewtonCache, refresh_cost: float) -> bool:
    """Whether a data-pass refresh is due now (rent-or-buy for ``"auto"``, every k removals for an int)."""
    if cfg.refresh == "never":
        return False
    if isinstance(cfg.refresh, int):
        return cache.removals_since_refresh >= cfg.refresh
    return cache.excess_cost >= refresh_cost


def cho_solve(F: tuple[np.ndarray, bool | None], b: np.ndarray, check_finite: bool = False) -> np.ndarray:
    """Solve with a Cholesky factor (from :func:`scipy.linalg.cho_factor`) by two BLAS triangular solves (the
    LAPACK wrapper's overhead is significant at O(d²) per removal), or apply the explicit float32 inverse of
    :func:`precond_factor` (``lower`` is ``None``) by one symmetric matrix-vector product. Used only for
    preconditioners and initial guesses: certificates never rely on the accuracy of this solve."""
    c, lower = F
    if lower is None:
        scale = float(np.max(np.abs(b), initial=0.0))  # the product is linear: scale into float32's range
        if scale == 0.0 or not np.isfinite(scale):
            return np.zeros_like(b) if scale == 0.0 else np.full_like(b, np.nan)
        x = ssymv(1.0, c, np.asarray(b / scale, dtype=np.float32), lower=0)
        return np.asarray(x, dtype=np.float64) * scale
    if lower:
        return np.asarray(dtrsv(c, dtrsv(c, b, lower=1, trans=0), lower=1, trans=1))
    return np.asarray(dtrsv(c, dtrsv(c, b, lower=0, trans=1), lower=0, trans=0))


def precond_factor(M: np.ndarray) -> tuple[np.ndarray, None]:
    """The inverse of the symmetric matrix in the upper triangle of M (Cholesky factorisation, then LAPACK
    ``potri``), upper triangle stored in float32: applying it costs one ``ssymv``, a quarter of the memory traffic
    of two double-precision triangular solves. For use as a preconditioner only. Should the factorisation fail (M
    numerically indefinite after many downdates), a growing multiple of the identity is added: any SPD matrix is
    a valid preconditioner, and certificates never depend on it."""
    jitter = 0.0
    scale = float(np.max(np.abs(np.diag(M)), initial=1.0))
    for _ in range(8):
        try:
            A = M if jitter == 0.0 else M + jitter * np.eye(M.shape[0])
            c, _ = cho_factor(A, lower=False, check_finite=False)
            inv, info = dpotri(c, lower=0, overwrite_c=1)
            if info != 0:
                raise LinAlgError(f"potri failed (info = {info}).")
            return np.asfortranarray(inv, dtype=np.float32), None
        except LinAlgError:
            jitter = max(jitter * 100.0, 1e-10 * scale)
    raise LinAlgError("The anchor matrix could not be factorised even with a diagonal shift.")


def _mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A x for the symmetric matrix stored in the upper triangle of A."""
    return np.asarray(dsymv(1.0, A, x, lower=0))


def _dense_pcg(mv: Callable[[np.ndarray], np.ndarray], F: tuple[np.ndarray, bool | None], rhs: np.ndarray,
               v: np.ndarray, e: np.ndarray, tol: float, max_it: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Preconditioned CG on M v = rhs from v (e = M v − rhs; ``mv`` applies M), preconditioner F⁻¹; O(d²) per
    iteration.

    Returns (v, e, iterations); ``e`` is the recursively updated residual (callers that certify it recompute it).
    """
    it = 0
    rz_old = 0.0
    p = np.zeros_like(v)
    while it < max_it and vnorm(e) > tol:
        r = -e
        zc = cho_solve(F, r, check_finite=False)
        rz = float(r @ zc)
        p = zc if it == 0 else zc + (rz / rz_old) * p
        rz_old = rz
        q = mv(p)
        pq = float(p @ q)
        if not pq > 0.0:
            break
        alpha = rz / pq
        v = v + alpha * p
        e = e + alpha * q
        it += 1
    return v, e, it


def _gram_single(X: np.ndarray, r: np.ndarray, block: int = 2048) -> np.ndarray:
    """≈ Xᵀ diag(r²) X (upper triangle, float64) from single-precision blocks: for preconditioners only."""
    d = X.shape[1]
    M = np.zeros((d, d))
    for i in range(0, X.shape[0], block):
        Zb = (r[i:i + block, None] * X[i:i + block]).astype(np.float32)
        M += ssyrk(1.0, Zb.T, trans=0, lower=0)
    return M


def build_anchor(cfg: CertifiedRemoval, w: np.ndarray, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                 cache: NewtonCache, *, with_gram: bool | None, gram: np.ndarray | None = None,
                 margins: np.ndarray | None = None) -> None:
    """Form the anchor system at w_a = w on the rows ``active`` (one O(n d²) pass) and factorise it.

    M̃ = fl(Zᵀ Z) + λ n′ I with Z = √ŝ ⊙ X′, ŝᵢ = fl(ℓ''(fl(xᵢᵀ w_a))) (stored: row i is later downdated with
    exactly this value); with ``with_gram`` also G̃ = fl(X′ᵀ X′) (or ``gram``, a previously computed fl(X′ᵀX′) for
    exactly these rows); ``with_gram=None`` keeps the maintained G̃ (it does not depend on w).
    Error bounds (docs/tighter_bounds.md §7): ‖M̃ − M̂‖_F ≤ (γ_n + 6u) max ŝ ‖X′‖_F² + 2u(λ n′ √d + ‖M̃‖_F),
    with M̂ the exact matrix for the stored ŝ; ‖G̃ − X′ᵀX′‖_F ≤ γ_n ‖X′‖_F²;
    |ŝᵢ − ℓ''(xᵢᵀw_a)| ≤ γ γ_d ρ ‖w_a‖ + 8u(1 + max ŝ). Other cache fields (margins, counters) are kept.
    ``margins``: fl(X w) for all rows of X, freshly computed (:func:`_margins`, the error assumed above), to save
    the pass that would compute it again.
    """
    loss, lam = cfg.loss_, cfg.lam
    n_rows, d = X.shape
    n_act = int(np.count_nonzero(active))
    rho = _row_norm_max(cfg, X, cache)
    all_rows = bool(active.all())
    Xa = X if all_rows else X[active]
    if margins is None:
        z = Xa @ w
    else:
        z = margins if all_rows else margins[active]
    s_act = loss.d2(z, y if all_rows else y[active])
    s_hat = np.zeros(n_rows)
    s_hat[active] = s_act
    if with_gram is False and cfg.solver in ("refine", "pcg") and loss.gamma != 0.0:
        # M is only the preconditioner and initial guess of the exact-Hessian solvers (their solve error is
        # measured): a single-precision product (rows ‖xᵢ‖ ≤ 1, ŝ ≤ γ-bounded curvature: no overflow) at half the time
        M = _gram_single(Xa, np.sqrt(s_act))
    else:
        Zt = (np.sqrt(s_act)[:, None] * Xa).T  # d × n′, a Fortran-contiguous view: no copy for BLAS
        M = dsyrk(1.0, Zt, trans=0, lower=0)
    M[np.diag_indices(d)] += lam * n_act
    fro2 = float(np.einsum("ij,ij->", Xa, Xa))
    s_max = float(np.max(s_act, initial=0.0))
    gn = gamma_k(n_act + 2)
    cache.w_anchor = np.array(w, dtype=np.float64, copy=True)
    cache.s_hat = s_hat
    cache.M = np.asfortranarray(M)
    cache.fro_M = _fro_sym_upper(cache.M) * (1.0 + 1e-10)
    cache.eps_M = 1.01 * (gn + 6 * U) * s_max * fro2 + 2 * U * (lam * n_act * math.sqrt(d) + cache.fro_M)
    cache.tau = float(loss.gamma) * gamma_k(d + 2) * rho * vnorm(w) + 8 * U * (1.0 + s_max)
    cache.pend_k, cache.pend_S = 0, 0.0
    if with_gram:
        G = dsyrk(1.0, Xa.T, trans=0, lower=0) if gram is None else np.array(gram, dtype=np.float64, copy=True)
        cache.G = np.asfortranarray(G)
        cache.fro_G = _fro_sym_upper(cache.G) * (1.0 + 1e-10)
        cache.eps_G = 1.01 * gn * fro2
    elif with_gram is not None:
        cache.G = None
    # anchor: G̃ (w − w_a) = 0 at the anchor itself, exactly
    cache.h_G, cache.h_err = (np.zeros(d), 0.0) if cache.G is not None else (None, math.inf)
    cache.factor = precond_factor(cache.M)
    cache.refreshes += 1
    cache.excess_cost = 0.0
    cache.iter_cost = 0.0
    cache.removals_since_refresh = 0


def _downdate(cache: NewtonCache, X: np.ndarray, idx: np.ndarray, lam: float, *, track: bool) -> None:
    """Remove rows ``idx`` from the anchor system: M ← M − Σ ŝⱼ xⱼxⱼᵀ − λ m I, reading only those rows. Without
    ``track`` the rank-one updates of the upper triangle are applied at once (O(d²) per row). With ``track``
    (``anchor``, ``onepass``) the rows √ŝⱼ xⱼ are queued and folded into M by one rank-k update every
    ``fold_every`` rows (:meth:`NewtonCache.fold_pending`); :func:`_mv_maintained` subtracts the queued rows
    explicitly until then. The λ m I term is applied at once, with ε_M grown by its rounding. The Gram matrix G is
    *not* downdated: it only enters upper bounds on ‖X′v‖² = vᵀX′ᵀX′v ≤ vᵀGv, and removing rows only subtracts
    the PSD terms xⱼxⱼᵀ."""
    assert cache.M is not None and cache.s_hat is not None
    d = cache.M.shape[0]
    if track and (cache.pend_Z is None or cache.pend_Z.shape != (max(cache.fold_every, 1), d)):
        cache.fold_pending()  # queued rows first (fold_every may have changed): the new queue starts empty
        cache.pend_Z = np.empty((max(cache.fold_every, 1), d))
    m = int(idx.size)
    if m > 1 and (not track or m >= cache.fold_every):
        # a batch (Eq. 6): one rank-m update instead of m rank-one updates or m/k queue folds (O(m d²) flops at
        # BLAS-3 speed); with ``track`` the queued rows are folded first and ε_M grows as for a fold of m rows
        s_b = cache.s_hat[idx]
        Z = np.sqrt(s_b)[:, None] * X[idx]  # z̃ⱼ = fl(√ŝⱼ) xⱼ, the rows the queue would hold
        if track:
            cache.fold_pending()
            # S ≥ Σ‖z̃ⱼ‖²: each computed square norm within γ_{d+2}, their sum within γ_{m+1} (non-negative terms)
            S = float(np.sum(np.einsum("ij,ij->i", Z, Z))) * (1.0 + gamma_k(d + 2)) * (1.0 + gamma_k(m + 1))
            cache._fold_rows(Z, S)
        else:  # pcg/refine: M is only a preconditioner (the solve error is measured), single precision will do
            Z32 = Z.astype(np.float32)
            cache.M += ssyrk(-1.0, Z32.T, trans=0, lower=0)  # upper triangle, as stored
        cache.s_hat[idx] = 0.0
        idx = idx[:0]
    M = cache.M
    for j in idx:
        sj = float(cache.s_hat[j])
        if sj != 0.0:
            xj = np.ascontiguousarray(X[j])
            if not track:
                M = dsyr(-sj, xj, lower=0, a=M, overwrite_a=1)
            else:
                if cache.pend_k >= cache.fold_every:
                    cache.M = M
                    cache.fold_pending()
                    M = cache.M
                assert cache.pend_Z is not None
                zj = np.multiply(xj, math.sqrt(sj), out=cache.pend_Z[cache.pend_k])
                cache.pend_k += 1
                cache.pend_S += float(zj @ zj) * (1.0 + gamma_k(d + 2))
        cache.s_hat[j] = 0.0
    M[np.diag_indices(d)] -= lam * m
    if track:
        cache.eps_M += U * (2.0 * (cache.fro_M + 2.0 * cache.eps_M) + 2.0 * lam * m * math.sqrt(d))
    cache.M = M


def _mv_maintained(cache: NewtonCache, v: np.ndarray) -> tuple[np.ndarray, float]:
    """M v for the maintained anchor matrix, queued rows included: fl(M̃v) − Zᵀ(Zv), and a bound on the error of
    the correction against Σ ŝⱼxⱼ(xⱼᵀv) plus the subtraction's rounding (the product with the stored M̃ is bounded
    by the caller: γ_{d+2}‖M̃‖_F‖v‖ + ε_M‖v‖). Zv has entries within γ_d‖zⱼ‖‖v‖, Zᵀt within γ_k‖|Z|ᵀ|t|‖ ≤
    γ_k‖Z‖_F‖t‖, and z̃z̃ᵀ vs ŝxxᵀ within 5u ŝ‖x‖²: with S ≥ ‖Z‖_F², ≤ (γ_{d+2} + γ_{k+2} + 6u) S ‖v‖."""
    assert cache.M is not None
    q = _mv(cache.M, v)
    k = cache.pend_k
    if k == 0 or cache.pend_Z is None:
        return q, 0.0
    Z = cache.pend_Z[:k]
    corr = Z.T @ (Z @ v)
    q -= corr
    d = v.shape[0]
    err = ((gamma_k(d + 2) + gamma_k(k + 2) + 6 * U) * cache.pend_S * vnorm(v) * (1.0 + 4 * U)
           + 1.01 * U * vnorm(q))
    return q, err


def _carry_start(cfg: CertifiedRemoval, state: ModelState, cache: NewtonCache | None, synced: bool,
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


def _carry_finish(cache: NewtonCache | None, e: np.ndarray, e_old: np.ndarray | None, eps_old: float, S_old: float,
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


class _Buffers:
    """Preallocated n-vectors for the per-removal O(n) work. Fresh 100 kB temporaries on every removal made glibc
    trim and re-fault heap pages: about 0.3 ms per removal at n = 12,000 (measured), as much as the float32 pass."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.f = [np.empty(n) for _ in range(6)]  # f[0:4]: _remainder's; f[4:6]: the caller's
        self.a = np.empty(n)
        self.a32 = np.empty(n, dtype=np.float32)


def _buffers(cache: NewtonCache | None, n: int) -> _Buffers:
    if cache is None:
        return _Buffers(n)
    if cache.buf is None or cache.buf.n != n:
        cache.buf = _Buffers(n)
    return cache.buf


def _curvature(loss: Any, z: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """ℓ''(z, y) into ``out`` (without a temporary for the logistic loss)."""
    if isinstance(loss, LogisticLoss):
        return loss.d2(z, y, out=out)
    out[:] = loss.d2(z, y)
    return out


def _remainder(cfg: CertifiedRemoval, keep: np.ndarray, z: np.ndarray, eta: float, a: np.ndarray, zeta: float,
               v_ub: float, x_norm: float, rho: float, buf: _Buffers | None = None) -> tuple[float, dict[str, float]]:
    """Bound on the Taylor remainder ‖r‖ of a step with computed margins ã ≈ X v (|ãᵢ − xᵢᵀv| ≤ ζ) from margins
    z̃ ≈ X w (|z̃ᵢ − xᵢᵀw| ≤ η): Cor. 1/2 in paper mode, Theorem 1 with local Lipschitz constants in tight mode
    (docs/tighter_bounds.md §2–3). Γᵢ bounds |ℓ'''| on [cᵢ − rᵢ, cᵢ + rᵢ] with the midpoint cᵢ = z̃ᵢ + ãᵢ/2 and the
    radius rᵢ = |ãᵢ|/2 + sᵢ, sᵢ = (η + ζ)(1 + 8u) + 5u(|z̃ᵢ| + |ãᵢ|): the interval between xᵢᵀw and xᵢᵀ(w + v),
    widened by the errors of z̃ and ã and the roundings of forming cᵢ, rᵢ and |cᵢ| ± rᵢ; āᵢ = |ãᵢ| + ζ on D′, 0
    elsewhere. Returns (bound, candidates).
    ``buf`` (n-vectors, not aliasing the inputs) avoids temporaries."""
    loss = cfg.loss_
    b0, b1, b2, b3 = (buf if buf is not None else _Buffers(a.size)).f[:4]
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


# -- solvers with the exact Hessian (cholesky, refine, pcg) --------------------------------------------------------


def exact_hessian_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                       idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton step with the exact Hessian at w: measured solve error + remainder bound (module docstring).

    ``refine``/``pcg``: the initial guess solves the downdated anchor system M v = Δ by a few O(d²) PCG
    iterations (preconditioner: the cached factor F); the outer iterations (iterative refinement or PCG on the exact
    H, preconditioner F, one Hessian-vector product = two data passes each) run only while the *measured* solve
    error exceeds ``budget_share`` of the remainder bound.
    """
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
    delta_norm = vnorm(Delta)

    active_before = keep.copy()
    active_before[idx] = True
    synced = cache is not None and cache.matches(X, w, active_before, "exact") and cache.z is not None
    if synced:
        assert cache is not None and cache.z is not None
        z, eta = cache.z, cache.eta
    else:
        z, eta = _margins(X, w, rho)
        passes += 1
        if cache is not None:
            if cache.kind != "exact" or (cache.factor is not None and cache.factor[0].shape != (d, d)):
                cache.reset()
            cache.kind = "exact"
            cache.M = None  # the downdated anchor system is only trusted in sync; F stays as a preconditioner
            cache.s_hat = None
    if cache is not None:
        cache._mark_dirty()
    # tight accounting: solve H v = Δ − ē, correcting the carried measured error ē (docs/tighter_bounds.md §4)
    e_old, eps_old, S_old = _carry_start(cfg, state, cache, synced, d)
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
        ap = X @ p
        g = s * ap
        q = X.T @ g + lam_n * p
        p_norm = vnorm(p)
        ap_err = gd * rho * p_norm * sqrt_n  # ‖ã_p − X′p‖ on the rows of D′ (others carry s = 0)
        ap_ub = vnorm(ap[keep]) + ap_err
        g_norm = vnorm(g)
        g_err = tau_s * ap_ub + s_sup * ap_err + U * g_norm
        err = x_norm * g_err + gn * x_fro * g_norm + 2 * U * (lam_n * p_norm + vnorm(q))
        return ap, q, err

    buf = _buffers(cache, n_rows)

    def remainder(a: np.ndarray, zeta: float, v_ub: float) -> tuple[float, dict[str, float]]:
        return _remainder(cfg, keep, z, eta, a, zeta, v_ub, x_norm, rho, buf)

    # -- preconditioner F and initial guess v₀
    refresh_cost = cm.hessian(n_new, d) + cm.cholesky(d)
    fresh = False
    if cfg.solver == "cholesky" or cache is None:
        F = cho_factor(obj.hessian(w, X, y, loss, lam, mask=keep), check_finite=False)
        passes += d / 4.0
        fresh = True
    else:
        if cache.factor is None or _policy_due(cfg, cache, refresh_cost):
            build_anchor(cfg, w, X, y, keep, cache, with_gram=False)  # the exact Hessian on D′ at w
            refreshed = "hessian"
            passes += d / 4.0
            fresh = True
        elif cache.M is not None:
            _downdate(cache, X, idx, lam, track=False)
            if cache.iter_cost >= cm.cholesky(d):  # stale factor: refactorise the maintained M (no data pass)
                refreshed = cache.refactorize()
        assert cache.factor is not None
        F = cache.factor
    max_it = 0 if cfg.solver == "cholesky" or cache is None else cache.max_sweeps
    rtol = cache.rtol if cache is not None else 1e-12
    share = cache.budget_share if cache is not None else 1e-2

    carry_target = (cache.carry_share * cfg.budget) if (cache is not None and e_old is not None) else 0.0
    v = cho_solve(F, rhs, check_finite=False)
    if not fresh and cache is not None and cache.M is not None:
        e_M = _mv(cache.M, v) - rhs
        tol_in = max(rtol * delta_norm, 0.1 * max(share * cache.last_remainder, carry_target))
        M = cache.M
        v, _, k_in = _dense_pcg(lambda p: _mv(M, p), F, rhs, v, e_M, tol_in, 4 * cache.max_sweeps)
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
    if (cache is not None and not fresh and vnorm(e) > target and cfg.refresh != "never"):
        # the preconditioner has gone stale: rebuild the anchor system at the current point and solve again
        build_anchor(cfg, w, X, y, keep, cache, with_gram=False)
        refreshed = "hessian"
        passes += d / 4.0
        assert cache.factor is not None
        F = cache.factor
        v, a, e, err_e, w_new, wn_new, zeta, rem_c, it2, target = solve_from(cho_solve(F, rhs, check_finite=False), 0)
        passes += 2
        it += it2
    rem, cands = rem_c
    if cache is not None:
        cache.sweeps_total += it
        if cfg.solver != "cholesky":
            cache.removals_since_refresh += 1
            cache.excess_cost += it * 2 * cm.data_pass(n_rows, d)
        cache.last_remainder = rem

    err_e = 2.0 * (err_e + H_ub * 1.01 * U * wn_new)
    acc, carried, e_norm, err_step = _carry_finish(cache, e, e_old, eps_old, S_old, err_e, rem)
    step = rem + e_norm + err_step

    if cache is not None:  # advance the margins to w_new: X′w_new = z + a up to the tracked error
        z_new = z + a
        cache.z = z_new
        cache.eta = eta + zeta + 1.01 * U * float(np.max(np.abs(z_new), initial=0.0))
        cache._advance(X, w_new, keep)
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=0.0, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)


# -- the no-data-pass solver (anchor) -------------------------------------------------------------------------------


def _fro_sym_upper(A: np.ndarray) -> float:
    """‖A‖_F of the symmetric matrix whose upper triangle is stored in A."""
    up = np.triu(A)
    dg = np.diag(A)
    return math.sqrt(max(2.0 * float(np.einsum("ij,ij->", up, up)) - float(dg @ dg), 0.0))


def _rows_before(keep: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The active-row mask before removing ``idx`` from it (``keep`` is the mask after)."""
    before = keep.copy()
    before[idx] = True
    return before


def _solve_maintained(cache: NewtonCache, rhs: np.ndarray, v: np.ndarray, e: np.ndarray,
                      target: float, d: int) -> tuple[np.ndarray, np.ndarray, int, str]:
    """PCG on the maintained system M v = rhs (O(d²) per iteration, preconditioner: the cached factor) until
    ‖Mv − rhs‖ ≤ target; once, if the cap is hit, refactorise M (O(d³), no data pass) and solve again.
    Returns (v, e, iterations, "factor" if refactorised else "")."""
    F = cache.factor
    assert F is not None
    it, refac = 0, ""
    def mv(p: np.ndarray) -> np.ndarray:
        return _mv_maintained(cache, p)[0]

    for attempt in range(2):
        v, e, k = _dense_pcg(mv, F, rhs, v, e, target, cache.max_sweeps)
        it += k
        cache.iter_cost += k * 2 * cache.cost_model.dense_op(d)
        if vnorm(e) <= target or attempt == 1:
            break
        refac = cache.refactorize()  # stale preconditioner
        F = cache.factor
        assert F is not None
        v = cho_solve(F, rhs, check_finite=False)
        e = mv(v) - rhs
    cache.sweeps_total += it
    return v, e, it, refac


def anchor_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Newton-type step with the maintained anchor Hessian, certified without a pass over the data."""
    loss, lam, w = cfg.loss_, cfg.lam, state.w
    n_rows, d = X.shape
    n_new, m = int(np.count_nonzero(keep)), int(idx.size)
    cache = NewtonCache() if cache is None else cache
    cm, passes, refreshed = cache.cost_model, 0.0, ""
    active_before = _rows_before(keep, idx)
    anchor_cost = cm.hessian(n_rows, d) + cm.cholesky(d) + cm.data_pass(n_rows, d)
    synced = cache.matches(X, w, active_before, "anchor") and cache.G is not None
    if not synced or _policy_due(cfg, cache, anchor_cost):
        if not synced:
            cache.reset()
            cache.kind = "anchor"
        # a re-anchor keeps the Gram matrix (independent of w) and the carried accounting
        build_anchor(cfg, w, X, y, active_before, cache, with_gram=True if not synced else None)
        refreshed = "anchor"
        passes += d / 2.0
    elif cache.iter_cost >= cm.cholesky(d):
        refreshed = cache.refactorize()
    cache._mark_dirty()
    assert cache.w_anchor is not None
    rho = _row_norm_max(cfg, X, cache)
    x_norm = _x_norm(state, n_rows, rho)

    Delta, err_Delta = _removed_gradient(cfg, w, X[idx], y[idx], rho)
    delta_norm = vnorm(Delta)
    e_old, eps_old, S_old = _carry_start(cfg, state, cache, synced, d)
    rhs = Delta if e_old is None else Delta - e_old
    err_rhs = err_Delta + (0.0 if e_old is None else U * vnorm(rhs))
    _downdate(cache, X, idx, lam, track=True)
    G = cache.G
    assert G is not None
    fro_G = cache.fro_G + 2.0 * cache.eps_G

    gamma = float(loss.gamma) if cfg.bound == "paper" else float(getattr(loss, "gamma_exact", loss.gamma))
    dw = w - cache.w_anchor
    dw_norm = vnorm(dw) * (1.0 + 4 * U)
    gq = gamma_k(d + 2) * fro_G + cache.eps_G
    h = cache.h_G  # ≈ G̃ (w − w_a), carried from step to step (no product with G here)
    assert h is not None
    if dw_norm > 0.0:
        # dwᵀG̃dw = dwᵀh̃ + dwᵀ(G̃dw − h̃), ‖G̃dw − h̃‖ ≤ h_err + ‖G̃‖ ‖dw − (w − w_a)‖; the dot's rounding; G̃ vs G
        c_sq = (float(dw @ h) + gamma_k(d + 2) * dw_norm * vnorm(h)
                + dw_norm * (cache.h_err + 2 * U * fro_G * dw_norm) + cache.eps_G * dw_norm**2)
        c_norm = min(math.sqrt(max(c_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 2 * U * dw_norm, x_norm * dw_norm)
    else:
        c_norm = 0.0

    def terms(v: np.ndarray, w_new_norm: float) -> tuple[float, float, float, dict[str, float], np.ndarray]:
        """The step's bounds for v, and fl(G̃v) (it also advances the carried h̃)."""
        v_ub = vnorm(v) + 1.01 * U * w_new_norm
        gv = _mv(G, v)
        a_sq = float(v @ gv) + gq * v_ub**2
        a_norm = min(math.sqrt(max(a_sq, 0.0)) * (1.0 + 4 * U) + x_norm * 1.01 * U * w_new_norm, x_norm * v_ub)
        mis, rem, cands = anchor_bounds(gamma=gamma, tau=cache.tau, x_norm=x_norm, row_norm=rho, n_rows=n_new,
                                        v_norm=v_ub, a_norm=a_norm, dw_norm=dw_norm, c_norm=c_norm, mode=cfg.bound)
        return mis, rem, v_ub, cands, gv

    F = cache.factor
    assert F is not None
    v = cho_solve(F, rhs, check_finite=False)
    q, err_q = _mv_maintained(cache, v)
    e = q - rhs
    w_new = w + v
    mis, rem, v_ub, cands, gv = terms(v, vnorm(w_new))
    target = max(cache.rtol * delta_norm, cache.budget_share * (mis + rem))
    if e_old is not None:  # tight accounting: the measured error is carried and corrected, not accumulated
        target = max(target, cache.carry_share * cfg.budget)
    v, e, it, refac = _solve_maintained(cache, rhs, v, e, target, d)
    refreshed = refreshed or refac
    if it or refac:  # v changed (iterations, or a restart from a refactorised preconditioner)
        w_new = w + v
        q, err_q = _mv_maintained(cache, v)  # measured directly for the final v
        e = q - rhs
        mis, rem, v_ub, cands, gv = terms(v, vnorm(w_new))
    wn_new = vnorm(w_new)
    e_norm = vnorm(e)
    vn = vnorm(v)
    # after the solve: a refactorisation in it folds the queued rows and grows ε_M
    fro_M = cache.fro_M + 2.0 * cache.eps_M  # ≥ ‖M̃‖_F and ≥ ‖M̂‖₂ (the exact matrices only lose PSD terms)
    # ‖M̂ v_true − rhs‖ vs ‖ẽ‖: symv/subtraction rounding + ‖M̃ − M̂‖ ‖v‖ + ‖M̂‖ ‖v_true − ṽ‖ + error of rhs
    # + the queued rows' correction (_mv_maintained)
    err = 2.0 * (U * e_norm + gamma_k(d + 2) * fro_M * vn + cache.eps_M * v_ub + fro_M * 1.01 * U * wn_new
                 + err_rhs + err_q)
    acc, carried, e_norm, err_step = _carry_finish(cache, e, e_old, eps_old, S_old, err, mis + rem)
    step = e_norm + err_step + mis + rem
    # h̃ ← fl(h̃ + fl(G̃v)) tracks G̃(w_new − w_a): + the symv's rounding, G̃(v − v_true) and the addition's rounding
    h += gv
    cache.h_err += (gamma_k(d + 2) * fro_G * vn + fro_G * 1.01 * U * wn_new
                    + 1.01 * U * vnorm(h))

    cache._advance(X, w_new, keep)
    cache.removals_since_refresh += 1
    if cfg.refresh == "auto" and loss.gamma != 0.0 and cfg.budget > 0.0:
        # rent-or-buy: the budget spent on the anchor mismatch, priced at one retraining per budget ε′
        kappa = cm.training(n_rows, d, state.train_iterations) / cfg.budget
        cache.excess_cost += kappa * mis
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(w_new=w_new, step_bound=step, solve_error=e_norm, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=mis, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)


# -- one single-precision pass per removal (onepass) ----------------------------------------------------------------

U32 = 2.0**-24  # unit roundoff of IEEE single precision
TINY32 = 2.0**-125  # covers underflow (gradual or flush-to-zero) of one single-precision product or conversion


def _gamma32(k: int) -> float:
    """Higham's γ_k for single precision."""
    return k * U32 / (1.0 - k * U32)


def column_groups(X: np.ndarray) -> np.ndarray | None:
    """Exactly identical columns of X (bit for bit): the group index of every column (groups numbered in order of
    their first column), or ``None`` if all columns differ. Columns are compared by a BLAKE2 digest and then
    element by element, so a hash collision cannot merge different columns. Identical columns contribute
    xᵢⱼ(Σ_{j∈group} vⱼ) to X v: the single-precision copy keeps one column per group (on MNIST 3 vs 8, 624 of 784:
    the always-blank pixels)."""
    n, d = X.shape
    seen: dict[bytes, list[int]] = {}
    groups = np.empty(d, dtype=np.intp)
    reps: list[int] = []
    for j in range(d):
        col = np.ascontiguousarray(X[:, j])
        key = hashlib.blake2b(col.tobytes(), digest_size=16).digest()
        for k in seen.get(key, []):
            if np.array_equal(col.view(np.uint8), np.ascontiguousarray(X[:, reps[k]]).view(np.uint8)):
                groups[j] = k
                break
        else:
            seen.setdefault(key, []).append(len(reps))
            groups[j] = len(reps)
            reps.append(j)
    return None if len(reps) == d else groups


def _representatives(groups: np.ndarray) -> np.ndarray:
    """The first column of every group of :func:`column_groups`."""
    _, first = np.unique(groups, return_index=True)
    return first


def single_pass_margins(X32: np.ndarray, v: np.ndarray, rho: float, buf: _Buffers | None = None,
                        groups: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """ã ≈ X v from the single-precision copy X32 = fl₃₂(X), and ζ ≥ maxᵢ |ãᵢ − xᵢᵀv| (rows with ‖xᵢ‖ ≤ ρ).

    v is scaled by a power of two s (exact) into [−1, 1] and rounded to single precision; then, per row,
    |xᵢᵀv − s·fl₃₂(x̂ᵢᵀv̂)| ≤ s(|xᵢᵀ(v/s − v̂)| + |(xᵢ − x̂ᵢ)ᵀv̂| + γ₃₂_d Σⱼ|x̂ᵢⱼ||v̂ⱼ| + d·2⁻¹²⁵)
    ≤ ρ‖v‖(2u₃₂ + γ₃₂_d)(1 + u₃₂)² + s·2⁻¹²⁵(2d + ρ√d) (+ 2⁻¹⁰⁷⁰ for the product by s, which may be subnormal),
    the ρ√d ≥ Σⱼ|xᵢⱼ| for the underflow of x̂ᵢⱼ, with
    |x̂ᵢⱼ − xᵢⱼ| ≤ u₃₂|xᵢⱼ| + 2⁻¹²⁵, |v̂ⱼ − vⱼ/s| ≤ u₃₂|vⱼ/s| + 2⁻¹²⁵ (underflow, gradual or flushed to zero)
    (Higham 2002, §3.1, any summation order, with or without fused multiply-add). Returns (ã, ζ); with ``buf``,
    ã is ``buf.a`` (overwritten by the next call).

    With ``groups`` (:func:`column_groups`; X32 then holds one column per group), v is first summed per group in
    double precision, ṽ_k = fl(Σ_{j∈k} vⱼ), within γ_{d} Σ_{j∈k}|vⱼ|; as xᵢⱼ is the same for all j of a group,
    |xᵢᵀv − Σ_k xᵢₖṽ_k| ≤ γ_d Σⱼ|xᵢⱼ||vⱼ| ≤ γ_d ρ‖v‖, and the single-precision part is the bound above with d the
    number of groups and Σ_k|xᵢₖ||ṽ_k| ≤ (1 + γ_d) ρ‖v‖.
    """
    d = v.shape[0]
    vn_full = vnorm(v)
    g64 = 0.0
    if groups is not None:
        d_u = X32.shape[1]
        v = np.bincount(groups, weights=v, minlength=d_u)
        g64 = gamma_k(d + 2)
        d = d_u
    vmax = float(np.max(np.abs(v), initial=0.0))
    if vmax == 0.0:
        return np.zeros(X32.shape[0]), rho * vn_full * g64 * (1.0 + 4 * U)
    s = math.ldexp(1.0, math.frexp(vmax)[1])  # a power of two ≥ max |vⱼ|: v / s is exact
    vs = v / s
    if buf is None:
        a = (X32 @ vs.astype(np.float32)).astype(np.float64) * s
    else:
        np.dot(X32, vs.astype(np.float32), out=buf.a32)
        a = np.multiply(buf.a32, s, out=buf.a, dtype=np.float64)
    vn = vn_full  # vnorm does not underflow, even for tiny v
    zeta = (rho * vn * ((2.0 * U32 + _gamma32(d + 2)) * (1.0 + U32) ** 2 * (1.0 + g64) + g64) * (1.0 + 4 * U)
            + s * TINY32 * (2.0 * d + rho * math.sqrt(d)) + 2.0**-1070)  # last: s·fl₃₂(·) may be subnormal
    return a, zeta


def single_pass_transpose(X32: np.ndarray, p: np.ndarray, rho: float, block: int = 2048,
                          groups: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """q̃ ≈ Xᵀp from the single-precision copy X32 = fl₃₂(X) (rows ‖xᵢ‖ ≤ ρ), and a bound on ‖q̃ − Xᵀp‖₂.

    p is scaled by a power of two s ≥ max |pᵢ| (exact) and rounded to single precision; each block of ``block``
    rows is reduced in single precision and the block sums are added in double precision. As in
    :func:`single_pass_margins`, per column j and block B: |Σ_B xᵢⱼpᵢ − s fl₃₂(Σ_B x̂ᵢⱼp̂ᵢ)| ≤
    (2u₃₂ + γ₃₂_|B|)(1 + u₃₂)² Σ_B |xᵢⱼ||pᵢ| + 2⁻¹²⁵ (Σ_B |pᵢ| + s Σ_B |x̂ᵢⱼ| + s|B|); adding the block sums costs
    γ_{#blocks+1} Σᵢ |xᵢⱼ||pᵢ| (1 + γ₃₂_|B|)(1 + u₃₂)² (the block sums' magnitudes). Over the columns,
    ‖ |X|ᵀ|p| ‖₂ ≤ ‖X‖_F ‖p‖ ≤ √n ρ ‖p‖, and with s ≤ 2‖p‖
    the underflow terms are at most 2⁻¹²⁵ ‖p‖ (√(dn) + 2 n √d + 3 n ρ), plus √d 2⁻¹⁰⁷⁰ for the product by s,
    which may be subnormal in double precision (found by the slow property test). With ``groups`` (X32 holds one column
    per group of identical columns) the entries of a group are equal and computed once: the bound is the same,
    for the full X.
    """
    n = X32.shape[0]
    d = X32.shape[1] if groups is None else groups.shape[0]
    pmax = float(np.max(np.abs(p), initial=0.0))
    if pmax == 0.0:
        return np.zeros(d), 0.0
    s = math.ldexp(1.0, math.frexp(pmax)[1])
    ps = (p / s).astype(np.float32)
    q = np.zeros(X32.shape[1])
    for start in range(0, n, block):
        q += X32[start:start + block].T @ ps[start:start + block]
    q *= s
    if groups is not None:
        q = q[groups]
    p_norm = vnorm(p / s) * s
    n_blocks = -(-n // block)
    g_block = _gamma32(min(block, n))
    err = (math.sqrt(n) * rho * p_norm * ((2 * U32 + g_block) * (1 + U32) ** 2 * (1 + 1e-6)
                                          + gamma_k(n_blocks + 1) * (1 + g_block) * (1 + U32) ** 2)
           + TINY32 * p_norm * (math.sqrt(d * n) + 2 * n * math.sqrt(d) + 3 * n * rho)) * (1 + 8 * U)
    # the product by s may land in double precision's subnormal range: ≤ 2⁻¹⁰⁷⁵ per entry
    return q, err + math.sqrt(d) * 2.0**-1070


def _flush(cache: NewtonCache, X: np.ndarray, w: np.ndarray, x_norm: float, rho: float, *, margins: bool) -> None:
    """Apply the pending mismatch: ē = E + X′ᵀP becomes E ← fl(E + q̃), q̃ ≈ X′ᵀP from one single-precision pass
    (:func:`single_pass_transpose`, its error added to the carried error bound), P ← 0; and recompute the margins
    at w: with ``margins`` as z = fl(X w) (one double-precision pass, error the dot-product bound; also the new
    reference point), else as z_ref + X32 (w − w_ref) from the last reference (one single-precision pass)."""
    assert cache.P is not None and cache.carry_e is not None and cache.X32 is not None
    P = cache.P
    if float(np.max(np.abs(P), initial=0.0)) > 0.0:
        # P is zero outside the active rows, and so are the removed rows of X32
        q, q_err = single_pass_transpose(cache.X32, P, rho, groups=cache.col_groups)
        E = cache.carry_e + q
        cache.carry_err += (x_norm * cache.p_err + q_err
                            + 2 * U * (vnorm(E) + vnorm(q)))
        cache.carry_e = E
    P[:] = 0.0
    cache.p_err = 0.0
    if margins or cache.z_ref is None or cache.w_ref is None:
        cache.z, cache.eta = _margins(X, w, rho)
        cache.z_ref, cache.w_ref, cache.eta_ref = cache.z.copy(), w.copy(), cache.eta
    else:
        # re-base: z = z_ref + X32 (w − w_ref), one single-precision pass whose error grows with ‖w − w_ref‖
        # instead of with the sum of the steps' ‖v‖ (fl(w − w_ref) is within u|w − w_ref| of the exact difference)
        dw = w - cache.w_ref
        a, zeta32 = single_pass_margins(cache.X32, dw, rho, groups=cache.col_groups)
        z = np.add(cache.z_ref, a, out=a)
        cache.z = z
        cache.eta = (cache.eta_ref + zeta32 + 1.01 * U * rho * vnorm(dw)
                     + 1.01 * U * float(max(np.max(z, initial=0.0), -np.min(z, initial=0.0))))
    cache.since_flush = 0
    cache.flushes += 1


def _prime_onepass(cfg: CertifiedRemoval, w: np.ndarray, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                   cache: NewtonCache, removing: np.ndarray | None = None) -> None:
    """Anchor system at w (tracked M), margins, float32 copy of the active rows, empty pending vector. With a shared
    copy, rows of ``removing`` (the step about to run) may already be zeroed in it by another model."""
    rho = _row_norm_max(cfg, X, cache)
    cache.kind = "onepass"
    cache.z, cache.eta = _margins(X, w, rho)
    build_anchor(cfg, w, X, y, active, cache, with_gram=False, margins=cache.z)
    cache.z_ref, cache.w_ref, cache.eta_ref = cache.z.copy(), np.array(w, dtype=np.float64), cache.eta
    found = cache.shared.lookup(X, active, removing) if cache.shared is not None else None
    if found is not None:
        X32, groups = found
    else:
        groups = column_groups(X)
        X32 = (X if groups is None else X[:, _representatives(groups)]).astype(np.float32)
        X32[~active] = 0.0
        if cache.shared is not None:
            cache.shared.store(X, X32, groups, active)
    cache.X32 = X32
    cache.col_groups = groups
    cache.P = np.zeros(X.shape[0])
    cache.p_err = 0.0
    cache.since_flush = 0


def onepass_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
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
    active_before = _rows_before(keep, idx)
    rho = _row_norm_max(cfg, X, cache)
    x_norm = _x_norm(state, n_rows, rho)
    refresh_cost = cm.hessian(n_rows, d) + cm.cholesky(d)
    synced = (cache.matches(X, w, active_before, "onepass") and cache.X32 is not None and cache.P is not None
              and cache.z is not None and cache.M is not None
              and (cache.shared is None or cache.shared.usable_for_step(cache.X32, active_before, idx)))
    if not synced:
        cache.reset()
        _prime_onepass(cfg, w, X, y, active_before, cache, removing=idx)
        refreshed = "anchor"
        passes += d / 4.0 + 1
    elif _policy_due(cfg, cache, refresh_cost):
        build_anchor(cfg, w, X, y, active_before, cache, with_gram=False)  # P, E and z keep their meaning
        refreshed = "anchor"
        passes += d / 4.0
    elif cache.iter_cost >= cm.cholesky(d):
        refreshed = cache.refactorize()
    cache._mark_dirty()
    X32, P, z, eta = cache.X32, cache.P, cache.z, cache.eta
    assert X32 is not None and P is not None and z is not None

    Delta, err_Delta = _removed_gradient(cfg, w, X[idx], y[idx], rho)
    delta_norm = vnorm(Delta)
    e_old, eps_old, S_old = _carry_start(cfg, state, cache, synced, d)
    if e_old is not None:
        # fold the pending entries of the removed rows into E while they are still in the data: X_Dᵀ P =
        # X_D′ᵀ P + Σ_{j∈R} Pⱼ xⱼ
        PR = P[idx]
        if np.any(PR != 0.0):
            fold = X[idx].T @ PR
            e_old = e_old + fold
            eps_old += (rho * math.sqrt(m) * cache.p_err + gamma_k(m + 2) * rho * float(np.sum(np.abs(PR)))
                        + 2 * U * (vnorm(e_old) + vnorm(fold)))
            cache.carry_e, cache.carry_err = e_old, eps_old
        P[idx] = 0.0
    if cache.shared is not None:
        cache.shared.zero(idx)  # the single-precision copy forgets removed rows at once
    else:
        X32[idx] = 0.0
    rhs = Delta if e_old is None else Delta - e_old
    err_rhs = err_Delta + (0.0 if e_old is None else U * vnorm(rhs))
    _downdate(cache, X, idx, lam, track=True)

    # -- v from the anchor system (O(d²))
    F = cache.factor
    assert F is not None
    target = max(cache.rtol * delta_norm, cache.budget_share * cache.last_remainder)
    if e_old is not None:
        target = max(target, cache.carry_share * cfg.budget)
    v = cho_solve(F, rhs, check_finite=False)
    q, err_q = _mv_maintained(cache, v)
    v, e, it, refac = _solve_maintained(cache, rhs, v, q - rhs, target, d)
    refreshed = refreshed or refac
    if it or refac:  # measured directly for the final v (PCG only updates it recursively; a refactorisation folds)
        q, err_q = _mv_maintained(cache, v)
        e = q - rhs
    w_new = w + v
    wn_new = vnorm(w_new)
    vn = vnorm(v)
    v_ub = vn + 1.01 * U * wn_new  # ≥ ‖v_true‖, v_true = w_new − w exactly
    e_norm = vnorm(e)
    fro_M = cache.fro_M + 2.0 * cache.eps_M  # ≥ ‖M̃‖_F and ≥ ‖M̂‖₂, after any fold in the solve
    err_e = 2.0 * (U * e_norm + gamma_k(d + 2) * fro_M * vn + cache.eps_M * v_ub + fro_M * 1.01 * U * wn_new
                   + err_rhs + err_q)

    # -- the single-precision pass: margins of the step
    buf = _buffers(cache, n_rows)
    a, zeta32 = single_pass_margins(X32, v, rho, buf, cache.col_groups)
    passes += 0.5
    zeta = 2.0 * (zeta32 + 1.01 * U * rho * wn_new)  # max |ãᵢ − xᵢᵀ v_true| on the rows of D′
    # -- exact mismatch g = δ ⊙ a on D′ (δᵢ = ℓ''(zᵢ) − ŝᵢ; ŝ is zero on removed rows, s̃ masked to D′); ã is
    # exactly 0 on removed rows (their float32 rows are zero)
    assert cache.s_hat is not None
    delta_c = _curvature(loss, z, y, buf.f[4])
    delta_c *= keep
    s_max = float(np.max(delta_c, initial=0.0))
    tau_s = float(loss.gamma) * eta + 8 * U * (1.0 + s_max)  # |s̃ᵢ − ℓ''(xᵢᵀw)|
    delta_c -= cache.s_hat
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

    rem, cands = _remainder(cfg, keep, z, eta, a, zeta, v_ub, x_norm, rho, buf)
    cache.last_remainder = rem

    acc: float | None
    z_fresh = False  # whether the margins were recomputed at w_new in this step
    if e_old is None:  # paper accounting: the step's mismatch is charged at once
        acc, carried, e_step, err_step = None, 0.0, e_norm, err_e
        cache.since_flush += 1
        if cache.since_flush >= cache.flush_every:  # refresh the margins (their error grows by ζ per step)
            cache.z, cache.eta = _margins(X, w_new, rho)
            cache.since_flush = 0
            z_fresh = True
            passes += 1.0
    else:
        P += g
        p_norm = vnorm(P)
        cache.p_err += g_err + U * p_norm
        e_delta = e - e_old  # M̂′v − Δ as computed
        e_step = vnorm(e_delta)
        err_step = err_e + 2 * U * e_step
        cache.carry_e = e
        cache.carry_err = eps_old + err_e
        cache.carry_bound = S_old + rem
        cache.since_flush += 1

        def accumulated(p_norm: float) -> tuple[float, float]:
            assert cache.carry_e is not None
            pend = x_norm * (p_norm + cache.p_err)
            return ((cache.carry_bound + vnorm(cache.carry_e) + cache.carry_err + pend)
                    * evaluation_slack(n_rows)), pend

        acc, pend = accumulated(p_norm)
        over = cfg.noise != "none" and acc > cfg.budget
        if over or cache.since_flush >= cache.flush_every or pend > cache.flush_share * cfg.budget:
            forced = over or (cache.since_flush < cache.flush_every)
            full = cache.flushes % cache.margins_every == cache.margins_every - 1
            _flush(cache, X, w_new, x_norm, rho, margins=full)
            z_fresh = True
            passes += 1.5 if full else 1.0  # single-precision passes count ½
            if forced:
                cache.excess_cost += cm.data_pass(n_rows, d)
            acc, _ = accumulated(0.0)  # the flush emptied P and its error bound
        carried = vnorm(cache.carry_e)
    step = e_step + err_step + mis + rem

    if not z_fresh:  # advance the margins to w_new (unless just refreshed): z + ã, with the tracked error
        z += a  # in place: z is the cache's own margin vector
        cache.eta = eta + zeta + 1.01 * U * float(max(np.max(z, initial=0.0), -np.min(z, initial=0.0)))
    cache._advance(X, w_new, keep)
    cache.removals_since_refresh += 1
    worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
    return StepResult(w_new=w_new, step_bound=step, solve_error=e_step, error_allowance=err_step,
                      remainder_bound=rem, mismatch_bound=mis, worst_case=worst, iterations=it, refreshed=refreshed,
                      data_passes=passes, candidates=cands, accumulated_bound=acc, carried_error=carried)


def compute_step(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray,
                 idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """Dispatch on ``cfg.solver``. On an exception the cache is reset (its in-place updates may be half done)."""
    try:
        if cfg.solver == "anchor":
            return anchor_step(cfg, state, X, y, keep, idx, cache)
        if cfg.solver == "onepass":
            return onepass_step(cfg, state, X, y, keep, idx, cache)
        return exact_hessian_step(cfg, state, X, y, keep, idx, cache)
    except BaseException:
        if cache is not None:
            cache.reset()
        raise


def prime_cache(cfg: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                cache: NewtonCache, gram: np.ndarray | None = None, *, anchor_ready: bool = False) -> None:
    """Prepare ``cache`` for removals from ``state`` (after training), so the first removal is fast.

    ``anchor``: builds the anchor system with its Gram matrix (O(n d²)). ``refine``/``pcg``: builds the anchor
    system (the Hessian at w) and stores the margins; with ``anchor_ready`` the anchor system already in the cache
    (built by training on the rows ``active`` of X at a point near w, where it preconditioned the last iterations)
    is kept instead: for these solvers it is only a preconditioner and initial guess. ``cholesky``: margins only.
    """
    kept: dict[str, Any] | None = None
    if (anchor_ready and cfg.solver in ("refine", "pcg") and cache.factor is not None and cache.M is not None
            and cache.s_hat is not None and cache.s_hat.shape == (X.shape[0],)):
        kept = {k: getattr(cache, k) for k in ("factor", "M", "s_hat", "w_anchor", "fro_M", "eps_M", "tau")}
    cache.reset()
    n_rows, d = X.shape
    if cfg.solver == "anchor":
        cache.kind = "anchor"
        build_anchor(cfg, state.w, X, y, active, cache, with_gram=True, gram=gram)
    elif cfg.solver == "onepass":
        _prime_onepass(cfg, state.w, X, y, active, cache)
    else:
        rho = _row_norm_max(cfg, X, cache)
        cache.kind = "exact"
        cache.z, cache.eta = _margins(X, state.w, rho)
        if kept is not None:
            for k, v in kept.items():
                setattr(cache, k, v)
        elif cfg.solver != "cholesky":
            build_anchor(cfg, state.w, X, y, active, cache, with_gram=False, margins=cache.z)
    if cfg.bound == "tight":
        cache.carry_e = np.zeros(d)
        cache.carry_err = 0.0
        cache.carry_bound = float(state.residual_bound)
    cache._advance(X, state.w, active)


__all__ = ["BOUNDS", "SOLVERS", "CostModel", "NewtonCache", "SharedFloat32Data", "StepResult", "anchor_step",
           "build_anchor", "compute_step", "exact_hessian_step", "onepass_step", "prime_cache", "single_pass_margins"]
