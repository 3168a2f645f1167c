"""Newton removal steps (Guo et al. 2020, Eq. 3, 6): the dispatcher over the solvers.

One module per solver, each readable on its own (layers: a module imports only those above it in this list):

* :mod:`lethe.certified.data` — the data interface (dense, sparse; rounding bounds of every operation);
* :mod:`lethe.certified.linalg` — dense d × d kernels (preconditioners, PCG on a maintained matrix);
* :mod:`lethe.certified.cache` — :class:`NewtonCache`, :class:`CostModel`, :class:`SharedFloat32Data`;
* :mod:`lethe.certified.common` — :class:`StepResult`, Δ, margins, remainder, the tight accounting;
* :mod:`lethe.certified.anchor_system` — the maintained anchor Hessian;
* :mod:`lethe.certified.single` — single-precision passes with their error bounds;
* :mod:`lethe.certified.exact` — ``"cholesky"``, ``"refine"``, ``"pcg"`` (exact Hessian, measured solve error);
* :mod:`lethe.certified.anchor` — ``"anchor"`` (no data pass, bounded mismatch);
* :mod:`lethe.certified.onepass` — ``"onepass"`` (one single-precision pass, exact mismatch);
* this module — :func:`compute_step` and :func:`prime_cache`, used by :mod:`lethe.certified.mechanism`.

None of them imports the mechanism: the configuration is read through :class:`~lethe.certified.common.RemovalConfig`.
The names below are re-exported for existing imports (``from lethe.certified.newton import NewtonCache``).
"""

from __future__ import annotations

import numpy as np

from lethe.certified.anchor import anchor_step
from lethe.certified.anchor_system import build_anchor, downdate, mv_maintained, solve_maintained
from lethe.certified.cache import CostModel, NewtonCache, SharedFloat32Data
from lethe.certified.common import RemovalConfig, StepResult, compute_margins, max_row_norm
from lethe.certified.data import DataMatrix, backend_of, is_dense
from lethe.certified.exact import exact_hessian_step
from lethe.certified.linalg import cho_solve, jacobi_preconditioner, precond_factor
from lethe.certified.onepass import onepass_step, prime_onepass
from lethe.certified.single import (
    column_groups,
    representatives,
    single_pass_margins,
    single_pass_transpose,
)
from lethe.certified.state import ModelState

SOLVERS = ("cholesky", "refine", "pcg", "anchor", "onepass")
BOUNDS = ("paper", "tight")

#: ``solver="auto"`` chooses ``"anchor"`` up to this many features (its cache holds three d × d double matrices —
#: the anchor Hessian, the Gram matrix and the preconditioner — 3 · 8 · 4096² bytes = 403 MB per binary model),
#: ``"pcg"`` above it.
AUTO_ANCHOR_MAX_FEATURES = 4096


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
    """Refuse, naming the rule, a solver that the data's backend cannot run: ``onepass`` keeps a float32 copy of
    dense rows; ``cholesky`` and ``anchor`` keep d × d matrices, which a matrix-free backend (many features) must
    not form."""
    B = backend_of(X)
    if solver == "onepass" and not is_dense(X):
        raise ValueError(f"solver='onepass' needs a dense NumPy data matrix (it keeps a float32 copy of the rows). "
                         f"Found a {B.name} matrix; use solver='pcg'.")
    if solver in ("cholesky", "anchor") and B.matrix_free(X):
        raise ValueError(f"solver={solver!r} keeps d x d matrices, which a {B.name} matrix with {X.shape[1]} "
                         f"features must not form. Use solver='pcg' (matrix-free).")


def new_caches(k: int, solver: str, members: np.ndarray | None) -> list[NewtonCache]:
    """One cache per binary model; with ``solver="onepass"`` and all models on the same rows, one shared float32
    copy of the data for all of them (K copies would take K × 4nd bytes)."""
    shared = SharedFloat32Data() if solver == "onepass" and members is None and k > 1 else None
    return [NewtonCache(shared=shared) for _ in range(k)]


def prime_cache(cfg: RemovalConfig, state: ModelState, X: DataMatrix, y: np.ndarray, active: np.ndarray,
                cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """Prepare ``cache`` for removals from ``state`` (after training), so the first removal is fast.

    ``anchor``: builds the anchor system with its Gram matrix (O(n d²)). ``refine``/``pcg``: builds the anchor
    system (the Hessian at w, also when training left one formed at an earlier point: a cache primed after
    training and one primed after loading the model are then the same, so a service's removals reproduce the
    estimator's bounds) and stores the margins. ``cholesky``: margins only.
    """
    cache.reset()
    n_rows, d = X.shape
    check_solver_supports(cfg.solver, X)
    if cfg.solver == "anchor":
        cache.kind = "anchor"
        build_anchor(cfg, state.w, X, y, active, cache, with_gram=True, gram=gram)
    elif cfg.solver == "onepass":
        prime_onepass(cfg, state.w, X, y, active, cache)
    else:
        rho = max_row_norm(cfg, X, cache)
        cache.kind = "exact"
        cache.z, cache.eta = compute_margins(X, state.w, rho)
        if cfg.solver != "cholesky" and not backend_of(X).matrix_free(X):
            build_anchor(cfg, state.w, X, y, active, cache, with_gram=False, margins=cache.z)
    if cfg.bound == "tight":
        cache.carry_e = np.zeros(d)
        cache.carry_err = 0.0
        cache.carry_bound = float(state.residual_bound)
    cache.advance(X, state.w, active)


#: The names tests/certified import from this module (the solvers' helpers were private before the internal API).
_downdate, _mv_maintained, _representatives = downdate, mv_maintained, representatives

__all__ = ["AUTO_ANCHOR_MAX_FEATURES", "BOUNDS", "SOLVERS", "CostModel", "NewtonCache", "SharedFloat32Data",
           "StepResult", "anchor_step", "build_anchor", "check_solver_supports", "cho_solve", "column_groups",
           "downdate", "exact_hessian_step", "jacobi_preconditioner", "mv_maintained", "new_caches",
           "onepass_step", "precond_factor", "prime_cache", "representatives", "resolve_solver", "single_pass_margins",
           "single_pass_transpose", "solve_maintained"]
