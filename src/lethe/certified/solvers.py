"""The solver table of certified removal (issue 34): one :class:`Solver` entry per name a
:class:`~lethe.certified.mechanism.CertifiedRemoval` accepts, declaring what the code around the solvers asks of it —
where it runs, what it keeps, how it primes and steps, how its certificate names it — so that no module compares
solver names (as optax gives every transform its own state type, and Opacus keeps its accountants in one registry).

``"auto"`` is not an entry: :func:`resolve_solver` turns it into one from the data's backend and width.

How to add a solver: write its module under ``lethe/certified/`` (as ``exact.py``, ``anchor.py``, ``onepass.py``)
with a state type (a subclass of :class:`~lethe.certified.cache.SolverState`, or of
:class:`~lethe.certified.anchor_system.AnchorSystem` if it keeps the anchor Hessian; written by its own module
only), a ``prime`` function that puts a fresh state on the cache and a ``*_step`` function returning a
:class:`~lethe.certified.common.StepResult`; then add one :class:`Solver` entry to :data:`SOLVERS`. The mechanism,
the estimators, the planner and the certificate read the entry; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lethe.certified.anchor import AnchorState, anchor_step, prime_anchor
from lethe.certified.cache import NewtonCache, SharedFloat32Data, SolverState
from lethe.certified.common import StepResult
from lethe.certified.data import DataMatrix, backend_of, is_dense
from lethe.certified.exact import FactorState, exact_hessian_step, prime_exact
from lethe.certified.onepass import OnepassState, onepass_step, prime_onepass


@dataclass(frozen=True)
class Solver:
    """One solver of the Newton removal step: what it is, what it needs and what it keeps.

    Attributes
    ----------
    name : str
        The name a mechanism, an estimator and a certificate use.
    state : type
        Its state type on the :class:`~lethe.certified.cache.NewtonCache` (``cache.state``), written by its module.
    step : callable
        ``step(cfg, state, X, y, keep, idx, cache) -> StepResult``: one certified removal step.
    prime : callable
        ``prime(cfg, w, X, y, active, cache, gram=None)``: a fresh state on a reset cache for the model at w.
    exact_hessian : bool
        It solves with the exact Hessian at w and *measures* its solve error: an anchor matrix it keeps is only a
        preconditioner and initial guess (formed in single precision from dense data).
    reuses_factorisation : bool
        It keeps a factorisation (or anchor system) between removals; ``False``: the paper's fresh Cholesky
        factorisation of the exact Hessian at every removal, no iterations, no refresh policy.
    conjugate : bool
        Its iterations on the exact Hessian are preconditioned conjugate gradients (else iterative refinement).
    keeps_dense_matrices : bool
        It needs d × d matrices: refused for data a matrix-free backend holds (many features).
    dense_only : bool
        It keeps a single-precision copy of dense NumPy rows: refused for other data.
    primed_lazily : bool
        A cache that was never primed (training deferred it, or it was reset) is primed before its first step,
        exactly as after training or loading, so a service and the estimator take the same steps.
    preconditions_training : bool
        Its factorised anchor system preconditions the last training iterations (chord steps).
    gram_at_training : bool
        Training forms fl(XᵀX) once, for ‖X‖₂ and for the solver's Gram matrix.
    shares_float32_copy : bool
        The binary models of a one-vs-all estimator on the same rows share one float32 copy of the data.
    budget_adaptive : bool
        Its certified bound adapts to the budget (re-measured at ``remeasure_share`` of ε′, a step over budget retried
        from a fresh anchor): ``plan_sigma`` plans σ on its ``fallback``'s steps and searches on its own.
    fallback : str or None
        The solver that takes again, from the same state, a step of ``solver="auto"``'s choice that this one cannot
        certify within the budget (the model then stays on it until it is retrained).
    certificate_text : str
        What a removal certificate's ``bound`` adds for this solver's own terms.
    """

    name: str
    state: type[SolverState]
    step: Callable[..., StepResult]
    prime: Callable[..., None]
    exact_hessian: bool = False
    reuses_factorisation: bool = True
    conjugate: bool = False
    keeps_dense_matrices: bool = False
    dense_only: bool = False
    primed_lazily: bool = False
    preconditions_training: bool = False
    gram_at_training: bool = False
    shares_float32_copy: bool = False
    budget_adaptive: bool = False
    fallback: str | None = None
    certificate_text: str = ""

    def holds(self, cache: NewtonCache) -> bool:
        """Whether ``cache`` holds this solver's kind of state (synced or not)."""
        return isinstance(cache.state, self.state)

    def check_supports(self, X: DataMatrix) -> None:
        """Refuse, naming the rule, data that this solver cannot run on (:attr:`dense_only`,
        :attr:`keeps_dense_matrices`)."""
        B = backend_of(X)
        if self.dense_only and not is_dense(X):
            raise ValueError(f"solver={self.name!r} needs a dense NumPy data matrix (it keeps a float32 copy of the "
                             f"rows). Found a {B.name} matrix; use solver='pcg'.")
        if self.keeps_dense_matrices and B.matrix_free(X):
            raise ValueError(f"solver={self.name!r} keeps d x d matrices, which a {B.name} matrix with {X.shape[1]} "
                             f"features must not form. Use solver='pcg' (matrix-free).")


#: The solvers by name (``"auto"`` is resolved to one of them, :func:`resolve_solver`).
SOLVERS: dict[str, Solver] = {s.name: s for s in (
    Solver("cholesky", FactorState, exact_hessian_step, prime_exact, exact_hessian=True, reuses_factorisation=False,
           keeps_dense_matrices=True),
    Solver("refine", FactorState, exact_hessian_step, prime_exact, exact_hessian=True, primed_lazily=True,
           preconditions_training=True),
    Solver("pcg", FactorState, exact_hessian_step, prime_exact, exact_hessian=True, conjugate=True,
           primed_lazily=True, preconditions_training=True),
    Solver("anchor", AnchorState, anchor_step, prime_anchor, keeps_dense_matrices=True, primed_lazily=True,
           gram_at_training=True, budget_adaptive=True, fallback="pcg",
           certificate_text=" + anchor mismatch bound (no data pass)"),
    Solver("onepass", OnepassState, onepass_step, prime_onepass, dense_only=True, shares_float32_copy=True,
           certificate_text=" + exact anchor mismatch from one single-precision pass"),
)}

#: The solver of Guo et al. 2020's code (Alg. 1): what ``solver="auto"`` resolves to in paper mode where a d × d
#: matrix may be kept.
PAPER_SOLVER = "cholesky"

#: ``solver="auto"`` chooses ``"anchor"`` up to this many features (its cache holds three d × d double matrices —
#: the anchor Hessian, the Gram matrix and the preconditioner — 3 · 8 · 4096² bytes = 403 MB per binary model),
#: ``"pcg"`` above it.
AUTO_ANCHOR_MAX_FEATURES = 4096


def get_solver(name: str) -> Solver:
    """The table's entry for ``name``; ``ValueError`` listing the table's names for any other (``"auto"`` included:
    resolve it for the data first, :func:`resolve_solver`)."""
    spec = SOLVERS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"solver must be one of {list(SOLVERS)} (or 'auto', resolved for the data first). "
                         f"Found {name!r}.")
    return spec


def resolve_solver(solver: str, X: DataMatrix) -> str:
    """The concrete solver for ``solver`` on data X: ``solver`` itself, or for ``"auto"``: ``"anchor"`` (no pass
    over the data per removal, O(d²) per row; amortised cost that falls as n grows) where the data's backend may
    keep d × d matrices and d ≤ :data:`AUTO_ANCHOR_MAX_FEATURES`, else ``"pcg"`` (matrix-free: sparse or Dask data
    with many features, or very wide dense data). The rule reads only the backend and d, never n, so a model's
    choice does not change as rows are removed or added."""
    if solver != "auto":
        return solver
    B = backend_of(X)
    return "anchor" if not B.matrix_free(X) and int(X.shape[1]) <= AUTO_ANCHOR_MAX_FEATURES else "pcg"


def check_solver_supports(solver: str, X: DataMatrix) -> None:
    """Refuse, naming the rule, a solver that the data's backend cannot run (:meth:`Solver.check_supports`):
    ``onepass`` keeps a float32 copy of dense rows; ``cholesky`` and ``anchor`` keep d × d matrices, which a
    matrix-free backend (many features) must not form."""
    spec = SOLVERS.get(solver)
    if spec is not None:
        spec.check_supports(X)


def new_caches(k: int, solver: str, members: Any) -> list[NewtonCache]:
    """One cache per binary model; for a solver that shares its float32 copy (``onepass``) and all models on the
    same rows, one shared float32 copy of the data for all of them (K copies would take K × 4nd bytes)."""
    spec = SOLVERS.get(solver)
    shared = (SharedFloat32Data() if spec is not None and spec.shares_float32_copy and members is None and k > 1
              else None)
    return [NewtonCache(shared=shared) for _ in range(k)]


__all__ = ["AUTO_ANCHOR_MAX_FEATURES", "PAPER_SOLVER", "SOLVERS", "Solver", "check_solver_supports", "get_solver",
           "new_caches", "resolve_solver"]
