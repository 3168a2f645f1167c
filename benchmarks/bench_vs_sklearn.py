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
2. **Removal.** For each solver (``pcg``, the default; ``onepass``; ``anchor``): K random single-row removals (300;
   for ``anchor`` all but 982 rows of MNIST and 40,000 of the generated rows) from a freshly trained model whose
   removal machinery the first removal forms; the median and the amortised mean per removal (the first removal's
   setup and every refresh, measurement, flush and retraining inside the run included; if the run ended before the
   budget was spent, one retraining — lethe's own, timed — is added per *supported* removals), and for long runs
   the mean over the first 300, 1,000, 3,000 and 6,000 removals. Ratios: a scikit-learn refit ÷ removal; lethe's
   own retraining ÷ removal beside it. A run in which re-anchors measured the residual (``anchor``, §5c of
   docs/tighter_bounds.md) and no retraining happened reports its removals as measured without a retraining.
   Removals supported per budget: *measured* if the run hit the budget (first retraining), else *extrapolated*
   from the budget the K removals spent (labelled so; never counted as meeting a target). The amortised cost is
   also given as a *verified* upper bound: one retraining per K removals when the K removals did not spend the
   budget; only that figure can mark an amortised-cost target met.
3. **Batch.** One batch of B = 1,000 rows (Eq. 6) from a fresh model after 6 single removals: its time ÷ the median
   of the 5 warm single removals before and the 5 after, and the share of the budget it spent.
4. **Targets** of issue 15, met / NOT met / not verified (a target is labelled met only if this run measured it).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_vs_sklearn.py`` (about 12 minutes on 2 cores; ``--quick`` ≈ 2
minutes).
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
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from lethe.certified import objective as obj
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.datasets import load_mnist_binary
from lethe.estimators import CertifiedLogisticRegression
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


def removal_part(X: np.ndarray, y: np.ndarray, solver: str, k: int, batch: int, repeats: int,
                 seed: int = 0) -> dict[str, Any]:
    n = X.shape[0]
    mech = CertifiedRemoval(**PARAMS, bound="tight", calibration="analytic", solver=solver)
    cache = NewtonCache()
    # as the estimator fits: the removal machinery is formed by the first removal, whose time is counted below
    state, _ = mech.train(X, y, random_state=seed, cache=cache, defer_setup=True)
    beta0 = state.residual_bound
    active = np.ones(n, dtype=bool)
    order = np.random.default_rng(seed + 1).permutation(n)
    times: list[float] = []
    hits = 0
    first_hit: int | None = None
    removed = 0
    for i in order[:k]:
        t0 = time.perf_counter()
        state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=seed + 2,
                                  check_input=False)
        times.append(time.perf_counter() - t0)
        active[i] = False
        removed += 1
        if cert.retrained:
            hits += 1
            if first_hit is None:
                first_hit = removed - 1  # removals certified before the budget forced the first retraining
    state_end = state
    # amortised cost over the first K removals (everything inside the timed calls: re-anchors, measurements,
    # retrainings), for the long anchor run
    prefixes = {K: statistics.fmean(times[:K]) for K in (300, 1000, 3000, 6000) if K < len(times)}
    t_retrain, _ = median_time(lambda: mech.retrain(state, X, y, active, np.random.default_rng(7), cache=None),
                               repeats)
    if first_hit is not None:
        supported, how = first_hit, "measured"
        amortised = amortised_verified = statistics.fmean(times)  # the retraining(s) are inside the timed calls
    elif cache.remeasures > 0:
        # re-anchors measured the residual and restarted the accounting: the budget was never spent; what is
        # measured is that these ``removed`` removals needed no retraining
        supported, how = removed, f"measured: no retraining in {removed}, {cache.remeasures} residual measurements"
        amortised = statistics.fmean(times) + t_retrain / removed
        amortised_verified = amortised
    else:
        spent = state.residual_bound - beta0
        supported = int(removed * (mech.budget - beta0) / spent) if spent > 0 else 10**9
        how = f"extrapolated from {removed}"
        amortised = statistics.fmean(times) + t_retrain / max(supported, 1)
        # verified upper bound on the amortised cost: at least ``removed`` removals fit in one budget
        amortised_verified = statistics.fmean(times) + t_retrain / removed
    single = statistics.median(times)
    first = times[0]
    # one batch of B rows (Eq. 6) from a fresh model after a few warm single removals
    state, _ = mech.train(X, y, random_state=seed, cache=cache, defer_setup=True)
    active = np.ones(n, dtype=bool)
    warm: list[float] = []
    for i in order[:6]:
        t0 = time.perf_counter()
        state, _ = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=seed + 2,
                               check_input=False)
        warm.append(time.perf_counter() - t0)
        active[i] = False
    alive = np.flatnonzero(active)
    B = min(batch, alive.size - 2)
    idx = np.random.default_rng(seed + 3).choice(alive, size=B, replace=False)
    before = state.residual_bound
    t0 = time.perf_counter()
    new, bcert = mech.remove(state, X, y, idx, active=active, cache=cache, random_state=seed + 4,
                             check_input=False)
    t_batch = time.perf_counter() - t0
    # the single removals right after the batch, for a same-state comparison
    active[idx] = False
    state = new
    after: list[float] = []
    for i in np.flatnonzero(active)[:5]:
        t0 = time.perf_counter()
        state, _ = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=seed + 5,
                               check_input=False)
        after.append(time.perf_counter() - t0)
        active[i] = False
    return dict(solver=solver, single=single, amortised=amortised, amortised_verified=amortised_verified,
                supported=supported, how=how, hits=hits, first=first, remeasures=cache.remeasures, prefixes=prefixes,
                refreshes=cache.refreshes, beta_end=float(state_end.residual_bound), single_before=statistics.median(
                    warm[1:]),
                removed=removed, t_retrain=t_retrain, t_batch=t_batch, B=B, batch_step=float(bcert.step_bound),
                batch_retrained=bool(bcert.retrained), batch_spent=(float(bcert.residual_bound) - before),
                budget=mech.budget, single_after=statistics.median(after) if after else math.nan)


def run_dataset(name: str, X: np.ndarray, y: np.ndarray, k: int, batch: int, repeats: int,
                k_anchor: int) -> dict[str, Any]:
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
    rows = []
    for solver in SOLVERS:
        rows.append(removal_part(X, y, solver, k_anchor if solver == "anchor" else k, batch, repeats))
    print(f"removal ({k} single-row removals for pcg and onepass, {k_anchor} for anchor, each from a model whose "
          f"removal machinery is formed by its first removal (timed); sklearn refit = {f['t_sk']:.3f} s)")
    print("  (amort. = mean incl. refreshes/flushes + one retraining per supported removals; amort.v = the same with "
          "one retraining per removals actually made: a verified upper bound)")
    print(f"  {'solver':<9}{'median ms':>10}{'amort. ms':>10}{'amort.v ms':>11}{'sk/median':>10}{'sk/amort.':>10}"
          f"{'sk/amort.v':>11}{'own retrain s':>14}{'own/amort.':>11}{'retrainings':>12}   removals supported")
    for r in rows:
        print(f"  {r['solver']:<9}{1e3 * r['single']:>10.2f}{1e3 * r['amortised']:>10.2f}"
              f"{1e3 * r['amortised_verified']:>11.2f}{f['t_sk'] / r['single']:>10.0f}"
              f"{f['t_sk'] / r['amortised']:>10.0f}{f['t_sk'] / r['amortised_verified']:>11.0f}{r['t_retrain']:>14.3f}"
              f"{r['t_retrain'] / r['amortised']:>11.0f}{r['hits']:>12d}   {r['supported']} ({r['how']})")
    for r in rows:
        print(f"  {r['solver']}: first removal (incl. the deferred setup) {1e3 * r['first']:.1f} ms; anchor builds "
              f"{r['refreshes']}, residual re-measures {r['remeasures']}; bound at the end {r['beta_end']:.3g} "
              f"({r['beta_end'] / r['budget']:.1%} of the budget)")
        if r["prefixes"]:
            print("    mean ms over the first K removals (all refreshes and retrainings inside; sklearn refit / it): "
                  + ", ".join(f"K = {K}: {1e3 * t:.2f} ms ({f['t_sk'] / t:.0f}x)" for K, t in r["prefixes"].items()))
    print("batch of B rows (Eq. 6) from a fresh model after 6 single removals (single ms: the median of the 5 "
          "warm singles before and the 5 after)")
    print(f"  {'solver':<9}{'B':>6}{'batch ms':>10}{'single ms':>10}{'batch/single':>13}{'budget spent':>13}"
          f"{'retrained':>10}")
    for r in rows:
        ref = statistics.median([r["single_before"], r["single_after"]]) if math.isfinite(r["single_after"]) else (
            r["single_before"])
        r["batch_ratio"] = r["t_batch"] / ref
        print(f"  {r['solver']:<9}{r['B']:>6d}{1e3 * r['t_batch']:>10.2f}{1e3 * ref:>10.2f}{r['batch_ratio']:>13.2f}"
              f"{r['batch_spent'] / r['budget']:>12.1%} {str(r['batch_retrained']):>10}")
    return dict(fit=f, rows={r["solver"]: r for r in rows}, n=n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="n = 10^5 synthetic, fewer removals (a smoke run)")
    ap.add_argument("--n-synth", type=int, default=None, help="rows of the generated problem (default 10^6)")
    ap.add_argument("--removals", type=int, default=None, help="single-row removals per solver")
    ap.add_argument("--anchor-removals", type=int, default=None,
                    help="single-row removals for anchor (default: n - 982 on MNIST, 40,000 on the generated data)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads for every timed call (both libraries)")
    ap.add_argument("--data", default="mnist,synth", help="comma-separated subset of mnist,synth (default both)")
    args = ap.parse_args()
    n_synth = args.n_synth or (100_000 if args.quick else 1_000_000)
    k = args.removals or (100 if args.quick else 300)
    repeats = 1 if args.quick else args.repeats
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
        res["mnist"] = run_dataset("MNIST 3 vs 8", X, y, k, 1000, repeats, k_anchor)
        del X, y
        gc.collect()
    if "synth" in which:
        Xs, ys = synthetic(n_synth, 100)
        k_anchor = args.anchor_removals or (2000 if args.quick else 40_000)
        res["synth"] = run_dataset(f"generated {n_synth} x 100", Xs, ys, k, 1000, repeats, k_anchor)
    print("\n== targets (issue 15), this run")
    for what, value, ok in targets(res, full=n_synth >= 1_000_000):
        label = "met" if ok is True else ("NOT met" if ok is False else f"not verified ({ok})")
        print(f"  [{label}] {what}: {value}")
    print(f"total benchmark time: {time.perf_counter() - t_start:.0f} s")


def targets(res: dict[str, Any], full: bool) -> list[tuple[str, str, bool | str]]:
    out: list[tuple[str, str, bool | str]] = []
    m, s = res.get("mnist"), res.get("synth")
    sname = "10^6 x 100" if full else f"{s['n'] if s else 0} x 100"
    runs = [(name, r) for name, r in (("MNIST 3 vs 8", m), (sname, s)) if r is not None]
    for name, r in runs:
        ratio = r["fit"]["t_est"] / r["fit"]["t_sk"]
        ok: bool | str = ratio <= 1.5 if (full or r is m) else "not the 10^6 problem"
        out.append((f"fit <= 1.5x scikit-learn's lbfgs fit (its default tol), {name}", f"{ratio:.2f}x", ok))
        ratio = r["fit"]["t_est"] / r["fit"]["t_sk_eq"]
        ok = ratio <= 1.5 if (full or r is m) else "not the 10^6 problem"
        out.append((f"fit <= 1.5x scikit-learn's lbfgs fit at lethe's tolerance, {name}", f"{ratio:.2f}x", ok))
    for name, r, need_ratio, need_sup in (("MNIST 3 vs 8", m, 100, 20_000), (sname, s, 1000, 10_000)):
        if r is None:
            continue
        for q in r["rows"].values():
            ratio = r["fit"]["t_sk"] / q["amortised"]
            ratio_v = r["fit"]["t_sk"] / q["amortised_verified"]
            ok = ratio_v >= need_ratio or ("extrapolated count" if ratio >= need_ratio else False)
            if not (full or r is m):
                ok = "not the 10^6 problem"
            out.append((f"amortised removal >= {need_ratio}x a scikit-learn refit, {name}, {q['solver']}",
                        f"{ratio:.0f}x with the {q['how']} count; {ratio_v:.0f}x verified (one retraining per "
                        f"{q['removed'] if q['how'] != 'measured' else q['supported']} removals)", ok))
        for q in r["rows"].values():
            ok_s: bool | str = q["supported"] >= need_sup if q["how"] == "measured" else "extrapolated"
            if q["how"].startswith("measured: no retraining"):
                ok_s = True if q["removed"] >= need_sup else (
                    f"{q['removed']} removed with no retraining; n = {r['n']} rows cannot show {need_sup}")
            elif q["how"] != "measured" and q["supported"] < need_sup:
                ok_s = False  # even the extrapolation falls short
            out.append((f">= {need_sup} removals supported, {name}, {q['solver']}",
                        f"{q['supported']} ({q['how']})", ok_s))
    for name, r in runs:
        for q in r["rows"].values():
            ok_b: bool | str = q["batch_ratio"] <= 3.0 if q["B"] >= 1000 else f"B = {q['B']}"
            out.append((f"batch of 1000 <= 3x one removal, {name}, {q['solver']}", f"{q['batch_ratio']:.2f}x", ok_b))
    return out


if __name__ == "__main__":
    main()
