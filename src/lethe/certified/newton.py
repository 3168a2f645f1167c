"""Newton removal steps (Guo et al. 2020, Eq. 3, 6): the dispatcher over the solvers.

One module per solver, each readable on its own (layers: a module imports only those above it in this list):

* :mod:`lethe.certified.data` — the data interface (dense, sparse; rounding bounds of every operation);
* :mod:`lethe.certified.linalg` — dense d × d kernels (preconditioners, PCG on a maintained matrix);
* :mod:`lethe.certified.cache` — :class:`NewtonCache` (the common part: sync key, mask copy, counters, refresh
  policy, carried accounting) holding one solver state (:class:`~lethe.certified.cache.SolverState`),
  :class:`CostModel`, :class:`SharedFloat32Data`;
* :mod:`lethe.certified.common` — :class:`StepResult`, Δ, margins, remainder, the tight accounting;
* :mod:`lethe.certified.anchor_system` — the maintained anchor Hessian (and ``anchor``'s state type);
* :mod:`lethe.certified.single` — single-precision passes with their error bounds;
* :mod:`lethe.certified.exact` — ``"cholesky"``, ``"refine"``, ``"pcg"`` (exact Hessian, measured solve error);
* :mod:`lethe.certified.anchor` — ``"anchor"`` (no data pass, bounded mismatch);
* :mod:`lethe.certified.onepass` — ``"onepass"`` (one single-precision pass, exact mismatch);
* :mod:`lethe.certified.solvers` — the solver table: one entry per name, with its state type, ``prime`` and ``step``
  functions and what the code around it asks of it (no module compares solver names);
* this module — :func:`prime_cache`, used by :mod:`lethe.certified.mechanism` (whose ``compute_step`` runs a
  solver's step from the table).

None of them imports the mechanism: the configuration is read through :class:`~lethe.certified.common.RemovalConfig`.
The names below are re-exported for existing imports (``from lethe.certified.newton import NewtonCache``).
"""

from __future__ import annotations

import numpy as np

from lethe.certified.anchor import anchor_step
from lethe.certified.anchor_system import build_anchor, downdate, mv_maintained, solve_maintained
from lethe.certified.cache import CostModel, NewtonCache, SharedFloat32Data
from lethe.certified.common import RemovalConfig, StepResult
from lethe.certified.data import DataMatrix
from lethe.certified.exact import exact_hessian_step
from lethe.certified.linalg import cho_solve, jacobi_preconditioner, precond_factor
from lethe.certified.onepass import onepass_step
from lethe.certified.single import (
    column_groups,
    representatives,
    single_pass_margins,
    single_pass_transpose,
)
from lethe.certified.solvers import (
    AUTO_ANCHOR_MAX_FEATURES,
    SOLVERS,
    check_solver_supports,
    get_solver,
    new_caches,
    resolve_solver,
)
from lethe.certified.state import ModelState

BOUNDS = ("paper", "tight")


def prime_cache(cfg: RemovalConfig, state: ModelState, X: DataMatrix, y: np.ndarray, active: np.ndarray,
                cache: NewtonCache, gram: np.ndarray | None = None) -> None:
    """Prepare ``cache`` for removals from ``state`` (after training), so the first removal is fast: reset it, put
    the solver's fresh state on it (its table entry's ``prime``), start the carried accounting in tight mode and key
    it to (X, w, ``active``).

    ``anchor``: builds the anchor system with its Gram matrix (O(n d²)). ``refine``/``pcg``: builds the anchor
    system (the Hessian at w, also when training left one formed at an earlier point: a cache primed after
    training and one primed after loading the model are then the same, so a service's removals reproduce the
    estimator's bounds) and stores the margins. ``cholesky``: margins only. ``onepass``: the anchor system, the
    margins and the float32 copy.
    """
    cache.reset()
    d = X.shape[1]
    spec = get_solver(cfg.solver)
    spec.check_supports(X)
    spec.prime(cfg, state.w, X, y, active, cache, gram=gram)
    if cfg.bound == "tight":
        cache.carry_e = np.zeros(d)
        cache.carry_err = 0.0
        cache.carry_bound = float(state.residual_bound)
    cache.advance(X, state.w, active)


#: The names tests/certified import from this module (the solvers' helpers were private before the internal API).
_downdate, _mv_maintained, _representatives = downdate, mv_maintained, representatives

__all__ = ["AUTO_ANCHOR_MAX_FEATURES", "BOUNDS", "SOLVERS", "CostModel", "NewtonCache", "SharedFloat32Data",
           "StepResult", "anchor_step", "build_anchor", "check_solver_supports", "cho_solve", "column_groups",
           "downdate", "exact_hessian_step", "get_solver", "jacobi_preconditioner", "mv_maintained", "new_caches",
           "onepass_step", "precond_factor", "prime_cache", "representatives", "resolve_solver", "single_pass_margins",
           "single_pass_transpose", "solve_maintained"]
