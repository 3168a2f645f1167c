"""Choosing σ from the removals a model must support (issue 16; cf. Opacus' ``make_private_with_epsilon``).

The (ε, δ) guarantee of certified removal holds while the accumulated residual bound β stays within the budget
ε′ (Guo et al. 2020, Alg. 2); ε′ is proportional to σ for every calibration lethe has (Gaussian ``"paper"``:
ε′ = σε/c; ``"analytic"``: ε′ = σ/σ₁(ε, δ); Laplace-type: ε′ = σε), while β after R removals depends on σ
through the weights — hardly on large tables, but on small ones (hundreds of rows) β grows roughly in proportion to
σ. So the σ that supports R removals before a retraining is

    σ_R = β_R(σ_R) / ε′(σ = 1),

a fixed point that :func:`plan_sigma` finds by simulation on the user's data: train at σ, take R Newton removal steps of
random rows with the estimator's own solver and bound (no budget decision, nothing is published), read β_R, and step σ
by a secant on β modelled as affine in σ (issue 37: the plain step σ ← margin · β_R / ε′(1) ran away on 800 rows), until
σ settles; a search that does not settle ends with the best σ tried. β_R depends on the model's own random b and on
which rows are removed in which order, so every σ is tried on ``n_simulations`` independent draws of both and β_R is
their ``confidence`` quantile. An ``anchor`` model (the default ``solver="auto"`` on dense data) certifies with a bound
that adapts to its budget (it re-measures the residual), so its fixed point is taken on ``pcg``'s β and σ is then
searched downwards, accepting a σ only where every draw removes its rows with the estimator's own :meth:`remove`
without retraining (:func:`_search_adaptive`). A check on fresh draws raises σ while any retrains, and the
retraining rate is finally measured on yet other fresh draws and reported (``SigmaPlan.retraining_rate``, with a
Clopper–Pearson upper bound): the plan states the probability it promises and what it measured.
It reports the accuracy at that σ on held-out rows beside
the accuracy of the same model without noise, i.e. what the guarantee costs.

``X`` may be a pandas DataFrame and ``estimator`` a pipeline (:class:`lethe.pipeline.UnlearningPipeline` or a
scikit-learn ``Pipeline``) whose steps before the certified one learn nothing from the rows (stateless, e.g.
:class:`lethe.preprocessing.SchemaEncoder`, or frozen): the rows are encoded once by those steps and the plan is
made for the final step.

λ matters as much as σ (on Adult, λ = 3e-5 gives 84.9 % test accuracy where λ = 1e-3 gives 83.5 %).
:func:`plan_lambda` prints, for a grid of λ and σ, the held-out accuracy beside the number of removals each model
supports before its first retraining. Run it on PUBLIC data (a public sample of the same kind, or a public
validation set with public training rows) and the choice leaks nothing. Run on the private rows, the chosen λ is a
function of every private row, deleted ones included, and no removal certificate covers it (docs/tabular.md, "What
choosing λ on private data costs").

The plan is a planning aid, not a certificate: every removal is still certified and the estimator still retrains
when the budget is spent. Removal requests that are not random (e.g. the hardest training points) cost more budget
per removal than the simulation assumes; plan with a margin, or simulate those rows (``removal_rows``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.stats import beta as beta_dist
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator

from lethe._rng import check_random_state
from lethe._validation import check_positive, check_positive_int
from lethe.advisor import Advice
from lethe.advisor import advise as _advise
from lethe.certified.cache import NewtonCache
from lethe.certified.estimators import CertifiedLogisticRegression, joint_residual
from lethe.certified.newton import SOLVERS, resolve_solver
from lethe.certified.noise import residual_budget
from lethe.pipeline import step_learns_from_data


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
        The ``confidence`` quantile of β (joint over one-vs-all classes, as the estimator certifies it) after the
        ``n_removals`` removals, over the final measurement's models at ``sigma`` that did not retrain (NaN if
        every one retrained).
    budget : float
        ε′ at ``sigma``.
    accuracy : float
        Mean held-out score of models trained at ``sigma`` (over ``n_repeats`` draws of b).
    accuracy_without_noise : float
        Held-out score of the same model with b ≈ 0 (no guarantee): the reference for the cost.
    iterations : int
        Fixed-point iterations used, plus the simulated models of the downward search (``anchor``) and of the
        check on fresh draws.
    confidence : float
        The planned probability that a model trained at ``sigma`` removes ``n_removals`` random rows without
        retraining (over its draw of b and the rows removed).
    retraining_rate : float
        Measured share of ``n_simulations`` fresh simulated models at ``sigma`` (fresh b, fresh random removal rows,
        drawn after σ was chosen, so the estimate is not biased by the choice) that retrained within ``n_removals``
        removals with the estimator's own :meth:`remove`.
    retraining_rate_upper : float
        Its one-sided 95 % Clopper–Pearson upper bound.
    n_simulations : int
        Simulated models per σ tried, and in the final measurement.
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
    confidence: float = math.nan
    retraining_rate: float = math.nan
    retraining_rate_upper: float = math.nan
    n_simulations: int = 0

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


Draw = tuple[int, np.ndarray]  # (the seed of a model's b, the rows it removes in that order)


def _draws(rng: np.random.Generator, k: int, n_train: int, R: int, removal_rows: np.ndarray | None) -> list[Draw]:
    """``k`` independent draws of (b's seed, removal order): R random training rows, or a random order of
    ``removal_rows`` (the order matters: β accumulates along it)."""
    out = []
    for _ in range(k):
        rows = rng.permutation(removal_rows) if removal_rows is not None else rng.choice(n_train, size=R,
                                                                                          replace=False)
        out.append((int(rng.integers(2**31)), rows))
    return out


def _retrainings(base: Any, X: np.ndarray, y: np.ndarray, sigma: float, draws: list[Draw],
                 stop_after: int | None = None) -> tuple[int, int, list[float]]:
    """(models that retrained within their removals, models run, β after the removals of each model that did not)
    for one model per draw at ``sigma``, each removing its rows with the estimator's own :meth:`remove`; stops
    early once more than ``stop_after`` retrained."""
    fails = runs = 0
    betas: list[float] = []
    for seed, rows in draws:
        runs += 1
        beta = _removes_without_retraining(clone(base).set_params(sigma=sigma, random_state=seed), X, y, rows)
        if beta is None:
            fails += 1
            if stop_after is not None and fails > stop_after:
                break
        else:
            betas.append(beta)
    return fails, runs, betas


def _search_adaptive(base: Any, X: np.ndarray, y: np.ndarray, draws: list[Draw], sigma_fixed: float,
                     margin: float, halvings: int = 6, bisections: int = 3, probe: int = 3,
                     steps_up: int = 8) -> tuple[float, int]:
    """σ for a model whose certified bound adapts to its budget (``anchor``, re-measuring at 70 % of ε′): a σ at
    which the estimator itself removes its rows without retraining for EVERY one of ``draws`` (independent b and
    removal orders, the same at every σ tried), times ``margin``, and at most ``sigma_fixed`` (the plan from
    ``pcg``'s budget-independent β, which ``auto`` meets through its fallback). Returns (σ, models run).

    The acceptance rule is the one the search always had — every draw passes — but it is reached in two stages,
    so that a σ is run on all draws only once it is a candidate: (1) halvings down from ``sigma_fixed`` until a σ
    fails, then geometric bisection, on ``probe`` draws only (a draw that retrains is moved to the front, so later
    tries fail on it first); (2) the candidate is confirmed on every draw, the draw that retrains (if any) moved to
    the front, and σ raised by 2^(1/4) until every draw passes (at most ``steps_up`` times; past that, σ is the
    plan of ``pcg``, ``sigma_fixed``). Before this two-stage search, each passing σ of the halvings ran all the
    draws: on the 500-row table of tests/test_planning.py the search took ~50 simulated models, now ~20.

    One lucky draw does not decide (it did once: the smallest σ at which one model happened to fit was the plan,
    and many fresh models at that σ retrained)."""
    runs = 0
    pool = list(draws)

    def passes(sig: float, k: int) -> bool:
        nonlocal runs
        for j in range(min(k, len(pool))):
            seed, rows = pool[j]
            runs += 1
            est = clone(base).set_params(sigma=sig, random_state=seed)
            if _removes_without_retraining(est, X, y, rows) is None:
                pool.insert(0, pool.pop(j))  # fail fast on it next time
                return False
        return True

    ok, fail = sigma_fixed, None
    for _ in range(halvings):
        if not passes(ok / 2.0, probe):
            fail = ok / 2.0
            break
        ok /= 2.0
    if fail is not None:
        for _ in range(bisections):
            mid = math.sqrt(ok * fail)
            if passes(mid, probe):
                ok = mid
            else:
                fail = mid
    for _ in range(steps_up):
        if ok >= sigma_fixed or passes(ok, len(pool)):
            break
        ok *= 2.0 ** 0.25
    else:
        if not passes(ok, len(pool)):
            return sigma_fixed, runs
    return min(sigma_fixed, margin * ok), runs


def _quantile_residual(base: Any, X: np.ndarray, y: np.ndarray, sigma: float, draws: list[Draw],
                       confidence: float, cache: dict[tuple[float, int], float] | None = None) -> float:
    """The ``confidence`` quantile (the next order statistic up) over ``draws`` of β after the draw's removals,
    simulated by :func:`_simulate` at ``sigma`` (β of draw j at σ is kept in ``cache`` under (σ, j))."""
    cache = {} if cache is None else cache
    betas = []
    for j, (seed, rows) in enumerate(draws):
        if (sigma, j) not in cache:
            cache[(sigma, j)] = _simulate(clone(base).set_params(sigma=sigma, random_state=seed), X, y, rows)
        betas.append(cache[(sigma, j)])
    return float(np.quantile(betas, confidence, method="higher"))


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
    spec = mech.solver_spec
    if spec.budget_adaptive:  # anchor: simulated by its fallback, pcg (docstring)
        mech = dataclasses.replace(mech, solver=spec.fallback)
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
            states[k], _ = mech.propose(states[k], est.X_, est.Y_[k], keep, idx, est.caches_[k])
        active[i] = False
    return joint_residual([s.residual_bound for s in states], mech.noise)


def _prepare(X: Any, y: Any, estimator: Any) -> tuple[Any, np.ndarray, Any]:
    """(encoded X as float64 array or CSR, y, the unfitted certified estimator).

    A pipeline's steps before the last must learn nothing from the rows (the rule of
    :class:`lethe.pipeline.UnlearningPipeline`); they encode X once (a frozen step by its ``transform``, a stateless
    one by ``fit_transform`` of a clone, which learns nothing)."""
    y = np.asarray(y)
    if hasattr(estimator, "steps"):
        for name, step in estimator.steps[:-1]:
            if step_learns_from_data(step):
                raise ValueError(f"Cannot plan: step {name!r} ({type(step).__name__}) of the pipeline learns from the "
                                 "training data, so no certificate would cover it. Use a stateless step (e.g. "
                                 "lethe.preprocessing.SchemaEncoder) or one fitted on public data wrapped in "
                                 "sklearn.frozen.FrozenEstimator.")
        for _, step in estimator.steps[:-1]:
            if step is None or (isinstance(step, str) and step == "passthrough"):
                continue
            X = step.transform(X) if isinstance(step, FrozenEstimator) else clone(step).fit_transform(X, y)
        estimator = estimator.steps[-1][1]
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64), y, estimator
    try:
        Xa = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        cols = [str(c) for c in getattr(X, "columns", [])
                if getattr(getattr(X[c], "dtype", None), "kind", "O") not in "iufb"]
        raise ValueError(f"X must be numeric, or the estimator a pipeline whose first step encodes it (e.g. "
                         f"make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(...))). "
                         f"Found non-numeric columns {cols[:10]}.") from None
    return Xa, y, estimator


def plan_sigma(X: Any, y: Any, *, n_removals: int, epsilon: float = 1.0, delta: float = 1e-4,
               estimator: Any = None, margin: float = 1.2, validation_fraction: float = 0.2, n_repeats: int = 3,
               removal_rows: Any = None, max_iter: int = 5, random_state: Any = None, confidence: float = 0.9,
               n_simulations: int = 10) -> SigmaPlan:
    """Choose σ so that a model trained on (X, y) supports ``n_removals`` removals at (ε, δ) before retraining.

    Whether a model retrains within R removals depends on its own random b (drawn at ``fit``) and on which rows
    are removed in which order, so the plan is made over ``n_simulations`` independent draws of both, and its
    promise is a probability, measured and reported:

    1. fixed point on ``pcg``'s budget-independent β: σ ← ``margin`` · q_c(β_R(σ)) / ε′(σ = 1), where q_c is the
       ``confidence`` quantile (next order statistic up; with 10 draws and c = 0.9, the largest) of β after the R
       removals over the draws (the same draws at every σ, so the iteration settles); it is approached on the
       first 3 draws (σ starts at the estimator's, often far away) and then settled on all of them, each draw's β
       at a σ simulated once;
    2. for an ``anchor`` model (``solver="auto"`` on dense data), whose certified bound adapts to its budget, σ is
       searched downwards from there and accepted only where EVERY draw removes its rows with the estimator's own
       :meth:`remove` without retraining, times ``margin`` (candidates are found on 3 probe draws, then confirmed
       on all, :func:`_search_adaptive`);
    3. a check on 2 · ``n_simulations`` fresh draws: while any of them retrains at σ, σ ← 1.25 σ and new draws (at
       most ``max_iter`` times; past that a :class:`UserWarning`);
    4. the reported ``retraining_rate`` is measured on yet another ``n_simulations`` fresh draws at the final σ,
       independent of its choice, with a 95 % Clopper–Pearson upper bound (``retraining_rate_upper``); a
       :class:`UserWarning` says so when it is above 1 − ``confidence``.

    What the plan can claim is what it measured: with the default 10 draws, 0 retrainings bound the probability of a
    retraining within R random removals by 0.26 at 95 % confidence (the check (3) passes a σ whose true probability
    is 0.1 only 12 % of the time, 0.2 only 1 %); raise ``n_simulations`` for a tighter statement (the cost grows
    linearly: each draw is a fit and R removals). On Adult (26,048 training rows, R = 1,000, λ = 3e-5, with an
    intercept) the plan took 20 min on a shared core (the single-draw plan before: 1.5 min) and chose σ = 0.269
    (before: 0.213; at 0.215, 2 of 10 fresh models retrained), at a cost of 0.03 pp of held-out accuracy. With the
    two-stage fixed point and search (the same acceptance rules) it simulates 83 models there (18.3 min wall on a
    machine loaded 4×; σ = 0.264, 0 of 10 fresh models retrained, cost 0.03 pp); at R = 300, 67 models and 1.3 min
    of CPU where the plan before simulated 84 in 1.8 min (σ = 0.147 both), ``benchmarks/bench_plan_sigma_adult.py``.

    Before this version a single draw of b and one removal order decided, and the downward search kept the smallest
    σ at which that one model happened to fit: on a 500-row table 7 of 18 fresh models at the planned σ retrained
    within the planned removals (tests/test_planning.py::test_the_plan_keeps_its_promise_over_fresh_models).

    Parameters
    ----------
    X, y : array-like or DataFrame
        The training data (rows in the unit ball, or an ``estimator`` with ``normalize_rows=True``, or a pipeline
        whose steps encode X into the unit ball).
    n_removals : int
        R, the number of removals to support between retrainings.
    epsilon, delta : float
        The removal guarantee (ε, δ).
    estimator : CertifiedLogisticRegression or pipeline, optional
        The unfitted estimator to plan for (λ, solver, bound, calibration, noise, ...); its ``sigma``, ``epsilon``
        and ``delta`` are replaced. Default: ``CertifiedLogisticRegression()``. A pipeline (its final step the
        certified estimator, the others learning nothing from rows) encodes X first; σ is for its final step.
    margin : float, default=1.2
        σ is set to ``margin`` times the quantile fixed point (and times the smallest σ every draw supported, for
        ``anchor``).
    validation_fraction : float, default=0.2
        Share of the rows held out to measure accuracy; the simulation trains on the rest (fewer rows than the
        model will be trained on; a removal usually costs more budget on fewer rows, so the plan tends to the safe
        side).
    n_repeats : int, default=3
        Models (draws of b) averaged for the accuracy at σ.
    removal_rows : sequence of int, optional
        Rows (of the training part) to simulate removing, in a random order per draw; default: ``n_removals``
        random rows per draw.
    max_iter : int, default=5
        Fixed-point iterations per stage (secant steps on β modelled as affine in σ, :func:`_next_sigma`), and
        steps up of the check (3). A search that does not settle ends with the best σ tried (the smallest that fits
        its budget; else the closest, with a :class:`UserWarning`) and goes on to the check, never raising.
    random_state : None, int or Generator
    confidence : float, default=0.9
        c, the planned probability of no retraining within ``n_removals`` random removals.
    n_simulations : int, default=10
        Independent draws (b, removal rows) per σ tried, and for the final measurement.

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
    >>> plan.retraining_rate <= 1 - plan.confidence
    True
    """
    R = check_positive_int("n_removals", n_removals)
    epsilon = check_positive("epsilon", epsilon)
    margin = check_positive("margin", margin)
    if margin < 1.0:
        raise ValueError(f"margin must be >= 1. Found {margin}.")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1). Found {validation_fraction!r}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1). Found {confidence!r}.")
    K = check_positive_int("n_simulations", n_simulations)
    rng = check_random_state(random_state)
    X, y, estimator = _prepare(X, y, estimator)
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
    fixed_rows = None
    if removal_rows is not None:
        fixed_rows = np.asarray(removal_rows, dtype=np.int64).ravel()
        bad = fixed_rows.size == 0 or np.unique(fixed_rows).size != fixed_rows.size or fixed_rows.min() < 0 \
            or fixed_rows.max() >= tr.size
        if bad:
            raise ValueError(f"removal_rows must be distinct rows of the {tr.size} training rows of the plan "
                             f"(positions in [0, {tr.size})). Found {fixed_rows.size} rows.")
    Xtr, ytr = X[tr], y[tr]
    draws = _draws(rng, K, tr.size, R, fixed_rows)
    sigma = float(params.get("sigma", 1.0))
    beta = math.nan
    it = 0
    cache: dict[tuple[float, int], float] = {}
    # the fixed point is first approached on the first few draws (σ starts far from it: the estimator's default),
    # then settled on all of them; β of a draw at a σ is simulated once (the settled σ of the first stage is where
    # the second starts, so its first few draws are not run again)
    stages = [draws[:3], draws] if K > 3 else [draws]
    hist: list[tuple[float, float]] = []  # (σ, β) tried (the first stage's points give the second its slope)
    for stage in stages:
        tried: list[tuple[float, float]] = []
        for _ in range(max_iter):
            it += 1
            beta = _quantile_residual(base, Xtr, ytr, sigma, stage, confidence, cache)
            hist.append((sigma, beta))
            tried.append((sigma, beta))
            target = _next_sigma(hist, unit, margin)
            # fits the budget, and not wastefully large — judged on the slope of β in σ once two σ were tried
            # (where β grows in proportion to σ, every σ above the fixed point is within 10 % of the plain step)
            if beta <= unit * sigma and sigma <= 1.1 * target and len({s for s, _ in hist}) >= 2:
                break
            sigma = target
        else:
            sigma = _best_tried(tried, unit, R, confidence)
    if SOLVERS[resolve_solver(str(params.get("solver", "auto")), Xtr)].budget_adaptive:
        sigma, searched = _search_adaptive(base, Xtr, ytr, draws, sigma, margin)
        it += searched
    # the check: any retraining among 2K fresh draws steps σ up (a σ whose retraining probability is 0.1 passes 20
    # draws only 12 % of the time, 0.2 only 1 %)
    for step in range(max_iter + 1):
        fails, runs, _ = _retrainings(base, Xtr, ytr, sigma, _draws(rng, 2 * K, tr.size, R, fixed_rows),
                                      stop_after=0)
        it += runs
        if fails == 0:
            break
        if step == max_iter:
            warnings.warn(f"plan_sigma: at σ = {sigma:.4g} some of {2 * K} simulated models still retrained within "
                          f"{R} removals after {max_iter} steps up. Increase margin or max_iter.", UserWarning,
                          stacklevel=2)
            break
        sigma *= 1.25
    fails, _, betas = _retrainings(base, Xtr, ytr, sigma, _draws(rng, K, tr.size, R, fixed_rows))
    if fails > math.floor((1.0 - confidence) * K + 1e-9):  # more retrainings than the plan allows
        warnings.warn(f"plan_sigma: {fails} of {K} fresh simulated models at the planned σ = {sigma:.4g} retrained "
                      f"within {R} removals, more than the {1.0 - confidence:.0%} planned (confidence "
                      f"{confidence}); see plan.retraining_rate. Increase margin or n_simulations.", UserWarning,
                      stacklevel=2)
    beta = float(np.quantile(betas, confidence, method="higher")) if betas else math.nan
    scores = [clone(base).set_params(sigma=sigma, random_state=int(rng.integers(2**31))).fit(Xtr, ytr)
              .score(X[val], y[val]) for _ in range(check_positive_int("n_repeats", n_repeats))]
    # the same model with b ≈ 0: Laplace-type b with σ = 1e-9 is negligible, and ε = 1e12 keeps any training
    # residual within its budget (no guarantee is meant: this is the reference the cost is measured against)
    ref = clone(base).set_params(noise="laplace", sigma=1e-9, epsilon=1e12, tol=1e-6 * max(1.0, n), random_state=0)
    return SigmaPlan(sigma=float(sigma), epsilon=float(epsilon), delta=float(delta), n_removals=R,
                     residual_after_removals=float(beta),
                     budget=float(unit * sigma), accuracy=float(np.mean(scores)),
                     accuracy_without_noise=float(ref.fit(Xtr, ytr).score(X[val], y[val])), iterations=it,
                     confidence=float(confidence), retraining_rate=fails / K, retraining_rate_upper=_cp_upper(fails, K),
                     n_simulations=K)


def _next_sigma(hist: list[tuple[float, float]], unit: float, margin: float) -> float:
    """The next σ of the fixed-point search σ = margin · β(σ) / ε′(1), from the (σ, β) tried so far.

    β after R removals grows with σ on small tables (b perturbs the weights, and the weights' size sets the residual: on
    800 rows of the German credit table β roughly doubles from σ = 0.2 to 1.6), so the plain iteration σ ← margin ·
    β(σ)/ε′(1) converges slowly, or runs away when margin · dβ/dσ nears ε′(1). β is modelled as affine in σ through the
    last point and the latest other σ tried, β ≈ a + cσ, whose fixed point is σ* = margin · a / (ε′(1) − margin · c) (a
    secant step); the plain step when there is one point, when the model does not apply (a ≤ 0 or c < 0) or when it has
    no fixed point (the budget grows no faster than β). The step is kept within a factor 10 of the σ tried, so one noisy
    quantile cannot throw the search far."""
    s1, b1 = hist[-1]
    plain = margin * b1 / unit
    earlier = [p for p in hist[:-1] if p[0] != s1]
    if not earlier:
        return plain
    s0, b0 = earlier[-1]
    c = (b1 - b0) / (s1 - s0)
    a = b1 - c * s1
    denom = unit - margin * c
    if a <= 0 or c < 0 or denom <= 0:
        return plain
    tried = [s for s, _ in hist]
    return float(min(max(margin * a / denom, 0.1 * min(tried)), 10.0 * max(tried)))


def _best_tried(hist: list[tuple[float, float]], unit: float, R: int, confidence: float) -> float:
    """The σ a search that did not settle ends with: the smallest σ tried whose β fits its budget ε′ = ε′(1)·σ;
    if none did, the one closest to fitting (largest ε′/β), with a :class:`UserWarning` (the check that follows
    raises σ while simulated models retrain, and the plan reports the retraining rate it measured)."""
    fits = [s for s, b in hist if b <= unit * s]
    if fits:
        return min(fits)
    sigma, beta = max(hist, key=lambda p: unit * p[0] / p[1] if p[1] > 0 else math.inf)
    warnings.warn(f"plan_sigma: no σ tried supports {R} removals at confidence {confidence} (the residual grows "
                  f"about as fast as the budget with σ; the closest: σ = {sigma:.4g}, β = {beta:.4g} against a "
                  f"budget of {unit * sigma:.4g}); continuing from it: see plan.retraining_rate. Fewer removals "
                  "between retrainings, a larger λ or more rows make a plan feasible, or retrain exactly "
                  "(lethe.planning.advise).", UserWarning, stacklevel=3)
    return sigma


def _cp_upper(k: int, n: int) -> float:
    """One-sided 95 % Clopper–Pearson upper bound of a proportion with k successes in n trials:
    Beta⁻¹(0.95; k + 1, n − k) (1 if k = n)."""
    return 1.0 if k >= n else float(beta_dist.ppf(0.95, k + 1, n - k))


@dataclass(frozen=True)
class LambdaPoint:
    """One (λ, σ) of :func:`plan_lambda`'s grid.

    Attributes
    ----------
    lam, sigma : float
    accuracy : float
        Held-out score of the model trained at (λ, σ).
    removals_supported : int
        Random removals, one request at a time, certified before the first retraining (at most ``max_removals``).
    capped : bool
        True when the model reached ``max_removals`` without retraining (it supports at least that many).
    """

    lam: float
    sigma: float
    accuracy: float
    removals_supported: int
    capped: bool


@dataclass(frozen=True)
class LambdaPlan:
    """The trade-off table of :func:`plan_lambda`; ``str()`` prints it."""

    points: tuple[LambdaPoint, ...]
    epsilon: float
    delta: float
    max_removals: int
    data: str
    note: str = ""

    def best(self, min_removals: int = 0) -> LambdaPoint:
        """The most accurate point that supports at least ``min_removals`` removals before retraining."""
        ok = [p for p in self.points if p.removals_supported >= min_removals]
        if not ok:
            raise ValueError(f"min_removals must be met by a point of the grid (most supported: "
                             f"{max(p.removals_supported for p in self.points)}). Found {min_removals}.")
        return max(ok, key=lambda p: (p.accuracy, p.removals_supported))

    def __str__(self) -> str:
        lines = [f"λ/σ trade-off at (ε, δ) = ({self.epsilon:g}, {self.delta:g}), chosen on {self.data} data",
                 *([self.note] if self.note else []),
                 f"{'lambda':>10} {'sigma':>8} {'accuracy':>9} {'removals before retraining':>27}"]
        for p in self.points:
            rem = f">= {p.removals_supported}" if p.capped else str(p.removals_supported)
            lines.append(f"{p.lam:>10.3g} {p.sigma:>8.3g} {p.accuracy:>9.4f} {rem:>27}")
        return "\n".join(lines)


def plan_lambda(X: Any, y: Any, *, data: str, lams: Any = (1e-2, 1e-3, 1e-4, 3e-5, 1e-5),
                sigmas: Any = (0.1, 1.0, 10.0), X_val: Any = None, y_val: Any = None, estimator: Any = None,
                epsilon: float = 1.0, delta: float = 1e-4, max_removals: int | None = None,
                validation_fraction: float = 0.2, random_state: Any = None) -> LambdaPlan:
    """The trade-off between held-out accuracy and removals supported, over a grid of λ and σ.

    For each (λ, σ) a model is trained on the training rows, scored on the validation rows, then asked to remove
    random training rows one request at a time with its own certified :meth:`remove` until its first retraining
    (or ``max_removals``).

    Parameters
    ----------
    X, y : array-like or DataFrame
        Training rows (encoded by ``estimator``'s pipeline steps if it is a pipeline).
    data : {"public", "private"}
        Whose rows X (and the validation rows) are — stated explicitly. ``"public"``: the choice reveals nothing
        about private rows; use it with a public sample or public data of the same kind, then train the private model
        at the chosen λ. ``"private"``: a :class:`UserWarning` says what it costs: the chosen λ (one of G grid
        values, at most log₂ G bits) depends on every private row, deleted ones included, and stays after their
        deletion — no removal certificate covers it (docs/tabular.md).
    lams, sigmas : sequence of float
        The grid.
    X_val, y_val : optional
        Validation rows (e.g. a public validation set); default: a ``validation_fraction`` share of X held out.
    estimator : CertifiedLogisticRegression or pipeline, optional
        As in :func:`plan_sigma`; its ``lam``, ``sigma``, ``epsilon``, ``delta`` are replaced.
    max_removals : int, optional
        Removals tried per model. Default: scaled to the table, min(1000, training rows // 5) (at least 1), and
        the plan says so (``LambdaPlan.note``, printed); given, it must be below the training rows.
    random_state : None, int or Generator

    Returns
    -------
    LambdaPlan
        ``print(plan)`` shows the table; ``plan.best(min_removals)`` picks the most accurate point that supports
        ``min_removals``.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import normalize
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> plan = plan_lambda(normalize(X), y, data="public", lams=[1e-2, 1e-3], sigmas=[1.0], max_removals=20,
    ...                    random_state=0)
    >>> [p.lam for p in plan.points]
    [0.01, 0.001]
    """
    if data not in ("public", "private"):
        raise ValueError(f"data must be 'public' or 'private'. Found {data!r}.")
    if data == "private":
        warnings.warn("plan_lambda on private data: the λ chosen from this table depends on every private row, "
                      "including rows deleted later, and no removal certificate covers that choice (at most log2 of "
                      "the grid size in bits, kept after deletion). Prefer a public sample; see docs/tabular.md.",
                      UserWarning, stacklevel=2)
    M = None if max_removals is None else check_positive_int("max_removals", max_removals)
    lam_grid = [check_positive("lams", float(v)) for v in lams]
    sig_grid = [check_positive("sigmas", float(v)) for v in sigmas]
    if not lam_grid or not sig_grid:
        raise ValueError(f"lams and sigmas must not be empty. Found lams={list(lams)}, sigmas={list(sigmas)}.")
    rng = check_random_state(random_state)
    X, y, base_est = _prepare(X, y, estimator)
    if X_val is not None:
        if y_val is None:
            raise ValueError("y_val must be given with X_val. Found y_val=None.")
        Xv, yv, _ = _prepare(X_val, y_val, estimator)
        Xtr, ytr = X, y
    else:
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1). Found {validation_fraction!r}.")
        perm = rng.permutation(X.shape[0])
        n_val = max(1, int(round(validation_fraction * X.shape[0])))
        Xv, yv, Xtr, ytr = X[perm[:n_val]], y[perm[:n_val]], X[perm[n_val:]], y[perm[n_val:]]
    note = ""
    if M is None:  # the default scales with the table (1000 removals are not possible on 800 rows)
        M = max(1, min(1000, Xtr.shape[0] // 5))
        note = (f"max_removals: {M} (default: min(1000, training rows // 5) for {Xtr.shape[0]} training rows; set "
                "it to the removals expected between retrainings)")
    if M >= Xtr.shape[0]:
        raise ValueError(f"max_removals must be below the {Xtr.shape[0]} training rows. Found {M}.")
    base = clone(base_est) if base_est is not None else CertifiedLogisticRegression()
    base.set_params(epsilon=epsilon, delta=delta)
    rows = rng.choice(Xtr.shape[0], size=M, replace=False)
    points = []
    for lam in lam_grid:
        for sigma in sig_grid:
            est = clone(base).set_params(lam=lam, sigma=sigma, random_state=int(rng.integers(2**31)))
            est.fit(Xtr, ytr)
            acc = float(est.score(Xv, yv))
            done = 0
            for i in rows:
                if est.remove([int(i)]).retrained:
                    break
                done += 1
            points.append(LambdaPoint(lam=lam, sigma=sigma, accuracy=acc, removals_supported=done, capped=done == M))
    return LambdaPlan(points=tuple(points), epsilon=float(epsilon), delta=float(delta), max_removals=M, data=data,
                      note=note)


def advise(X: Any, y: Any, **kwargs: Any) -> Advice:
    """Compare the unlearning families on the user's table and recommend one (issue 37): exact retraining, sharded,
    certified removal with λ and σ planned here (:func:`plan_lambda`, :func:`plan_sigma`), released models, against
    the majority class. The parameters and the method: :func:`lethe.advisor.advise`. ``print(advice)`` shows the
    comparison, the recommendation and the code to use."""
    return _advise(X, y, planners=(plan_lambda, plan_sigma), **kwargs)


__all__ = ["LambdaPlan", "LambdaPoint", "SigmaPlan", "advise", "plan_lambda", "plan_sigma"]
