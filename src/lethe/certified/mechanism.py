"""Certified removal for linear models (Guo et al. 2020): training (Alg. 1), Newton removal (Eq. 3, 6) with the
data-dependent certificates (Cor. 1, 2) and the removal budget with retraining (Alg. 2).

The mechanism is a small immutable configuration (:class:`CertifiedRemoval`) whose operations take the current data
and an immutable :class:`ModelState` and return a *new* state plus an immutable certificate; a failed operation
therefore leaves the caller's state exactly as it was. The state holds no training data: unlearning reads only the
current data set and the current model (as the curator service stores them).

Guarantee. After training and any sequence of removals, the published w is the exact minimiser of
L_b(·; D′) − uᵀ(·) for the current data D′ with ‖u‖ ≤ β (the accumulated bound, ``state.residual_bound``), and
β ≤ ε′ = :func:`~lethe.certified.noise.residual_budget`. By Guo et al. 2020, Thm 2–3, the model is then (ε, δ)-
(Gaussian b) or ε- (Laplace-type b) indistinguishable from training on D′ from scratch. Whenever a removal would
push β above ε′ the mechanism retrains on D′ with a fresh b instead (Alg. 2, line 17).

Secret state. b (``state.b``) must stay secret: anyone who knows b can subtract the masking and recover the exact
gradient residual, which carries information about removed records.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lethe._rng import RandomState, check_random_state
from lethe._validation import (
    check_choice,
    check_finite_matrix,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from lethe.certified import objective as obj
from lethe.certified._threads import blas_threads
from lethe.certified.anchor import synced_gram
from lethe.certified.bounds import (
    UNDERFLOW_ERROR,
    gamma_k,
    spectral_norm_upper_bound_single,
    vnorm,
)
from lethe.certified.certificate import Certificate, certify
from lethe.certified.common import gradient_allowance, mask_before, measured_residual
from lethe.certified.data import DataMatrix, backend_of, check_data_matrix, is_dense
from lethe.certified.exact import precondition_training
from lethe.certified.newton import (
    BOUNDS,
    SOLVERS,
    NewtonCache,
    StepResult,
    check_solver_supports,
    prime_cache,
    resolve_solver,
)
from lethe.certified.newton import cho_solve as newton_solve
from lethe.certified.noise import CALIBRATIONS, NOISES, residual_budget, sample_perturbation
from lethe.certified.rows import check_indices, check_row_norms, set_rows
from lethe.certified.solvers import Solver, get_solver
from lethe.certified.state import ModelState
from lethe.certified.training import Evaluation, minimise
from lethe.losses import Loss, get_loss


@dataclass(frozen=True)
class CertifiedRemoval:
    """Configuration of the certified-removal mechanism for one linear model (Guo et al. 2020).

    Parameters
    ----------
    loss : str or Loss
        ℓ: ``"logistic"`` (y ∈ {−1, +1}) or ``"squared"``, or any :class:`lethe.losses.Loss`.
    lam : float
        λ > 0, L2 regularisation; the objective uses λ n / 2 ‖w‖² (§3.1).
    sigma : float
        σ > 0, scale of the perturbation b (std of each coordinate for Gaussian noise).
    epsilon, delta : float
        The removal guarantee: (ε, δ)-certified removal (Def. 1). ``delta`` is ignored for Laplace-type noise.
    noise : {"gaussian", "laplace", "none"}
        Distribution of b (Thm 3 ii, Thm 3 i, or none for exact least-squares removal).
    tol : float or None
        Training stops when ‖∇L_b(w; D)‖₂ ≤ tol. That residual is charged to the budget (footnote 1).
        Default: 10⁻³ ε′ (0.1 % of the budget); for ``noise="none"``, 10⁻⁹ (λ n).
    max_iter : int
        Maximum L-BFGS iterations in training.
    solver : {"cholesky", "refine", "pcg", "anchor", "onepass", "auto"}
        How the Newton system is solved at removal (:mod:`lethe.certified.newton`): ``"auto"`` chooses ``"anchor"``
        where the data's backend may keep d × d matrices (dense data, sparse or Dask data with few features) and
        d ≤ 4096, else ``"pcg"`` (:func:`~lethe.certified.newton.resolve_solver`; :meth:`resolved` gives the
        mechanism with the concrete solver, which every certificate names); ``"cholesky"`` rebuilds and
        factorises the exact Hessian at every removal (the paper, O(nd² + d³)); ``"refine"`` (iterative
        refinement) and ``"pcg"`` (preconditioned conjugate gradients) use a cached factorisation as
        preconditioner and measure the solve error with Hessian-vector products, O(nd) per iteration;
        ``"anchor"`` makes no pass over the data: it solves with an anchor Hessian downdated per removed row and
        *bounds* its mismatch with the current Hessian, O(d²) per removed row; ``"onepass"`` uses the same anchor
        system plus one single-precision pass over the data per removal, which makes the mismatch exact (applied
        to the data by a double-precision pass every few removals; docs/tighter_bounds.md §5b). Every solver's
        certificate covers the full residual increment, including its own solve error.
    bound : {"paper", "tight"}
        ``"paper"``: Cor. 1/2 with γ = ``loss.gamma`` (1/4 for logistic), as in the paper (for reproduction).
        ``"tight"``: the smallest of the proven bounds of docs/tighter_bounds.md (exact γ = 1/(6√3) or per-sample
        local curvature, the integral form's factor 1/2, per-sample ‖X′v‖₄²- and triangle-inequality forms).
    calibration : {"paper", "analytic"}
        Budget for Gaussian noise: ``"paper"``: ε′ = σε/√(2 log(1.5/δ)) (Alg. 2; refused where invalid);
        ``"analytic"``: the exact analytic Gaussian mechanism (Balle & Wang 2018), valid for every ε and never
        smaller.
    refresh : "auto", "never" or int
        When the cached factorisation (``refine``/``pcg``) or anchor (``anchor``/``onepass``) is rebuilt from
        the data:
        ``"auto"``: when the time or budget its staleness has cost reaches the cost of rebuilding it
        (:mod:`lethe.certified.newton`); ``"never"``: only when missing; k: every k removals.
    residual_cap : float or None
        None (default): Guo et al.'s mechanism as above. A number β_cap > 0: NO objective perturbation (b = 0 at
        training and at every retraining) and the residual budget is β_cap instead of ε′(σ, ε, δ): the state's w is
        then an approximate minimiser of the unperturbed L_0 with a certified ‖∇L_0(w; D′)‖ ≤ β ≤ β_cap, retrained
        (re-solved: the minimiser is unique, no randomness) whenever a removal would pass β_cap. This mechanism
        alone gives NO privacy (its certificates' ε, δ are meaningless): it is the centre that
        :mod:`lethe.release` publishes with fresh Gaussian noise (docs/release_privacy.md).

    Notes
    -----
    The defaults reproduce the paper (``bound="paper"``, ``calibration="paper"``, ``solver="cholesky"``). The
    estimators' default is ``bound="tight", calibration="analytic", solver="auto"``: ``anchor`` (no pass over the
    data per removal, its residual re-measured when its bounded mismatch grows: the lowest amortised cost) where a
    d × d matrix may be kept, ``pcg`` (exact Hessian-vector products, measured solve error, O(nd) per removal)
    elsewhere; ``solver="onepass"`` reads the data once in single precision per removal.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 5)); X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> y = np.where(X[:, 0] > 0, 1.0, -1.0)
    >>> mech = CertifiedRemoval(lam=1e-2, sigma=1.0, bound="tight", calibration="analytic", solver="pcg")
    >>> cache = NewtonCache()
    >>> state, _ = mech.train(X, y, random_state=0, cache=cache)
    >>> state, cert = mech.remove(state, X, y, [3], cache=cache)
    >>> cert.residual_bound <= cert.budget, cert.bound_mode, cert.calibration
    (True, 'tight', 'analytic')
    """

    loss: str | Loss = "logistic"
    lam: float = 1e-3
    sigma: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-4
    noise: str = "gaussian"
    tol: float | None = None
    max_iter: int = 2000
    solver: str = "cholesky"
    bound: str = "paper"
    calibration: str = "paper"
    refresh: str | int = "auto"
    residual_cap: float | None = None

    def __post_init__(self) -> None:
        check_positive("lam", self.lam)
        check_choice("noise", self.noise, NOISES)
        loss = get_loss(self.loss)
        if self.noise == "none":
            if loss.gamma != 0.0:
                raise ValueError(
                    f"noise='none' gives a certificate only for losses with gamma = 0 (least squares). "
                    f"Found loss {loss.name!r} with gamma = {loss.gamma}."
                )
        else:
            check_positive("sigma", self.sigma)
            check_positive("epsilon", self.epsilon)
            if self.noise == "gaussian":
                check_open_unit("delta", self.delta)
        if self.tol is not None:
            check_positive("tol", self.tol)
        check_positive_int("max_iter", self.max_iter)
        check_choice("solver", self.solver, (*SOLVERS, "auto"))
        check_choice("bound", self.bound, BOUNDS)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        if isinstance(self.refresh, bool) or not (self.refresh in ("auto", "never") or (
                isinstance(self.refresh, int) and self.refresh >= 1)):
            raise ValueError(f"refresh must be 'auto', 'never' or an integer >= 1. Found {self.refresh!r}.")
        object.__setattr__(self, "_loss", loss)
        object.__setattr__(self, "_resolved", {})
        object.__setattr__(self, "_fallback", None)
        if self.residual_cap is not None:
            if self.noise == "none":
                raise ValueError("residual_cap needs a loss with noise != 'none' (it replaces the budget of the "
                                 f"perturbed mechanism). Found noise={self.noise!r}.")
            check_positive("residual_cap", self.residual_cap)
        object.__setattr__(self, "_budget", float(self.residual_cap) if self.residual_cap is not None else
                           residual_budget(self.sigma, self.epsilon, self.delta, self.noise,
                                           calibration=self.calibration)
                           if self.noise != "none" else 0.0)

    # -- derived quantities ---------------------------------------------------------------------------------
    def resolved(self, X: DataMatrix, solver: str | None = None) -> CertifiedRemoval:
        """This mechanism with ``solver="auto"`` replaced by the concrete solver for data X
        (:func:`~lethe.certified.newton.resolve_solver`: a function of the backend and d only), or by ``solver``
        (a model's recorded choice); itself otherwise. Every method that takes data resolves first, so
        certificates always name the solver that computed them.

        ``auto``'s ``anchor`` falls back to ``pcg``: a removal whose anchor step would push the certified bound over
        the budget (its mismatch and remainder are *bounded*, from ‖X‖₂ and global curvature, which can be far
        looser than ``pcg``'s measured, per-sample terms — large ‖w‖, small λn) is taken again by ``pcg`` from the
        same state before any retraining, and the model stays on ``pcg`` until it is retrained (its cache then
        holds ``pcg``'s state). Each step's certificate is that of the solver that took it, which it names."""
        if self.solver in SOLVERS:  # a concrete solver already ("auto" is the only other name accepted)
            return self
        concrete = resolve_solver("auto", X) if solver is None else solver
        check_choice("solver", concrete, tuple(SOLVERS))
        cached: dict[str, CertifiedRemoval] = self._resolved  # type: ignore[attr-defined]
        mech = cached.get(concrete)
        if mech is None:
            mech = cached[concrete] = replace(self, solver=concrete)
            fallback = SOLVERS[concrete].fallback
            if fallback is not None:
                object.__setattr__(mech, "_fallback", replace(self, solver=fallback))
        return mech

    @property
    def fallback(self) -> CertifiedRemoval | None:
        """The mechanism a step that this one cannot certify within the budget is taken again with (``pcg`` for
        the ``anchor`` that ``solver="auto"`` resolved to), or None."""
        return self._fallback  # type: ignore[attr-defined,no-any-return]

    @property
    def solver_spec(self) -> Solver:
        """The solver table's entry for this mechanism's solver (:data:`lethe.certified.solvers.SOLVERS`);
        ``ValueError`` for ``solver="auto"``, which names no solver until it is resolved for the data
        (:meth:`resolved`)."""
        return get_solver(self.solver)

    @property
    def loss_(self) -> Loss:
        """The loss object."""
        return self._loss  # type: ignore[attr-defined,no-any-return]

    @property
    def budget(self) -> float:
        """ε′: the largest accumulated residual norm that keeps the guarantee (Alg. 2, line 16)."""
        return self._budget  # type: ignore[attr-defined,no-any-return]

    @property
    def guarantee(self) -> str:
        """The definition the certificates refer to."""
        if self.residual_cap is not None:
            return ("none by itself: unperturbed centre (b = 0) with a certified residual <= residual_cap; the "
                    "privacy comes from the release noise of lethe.release (docs/release_privacy.md)")
        if self.noise == "none":
            return "exact removal (Guo et al. 2020, §3.2: least squares, epsilon = 0)"
        if self.noise == "laplace":
            return "epsilon-certified removal (Guo et al. 2020, Def. 1, Thm 3 i)"
        if self.calibration == "analytic":
            return ("(epsilon, delta)-certified removal (Guo et al. 2020, Def. 1, Thm 2-3 ii with the analytic "
                    "Gaussian mechanism of Balle & Wang 2018)")
        return "(epsilon, delta)-certified removal (Guo et al. 2020, Def. 1, Thm 3 ii)"

    def eps_delta(self) -> tuple[float, float]:
        """The (ε, δ) of the guarantee: (0, 0) for exact removal, (ε, 0) for Laplace-type b."""
        if self.noise == "none":
            return 0.0, 0.0
        if self.noise == "laplace":
            return float(self.epsilon), 0.0
        return float(self.epsilon), float(self.delta)

    def train_tolerance(self, n: int) -> float:
        """The gradient tolerance of training on n rows."""
        if self.tol is not None:
            return float(self.tol)
        if self.noise == "none":
            return 1e-9 * self.lam * n
        return 1e-3 * self.budget

    # -- data checks ----------------------------------------------------------------------------------------
    def check_data(self, X: Any, y: Any) -> tuple[DataMatrix, np.ndarray]:
        """Validate a data set: finite, ‖xᵢ‖ ≤ 1 (when the loss needs it), targets valid for the loss. X may be a
        dense array or a SciPy sparse matrix (:func:`~lethe.certified.data.check_data_matrix`)."""
        X = check_data_matrix("X", X)
        yv = check_finite_matrix("y", y, ndim=1)
        if X.shape[0] != yv.shape[0]:
            raise ValueError(f"X and y must have the same number of rows. Found {X.shape[0]} and {yv.shape[0]}.")
        if X.shape[0] < 2:
            raise ValueError(f"At least 2 training rows are needed (n_samples = {X.shape[0]}).")
        if self.loss_.gamma != 0.0:
            check_row_norms(X)
        return X, self.loss_.check_targets(yv)

    # -- Algorithm 1 ----------------------------------------------------------------------------------------
    def residual_with_allowance(self, w: np.ndarray, X: DataMatrix, y: np.ndarray, ev: Evaluation) -> float:
        """β₀ = ‖fl(∇L_b(w; D))‖ + the rounding allowance of computing it as
        :func:`~lethe.certified.objective.objective_grad` does. ``ev``: the optimiser's evaluation at w, reused when
        it computed exactly that (dense and sparse data); otherwise (a one-pass map-reduce of chunked data) the
        gradient and ‖ℓ'(Xw)‖ are computed again here."""
        n, d = X.shape
        B = backend_of(X)
        if (ev.exact_ops or ev.fused) and ev.at(w):
            g, d1_norm = ev.g, ev.d1_norm
        else:
            g = obj.objective_grad(w, X, y, self.loss_, self.lam, ev.b)
            d1_norm = vnorm(self.loss_.d1(B.matvec(X, w), y))
        # ‖X‖_F² as computed: a sum of n d squares (γ_{nd}), squares that underflow losing ≤ η each
        fro = math.sqrt(B.frobenius_sq(X) * (1.0 + 2.0 * gamma_k(n * d + 1)) + n * d * UNDERFLOW_ERROR)
        g_norm = vnorm(g)
        return g_norm + gradient_allowance(X, self.loss_, reg_coef=self.lam * n, fro=fro, d1_norm=d1_norm, w=w,
                                           b=ev.b, g_norm=g_norm)

    def train(self, X: Any, y: Any, random_state: RandomState = None, *,
              cache: NewtonCache | None = None, defer_setup: bool = False,
              check_input: bool = True) -> tuple[ModelState, Certificate]:
        """Algorithm 1: sample b, minimise L_b(w; D); the solver's residual starts the accumulated bound β.

        If a :class:`NewtonCache` is given it is prepared for the configured solver (for ``"anchor"`` this builds
        the anchor system, an O(n d²) pass that later removals then avoid). Returns the new state and a
        ``"train"`` certificate.

        ``defer_setup=True`` (the estimators' fit): the removal machinery — the ‖X‖₂ bound (the state's
        ``x_norm_bound`` is left NaN) and the cache's anchor system — is not formed here but by the first removal
        (:meth:`remove`), which pays for it; training then runs L-BFGS alone (no chord steps, which need the
        cache's factorised Hessian). The training certificate (β₀) is the same measured residual either way.

        ``check_input=False`` skips :meth:`check_data` (finite values, ‖xᵢ‖ ≤ 1, targets): only for data that the
        caller validated by the same rules and holds as its own copy (the estimators); it applies to dense C-ordered
        float64 arrays only (other data are checked anyway), and the targets are always checked.
        """
        t0 = time.perf_counter()
        if check_input or not (is_dense(X) and X.dtype == np.float64 and X.flags.c_contiguous):
            X, y = self.check_data(X, y)
        else:
            y = self.loss_.check_targets(np.asarray(y, dtype=np.float64))
        mech = self.resolved(X)  # solver="auto": resolved once, here
        if defer_setup and cache is not None:
            check_solver_supports(mech.solver, X)  # refuse at fit, not at the first removal
        rng = check_random_state(random_state)
        with blas_threads():
            state = _train_state(mech, X, y, rng, retrainings=0, cache=None if defer_setup else cache,
                                        defer_setup=defer_setup)
        return state, mech.certify("train", state, step=state.residual_bound, retrained=False, removed=(),
                                   worst=math.nan, solve_error=0.0, seconds=time.perf_counter() - t0)

    def prime(self, cache: NewtonCache, state: ModelState, X: DataMatrix, y: np.ndarray,
              active: np.ndarray | None = None) -> None:
        """Prepare ``cache`` for removals from ``state`` on the rows ``active`` of (X, y) (one data pass).

        Optional: an unprepared cache is built at the first removal.
        """
        active = np.ones(X.shape[0], dtype=bool) if active is None else np.asarray(active, dtype=bool)
        with blas_threads():
            prime_cache(self.resolved(X), state, X, y, active, cache)

    # -- Eq. 3 / Eq. 6 with their certificates, and Algorithm 2 -----------------------------------------------
    def within_budget(self, beta: float) -> bool:
        """Alg. 2, line 16: whether an accumulated residual bound β keeps the guarantee, β ≤ ε′ (always, for exact
        removal, ``noise="none"``). THE budget decision: every removal, retraining, addition, one-vs-all joint
        bound (:class:`~lethe.certified.one_vs_all.OneVsAllRemoval`) and stored state is judged by it."""
        return self.noise == "none" or beta <= self.budget

    def certify(self, operation: str, state: ModelState, *, step: float, retrained: bool,
                removed: tuple[int, ...], worst: float, solve_error: float, seconds: float,
                result: StepResult | None = None) -> Certificate:
        """The :class:`Certificate` of ``operation`` that left ``state``
        (:func:`lethe.certified.certificate.certify`)."""
        return certify(self, operation, state, step=step, retrained=retrained, removed=removed, worst=worst,
                       solve_error=solve_error, seconds=seconds, result=result)

    def newton_step(self, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray, idx: np.ndarray,
                    cache: NewtonCache | None = None) -> tuple[np.ndarray, float, float, float]:
        """The (batch) Newton removal step w⁻ = w + v, v ≈ H⁻¹Δ (Eq. 3, 6), and its certified residual increment.

        ``keep`` is the mask of rows that remain after the removal; ``idx`` the rows removed. The step is computed
        by the configured ``solver`` and certified by the configured ``bound`` (see :mod:`lethe.certified.newton`,
        :mod:`lethe.certified.bounds` and docs/tighter_bounds.md). A :class:`NewtonCache` makes later steps
        fast; it advances itself to the returned weights.

        Returns (w⁻, step bound, worst-case bound (Thm 1/4, informational), measured solve error).
        """
        r = self.step(state, X, y, keep, idx, cache)
        return r.w_new, r.step_bound, r.worst_case, r.solve_error

    def step(self, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray, idx: np.ndarray,
             cache: NewtonCache | None = None) -> StepResult:
        """As :meth:`newton_step`, returning the full :class:`~lethe.certified.newton.StepResult`."""
        mech = self.resolved(X)
        with blas_threads():
            return compute_step(mech, state, X, y, keep, idx, cache)

    def propose(self, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray, idx: np.ndarray,
                cache: NewtonCache | None = None, *, limit: float | None = None) -> tuple[ModelState, StepResult]:
        """Alg. 2, lines 6–15 without the budget decision: the Newton step from ``state`` removing rows ``idx``
        (``keep``: the rows after it) as a new state whose β is the old β plus the step's certified bound (Guo et
        al.'s induction; with ``bound="tight"`` possibly the smaller accumulated bound of docs/tighter_bounds.md §4).
        The caller decides with :meth:`within_budget` (:meth:`remove`, the one-vs-all
        :class:`~lethe.certified.one_vs_all.OneVsAllRemoval`).

        ``limit`` (default: the budget ε′): the bound above which a step of ``auto``'s ``anchor`` is taken again by
        its fallback (:meth:`resolved`); one-vs-all passes each class's share of the joint budget."""
        mech = self.resolved(X)
        alt = mech.fallback
        if alt is None or cache is None:
            return mech._step_own(state, X, y, keep, idx, cache)
        if alt.solver_spec.holds(cache):  # this model fell back: it stays there until it is retrained
            return alt._step_own(state, X, y, keep, idx, cache)
        new, r = mech._step_own(state, X, y, keep, idx, cache)
        if mech.noise == "none" or new.residual_bound <= (mech.budget if limit is None else limit):
            return new, r
        # over budget from the anchor's bounded terms: the exact-Hessian step, from the same state, before any
        # retraining. Its cache is primed from (w, rows before), as after loading the model, and in tight mode
        # its vector accounting restarts from the residual measured at w (as an anchor's re-measure does,
        # docs/tighter_bounds.md §5c, §5f) instead of from the anchor's accumulated bound β
        cache.reset()
        before = keep.copy()
        before[idx] = True
        with blas_threads():
            prime_cache(alt, state, X, y, before, cache)
            if alt.bound == "tight" and mech.loss_.gamma != 0.0:
                cache.carry_e, cache.carry_err = measured_residual(alt, state.w, state.b, X, y, before)
                cache.carry_bound = 0.0
        return alt._step_own(state, X, y, keep, idx, cache)

    def _step_own(self, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray, idx: np.ndarray,
                  cache: NewtonCache | None) -> tuple[ModelState, StepResult]:
        """:meth:`propose` with this (concrete) mechanism's own solver."""
        with blas_threads():
            if cache is not None and cache.state is None and self.solver_spec.primed_lazily:
                # a cache never primed (training deferred it, or it was reset): primed now exactly as ``prime``
                # primes it after training or loading, so a service and the estimator take the same steps
                # (``onepass`` steps build their anchor system themselves when out of sync, sharing one float32
                # copy between the models of a one-vs-all estimator)
                prime_cache(self, state, X, y, mask_before(keep, idx), cache)
            if not math.isfinite(state.x_norm_bound):
                state = self._with_x_norm(state, X, cache, mask_before(keep, idx))
            r = compute_step(self, state, X, y, keep, idx, cache)
        beta = state.residual_bound + r.step_bound  # Guo et al.'s induction (triangle inequality over steps)
        if r.accumulated_bound is not None:  # tight accounting with the measured error vector (docs §4)
            beta = min(beta, r.accumulated_bound)
        new = ModelState(w=r.w_new, b=state.b, n=state.n - idx.size, residual_bound=beta,
                         x_norm_bound=state.x_norm_bound, removals_since_training=state.removals_since_training
                         + idx.size, retrainings=state.retrainings, train_iterations=state.train_iterations)
        return new, r

    def _with_x_norm(self, state: ModelState, X: DataMatrix, cache: NewtonCache | None = None,
                     active: np.ndarray | None = None) -> ModelState:
        """``state`` with its ‖X‖₂ bound formed now if training deferred it (``train(defer_setup=True)``).

        The bound is computed over *all* rows of X, active or not: a removal's X holds the training rows (removed
        ones zeroed, or still present), a superset of the current data, and ‖X_S‖₂ ≤ ‖X‖₂ for any subset S of rows
        (docs/tighter_bounds.md §9). States that carry a bound, or data for which no d × d bound is formed (d > n,
        matrix-free or chunked data), are returned unchanged (the Frobenius fallback of the bounds applies).

        An ``anchor`` cache synced to (w, ``active``) with every row of dense X active holds G̃ = fl(XᵀX) over all
        rows (its Gram matrix, formed when it was primed; never downdated): the bound is then computed from it
        (:func:`~lethe.certified.bounds.spectral_norm_upper_bound` with ``gram``, whose allowance covers the
        product's rounding, as training without deferral shares it) instead of forming a second, single-precision
        Gram matrix. Estimator and service prime the same cache from the same data, so both get the same bound.
        """
        if math.isfinite(state.x_norm_bound):
            return state
        B = backend_of(X)
        n_rows, d = X.shape
        if d > n_rows or B.matrix_free(X):
            return state
        gram = synced_gram(cache, X, state.w, active) if cache is not None and active is not None else None
        if gram is not None:
            x_norm = B.spectral_norm_bound(X, gram=gram)
        else:
            x_norm = spectral_norm_upper_bound_single(X) if is_dense(X) else B.spectral_norm_bound(X)
        return ModelState(w=state.w, b=state.b, n=state.n, residual_bound=state.residual_bound, x_norm_bound=x_norm,
                          removals_since_training=state.removals_since_training, retrainings=state.retrainings,
                          train_iterations=state.train_iterations)

    def retrain(self, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray, rng: np.random.Generator,
                cache: NewtonCache | None = None) -> ModelState:
        """Alg. 2 line 17: retrain on the rows ``keep`` with a fresh b (reusing the ‖X‖₂ bound: rows were only
        removed), and re-prime ``cache`` for the new model."""
        mech = self.resolved(X)
        with blas_threads():
            new = _train_state(mech, backend_of(X).subset(X, keep), y[keep], rng,
                                      retrainings=state.retrainings + 1, x_norm=state.x_norm_bound)
            if cache is not None:
                cache.reset()
                prime_cache(mech, new, X, y, keep, cache)
        return new

    def remove(self, state: ModelState, X: Any, y: Any, indices: Any, *, active: np.ndarray | None = None,
               cache: NewtonCache | None = None, random_state: RandomState = None,
               check_input: bool = True, clear_active: bool = False) -> tuple[ModelState, Certificate]:
        """Remove rows ``indices`` of X as one batch (Eq. 3 for one row, Eq. 6 for many), certified by the
        configured bound (Cor. 1/2 or the tight bounds).

        If the certified bound after the step would exceed the budget ε′, retrain on the remaining rows with a
        fresh b instead (Alg. 2, lines 16–17).

        Parameters
        ----------
        state : ModelState
            The current model, trained on the rows ``active`` of (X, y).
        X, y : arrays
            The data matrix and targets; rows with ``active[i] == False`` are not part of the data set (they may
            have been zeroed after an earlier removal).
        indices : sequence of int
            Rows of X to remove; each must be active.
        active : bool array, optional
            Rows currently in the data set (default: all). Not modified; the caller clears ``active[indices]``.
        cache : NewtonCache, optional
            Cached factorisation / margins / anchor system (fast path; required for the ``anchor`` solver to be
            O(d²)). Without it the Hessian is rebuilt. A cache synced to (X, w, ``active``) also gives the number
            of active rows (its own copy of the mask, compared in full) instead of a count.
        random_state
            Randomness for the fresh b if retraining is needed.
        check_input : bool
            Validate X and y (finite, ‖xᵢ‖ ≤ 1, targets). Only skip it for data validated before (as the
            estimators do: they hold the data they were fitted on).
        clear_active : bool
            Clear ``active[indices]`` in place (``active`` must then be a boolean NumPy array) instead of working on
            a copy of the mask: for callers that clear them anyway (the estimators), it saves an O(n) copy per
            removal. If the removal raises, the rows are set again, so ``active`` is as it was (and the
            cache is put back as it was, :meth:`NewtonCache.begin`: the next removal is certified as if this one had
            never run). A read-only
            ``active`` is made writable for the change and read-only again: a caller that keeps its mask read-only
            between removals (the estimators' ``active_``) also spares the O(n) comparison with the cache's copy
            (:meth:`NewtonCache.synced_count` with ``owned``).
        """
        t0 = time.perf_counter()
        if check_input:
            X, y = self.check_data(X, y)
        mech = self.resolved(X)  # solver="auto": resolved once, here
        n_rows = X.shape[0]
        if clear_active and not (isinstance(active, np.ndarray) and active.dtype == np.bool_):
            raise TypeError("clear_active=True clears the rows in the caller's mask: active must be a boolean NumPy "
                            f"array. Found {type(active).__name__} of dtype {getattr(active, 'dtype', None)}.")
        if active is None:
            active = np.ones(n_rows, dtype=bool)
        active = np.asarray(active, dtype=bool)
        if active.shape != (n_rows,):
            raise ValueError(f"active must be a boolean mask of length {n_rows}. Found shape {active.shape}.")
        n_active = cache.synced_count(X, state.w, active, owned=clear_active) if cache is not None else None
        synced = n_active is not None
        if n_active is None:
            n_active = int(np.count_nonzero(active))
        if n_active != state.n:
            raise ValueError(f"The data must have the {state.n} active rows the model was trained on. "
                             f"Found {n_active}.")
        if X.shape[1] != state.w.shape[0]:
            raise ValueError(f"X must have {state.w.shape[0]} features. Found {X.shape[1]}.")
        idx = check_indices(indices, n_rows, active, state.n)  # state.n == the rows ``active`` marks (checked)
        keep = active if clear_active else active.copy()
        # a transaction on the cache (unless the caller opened one: the estimators, whose own undo record covers it)
        txn = cache.begin(idx) if cache is not None and cache.txn is None else None
        rng: np.random.Generator | None = None
        rng_state: Any = None
        try:
            set_rows(keep, idx, False)  # inside the try: the rows are set again whatever point an exception hits
            if synced:  # the cache's mask was just compared with ``active``: the step need not compare it again
                cache.vouch_removal(keep, idx, n_active - idx.size)  # type: ignore[union-attr]
            new, r = mech.propose(state, X, y, keep, idx, cache)
            retrained = not mech.within_budget(new.residual_bound)
            if retrained:  # Alg. 2, line 17
                rng = check_random_state(random_state)
                rng_state = rng.bit_generator.state if rng is random_state else None  # the caller's, restored
                if rng_state is not None and txn is None and cache is not None and cache.txn is not None:
                    cache.txn.rng = (rng, rng_state)  # for the caller's transaction (the estimators' lazy_rng)
                new = mech.retrain(state, X, y, keep, rng, cache)
            cert = mech.certify("retrain" if retrained else "remove", new, step=r.step_bound, retrained=retrained,
                                removed=tuple(idx.tolist()), worst=r.worst_case, solve_error=r.solve_error,
                                seconds=time.perf_counter() - t0, result=r)
        except BaseException:
            if clear_active:
                set_rows(keep, idx, True)  # the caller's mask as it was
            if rng is not None and rng_state is not None:
                rng.bit_generator.state = rng_state
            if txn is not None:
                txn.rollback()  # the cache as it was, bit for bit
            raise
        if txn is not None:
            txn.close()
        return new, cert


def compute_step(cfg: CertifiedRemoval, state: ModelState, X: DataMatrix, y: np.ndarray, keep: np.ndarray,
                 idx: np.ndarray, cache: NewtonCache | None) -> StepResult:
    """The removal step of ``cfg.solver``: its entry's ``step`` in the solver table (:mod:`lethe.certified.solvers`:
    :mod:`~lethe.certified.anchor`, :mod:`~lethe.certified.onepass` or :mod:`~lethe.certified.exact`). On an exception
    the cache is reset (its in-place updates may be half done)."""
    spec = cfg.solver_spec
    spec.check_supports(X)
    try:
        return spec.step(cfg, state, X, y, keep, idx, cache)
    except BaseException:
        if cache is not None:
            cache.reset()
        raise


def _train_state(cfg: CertifiedRemoval, X: DataMatrix, y: np.ndarray, rng: np.random.Generator,
                 retrainings: int, *, x_norm: float | None = None, cache: NewtonCache | None = None,
                 defer_setup: bool = False) -> ModelState:
    """Alg. 1 for the concrete mechanism ``cfg`` on validated data: sample b (none with ``residual_cap``), minimise
    L_b, charge the measured residual β₀ with its allowance (refused above the budget), form the ‖X‖₂ bound unless
    deferred or given, and prime ``cache``."""
    n, d = X.shape
    # residual_cap: the unperturbed objective (b = 0), no draw from rng
    b = np.zeros(d) if cfg.residual_cap is not None else sample_perturbation(d, cfg.sigma, cfg.noise, rng)
    precondition = None
    B = backend_of(X)
    # the chord steps need the cache's factorised anchor system: formed for pcg/refine on in-memory data that is
    # not matrix-free (dense, or sparse with few features); chunked and matrix-free data train by L-BFGS alone
    spec = cfg.solver_spec
    formed: list[bool] = []  # whether the chord steps formed an anchor system in the cache
    if (cache is not None and spec.preconditions_training and cfg.loss_.gamma != 0.0
            and B.name in ("dense", "sparse") and not B.matrix_free(X)):

        def precondition(w_c: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
            # the pcg/refine cache's anchor system at w_c: it preconditions the last training iterations;
            # prime_cache then forms it again at the final w (the removals' preconditioner, as after a reload)
            assert cache is not None
            formed.append(True)
            F = precondition_training(cfg, w_c, X, y, cache)
            return lambda r: newton_solve(F, r)

    try:
        w, iterations, ev = minimise(cfg, X, y, b, precondition=precondition)
        beta = cfg.residual_with_allowance(w, X, y, ev)
        del ev
        if not cfg.within_budget(beta):
            raise RuntimeError(f"The training residual {beta:.3g} exceeds the removal budget {cfg.budget:.3g}; "
                               "lower tol.")
    except BaseException:
        if formed and cache is not None:
            cache.reset()  # the chord steps' anchor system is no model's: the cache holds no solver state
        raise
    gram = None
    if cache is not None and spec.gram_at_training and d <= n and not B.matrix_free(X):
        gram = B.gram(X)  # fl(XᵀX), shared by ‖X‖₂ and the anchor's Gram matrix
    if defer_setup and (x_norm is None or not math.isfinite(x_norm)):
        x_norm = math.nan  # formed by the first removal (:meth:`_with_x_norm`)
    elif x_norm is None or not math.isfinite(x_norm):
        # dense data without a double-precision Gram matrix at hand: a single-precision one (half the time; bound
        # looser by ≈ γ_1024 in single precision, relative to ‖X‖_F²/‖X‖₂²); other backends: their own bound
        x_norm = (spectral_norm_upper_bound_single(X) if is_dense(X) and gram is None and d <= n
                  else B.spectral_norm_bound(X, gram=gram))
    state = ModelState(w=w, b=b, n=n, residual_bound=beta, x_norm_bound=x_norm, removals_since_training=0,
                       retrainings=retrainings, train_iterations=iterations)
    if cache is not None:
        prime_cache(cfg, state, X, y, np.ones(n, dtype=bool), cache, gram=gram)
    return state


__all__ = ["Certificate", "CertifiedRemoval", "ModelState", "NewtonCache", "check_row_norms"]
