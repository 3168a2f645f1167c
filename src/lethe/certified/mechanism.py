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

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

from lethe._random import RandomState, check_random_state
from lethe._validation import (
    check_choice,
    check_finite_matrix,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from lethe.certified import objective as obj
from lethe.certified.bounds import (
    data_dependent_bound,
    rounding_allowance,
    spectral_norm_upper_bound,
    worst_case_bound,
)
from lethe.certified.noise import NOISES, epsilon_spent, residual_budget, sample_perturbation
from lethe.losses import Loss, get_loss

ROW_NORM_TOLERANCE = 1e-9


def check_row_norms(X: np.ndarray, name: str = "X") -> None:
    """Raise ``ValueError`` naming the first row with ‖xᵢ‖₂ > 1 (the theory of Guo et al. 2020 needs ‖xᵢ‖ ≤ 1)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    bad = np.flatnonzero(norms > 1.0 + ROW_NORM_TOLERANCE)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"Every row of {name} must have L2 norm <= 1 (Guo et al. 2020, Thm 1). Row {i} has norm {norms[i]:.6g}; "
            "rescale the features or ask for row normalisation (normalize_rows=True)."
        )


@dataclass(frozen=True, eq=False)
class ModelState:
    """The state of one removal-enabled linear model. Immutable; every operation returns a new one.

    Attributes
    ----------
    w : ndarray (d,)
        The published weights.
    b : ndarray (d,)
        The secret objective perturbation (Alg. 1). Never publish it.
    n : int
        Number of training rows the state refers to (current data).
    residual_bound : float
        β: certified upper bound on ‖∇L_b(w; D)‖₂ on the current data (training residual + removal steps).
    x_norm_bound : float
        Certified upper bound on ‖X‖₂ of the data at the last (re)training; valid for every later subset.
    removals_since_training : int
        Rows removed since the last (re)training.
    retrainings : int
        How many times the budget forced retraining.
    train_iterations : int
        Optimiser iterations of the last (re)training.
    """

    w: np.ndarray
    b: np.ndarray
    n: int
    residual_bound: float
    x_norm_bound: float
    removals_since_training: int = 0
    retrainings: int = 0
    train_iterations: int = 0

    def __post_init__(self) -> None:
        for name in ("w", "b"):
            arr = np.array(getattr(self, name), dtype=np.float64, copy=True)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)


class NewtonCache:
    """A cached Cholesky factorisation M of a Hessian, used to precondition later Newton solves.

    Held in memory by the caller, never serialised with the model: M is derived from the data at the time it
    was formed (including rows removed since), so it is refreshed from the current data whenever it goes stale
    (more than ``max_sweeps`` refinement sweeps needed to bring ‖Hv − Δ‖ below ``budget_share`` times the
    Cor. 1/2 term, or below ``rtol`` ‖Δ‖) and dropped at retraining.
    """

    def __init__(self, rtol: float = 1e-12, budget_share: float = 1e-2, max_sweeps: int = 4) -> None:
        self.rtol = rtol
        self.budget_share = budget_share
        self.max_sweeps = max_sweeps
        self.factor: tuple[np.ndarray, bool] | None = None
        self.refreshes = 0
        self.sweeps_total = 0

    def refresh(self, H: np.ndarray) -> None:
        """Factorise a new Hessian."""
        self.factor = cho_factor(H)
        self.refreshes += 1


@dataclass(frozen=True)
class Certificate:
    """What one operation (train, remove, retrain) guaranteed, by which result, with which numbers, at what cost.

    ``epsilon``/``delta`` are the guarantee that holds for the published model after the operation
    (delta = 0 for pure ε-removal; epsilon = delta = 0 for exact removal).
    """

    operation: str
    guarantee: str
    epsilon: float
    delta: float
    noise: str
    bound: str
    step_bound: float
    residual_bound: float
    budget: float
    budget_left: float
    epsilon_spent: float
    retrained: bool
    n_removed: int
    n_remaining: int
    worst_case_bound: float
    solve_error: float
    seconds: float
    removed_indices: tuple[int, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        d = dataclasses.asdict(self)
        d["removed_indices"] = list(self.removed_indices)
        return d


def _check_indices(indices: Any, n: int, active: np.ndarray) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1:
        raise ValueError(f"indices must be a 1-D sequence of row indices. Found shape {idx.shape}.")
    if idx.size == 0:
        raise ValueError("indices must name at least one row. Found an empty sequence.")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be integers. Found dtype {idx.dtype}.")
    bad = np.flatnonzero((idx < 0) | (idx >= n))
    if bad.size:
        raise ValueError(f"indices must be in [0, {n}). Found {int(idx[bad[0]])}.")
    uniq, counts = np.unique(idx, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"indices must be distinct. Found {int(uniq[counts > 1][0])} more than once.")
    gone = np.flatnonzero(~active[idx])
    if gone.size:
        raise ValueError(f"Row {int(idx[gone[0]])} was already removed.")
    if idx.size >= int(np.count_nonzero(active)):
        raise ValueError(f"Cannot remove all {int(np.count_nonzero(active))} remaining rows: one must remain.")
    return idx.astype(np.int64)


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
    solver : {"cholesky", "refine"}
        How the Newton system H v = Δ is solved at removal: ``"cholesky"`` rebuilds and factorises the exact
        Hessian on the remaining data at every removal (the paper, O(nd² + d³)); ``"refine"`` uses iterative
        refinement with a cached factorisation (see :class:`NewtonCache`), O(nd) per sweep. The step and the
        certificate are for the same Eq. 3/6 either way; the measured solve error is charged to the bound.
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
        check_choice("solver", self.solver, ("cholesky", "refine"))
        object.__setattr__(self, "_loss", loss)
        object.__setattr__(self, "_budget", residual_budget(self.sigma, self.epsilon, self.delta, self.noise)
                           if self.noise != "none" else 0.0)

    # -- derived quantities ---------------------------------------------------------------------------------
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
        if self.noise == "none":
            return "exact removal (Guo et al. 2020, §3.2: least squares, epsilon = 0)"
        if self.noise == "laplace":
            return "epsilon-certified removal (Guo et al. 2020, Def. 1, Thm 3 i)"
        return "(epsilon, delta)-certified removal (Guo et al. 2020, Def. 1, Thm 3 ii)"

    def _eps_delta(self) -> tuple[float, float]:
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
    def check_data(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validate a data set: finite, ‖xᵢ‖ ≤ 1 (when the loss needs it), targets valid for the loss."""
        X = check_finite_matrix("X", X)
        yv = check_finite_matrix("y", y, ndim=1)
        if X.shape[0] != yv.shape[0]:
            raise ValueError(f"X and y must have the same number of rows. Found {X.shape[0]} and {yv.shape[0]}.")
        if X.shape[0] < 2:
            raise ValueError(f"At least 2 training rows are needed (n_samples = {X.shape[0]}).")
        if self.loss_.gamma != 0.0:
            check_row_norms(X)
        return X, self.loss_.check_targets(yv)

    # -- Algorithm 1 ----------------------------------------------------------------------------------------
    def _solve(self, X: np.ndarray, y: np.ndarray, b: np.ndarray,
               w0: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """argmin_w L_b(w; D) to gradient norm ≤ tol: L-BFGS, then Newton polishing (exact for γ = 0)."""
        n, d = X.shape
        loss, lam = self.loss_, self.lam
        tol = self.train_tolerance(n)
        w = np.zeros(d) if w0 is None else w0.copy()
        iterations = 0
        if loss.gamma != 0.0:
            res = minimize(obj.value_and_grad, w, args=(X, y, loss, lam, b), jac=True, method="L-BFGS-B",
                           options={"maxiter": self.max_iter, "gtol": tol / math.sqrt(d) / 10, "ftol": 0.0,
                                    "maxcor": 20})
            w = res.x
            iterations = int(res.nit)
        for _ in range(50):
            g = obj.objective_grad(w, X, y, loss, lam, b)
            if np.linalg.norm(g) <= tol:
                return w, max(iterations, 1)
            H = obj.hessian(w, X, y, loss, lam)
            w = w - cho_solve(cho_factor(H), g)
            iterations += 1
        g = obj.objective_grad(w, X, y, loss, lam, b)
        if np.linalg.norm(g) > tol:
            raise RuntimeError(f"Training did not reach the gradient tolerance {tol:.3g}: |grad| = "
                               f"{np.linalg.norm(g):.3g}. Increase max_iter or tol.")
        return w, iterations

    def _residual_with_allowance(self, w: np.ndarray, X: np.ndarray, y: np.ndarray, b: np.ndarray) -> float:
        n, d = X.shape
        g = obj.objective_grad(w, X, y, self.loss_, self.lam, b)
        d1 = self.loss_.d1(X @ w, y)
        fro = math.sqrt(float(np.einsum("ij,ij->", X, X)))
        return float(np.linalg.norm(g)) + rounding_allowance(
            n, d, fro * float(np.linalg.norm(d1)), self.lam * n * float(np.linalg.norm(w)), float(np.linalg.norm(b)))

    def train(self, X: Any, y: Any, random_state: RandomState = None) -> tuple[ModelState, Certificate]:
        """Algorithm 1: sample b, minimise L_b(w; D); the solver's residual starts the accumulated bound β.

        Returns the new state and a ``"train"`` certificate.
        """
        t0 = time.perf_counter()
        X, y = self.check_data(X, y)
        rng = check_random_state(random_state)
        state = self._train_checked(X, y, rng, retrainings=0)
        return state, self._certificate("train", state, step=state.residual_bound, retrained=False, removed=(),
                                        worst=math.nan, solve_error=0.0, seconds=time.perf_counter() - t0)

    def _train_checked(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator, retrainings: int) -> ModelState:
        n, d = X.shape
        b = sample_perturbation(d, self.sigma, self.noise, rng)
        w, iterations = self._solve(X, y, b)
        beta = self._residual_with_allowance(w, X, y, b)
        if self.noise != "none" and beta > self.budget:
            raise RuntimeError(f"The training residual {beta:.3g} exceeds the removal budget {self.budget:.3g}; "
                               "lower tol.")
        x_norm = spectral_norm_upper_bound(X) if self.loss_.gamma != 0.0 else math.nan
        return ModelState(w=w, b=b, n=n, residual_bound=beta, x_norm_bound=x_norm, removals_since_training=0,
                          retrainings=retrainings, train_iterations=iterations)

    # -- Eq. 3 / Eq. 6 with Cor. 1 / Cor. 2 and Algorithm 2 -----------------------------------------------------
    def newton_step(self, state: ModelState, X: np.ndarray, y: np.ndarray, keep: np.ndarray, idx: np.ndarray,
                    cache: NewtonCache | None = None) -> tuple[np.ndarray, float, float, float]:
        """The (batch) Newton removal step w⁻ = w + H⁻¹Δ (Eq. 3, 6) and its certified residual increment.

        ``keep`` is the mask of rows that remain after the removal; ``idx`` the rows removed.
        H = ∇²L(w; D′) is applied exactly; the linear system is solved either by a fresh Cholesky factorisation
        of H (``solver="cholesky"``, the paper's O(nd² + d³)) or, when a :class:`NewtonCache` is given, by
        iterative refinement preconditioned with a cached factorisation M of an earlier Hessian: v ← v − M⁻¹(Hv − Δ),
        each sweep one O(nd) Hessian-vector product. Either way the solve error ‖Hv − Δ‖ is measured exactly and
        charged to the certificate, so the bound does not depend on how well the system was solved.

        Returns (w⁻, step bound, worst-case bound (Thm 1/4, informational), solve error ‖Hv − Δ‖).
        See :mod:`lethe.certified.bounds` for the derivation.
        """
        loss, lam = self.loss_, self.lam
        d = X.shape[1]
        n_new = int(np.count_nonzero(keep))
        m = idx.size
        w = state.w
        # Δ = m λ w + Σ_{j removed} ∇ℓ(wᵀxⱼ, yⱼ)   (Eq. 6)
        Delta = m * lam * w + obj.loss_gradients_sum(w, X[idx], y[idx], loss)
        s = obj.curvature(w, X, y, loss, keep)  # diag of D_w on D′ (0 on absent rows)
        x_norm = state.x_norm_bound if loss.gamma != 0.0 else 0.0

        def residual_of(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            w_new = w + v
            v = w_new - w  # the step actually taken, after rounding
            Xv = X @ v
            return w_new, v, Xv, X.T @ (s * Xv) + lam * n_new * v - Delta

        def cor_term(v: np.ndarray, Xv: np.ndarray) -> float:
            return data_dependent_bound(loss.gamma, x_norm, float(np.linalg.norm(v)), float(np.linalg.norm(Xv[keep])))

        if cache is None or self.solver == "cholesky":
            factor = cho_factor(obj.hessian(w, X, y, loss, lam, mask=keep))
            w_new, v, Xv, err = residual_of(cho_solve(factor, Delta))
        else:
            if cache.factor is None:
                cache.refresh(obj.hessian(w, X, y, loss, lam, mask=keep))
            assert cache.factor is not None
            v = cho_solve(cache.factor, Delta)
            for sweep in range(cache.max_sweeps + 1):
                w_new, v, Xv, err = residual_of(v)
                e_norm = float(np.linalg.norm(err))
                # stop once the solve error costs at most ``budget_share`` of the Cor. 1/2 term (or is negligible)
                if e_norm <= max(cache.rtol * float(np.linalg.norm(Delta)), cache.budget_share * cor_term(v, Xv)):
                    break
                if sweep == cache.max_sweeps:  # the preconditioner has gone stale: refresh at the current point
                    cache.refresh(obj.hessian(w, X, y, loss, lam, mask=keep))
                    w_new, v, Xv, err = residual_of(cho_solve(cache.factor, Delta))
                    break
                v = v - cho_solve(cache.factor, err)
            cache.sweeps_total += sweep + 1
        Xv_norm = float(np.linalg.norm(Xv[keep]))
        v_norm = float(np.linalg.norm(v))
        solve_err = float(np.linalg.norm(err))
        step = data_dependent_bound(loss.gamma, x_norm, v_norm, Xv_norm) + solve_err
        h_norm = float(np.max(s, initial=0.0)) * (x_norm**2 if loss.gamma != 0.0 else
                                                   float(np.einsum("ij,ij->", X[keep], X[keep]))) + lam * n_new
        step += rounding_allowance(n_new, d, float(np.linalg.norm(Delta)), h_norm * v_norm)
        worst = worst_case_bound(loss.gamma, loss.grad_bound, lam, n_new, m)
        return w_new, step, worst, solve_err

    def remove(self, state: ModelState, X: Any, y: Any, indices: Any, *, active: np.ndarray | None = None,
               cache: NewtonCache | None = None, random_state: RandomState = None,
               check_input: bool = True) -> tuple[ModelState, Certificate]:
        """Remove rows ``indices`` of X as one batch (Eq. 3 for one row, Eq. 6 for many), certified by Cor. 1/2.

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
            A cached factorisation used as preconditioner (fast path). Without it the Hessian is rebuilt.
        random_state
            Randomness for the fresh b if retraining is needed.
        check_input : bool
            Validate X and y (finite, ‖xᵢ‖ ≤ 1, targets). Only skip it for data validated before (as the
            estimators do: they hold the data they were fitted on).
        """
        t0 = time.perf_counter()
        if check_input:
            X, y = self.check_data(X, y)
        n_rows = X.shape[0]
        if active is None:
            active = np.ones(n_rows, dtype=bool)
        active = np.asarray(active, dtype=bool)
        if active.shape != (n_rows,):
            raise ValueError(f"active must be a boolean mask of length {n_rows}. Found shape {active.shape}.")
        if int(np.count_nonzero(active)) != state.n:
            raise ValueError(f"The data must have the {state.n} active rows the model was trained on. "
                             f"Found {int(np.count_nonzero(active))}.")
        if X.shape[1] != state.w.shape[0]:
            raise ValueError(f"X must have {state.w.shape[0]} features. Found {X.shape[1]}.")
        idx = _check_indices(indices, n_rows, active)
        rng = check_random_state(random_state)
        keep = active.copy()
        keep[idx] = False
        w_new, step, worst, solve_err = self.newton_step(state, X, y, keep, idx, cache)
        beta = state.residual_bound + step
        removed = tuple(int(i) for i in idx)
        if self.noise == "none" or beta <= self.budget:
            new = ModelState(w=w_new, b=state.b, n=state.n - idx.size, residual_bound=beta,
                             x_norm_bound=state.x_norm_bound,
                             removals_since_training=state.removals_since_training + idx.size,
                             retrainings=state.retrainings)
            return new, self._certificate("remove", new, step=step, retrained=False, removed=removed, worst=worst,
                                          solve_error=solve_err, seconds=time.perf_counter() - t0)
        new = self._train_checked(X[keep], y[keep], rng, retrainings=state.retrainings + 1)
        if cache is not None:
            cache.factor = None
        return new, self._certificate("retrain", new, step=step, retrained=True, removed=removed, worst=worst,
                                      solve_error=solve_err, seconds=time.perf_counter() - t0)

    def _certificate(self, operation: str, state: ModelState, *, step: float, retrained: bool,
                     removed: tuple[int, ...], worst: float, solve_error: float, seconds: float) -> Certificate:
        eps, delta = self._eps_delta()
        bound = ("training residual (Guo et al. 2020, footnote 1)" if operation == "train" else
                 "data-dependent: Cor. 1/Cor. 2 + solve error (Guo et al. 2020)")
        if operation == "retrain":
            bound = "budget exceeded (Alg. 2 line 16): retrained with fresh b; bound = training residual"
        budget = self.budget
        return Certificate(
            operation=operation, guarantee=self.guarantee, epsilon=eps, delta=delta, noise=self.noise, bound=bound,
            step_bound=float(step), residual_bound=float(state.residual_bound), budget=float(budget),
            budget_left=float(max(budget - state.residual_bound, 0.0)) if self.noise != "none" else 0.0,
            epsilon_spent=float(epsilon_spent(state.residual_bound, self.sigma, self.delta, self.noise))
            if self.noise != "none" else 0.0,
            retrained=retrained, n_removed=len(removed), n_remaining=state.n, worst_case_bound=float(worst),
            solve_error=float(solve_error), seconds=float(seconds), removed_indices=removed)


def exact_residual(config: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray) -> float:
    """‖∇L_b(w; D)‖₂ for the current data: the quantity every certificate bounds (for tests and audits)."""
    return float(np.linalg.norm(obj.objective_grad(state.w, X, y, config.loss_, config.lam, state.b)))


__all__ = ["Certificate", "CertifiedRemoval", "ModelState", "check_row_norms", "exact_residual"]
