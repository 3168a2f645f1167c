"""The solver cache (:class:`NewtonCache`), its cost model (:class:`CostModel`) and the float32 copy shared between
the caches of one-vs-all models (:class:`SharedFloat32Data`).

Refresh policy (``CertifiedRemoval.refresh``): a deterministic cost model (:class:`CostModel`, flop counts, so
seeded runs stay bit-for-bit reproducible) prices each option in seconds. ``"auto"`` is a rent-or-buy rule: the
cost that staleness causes is accumulated (extra solver iterations for ``refine``/``pcg``; for ``anchor`` the
budget spent on the mismatch term, converted to time at the rate of one retraining per budget ε′) and the
factorisation / anchor is refreshed once that accumulated cost reaches the cost of a refresh. ``"never"`` never
refreshes with a data pass; an integer k refreshes every k removals.
"""

from __future__ import annotations

import copy
import math
import os
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.linalg import cho_factor
from scipy.linalg.blas import dsyrk

from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import gamma_k
from lethe.certified.data import DataMatrix
from lethe.certified.linalg import precond_factor


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
        return 3.0 * max(int(iterations), 1) * self.data_pass(n, d) + 2.0 * self.hessian(n, d)


def _sync_key(X: DataMatrix, w: np.ndarray) -> tuple[Any, ...]:
    """What a cache must match to be reused besides the data array itself (held by weak reference) and the active-row
    mask (kept as a copy, :meth:`NewtonCache.matches`): the data's shape and the exact bytes of w."""
    return (X.shape, hash(np.ascontiguousarray(w).tobytes()))


def _libc_memcmp() -> Any:
    """The C library's ``memcmp`` through :mod:`ctypes`, or ``None`` where it cannot be loaded."""
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c") or ("msvcrt" if os.name == "nt" else None)
        if name is None:
            return None
        fn = ctypes.CDLL(name).memcmp
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        return fn
    except (OSError, AttributeError):
        return None


_MEMCMP = _libc_memcmp()


def same_mask(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two boolean masks hold the same rows: the C library's ``memcmp`` over their bytes (one pass, about
    half the time of a word-wise NumPy comparison and a third of ``np.array_equal`` at n = 10⁶: this comparison is
    what stops a stale cache from certifying, and it runs on every removal), else 8 rows per machine word in NumPy.
    A non-canonical boolean byte compares unequal: the caller rebuilds (time, never soundness)."""
    if a.shape != b.shape or a.dtype != np.bool_ or b.dtype != np.bool_ or a.ndim != 1:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if _MEMCMP is not None:
        return a.size == 0 or int(_MEMCMP(a.ctypes.data, b.ctypes.data, a.nbytes)) == 0
    k = a.shape[0] // 8 * 8
    return bool(np.all(a[:k].view(np.uint64) == b[:k].view(np.uint64))) and bool(np.all(a[k:] == b[k:]))


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


class SolverState:
    """What one solver keeps on a :class:`NewtonCache` between removals (``cache.state``), as optax gives every
    transform its own state type: one subclass per kind of solver, written by that solver's module only —
    :class:`~lethe.certified.exact.FactorState` (``cholesky``, ``refine``, ``pcg``),
    :class:`~lethe.certified.anchor_system.AnchorState` (``anchor``) and
    :class:`~lethe.certified.onepass.OnepassState` (``onepass``); the solver table
    (:data:`lethe.certified.solvers.SOLVERS`) names each solver's type. A state is tied to one model state and is
    dropped whole by :meth:`NewtonCache.reset`."""

    #: The kind of state, as :attr:`NewtonCache.kind` reports it and :meth:`NewtonCache.matches` compares it.
    kind: ClassVar[str] = ""

    def __init__(self) -> None:
        self.factor: Any = None  # a factorisation (Cholesky factor, float32 inverse, Jacobi diagonal) for the solves


class AnchorSystem(SolverState):
    """The anchor system that every solver kind keeps today (:mod:`lethe.certified.anchor_system` forms and
    downdates it): the Hessian M = X′ᵀ diag(ŝ) X′ + λ n′ I at an anchor point w_a as a dense matrix (upper triangle,
    downdated per removed row), the curvatures ŝ, the rounding bounds of M̃, the rows removed but not yet folded
    into M (rows √ŝⱼ xⱼ, S_pend ≥ Σ ŝⱼ‖xⱼ‖², folded by one rank-k update every ``fold_every`` rows) and ``factor``,
    the preconditioner factorised from an earlier M. For ``refine``/``pcg`` M only preconditions (their solve error
    is measured against the exact Hessian); for ``anchor`` and ``onepass`` it enters the certificate. The folds and
    refactorisations are the cache's public methods (:meth:`NewtonCache.fold_rows`, :meth:`NewtonCache.fold_pending`,
    :meth:`NewtonCache.refactorize`)."""

    def __init__(self) -> None:
        super().__init__()
        self.w_anchor: np.ndarray | None = None
        self.s_hat: np.ndarray | None = None
        self.M: np.ndarray | None = None
        self.eps_M = math.inf
        self.fro_M = math.inf
        self.tau = math.inf
        self.pend_Z: np.ndarray | None = None
        self.pend_k = 0
        self.pend_S = 0.0


class _StateField:
    """An attribute of the cache that reads (and writes) the field of that name of its current solver state: the
    attributes the cache had before the per-solver state types (issue 34), for code that reads them. Reads give
    ``default`` when the state has no such field (or there is no state); a write to a missing field raises."""

    def __init__(self, default: Any) -> None:
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.state, self.name, self.default)

    def __set__(self, obj: Any, value: Any) -> None:
        if not hasattr(obj.state, self.name):
            raise AttributeError(f"The cache's solver state ({type(obj.state).__name__}) has no field {self.name!r}.")
        setattr(obj.state, self.name, value)


class NewtonCache:
    """In-memory state that makes removals fast: a factorisation, margins, or the anchor system.

    Held by the caller, one per model and data set, never serialised (it is derived from the data, including rows
    removed since it was formed). After each step it is keyed to the data array, the exact new weights and the new
    active-row mask; a removal that starts from anything else (a retrained model, another mask, another array)
    rebuilds it, so a stale cache can cost time but never soundness. Use one cache per model and data set, and
    do not modify the active rows of the data array in between.

    The cache itself holds what every solver shares — the settings below, the counters, the sync key with its own
    copy of the active-row mask, the refresh policy's record (rent-or-buy) and the carried accounting of tight mode
    — and one solver state, ``state`` (:class:`SolverState`), whose type the solver table names
    (:data:`lethe.certified.solvers.SOLVERS`) and which only that solver's module writes; :attr:`kind` names it.
    The state's fields that callers used to read on the cache (``M``, ``G``, ``X32``, ``factor``, …) still read
    (and write) through it. What the state holds depends on the solver:

    * ``refine``/``pcg`` (:class:`~lethe.certified.exact.FactorState`): the Hessian at an anchor point as a dense
      matrix M, downdated per removed row, and ``factor`` = Cholesky factor of an earlier M (both only produce the
      initial guess and the preconditioner: the solve error is measured against the exact Hessian); ``z`` —
      margins X w at the current w with their error bound.
    * ``cholesky`` (the same type): the margins only (it factorises the exact Hessian at every removal).
    * ``anchor`` (:class:`~lethe.certified.anchor_system.AnchorState`): the anchor point w_a, the dense anchor
      Hessian M (upper triangle, downdated per removed row) and Gram matrix X′ᵀX′ (as built: an upper bound after
      removals), their rounding-error bounds, curvatures ŝ at w_a, the carried product G(w − w_a), and ``factor`` =
      the float32 inverse of an earlier M (a preconditioner only: the anchor residual Mv − Δ is measured).
    * ``onepass`` (:class:`~lethe.certified.onepass.OnepassState`): the anchor system of ``anchor`` without the
      Gram matrix (M enters the certificate, so its rounding drift is tracked), the margins z, a float32 copy of
      the data (one single-precision pass per removal) and the pending mismatch vector P of
      docs/tighter_bounds.md §5b, with their error bounds.

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
    remeasure_share : float
        ``anchor`` in tight mode: the anchor is formed again at the current w (one O(n d²) pass, plus two passes
        that *measure* the residual ∇L_b(w; D′) and restart the accounting from it, docs/tighter_bounds.md §5c)
        as soon as the certified bound exceeds this share of the budget ε′, before a retraining would be forced
        (with ``refresh="auto"`` this is the only budget-driven re-anchor in tight mode: the budget it recovers is
        not a rent).
    shared : SharedFloat32Data, optional
        ``onepass``: hold the float32 copy of the data in this object, shared with the caches of other models on
        the same rows (one-vs-all), instead of one copy per cache.
    """

    # the fields of the current solver state that code reads through the cache (see :class:`_StateField`)
    factor = _StateField(None)
    w_anchor = _StateField(None)
    s_hat = _StateField(None)
    M = _StateField(None)
    eps_M = _StateField(math.inf)
    fro_M = _StateField(math.inf)
    pend_k = _StateField(0)
    G = _StateField(None)
    h_G = _StateField(None)
    h_err = _StateField(math.inf)
    X32 = _StateField(None)
    P = _StateField(None)
    since_flush = _StateField(0)
    flushes = _StateField(0)

    def __init__(self, rtol: float = 1e-12, budget_share: float = 1e-2, max_sweeps: int = 4, *,
                 carry_share: float = 1e-2, cost_model: CostModel | None = None, flush_every: int = 16,
                 flush_share: float = 2e-2, margins_every: int = 4, fold_every: int = 32,
                 remeasure_share: float = 0.7, shared: SharedFloat32Data | None = None) -> None:
        # the refresh policy and the solvers' stopping rules (read by the solvers, never written)
        self.rtol = rtol
        self.budget_share = budget_share
        self.max_sweeps = max_sweeps
        self.carry_share = carry_share
        self.flush_every = flush_every
        self.flush_share = flush_share
        self.margins_every = margins_every
        self.fold_every = fold_every
        self.remeasure_share = remeasure_share
        self.cost_model = cost_model if cost_model is not None else CostModel()
        # counters (kept across resets)
        self.remeasures = 0  # anchor: residuals measured at re-anchors
        self.reanchor_retries = 0  # anchor: steps taken again from a fresh anchor instead of retraining (§5d)
        self.refreshes = 0  # factorisations formed from the data (Hessian builds, anchor builds)
        self.refactorizations = 0  # refactorisations of the maintained M (no data pass)
        self.sweeps_total = 0
        self.buf: WorkBuffers | None = None  # work space, not state: kept across resets
        self.shared = shared  # onepass: a float32 copy of the data shared with other caches (kept across resets)
        self.txn: CacheTransaction | None = None  # the open transaction (:meth:`begin`), if any (kept across resets)
        self._clear_state()

    def _clear_state(self) -> None:
        # the solver's own state (:class:`SolverState`): None until a solver primes the cache
        self.state: SolverState | None = None
        self._key: tuple[Any, ...] | None = None
        self._xref: weakref.ref[Any] | None = None
        self._mask: np.ndarray | None = None  # a copy of the active-row mask the cache was advanced to
        self._count = 0  # its number of active rows
        self._vouched: tuple[np.ndarray, np.ndarray, int] | None = None  # see :meth:`vouch_removal`
        # the mask array the cache was last advanced with, by weak reference (see :meth:`synced_count`'s ``owned``)
        self._advanced_with: weakref.ref[np.ndarray] | None = None
        self.row_norm_max: float | None = None
        # the refresh policy's record since the last refresh (rent-or-buy, module docstring)
        self.excess_cost = 0.0
        self.iter_cost = 0.0
        self.last_remainder = 0.0
        self.removals_since_refresh = 0
        # tight accounting (docs/tighter_bounds.md §4): ‖u‖ ≤ carry_bound + ‖carry_e‖ + carry_err, where carry_e is
        # the measured sum of solve errors since the last sync and carry_bound the bounded parts (incl. β at sync)
        self.carry_e: np.ndarray | None = None
        self.carry_err = 0.0
        self.carry_bound = math.nan

    @property
    def kind(self) -> str | None:
        """The kind of solver state the cache holds (``"exact"``, ``"anchor"``, ``"onepass"``), None before a solver
        primes it."""
        return self.state.kind if self.state is not None else None

    def _system(self) -> AnchorSystem:
        st = self.state
        if not isinstance(st, AnchorSystem):
            raise TypeError(f"The cache's solver state ({type(st).__name__}) keeps no anchor system.")
        return st

    def refresh(self, H: np.ndarray) -> None:
        """Factorise a new Hessian (used as preconditioner)."""
        self._system().factor = cho_factor(H, check_finite=False)
        self.refreshes += 1

    def fold_pending(self) -> None:
        """Subtract the pending rows from the stored M of the anchor system: M ← M − ZᵀZ by one BLAS rank-k update
        (``dsyrk``), with ε_M grown by its rounding: per entry ≤ γ_{k+1}(|Mᵢⱼ| + Σ|z_{ri} z_{rj}|), in Frobenius norm
        ≤ γ_{k+1}(‖M̃‖_F + Σ‖z_r‖²); the rows z̃ = fl(√ŝ) x differ from the exact √ŝ x by ≤ 2u relatively, so
        z̃z̃ᵀ from ŝxxᵀ by ≤ 5u ŝ‖x‖² (S_pend covers Σ‖z̃‖²)."""
        st = self._system()
        k = st.pend_k
        if k == 0 or st.M is None or st.pend_Z is None:
            return
        self.fold_rows(st.pend_Z[:k], st.pend_S)
        # the next rows are queued in a new array: a transaction's snapshot keeps these (:meth:`begin`)
        st.pend_Z, st.pend_k, st.pend_S = np.empty_like(st.pend_Z), 0, 0.0

    def fold_rows(self, Z: np.ndarray, S: float) -> None:
        """M ← M − ZᵀZ for the k × d rows Z (z̃ = fl(√ŝ) x, S ≥ Σ‖z̃‖²) by one ``dsyrk``, ε_M grown as in
        :meth:`fold_pending` (the bound holds for any k)."""
        st = self._system()
        assert st.M is not None
        k = Z.shape[0]
        # Zᵀ is a Fortran-contiguous d × k view of C-contiguous rows: C ← C − (Zᵀ)(Zᵀ)ᵀ without copying the rows;
        # into a new matrix (once per ``fold_every`` rows): a transaction's snapshot (:meth:`begin`) keeps the old M
        st.M = dsyrk(-1.0, Z.T, beta=1.0, c=st.M, trans=0, lower=0, overwrite_c=0)
        st.eps_M += gamma_k(k + 1) * (st.fro_M + 2.0 * st.eps_M + S) + 5 * U * S

    def refactorize(self) -> str:
        """Refactorise the maintained matrix M (O(d³), no data pass) into the preconditioner; returns "factor"."""
        st = self._system()
        assert st.M is not None
        self.fold_pending()
        st.factor = precond_factor(st.M)
        self.refactorizations += 1
        self.iter_cost = 0.0
        return "factor"

    def reset(self) -> None:
        """Forget everything tied to a model state (after retraining or on misuse): the solver state whole, the sync
        key, the refresh policy's record and the carried accounting. Counters are kept."""
        self._clear_state()

    def _synced_mask(self, X: DataMatrix, w: np.ndarray, kind: str | None) -> np.ndarray | None:
        """The cache's row mask if it was last advanced, by a ``kind`` solver, to exactly these weights and this data
        array (the same object: a weak reference, so a new array at a recycled address does not match); else None."""
        if (kind is not None and self.kind == kind and self._key is not None and self._xref is not None
                and self._xref() is X and self._key == _sync_key(X, w)):
            return self._mask
        return None

    def matches(self, X: DataMatrix, w: np.ndarray, active: np.ndarray, kind: str) -> bool:
        """Whether the cache is synced (:meth:`_synced_mask`) to (X, w, ``kind``) and to exactly these rows, compared
        in full (O(n), :func:`same_mask`)."""
        mask = self._synced_mask(X, w, kind)
        return mask is not None and same_mask(mask, active)

    def synced_count(self, X: DataMatrix, w: np.ndarray, active: np.ndarray, *, owned: bool = False) -> int | None:
        """The number of rows of ``active`` if the cache (of any kind) is synced to (X, w, ``active``) — its mask is
        then equal to ``active``, compared in full, and its count was taken from it — else None.

        ``owned=True``: the caller owns ``active`` and keeps it read-only except while it changes it together with
        the cache (:meth:`lethe.certified.mechanism.CertifiedRemoval.remove` with ``clear_active``: the estimators'
        ``active_``). The O(n) comparison is then skipped when ``active`` is the very array the cache was last
        advanced with (:meth:`advance` copies it, or clears the same rows of the copy: their contents were equal
        then) and it is read-only now, so nothing can have written to it since without first making it writable
        again on purpose (NumPy refuses ``active[i] = ...`` on it). A writable array, another array or a copy is
        compared in full, as without ``owned``."""
        mask = self._synced_mask(X, w, self.kind)
        if mask is None:
            return None
        if (owned and self._advanced_with is not None and self._advanced_with() is active
                and not active.flags.writeable and mask.shape == active.shape):
            return self._count
        return self._count if same_mask(mask, active) else None

    def matches_removal(self, X: DataMatrix, w: np.ndarray, keep: np.ndarray, idx: np.ndarray,
                        kind: str) -> int | None:
        """:meth:`matches` for the rows before a removal, keep ∪ idx, without forming that mask: the cache's mask
        must have every row of ``idx`` active and equal ``keep`` once they are cleared (one O(n) comparison, O(m)
        besides). Returns the number of rows of ``keep`` when synced, else None."""
        vouched, self._vouched = self._vouched, None
        mask = self._synced_mask(X, w, kind)
        if mask is None or mask.shape != keep.shape:
            return None
        if vouched is not None and vouched[0] is keep and vouched[1] is idx:
            return vouched[2]
        if idx.size == 0 or int(idx.min()) < 0 or int(idx.max()) >= mask.shape[0]:
            return None
        saved = mask[idx]
        if not bool(np.all(saved)):
            return None
        mask[idx] = False
        try:
            same = same_mask(mask, keep)
        finally:
            mask[idx] = saved
        if not same:
            return None
        return self._count - (1 if idx.size == 1 else int(np.unique(idx).size))

    def vouch_removal(self, keep: np.ndarray, idx: np.ndarray, n_keep: int) -> None:
        """Record that the caller has just compared the cache's mask with the rows before a removal
        (:meth:`synced_count`), made ``keep`` those rows with the distinct, active rows ``idx`` cleared (``n_keep``
        rows; a fresh copy, or the caller's own mask, which it does not touch until the step returns) and hands both
        objects, unchanged, to the step: the next
        :meth:`matches_removal` for these very objects (the same ``keep`` and ``idx``, by identity) then does not
        compare the O(n) mask again. Consumed by that call (or cleared by any other, and by :meth:`reset`)."""
        self._vouched = (keep, idx, int(n_keep))

    def invalidate(self) -> None:
        """Unkey the cache: until the next :meth:`advance` it matches no model (a solver calls this before it
        changes anything, so a step that does not finish leaves a cache that matches nothing)."""
        self._key = None

    def begin(self, idx: np.ndarray) -> CacheTransaction:
        """Open a transaction for a step that removes rows ``idx``: a snapshot of the cache (:class:`CacheTransaction`)
        whose :meth:`~CacheTransaction.rollback` puts it back exactly as it is now, bit for bit — so a removal that
        raises (an error, ``KeyboardInterrupt``, a signal handler's exception) and is rolled back leaves a cache that
        gives the next removal the same certificate as if the failed call had never run. O(m d + d) (the arrays the
        steps change in place are saved on the removed rows only; every other array a step changes is replaced,
        not written)."""
        txn = CacheTransaction(self, idx)
        self.txn = txn
        return txn

    def advance(self, X: DataMatrix, w: np.ndarray, active: np.ndarray, *,
                removed: np.ndarray | None = None) -> None:
        """Key the cache to (X, w, ``active``): what a solver calls once its step has brought the cached quantities
        to the new model (the solvers of :mod:`lethe.certified.onepass`, ``exact``, ``anchor``, ``newton``).
        ``removed``: the caller checked (:meth:`matches_removal`) that the cache's mask was ``active`` ∪ ``removed``
        at the start of its step and has not changed it since: the mask is then updated in O(m) instead of copied
        (idempotent: rows already cleared are not counted twice)."""
        self._xref = weakref.ref(X)
        self._advanced_with = weakref.ref(active) if isinstance(active, np.ndarray) else None
        mask = self._mask
        if removed is not None and mask is not None and mask.shape == active.shape:
            self._count -= int(np.count_nonzero(mask[removed]))
            mask[removed] = False
        else:
            # a new array (not copied into the old one): a transaction's snapshot (:meth:`begin`) keeps the old mask
            self._mask = np.array(active, dtype=bool, copy=True)
            self._count = int(np.count_nonzero(self._mask))
        self._key = _sync_key(X, w)

    def __getstate__(self) -> dict[str, Any]:
        # a copied or unpickled cache is not tied to any data array: it rebuilds at its first use
        state = self.__dict__.copy()
        # its own solver state object (its arrays shared, as the cache's own attributes' arrays are): a copy that
        # replaces a field leaves the original's as it was
        state["state"] = copy.copy(self.state)
        state["_xref"] = None
        state["_key"] = None
        state["_mask"] = None
        state["_advanced_with"] = None
        state["buf"] = None
        state["shared"] = None
        state["txn"] = None
        return state


class CacheTransaction:
    """A snapshot of a :class:`NewtonCache` before a removal step (:meth:`NewtonCache.begin`).

    The steps replace most of the cache's and its solver state's arrays by new ones (so the snapshot's references
    keep the old ones) and change a few in place on the removed rows only; those rows are saved here: the mask's and
    the curvatures' ŝ entries, the pending mismatch P and the single-precision copy (``onepass``; a shared copy's
    rows and its record of zeroed rows), and M's diagonal (the λ m I downdate). :meth:`rollback` writes the saved
    rows back and then the attributes of the state and of the cache, the sync key last (until then the cache
    matches nothing and would be rebuilt): it is idempotent, so a rollback that was itself interrupted can be run
    again.
    """

    # the saved rows (class defaults: none saved)
    mask_rows: np.ndarray | None = None
    s_hat_rows: np.ndarray | None = None
    p_rows: np.ndarray | None = None
    x32_rows: np.ndarray | None = None
    shared_rows: tuple[dict[str, Any], np.ndarray, np.ndarray] | None = None
    m_diag: np.ndarray | None = None
    rng: tuple[Any, Any] | None = None  # (generator, its state before a retraining), recorded by the mechanism

    def __init__(self, cache: NewtonCache, idx: np.ndarray) -> None:
        self.cache = cache
        self.idx = idx
        a = self.attrs = cache.__dict__.copy()
        a["txn"] = None
        st = a["state"]
        sa: dict[str, Any] = st.__dict__.copy() if st is not None else {}
        self.state_attrs = sa
        mask, shared = a["_mask"], a["shared"]
        s_hat, P, X32, M = sa.get("s_hat"), sa.get("P"), sa.get("X32"), sa.get("M")
        try:  # (fancy indexing copies; an array of another length belongs to no data set of these rows: not saved)
            self.mask_rows = mask[idx] if mask is not None else None
            self.s_hat_rows = s_hat[idx] if s_hat is not None else None
            self.p_rows = P[idx] if P is not None else None
            if X32 is not None and (shared is None or shared.X32 is not X32):
                self.x32_rows = X32[idx]
            if shared is not None and shared.X32 is not None and shared.zeroed is not None:
                self.shared_rows = (shared.__dict__.copy(), shared.X32[idx], shared.zeroed[idx])
        except IndexError:
            pass
        if M is not None:
            self.m_diag = M.diagonal().copy()

    def rollback(self) -> None:
        """Put the cache back as it was at :meth:`NewtonCache.begin` (idempotent)."""
        cache, a, sa, idx = self.cache, self.attrs, self.state_attrs, self.idx
        cache._key = None  # matches nothing while it is restored
        for saved, name, rows in ((a, "_mask", self.mask_rows), (sa, "s_hat", self.s_hat_rows),
                                  (sa, "P", self.p_rows), (sa, "X32", self.x32_rows)):
            if rows is not None and saved.get(name) is not None:
                saved[name][idx] = rows
        shared = a.get("shared")
        if self.shared_rows is not None and shared is not None:
            saved_shared, x_rows, z_rows = self.shared_rows
            saved_shared["X32"][idx] = x_rows  # the arrays the rows were saved from
            saved_shared["zeroed"][idx] = z_rows
            shared.__dict__.update(saved_shared)
        if self.m_diag is not None and sa.get("M") is not None:
            np.einsum("ii->i", sa["M"])[...] = self.m_diag
        st = a.get("state")
        if st is not None:
            st.__dict__.update(sa)
        cache.__dict__.update({k: v for k, v in a.items() if k != "_key"})
        cache._key = a["_key"]

    def close(self) -> None:
        """The step was committed: forget the snapshot."""
        if self.cache.txn is self:
            self.cache.txn = None


class WorkBuffers:
    """Preallocated n-vectors for the per-removal O(n) work. Fresh 100 kB temporaries on every removal made glibc
    trim and re-fault heap pages: about 0.3 ms per removal at n = 12,000 (measured), as much as the float32 pass."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.f = [np.empty(n) for _ in range(6)]  # f[0:4]: remainder_terms's; f[4:6]: the caller's
        self.a = np.empty(n)
        self.a32 = np.empty(n, dtype=np.float32)


def work_buffers(cache: NewtonCache | None, n: int) -> WorkBuffers:
    if cache is None:
        return WorkBuffers(n)
    if cache.buf is None or cache.buf.n != n:
        cache.buf = WorkBuffers(n)
    return cache.buf
