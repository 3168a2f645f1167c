"""Benchmark: lethe against what a user would do instead — refit scikit-learn — on the same data, one run.

For MNIST 3 vs 8 and a generated n × 100 problem (n = 10⁶ by default; ``--quick`` uses 10⁵ and fewer removals), at
λ = 1e-3, σ = 10, ε = 1, δ = 1e-4, with the BLAS thread count fixed for every timed call (``--threads``, default 1)
and medians of ``--repeats`` runs:

1. **Fit.** scikit-learn's ``LogisticRegression(solver="lbfgs", C=1/(λn), fit_intercept=False)`` (the same objective
   without b) at its default tolerance (timed in turns with lethe's fit, so that load changes hit both alike) and at
   the tolerance that guarantees lethe's ‖∇L‖₂ ≤ tol (tol/(n√d): it minimises L/n and stops on the ∞-norm), against
   lethe's default estimator ``CertifiedLogisticRegression().fit`` (training and the training certificate β₀; the
   ‖X‖₂ bound and the removal cache are formed by the first removal, timed in part 2) and the mechanism's ``train``
   alone (training, β₀ and the ‖X‖₂ bound). Printed beside them: the gradient norm each reaches on its own objective
   (‖∇L(w)‖ for scikit-learn, the certified β₀ ≥ ‖∇L_b(w)‖ for lethe) and the peak resident memory.
2. **Removal.** First the estimators' *default configuration*: ``CertifiedLogisticRegression()`` with only λ, σ, ε,
   δ (and a seed) set, removals through its ``remove``; its row is labelled ``default (-> <solver>)`` with the
   concrete solver the fitted estimator reports (``solver_``, else ``solver``). Then each other solver of ``pcg``,
   ``onepass``, ``anchor`` through the mechanism (the default's own solver is not run twice; on the generated data
   ``onepass`` only with ``--synth-solvers pcg,onepass,anchor``, about 60 s more). Per row: K random
   single-row removals (300; for ``anchor`` all but 982 rows of MNIST and 40,000 of the generated rows) from a
   freshly trained model whose removal machinery the first removal forms; the median and the amortised mean per
   removal (the first removal's setup and every refresh, measurement, flush and retraining inside the run included;
   if the run ended before the budget was spent, one retraining — lethe's own, timed — is added per *supported*
   removals), and for long runs the mean over the first 300, 1,000, 3,000 and 6,000 removals. Ratios: a
   scikit-learn refit ÷ removal; lethe's own retraining ÷ removal beside it. A run in which re-anchors measured the
   residual (``anchor``, §5c of docs/tighter_bounds.md) and no retraining happened reports its removals as measured
   without a retraining. Removals supported per budget: *measured* if the run hit the budget (first retraining),
   else *extrapolated* from the budget the K removals spent (labelled so; never counted as meeting a target). The
   amortised cost is also given as a *verified* upper bound: one retraining per K removals when the K removals did
   not spend the budget; only that figure can mark an amortised-cost target met.
3. **Batch.** ``--batch-repeats`` (5) fresh models per row, each after 6 single removals: one batch of B = 1,000 rows
   (Eq. 6); its time and the median of the 5 warm single removals before it and the 5 right after it; the row
   reports the median batch ÷ the median single (per batch: its ratio and what it did — PCG iterations,
   refactorisations, measurements, retries, anchor builds). Beside it the machine's *floor* for an anchor-type batch
   (``anchor``, ``onepass``): reading the 1,000 rows and forming Δ, plus one ``dsyrk`` of the 1,000 × d rows on a
   d × d matrix (the rank-1,000 downdate of the anchor Hessian), medians, as a ratio to the row's single removal.
4. **Targets** of issue 15, met / NOT met / not verified (a target is labelled met only if this run measured it); an
   anchor-type batch target whose floor is itself over 3× one removal is labelled ``below this machine's floor``
   with the floor's figures, never met. The last line, *one default configuration meets every target*, is computed
   from the default configuration's targets only (the fit targets time the default estimator): met only if each is
   met or below the machine's floor.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_vs_sklearn.py`` (about 3 minutes on 2 cores; ``--quick`` ≈ 30 s,
smaller data, one repeat: a smoke run whose 10^5 rows cannot verify the 10^6 targets).
"""

from __future__ import annotations

import argparse
import gc
import math
import resource
import statistics
import time
from typing import Any

import numpy as np
from scipy.linalg.blas import dsyrk
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from lethe.certified import objective as obj
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.datasets import load_mnist_binary
from lethe.losses import get_loss

PARAMS = dict(lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4)
SOLVERS = ("pcg", "onepass", "anchor")
LOSS = get_loss("logistic")


def peak_rss_gb() -> float:
    """Peak resident set size of this process so far (Linux: ru_maxrss in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def median_time(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def synthetic(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    w = rng.normal(size=d) * 3.0
    y = np.where(rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(X @ w))), 1.0, -1.0)
    return X, y


def interleaved_medians(fns: list[Any], repeats: int) -> list[tuple[float, Any]]:
    """Median times of several functions timed in turns (f₁, f₂, …, f₁, f₂, …), so that a change in the machine's
    load during the run affects all of them alike; returns (median seconds, last result) per function."""
    times: list[list[float]] = [[] for _ in fns]
    outs: list[Any] = [None] * len(fns)
    for _ in range(repeats):
        for j, fn in enumerate(fns):
            outs[j] = None
            gc.collect()
            t0 = time.perf_counter()
            outs[j] = fn()
            times[j].append(time.perf_counter() - t0)
    return [(statistics.median(t), o) for t, o in zip(times, outs, strict=True)]


def fit_part(X: np.ndarray, y: np.ndarray, repeats: int) -> dict[str, Any]:
    n = X.shape[0]
    lam = PARAMS["lam"]
    rss0 = peak_rss_gb()

    def sk() -> LogisticRegression:
        return LogisticRegression(C=1.0 / (lam * n), fit_intercept=False, solver="lbfgs", max_iter=10_000).fit(X, y)

    # lethe's fit and scikit-learn's default fit in turns (the ratio the target is about)
    (t_est, est), (t_sk, clf) = interleaved_medians(
        [lambda: CertifiedLogisticRegression(**PARAMS, random_state=0).fit(X, y), sk], repeats)
    rss_est = peak_rss_gb()
    beta0 = float(est.fit_certificates_[0].residual_bound)
    iters = int(est.states_[0].train_iterations)
    del est
    gc.collect()
    mech = CertifiedRemoval(**PARAMS, bound="tight", calibration="analytic", solver="pcg")
    t_train, _ = median_time(lambda: mech.train(X, y, random_state=0), repeats)
    w_sk = clf.coef_.ravel()
    g_sk = float(np.linalg.norm(obj.objective_grad(w_sk, X, y, LOSS, lam)))
    # the same stopping target as lethe's: scikit-learn minimises L/n and stops on ‖∇(L/n)‖_∞ ≤ tol, so
    # tol = lethe's tol / (n √d) guarantees ‖∇L‖₂ ≤ lethe's tol
    tol_eq = mech.train_tolerance(n) / (n * math.sqrt(X.shape[1]))

    def sk_eq() -> LogisticRegression:
        return LogisticRegression(C=1.0 / (lam * n), fit_intercept=False, solver="lbfgs", max_iter=10_000,
                                  tol=tol_eq).fit(X, y)

    t_sk_eq, clf_eq = median_time(sk_eq, repeats)
    g_sk_eq = float(np.linalg.norm(obj.objective_grad(clf_eq.coef_.ravel(), X, y, LOSS, lam)))
    return dict(t_est=t_est, t_train=t_train, t_sk=t_sk, beta0=beta0, g_sk=g_sk, iters=iters,
                sk_iters=int(np.max(clf.n_iter_)), rss0=rss0, rss_est=rss_est, tol=mech.train_tolerance(n),
                budget=mech.budget, t_sk_eq=t_sk_eq, g_sk_eq=g_sk_eq, sk_eq_iters=int(np.max(clf_eq.n_iter_)),
                tol_eq=tol_eq)


class _MechanismRun:
    """An explicitly configured solver, driven through the mechanism (``CertifiedRemoval``) as before."""

    def __init__(self, X: np.ndarray, y: np.ndarray, solver: str, seed: int) -> None:
        self.X, self.y, self.seed, self.solver, self.label = X, y, seed, solver, solver
        self.mech = CertifiedRemoval(**PARAMS, bound="tight", calibration="analytic", solver=solver)

    def fresh(self, reuse: bool = False) -> None:
        self.cache: NewtonCache | None = NewtonCache()
        # as the estimator fits: the removal machinery is formed by the first removal, whose time is counted
        self.state, _ = self.mech.train(self.X, self.y, random_state=self.seed, cache=self.cache, defer_setup=True)
        self.active = np.ones(self.X.shape[0], dtype=bool)

    def remove(self, idx: Any) -> Any:
        self.state, cert = self.mech.remove(self.state, self.X, self.y, idx, active=self.active, cache=self.cache,
                                            random_state=self.seed + 2, check_input=False)
        self.active[idx] = False
        return cert

    def release(self) -> None:
        self.cache = None
        self.state = None

    def retrain_time(self, repeats: int) -> float:
        t, _ = median_time(lambda: self.mech.retrain(self.state, self.X, self.y, self.active,
                                                     np.random.default_rng(7), cache=None), repeats)
        return t


class _EstimatorRun:
    """The estimators' default configuration: ``CertifiedLogisticRegression()`` with only λ, σ, ε, δ set (and a
    seed), removals through ``remove(indices=...)`` (its validation, and the zeroing of removed rows, included)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        self.X, self.y, self.seed = X, y, seed
        self.est: Any = None
        self.solver = "?"
        self.label = "default"

    def fresh(self, reuse: bool = False) -> None:
        if reuse and self.est is not None and self.est.n_removed_ == 0:
            return  # the model fitted to resolve the solver, not yet used
        self.est = None
        gc.collect()
        self.est = CertifiedLogisticRegression(**PARAMS, random_state=self.seed).fit(self.X, self.y)
        self.solver = str(getattr(self.est, "solver_", self.est.solver))
        self.label = f"default (-> {self.solver})"
        self.mech = self.est.mechanism_

    @property
    def cache(self) -> NewtonCache:
        return self.est.caches_[0]

    @property
    def state(self) -> Any:
        return self.est.states_[0]

    @property
    def active(self) -> np.ndarray:
        return self.est.active_

    def remove(self, idx: Any) -> Any:
        return self.est.remove(indices=idx)

    def release(self) -> None:
        self.est = None

    def retrain_time(self, repeats: int) -> float:
        e = self.est
        t, _ = median_time(lambda: e.mechanism_.retrain(e.states_[0], e.X_, e.Y_[0], e.active_,
                                                        np.random.default_rng(7), cache=None), repeats)
        return t


def _counters(cache: NewtonCache) -> tuple[int, ...]:
    return (cache.refactorizations, cache.sweeps_total, cache.remeasures, cache.reanchor_retries, cache.refreshes)


def removal_part(run: Any, k: int, batch: int, repeats: int, b_repeats: int, seed: int = 0) -> dict[str, Any]:
    n = run.X.shape[0]
    run.fresh(reuse=True)
    beta0 = run.state.residual_bound
    budget = run.mech.budget
    order = np.random.default_rng(seed + 1).permutation(n)
    times: list[float] = []
    hits = 0
    first_hit: int | None = None
    removed = 0
    for i in order[:k]:
        t0 = time.perf_counter()
        cert = run.remove([int(i)])
        times.append(time.perf_counter() - t0)
        removed += 1
        if cert.retrained:
            hits += 1
            if first_hit is None:
                first_hit = removed - 1  # removals certified before the budget forced the first retraining
    cache = run.cache
    remeasures, refreshes = cache.remeasures, cache.refreshes
    beta_end = float(run.state.residual_bound)
    # amortised cost over the first K removals (everything inside the timed calls: re-anchors, measurements,
    # retrainings), for the long anchor run
    prefixes = {K: statistics.fmean(times[:K]) for K in (300, 1000, 3000, 6000) if K < len(times)}
    t_retrain = run.retrain_time(repeats)
    if first_hit is not None:
        supported, how = first_hit, "measured"
        amortised = amortised_verified = statistics.fmean(times)  # the retraining(s) are inside the timed calls
    elif remeasures > 0:
        # re-anchors measured the residual and restarted the accounting: the budget was never spent; what is
        # measured is that these ``removed`` removals needed no retraining
        supported, how = removed, f"measured: no retraining in {removed}, {remeasures} residual measurements"
        amortised = statistics.fmean(times) + t_retrain / removed
        amortised_verified = amortised
    else:
        spent = beta_end - beta0
        supported = int(removed * (budget - beta0) / spent) if spent > 0 else 10**9
        how = f"extrapolated from {removed}"
        amortised = statistics.fmean(times) + t_retrain / max(supported, 1)
        # verified upper bound on the amortised cost: at least ``removed`` removals fit in one budget
        amortised_verified = statistics.fmean(times) + t_retrain / removed
    single = statistics.median(times)
    first = times[0]
    # batches of B rows (Eq. 6), each from a fresh model after 6 warm single removals (the first forms the removal
    # machinery), timed against the median of the 5 warm singles before it and the 5 right after it; ``b_repeats``
    # fresh models, medians
    b_times: list[float] = []
    refs: list[float] = []
    spent_b: list[float] = []
    retrained_b: list[bool] = []
    did: list[str] = []
    B = 0
    del cache  # (an onepass cache holds a float32 copy of X)
    for rep in range(b_repeats):
        run.fresh()
        warm: list[float] = []
        for i in order[:6]:
            t0 = time.perf_counter()
            run.remove([int(i)])
            warm.append(time.perf_counter() - t0)
        alive = np.flatnonzero(run.active)
        B = min(batch, alive.size - 2)
        idx = np.random.default_rng(seed + 3 + rep).choice(alive, size=B, replace=False)
        before = float(run.state.residual_bound)
        c0 = _counters(run.cache)
        t0 = time.perf_counter()
        bcert = run.remove(idx)
        b_times.append(time.perf_counter() - t0)
        c1 = _counters(run.cache)
        spent_b.append(float(bcert.residual_bound) - before)
        retrained_b.append(bool(bcert.retrained))
        d = [c1[j] - c0[j] for j in range(5)]
        did.append(f"{d[1]} it" + (f", {d[0]} refact." if d[0] else "") + (f", {d[2]} meas." if d[2] else "")
                   + (f", {d[3]} retry" if d[3] else "") + (f", {d[4]} build" if d[4] else ""))
        after: list[float] = []
        for i in np.flatnonzero(run.active)[:5]:
            t0 = time.perf_counter()
            run.remove([int(i)])
            after.append(time.perf_counter() - t0)
        refs.append(statistics.median(warm[1:] + after))
    return dict(solver=run.solver, label=run.label, single=single, amortised=amortised,
                amortised_verified=amortised_verified, supported=supported, how=how, hits=hits, first=first,
                remeasures=remeasures, prefixes=prefixes, refreshes=refreshes, beta_end=beta_end, removed=removed,
                t_retrain=t_retrain, B=B, budget=budget, t_batch=statistics.median(b_times),
                batch_single=statistics.median(refs), batch_ratios=[t / r for t, r in zip(b_times, refs, strict=True)],
                batch_spent=statistics.median(spent_b), batch_retrained=any(retrained_b), batch_did=did)


def floor_part(X: np.ndarray, y: np.ndarray, batch: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """What any certified second-order batch of ``batch`` rows with an anchor-type solver must at least do on this
    machine: read the rows and form Δ = mλw + X_Rᵀℓ'(X_R w) (fresh random rows each time), and downdate the d × d
    anchor Hessian by their rank-m product (one ``dsyrk`` of the m × d rows on a d × d matrix). Medians."""
    n, d = X.shape
    rng = np.random.default_rng(seed + 11)
    w = rng.normal(size=d) * 0.1
    lam = PARAMS["lam"]
    m = min(batch, n - 2)
    reps = max(5 * repeats, 9)
    t_read: list[float] = []
    for _ in range(reps):
        idx = rng.choice(n, size=m, replace=False)
        t0 = time.perf_counter()
        XR = X[idx]
        delta = m * lam * w + XR.T @ LOSS.d1(XR @ w, y[idx])
        t_read.append(time.perf_counter() - t0)
        del XR, delta
    idx = rng.choice(n, size=m, replace=False)
    Z = np.ascontiguousarray(np.sqrt(LOSS.d2(X[idx] @ w, y[idx]))[:, None] * X[idx])
    M = np.asfortranarray(np.eye(d) * float(n))
    t_syrk: list[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        M = dsyrk(-1.0, Z.T, beta=1.0, c=M, trans=0, lower=0, overwrite_c=1)
        t_syrk.append(time.perf_counter() - t0)
    read, syrk = statistics.median(t_read), statistics.median(t_syrk)
    return dict(read=read, syrk=syrk, total=read + syrk, m=m)


def run_dataset(name: str, X: np.ndarray, y: np.ndarray, k: int, batch: int, repeats: int,
                k_anchor: int, b_repeats: int, solvers: tuple[str, ...] = SOLVERS) -> dict[str, Any]:
    n, d = X.shape
    print(f"\n== {name}: n = {n}, d = {d} ({X.nbytes / 1e6:.0f} MB); lambda = {PARAMS['lam']}, sigma = "
          f"{PARAMS['sigma']}, eps = {PARAMS['epsilon']}, delta = {PARAMS['delta']}")
    f = fit_part(X, y, repeats)
    print(f"fit (median of {repeats})      seconds   ratio to sklearn   gradient norm reached   iterations")
    print(f"  scikit-learn lbfgs       {f['t_sk']:>8.3f}   {1.0:>15.2f}   {f['g_sk']:>21.3g}   {f['sk_iters']:>10d}"
          "   (||grad L(w)||, its default tol)")
    print(f"  scikit-learn, same tol   {f['t_sk_eq']:>8.3f}   {f['t_sk_eq'] / f['t_sk']:>15.2f}   "
          f"{f['g_sk_eq']:>21.3g}   {f['sk_eq_iters']:>10d}   (tol {f['tol_eq']:.3g}: ||grad L||_2 <= lethe's tol)")
    print(f"  lethe estimator fit      {f['t_est']:>8.3f}   {f['t_est'] / f['t_sk']:>15.2f}   {f['beta0']:>21.3g}   "
          f"{f['iters']:>10d}   (certified beta_0 >= ||grad L_b(w)||; tol {f['tol']:.3g}, budget "
          f"{f['budget']:.3g}; ||X||_2 bound and removal cache deferred to the first removal, which is timed "
          "below)")
    print(f"  lethe fit / sklearn at the same tol: {f['t_est'] / f['t_sk_eq']:.2f}")
    print(f"  lethe train (no cache)   {f['t_train']:>8.3f}   {f['t_train'] / f['t_sk']:>15.2f}   (mechanism "
          "train: training + certificate setup incl. the ||X||_2 bound)")
    print(f"  peak RSS: {f['rss0']:.2f} GB before the fits (data incl.), {f['rss_est']:.2f} GB after lethe's and "
          "scikit-learn's default fits")
    fl = floor_part(X, y, batch, repeats)
    default = _EstimatorRun(X, y, seed=0)
    default.fresh()  # resolves the concrete solver (its removals start from the fresh model of removal_part)
    concrete = default.solver
    runs: list[Any] = [default] + [_MechanismRun(X, y, s, seed=0) for s in solvers if s != concrete]
    rows = []
    for run in runs:
        rows.append(removal_part(run, k_anchor if run.solver == "anchor" else k, batch, repeats, b_repeats))
        run.release()  # the estimator's copy of X, an onepass cache's float32 copy
        gc.collect()
    skipped = sorted(set(SOLVERS) - set(solvers) - {concrete})
    w = max(len(r["label"]) for r in rows) + 2
    print(f"removal ({k} single-row removals for pcg and onepass, {k_anchor} for anchor, each from a model whose "
          f"removal machinery is formed by its first removal (timed); sklearn refit = {f['t_sk']:.3f} s)")
    print(f"  default = CertifiedLogisticRegression() with only lam/sigma/epsilon/delta (and a seed) set, through "
          f"its remove(); it resolved to solver {concrete!r}, so no separate {concrete} row (the others run the "
          "mechanism with that solver)" + (f"; not run here: {', '.join(skipped)} (--synth-solvers)" if skipped
                                           else ""))
    print("  (amort. = mean incl. refreshes/flushes + one retraining per supported removals; amort.v = the same with "
          "one retraining per removals actually made: a verified upper bound)")
    print(f"  {'solver':<{w}}{'median ms':>10}{'amort. ms':>10}{'amort.v ms':>11}{'sk/median':>10}{'sk/amort.':>10}"
          f"{'sk/amort.v':>11}{'own retrain s':>14}{'own/amort.':>11}{'retrainings':>12}   removals supported")
    for r in rows:
        print(f"  {r['label']:<{w}}{1e3 * r['single']:>10.2f}{1e3 * r['amortised']:>10.2f}"
              f"{1e3 * r['amortised_verified']:>11.2f}{f['t_sk'] / r['single']:>10.0f}"
              f"{f['t_sk'] / r['amortised']:>10.0f}{f['t_sk'] / r['amortised_verified']:>11.0f}{r['t_retrain']:>14.3f}"
              f"{r['t_retrain'] / r['amortised']:>11.0f}{r['hits']:>12d}   {r['supported']} ({r['how']})")
    for r in rows:
        print(f"  {r['label']}: first removal (incl. the deferred setup) {1e3 * r['first']:.1f} ms; anchor builds "
              f"{r['refreshes']}, residual re-measures {r['remeasures']}; bound at the end {r['beta_end']:.3g} "
              f"({r['beta_end'] / r['budget']:.1%} of the budget)")
        if r["prefixes"]:
            print("    mean ms over the first K removals (all refreshes and retrainings inside; sklearn refit / it): "
                  + ", ".join(f"K = {K}: {1e3 * t:.2f} ms ({f['t_sk'] / t:.0f}x)" for K, t in r["prefixes"].items()))
    print(f"batch of B rows (Eq. 6): {b_repeats} fresh models, each after 6 single removals; medians (single ms: the 5 "
          "warm singles before each batch and the 5 after it)")
    print(f"  floor of an anchor-type batch of {fl['m']} rows on this machine (medians): reading the rows and forming "
          f"Delta {1e3 * fl['read']:.2f} ms + the rank-{fl['m']} downdate of the {d} x {d} anchor Hessian (one dsyrk) "
          f"{1e3 * fl['syrk']:.2f} ms = {1e3 * fl['total']:.2f} ms")
    print(f"  {'solver':<{w}}{'B':>6}{'batch ms':>10}{'single ms':>10}{'batch/single':>13}{'floor/single':>13}"
          f"{'budget spent':>13}{'retrained':>10}   per batch: ratio (what it did: PCG iterations, refactorisations, "
          "measurements, retries, anchor builds)")
    for r in rows:
        r["batch_ratio"] = r["t_batch"] / r["batch_single"]
        r["floor_ratio"] = fl["total"] / r["batch_single"]
        r["syrk_ratio"] = fl["syrk"] / r["batch_single"]
        anchor_type = r["solver"] in ("anchor", "onepass")
        per = "; ".join(f"{q:.2f}x ({dd})" for q, dd in zip(r["batch_ratios"], r["batch_did"], strict=True))
        floor = f"{r['floor_ratio']:>13.2f}" if anchor_type else f"{'-':>13}"
        print(f"  {r['label']:<{w}}{r['B']:>6d}{1e3 * r['t_batch']:>10.2f}{1e3 * r['batch_single']:>10.2f}"
              f"{r['batch_ratio']:>13.2f}{floor}{r['batch_spent'] / r['budget']:>12.1%} "
              f"{str(r['batch_retrained']):>10}   {per}")
    return dict(fit=f, rows={r["label"]: r for r in rows}, n=n, floor=fl, default=rows[0]["label"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="n = 10^5 synthetic, fewer removals (a smoke run)")
    ap.add_argument("--n-synth", type=int, default=None, help="rows of the generated problem (default 10^6)")
    ap.add_argument("--removals", type=int, default=None, help="single-row removals per solver")
    ap.add_argument("--anchor-removals", type=int, default=None,
                    help="single-row removals for anchor (default: n - 982 on MNIST, 40,000 on the generated data)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-repeats", type=int, default=5, help="fresh models (one batch each) per row")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads for every timed call (both libraries)")
    ap.add_argument("--data", default="mnist,synth", help="comma-separated subset of mnist,synth (default both)")
    ap.add_argument("--synth-solvers", default="pcg,anchor",
                    help="explicit solvers on the generated data besides the default (default pcg,anchor: onepass, "
                         "about 60 s at 10^6, is run on MNIST only; add it here to run it)")
    args = ap.parse_args()
    n_synth = args.n_synth or (100_000 if args.quick else 1_000_000)
    k = args.removals or (100 if args.quick else 300)
    repeats = 1 if args.quick else args.repeats
    b_repeats = 1 if args.quick else args.batch_repeats
    threadpool_limits(args.threads)
    print(f"BLAS threads: {args.threads} (scikit-learn and lethe alike); medians of {repeats}")
    t_start = time.perf_counter()
    which = {p.strip() for p in args.data.split(",") if p.strip()}
    if not which or which - {"mnist", "synth"}:
        ap.error(f"--data must name a subset of mnist,synth. Found {args.data!r}.")
    res: dict[str, Any] = {}
    if "mnist" in which:
        X, y, _, _ = load_mnist_binary(3, 8)
        # anchor: remove as many rows as n allows (all but 982; the count the target asks for is 20,000)
        k_anchor = args.anchor_removals or (2000 if args.quick else X.shape[0] - 982)
        res["mnist"] = run_dataset("MNIST 3 vs 8", X, y, k, 1000, repeats, k_anchor, b_repeats)
        del X, y
        gc.collect()
    if "synth" in which:
        Xs, ys = synthetic(n_synth, 100)
        k_anchor = args.anchor_removals or (2000 if args.quick else 40_000)
        syn = tuple(p.strip() for p in args.synth_solvers.split(",") if p.strip())
        if set(syn) - set(SOLVERS):
            ap.error(f"--synth-solvers must name a subset of {','.join(SOLVERS)}. Found {args.synth_solvers!r}.")
        res["synth"] = run_dataset(f"generated {n_synth} x 100", Xs, ys, k, 1000, repeats, k_anchor,
                                   b_repeats, syn)
    print("\n== targets (issue 15), this run")
    tg = targets(res, full=n_synth >= 1_000_000)
    for what, value, ok, _ in tg:
        print(f"  [{label_of(ok)}] {what}: {value}")
    what, value, ok = default_line(res, tg)
    print(f"  [{label_of(ok)}] {what}: {value}")
    print(f"total benchmark time: {time.perf_counter() - t_start:.0f} s")


def label_of(ok: bool | str) -> str:
    if ok is True:
        return "met"
    if ok is False:
        return "NOT met"
    return ok if ok.startswith("below this machine's floor") else f"not verified ({ok})"


def targets(res: dict[str, Any], full: bool) -> list[tuple[str, str, bool | str, bool]]:
    """(target, value, status, whether it is a target of the default configuration). Status: True (met), False (NOT
    met), or a reason it was not verified; a batch target that no anchor-type batch can meet on this machine (its
    floor is over 3x one removal) gets "below this machine's floor: ..." instead of NOT met, never met."""
    out: list[tuple[str, str, bool | str, bool]] = []
    m, s = res.get("mnist"), res.get("synth")
    sname = "10^6 x 100" if full else f"{s['n'] if s else 0} x 100"
    runs = [(name, r) for name, r in (("MNIST 3 vs 8", m), (sname, s)) if r is not None]
    for name, r in runs:  # the fit timed is the default estimator's
        ratio = r["fit"]["t_est"] / r["fit"]["t_sk"]
        ok: bool | str = ratio <= 1.5 if (full or r is m) else "not the 10^6 problem"
        out.append((f"fit <= 1.5x scikit-learn's lbfgs fit (its default tol), {name}", f"{ratio:.2f}x", ok, True))
        ratio = r["fit"]["t_est"] / r["fit"]["t_sk_eq"]
        ok = ratio <= 1.5 if (full or r is m) else "not the 10^6 problem"
        out.append((f"fit <= 1.5x scikit-learn's lbfgs fit at lethe's tolerance, {name}", f"{ratio:.2f}x", ok, True))
    for name, r, need_ratio, need_sup in (("MNIST 3 vs 8", m, 100, 20_000), (sname, s, 1000, 10_000)):
        if r is None:
            continue
        for q in r["rows"].values():
            ratio = r["fit"]["t_sk"] / q["amortised"]
            ratio_v = r["fit"]["t_sk"] / q["amortised_verified"]
            ok = ratio_v >= need_ratio or ("extrapolated count" if ratio >= need_ratio else False)
            if not (full or r is m):
                ok = "not the 10^6 problem"
            out.append((f"amortised removal >= {need_ratio}x a scikit-learn refit, {name}, {q['label']}",
                        f"{ratio:.0f}x with the {q['how']} count; {ratio_v:.0f}x verified (one retraining per "
                        f"{q['removed'] if q['how'] != 'measured' else q['supported']} removals)", ok,
                        q["label"] == r["default"]))
        for q in r["rows"].values():
            ok_s: bool | str = q["supported"] >= need_sup if q["how"] == "measured" else "extrapolated"
            if q["how"].startswith("measured: no retraining"):
                ok_s = True if q["removed"] >= need_sup else (
                    f"{q['removed']} removed with no retraining; n = {r['n']} rows cannot show {need_sup}"
                    if r["n"] - 2 < need_sup else f"{q['removed']} removed with no retraining; fewer than {need_sup} "
                    "removals made in this run")
            elif q["how"] != "measured" and q["supported"] < need_sup:
                ok_s = False  # even the extrapolation falls short
            if not (full or r is m) and ok_s is True:
                ok_s = "not the 10^6 problem"
            out.append((f">= {need_sup} removals supported, {name}, {q['label']}",
                        f"{q['supported']} ({q['how']})", ok_s, q["label"] == r["default"]))
    for name, r in runs:
        for q in r["rows"].values():
            ok_b: bool | str = q["batch_ratio"] <= 3.0 if q["B"] >= 1000 else f"B = {q['B']}"
            if len(q["batch_ratios"]) < 3 and ok_b is True:
                ok_b = f"{len(q['batch_ratios'])} batch(es), no median of repeats"
            value = f"{q['batch_ratio']:.2f}x (median of {len(q['batch_ratios'])} batches)"
            if ok_b is False and q["solver"] in ("anchor", "onepass") and q["floor_ratio"] > 3.0:
                ok_b = (f"below this machine's floor: reading the rows and forming Delta + one dsyrk alone = "
                        f"{q['floor_ratio']:.1f}x one removal (dsyrk alone {q['syrk_ratio']:.1f}x)")
            out.append((f"batch of 1000 <= 3x one removal, {name}, {q['label']}", value, ok_b,
                        q["label"] == r["default"]))
    return out


def default_line(res: dict[str, Any], tg: list[tuple[str, str, bool | str, bool]]) -> tuple[str, str, bool | str]:
    """The issue's last target, from the default configuration's rows only: met only if every one of its targets is
    met or below this machine's floor (named)."""
    mine = [(what, value, ok) for what, value, ok, is_default in tg if is_default]
    labels = sorted({r["default"] for r in res.values()})
    what = "one default configuration meets every target"
    if not mine:
        return what, "no default rows in this run", "no default rows"
    missed = [(w, ok) for w, _, ok in mine if ok is not True and not (
        isinstance(ok, str) and ok.startswith("below this machine's floor"))]
    floor = [w for w, _, ok in mine if isinstance(ok, str) and ok.startswith("below this machine's floor")]
    who = " / ".join(labels)
    if not missed:
        note = f"; {len(floor)} of them below this machine's floor ({'; '.join(floor)})" if floor else ""
        return what, f"{who}: all {len(mine)} targets met{note}", True
    listed = "; ".join(f"{w} [{label_of(ok)}]" for w, ok in missed)
    nv = all(isinstance(ok, str) for _, ok in missed)
    return what, f"{who}: {len(missed)} of {len(mine)} not met or not verified: {listed}", (
        "some targets not verifiable in this run" if nv else False)


if __name__ == "__main__":
    main()
