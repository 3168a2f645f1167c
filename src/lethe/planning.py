"""Choosing σ from the removals a model must support (issue 16; cf. Opacus' ``make_private_with_epsilon``).

The (ε, δ) guarantee of certified removal holds while the accumulated residual bound β stays within the budget
ε′ (Guo et al. 2020, Alg. 2); ε′ is proportional to σ for every calibration lethe has (Gaussian ``"paper"``:
ε′ = σε/c; ``"analytic"``: ε′ = σ/σ₁(ε, δ); Laplace-type: ε′ = σε), while β after R removals depends on σ only
through the weights. So the σ that supports R removals before a retraining is

    σ_R = β_R(σ_R) / ε′(σ = 1),

a fixed point that :func:`plan_sigma` finds by simulation on the user's data: train at σ, take R Newton removal
steps of random rows with the estimator's own solver and bound (no budget decision, nothing is published), read β_R,
set σ ← margin · β_R / ε′(1), and repeat until σ settles. An ``anchor`` model (the default ``solver="auto"`` on
dense data) certifies with a bound that adapts to its budget (it re-measures the residual), so its fixed point is
taken on ``pcg``'s β and σ is then searched downwards with the estimator's own removals (:func:`_search_adaptive`).
It reports the accuracy at that σ on held-out rows beside
the accuracy of the same model without noise, i.e. what the guarantee costs.

The plan is a planning aid, not a certificate: every removal is still certified and the estimator still retrains
when the budget is spent. Removal requests that are not random (e.g. the hardest training points) cost more budget
per removal than the simulation assumes; plan with a margin, or simulate those rows (``removal_rows``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone

from lethe._rng import check_random_state
from lethe._validation import check_positive, check_positive_int
from lethe.certified.cache import NewtonCache
from lethe.certified.newton import resolve_solver
from lethe.certified.noise import residual_budget
from lethe.estimators import CertifiedLogisticRegression, joint_residual


@dataclass(frozen=True)
class SigmaPlan:
    """The σ chosen by :func:`plan_sigma` and what it costs.

    Attributes
    ----------
    sigma : float
        σ that supports ``n_removals`` simulated removals within the budget (times ``margin``).
    epsilon, delta : float
        The guarantee planned for.
    n_removals : int
        Removals to support before a retraining.
    residual_after_removals : float
        β after the simulated removals at ``sigma`` (joint over one-vs-all classes).
    budget : float
        ε′ at ``sigma``.
    accuracy : float
        Mean held-out score of models trained at ``sigma`` (over ``n_repeats`` draws of b).
    accuracy_without_noise : float
        Held-out score of the same model with b ≈ 0 (no guarantee): the reference for the cost.
    iterations : int
        Fixed-point iterations used, plus the simulated runs of the downward search for an ``anchor`` model.
    """

    sigma: float
    epsilon: float
    delta: float
    n_removals: int
    residual_after_removals: float
    budget: float
    accuracy: float
    accuracy_without_noise: float
    iterations: int

    @property
    def accuracy_cost(self) -> float:
        """``accuracy_without_noise − accuracy``: what the removal guarantee costs in held-out score."""
        return self.accuracy_without_noise - self.accuracy


def _removes_without_retraining(est: Any, X: np.ndarray, y: np.ndarray, rows: np.ndarray) -> float | None:
    """Fit ``est`` and remove ``rows`` one at a time with its own :meth:`remove` (budget decisions included);
    the final residual bound β, or None if a removal retrained."""
    est.fit(X, y)
    beta = math.nan
    for i in rows:
        cert = est.remove([int(i)])
        if cert.retrained:
            return None
        beta = float(cert.residual_bound)
    return beta


def _search_adaptive(base: Any, X: np.ndarray, y: np.ndarray, rows: np.ndarray, sigma_fixed: float,
                     margin: float, rng: np.random.Generator, halvings: int = 6,
                     bisections: int = 3) -> tuple[float, float, int]:
    """σ for a model whose certified bound adapts to its budget (``anchor``, re-measuring at 70 % of ε′): the
    smallest σ found at which the estimator itself removes ``rows`` without retraining, times ``margin`` and at
    most ``sigma_fixed`` (the plan from ``pcg``'s budget-independent β, which ``auto`` meets through its
    fallback). Halvings down from ``sigma_fixed`` until a run retrains, then geometric bisection; returns
    (σ, β after the removals at σ, runs made)."""
    runs = 0

    def run(sig: float) -> float | None:
        nonlocal runs
        runs += 1
        return _removes_without_retraining(clone(base).set_params(sigma=sig, random_state=int(rng.integers(2**31))),
                                           X, y, rows)

    ok, fail = sigma_fixed, None
    for _ in range(halvings):
        if run(ok / 2.0) is None:
            fail = ok / 2.0
            break
        ok /= 2.0
    if fail is not None:
        for _ in range(bisections):
            mid = math.sqrt(ok * fail)
            if run(mid) is None:
                fail = mid
            else:
                ok = mid
    sigma = min(sigma_fixed, margin * ok)
    beta = run(sigma)
    while beta is None and sigma < sigma_fixed:  # an unlucky draw at the chosen σ: back towards the fixed plan
        sigma = min(sigma_fixed, sigma * margin)
        beta = run(sigma)
    if beta is None:
        raise RuntimeError(f"plan_sigma: the estimator retrained within the {rows.size} removals even at "
                           f"σ = {sigma:.4g}; increase margin.")
    return sigma, beta, runs


def _simulate(est: Any, X: np.ndarray, y: np.ndarray, rows: np.ndarray) -> float:
    """Fit ``est`` and take the Newton removal steps of ``rows`` one at a time without any budget decision; return
    the accumulated (joint) residual bound β.

    ``anchor`` is simulated by ``pcg``: its certified bound adapts to the budget (it re-measures the residual at 70 %
    of ε′ and retries a step over budget from a fresh anchor, docs/tighter_bounds.md §5c–§5d), so its β after R
    steps says how σ was spent, not what σ is needed; ``pcg``'s measured accounting does not depend on σ's budget,
    and ``solver="auto"``'s ``anchor`` takes a step it cannot certify within the budget with ``pcg`` before any
    retraining, so σ planned on ``pcg``'s β supports the R removals under ``auto`` too."""
    est.fit(X, y)
    mech = est.mechanism_
    if mech.solver == "anchor":
        mech = dataclasses.replace(mech, solver="pcg")
        est.caches_ = [NewtonCache() for _ in est.caches_]
    states = list(est.states_)
    active = est.active_.copy()
    members = est.members_
    for i in rows:
        idx = np.array([int(i)])
        for k in range(len(states)):
            act = active if members is None else active & members[k]
            if not act[i]:
                continue
            keep = act.copy()
            keep[i] = False
            states[k], _ = mech._propose(states[k], est.X_, est.Y_[k], keep, idx, est.caches_[k])
        active[i] = False
    return joint_residual([s.residual_bound for s in states], mech.noise)


def plan_sigma(X: Any, y: Any, *, n_removals: int, epsilon: float = 1.0, delta: float = 1e-4,
               estimator: Any = None, margin: float = 1.2, validation_fraction: float = 0.2, n_repeats: int = 3,
               removal_rows: Any = None, max_iter: int = 5, random_state: Any = None) -> SigmaPlan:
    """Choose σ so that a model trained on (X, y) supports ``n_removals`` removals at (ε, δ) before retraining.

    Parameters
    ----------
    X, y : array-like
        The training data (rows in the unit ball, or an ``estimator`` with ``normalize_rows=True``).
    n_removals : int
        R, the number of removals to support between retrainings.
    epsilon, delta : float
        The removal guarantee (ε, δ).
    estimator : CertifiedLogisticRegression, optional
        The unfitted estimator to plan for (λ, solver, bound, calibration, noise, ...); its ``sigma``, ``epsilon``
        and ``delta`` are replaced. Default: ``CertifiedLogisticRegression()``.
    margin : float, default=1.2
        σ is set to ``margin`` times the fixed point (β_R grows with the unknown removal order).
    validation_fraction : float, default=0.2
        Share of the rows held out to measure accuracy; the simulation trains on the rest.
    n_repeats : int, default=3
        Models (draws of b) averaged for the accuracy at σ.
    removal_rows : sequence of int, optional
        Rows (of the training part) to simulate removing; default: ``n_removals`` random rows.
    max_iter : int, default=5
        Fixed-point iterations.
    random_state : None, int or Generator

    Returns
    -------
    SigmaPlan

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import normalize
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> plan = plan_sigma(normalize(X), y, n_removals=20, estimator=CertifiedLogisticRegression(lam=1e-2),
    ...                   random_state=0)
    >>> plan.residual_after_removals <= plan.budget
    True
    """
    R = check_positive_int("n_removals", n_removals)
    epsilon = check_positive("epsilon", epsilon)
    margin = check_positive("margin", margin)
    if margin < 1.0:
        raise ValueError(f"margin must be >= 1. Found {margin}.")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1). Found {validation_fraction!r}.")
    rng = check_random_state(random_state)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    n = X.shape[0]
    perm = rng.permutation(n)
    n_val = max(1, int(round(validation_fraction * n)))
    val, tr = perm[:n_val], perm[n_val:]
    if R >= tr.size:
        raise ValueError(f"n_removals must be below the {tr.size} training rows of the plan. Found {R}.")
    base = clone(estimator) if estimator is not None else CertifiedLogisticRegression()
    base.set_params(epsilon=epsilon, delta=delta)
    params = base.get_params()
    if params.get("noise", "gaussian") == "none":
        raise ValueError("estimator must use noise (noise='gaussian' or 'laplace'): with noise='none' there is no σ "
                         "to plan.")
    unit = residual_budget(1.0, epsilon, delta, params.get("noise", "gaussian"),
                           calibration=params.get("calibration", "paper"))
    rows = (np.asarray(removal_rows, dtype=np.int64) if removal_rows is not None
            else rng.choice(tr.size, size=R, replace=False))
    Xtr, ytr = X[tr], y[tr]
    sigma = float(params.get("sigma", 1.0))
    beta = math.nan
    it = 0
    for _ in range(max_iter):
        it += 1
        est = clone(base).set_params(sigma=sigma, random_state=int(rng.integers(2**31)))
        beta = _simulate(est, Xtr, ytr, rows)
        target = margin * beta / unit
        if beta <= unit * sigma and sigma <= 1.1 * target:  # fits the budget, and not wastefully large
            break
        sigma = target
    else:
        raise RuntimeError(f"plan_sigma: σ did not settle in {max_iter} iterations (last σ = {sigma:.4g}, "
                           f"β = {beta:.4g}); increase max_iter or margin.")
    if resolve_solver(str(params.get("solver", "auto")), Xtr) == "anchor":
        sigma, beta, searched = _search_adaptive(base, Xtr, ytr, rows, sigma, margin, rng)
        it += searched
    scores = [clone(base).set_params(sigma=sigma, random_state=int(rng.integers(2**31))).fit(Xtr, ytr)
              .score(X[val], y[val]) for _ in range(check_positive_int("n_repeats", n_repeats))]
    # the same model with b ≈ 0: Laplace-type b with σ = 1e-9 is negligible, and ε = 1e12 keeps any training
    # residual within its budget (no guarantee is meant: this is the reference the cost is measured against)
    ref = clone(base).set_params(noise="laplace", sigma=1e-9, epsilon=1e12, tol=1e-6 * max(1.0, n), random_state=0)
    return SigmaPlan(sigma=float(sigma), epsilon=float(epsilon), delta=float(delta), n_removals=R,
                     residual_after_removals=float(beta),
                     budget=float(unit * sigma), accuracy=float(np.mean(scores)),
                     accuracy_without_noise=float(ref.fit(Xtr, ytr).score(X[val], y[val])), iterations=it)


__all__ = ["SigmaPlan", "plan_sigma"]
