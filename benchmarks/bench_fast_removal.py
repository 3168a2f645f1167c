"""Benchmark: faster and tighter certified removal than the paper (docs/tighter_bounds.md), side by side, one run.

Prints, from one run on this machine (ratios, since these machines are noisy):

1. MNIST 3 vs 8, λ = 1e-3, σ = 10, ε = 1, δ = 1e-4 — for each mode (bound × calibration × solver): the time of a
   scikit-learn refit on the remaining rows (``LogisticRegression``, lbfgs, C = 1/(λn), no intercept: the primary
   denominator, what a user would do instead), of Alg. 2's retraining on the remaining rows (L-BFGS from zero
   with a fresh b; the ‖X‖₂ bound is reused) and of a fit from scratch (incl. the ‖X‖₂ bound), medians of 3,
   timed right after that mode's removals; median and mean (amortised: includes every refresh and flush) wall
   time of one single-row ``remove`` call (certificate included), their ratios, test accuracy, and removals
   supported before the budget forces retraining. "measured": random rows removed one at a time until the first
   retraining. "extrapolated": the budget would outlast the removals run (for the tight bounds it would outlast
   the data set), so the count is K (ε′ − β₀)/(β_K − β₀) from the accumulated bound β_K after K removals. Also
   printed: the floor of the O(d²) mode: the d×d BLAS operations of one anchor removal, timed alone.
2. Synthetic n-scaling of the O(d²) `anchor` solver (refresh="never": no data pass after training): median time per
   removal at n and 10 n, with the O(nd) `pcg` solver for contrast.
3. The best test accuracy at ε = 1, δ = 1e-4 supporting ≥ 1000 removals, for the paper's mode and ours: for each
   λ of a grid, a probe (train at σ_ref, 200 removals) estimates the mean certified step; the smallest σ whose budget
   covers 1000 such steps (× 1.25) is then *verified* by removing 1000 random rows one at a time without a
   retraining (σ × 1.3 and retry otherwise); the test accuracy of that model is reported.
4. The issue's targets, met or not; ``--quick`` never labels a target met, and a count of removals that was
   extrapolated is "not verified".

Run: ``python benchmarks/bench_fast_removal.py`` (about 10–15 minutes on 2 cores; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.datasets import load_mnist_binary

EPS, DELTA = 1.0, 1e-4
REF = dict(lam=1e-3, sigma=10.0, epsilon=EPS, delta=DELTA)

MODES: list[tuple[str, dict[str, Any]]] = [
    ("paper (Cor.1, c, cholesky)", dict(bound="paper", calibration="paper", solver="cholesky")),
    ("paper bound, refine", dict(bound="paper", calibration="paper", solver="refine")),
    ("paper bound + analytic", dict(bound="paper", calibration="analytic", solver="refine")),
    ("tight bound + paper cal.", dict(bound="tight", calibration="paper", solver="pcg")),
    ("tight + analytic, pcg", dict(bound="tight", calibration="analytic", solver="pcg")),
    ("tight + analytic, refine", dict(bound="tight", calibration="analytic", solver="refine")),
    ("tight + analytic, onepass", dict(bound="tight", calibration="analytic", solver="onepass")),
    ("anchor O(d2), auto", dict(bound="tight", calibration="analytic", solver="anchor", refresh="auto")),
    ("anchor O(d2), never", dict(bound="tight", calibration="analytic", solver="anchor", refresh="never")),
]


def accuracy(w: np.ndarray, Xt: np.ndarray, yt: np.ndarray) -> float:
    return float(np.mean(np.where(Xt @ w > 0, 1.0, -1.0) == yt))


def retrain_seconds(mech: CertifiedRemoval, state: Any, X: np.ndarray, y: np.ndarray, active: np.ndarray,
                    reps: int = 3) -> tuple[float, float]:
    """Median of ``reps`` of (Alg. 2's retraining on the remaining rows: L-BFGS to the training tolerance with a
    fresh b, the ‖X‖₂ bound reused, no cache; a fit from scratch: Alg. 1 incl. the ‖X‖₂ bound). The first is the
    smaller, hence the conservative denominator of every ratio."""
    retrain, fit = [], []
    for r in range(reps):
        t0 = time.perf_counter()
        mech.retrain(state, X, y, active, np.random.default_rng(100 + r), cache=None)
        retrain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        mech.train(X[active], y[active], random_state=100 + r)
        fit.append(time.perf_counter() - t0)
    return statistics.median(retrain), statistics.median(fit)


def sklearn_refit_seconds(X: np.ndarray, y: np.ndarray, lam: float, reps: int = 3) -> float:
    """Median of ``reps`` scikit-learn refits on the same rows: ``LogisticRegression`` (lbfgs, C = 1/(λ n),
    no intercept, its default tolerance) — what a user would do instead of a certified removal."""
    from sklearn.linear_model import LogisticRegression

    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        LogisticRegression(C=1.0 / (lam * X.shape[0]), fit_intercept=False, solver="lbfgs", max_iter=10_000).fit(X, y)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run_removals(mech: CertifiedRemoval, X: np.ndarray, y: np.ndarray, order: np.ndarray, k: int,
                 seed: int = 0) -> dict[str, Any]:
    """Remove ``order[:k]`` one row at a time until the first retraining (or k)."""
    cache = NewtonCache()
    t0 = time.perf_counter()
    state, _ = mech.train(X, y, random_state=seed, cache=cache)
    setup = time.perf_counter() - t0
    w0, beta0 = state.w.copy(), state.residual_bound
    active = np.ones(X.shape[0], dtype=bool)
    times, incs, refreshes, done, hit = [], [], 0, 0, False
    for i in order[:k]:
        before = state.residual_bound
        t1 = time.perf_counter()
        state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=seed + 1,
                                  check_input=False)
        times.append(time.perf_counter() - t1)  # the whole call, certificate included
        active[i] = False
        if cert.retrained:
            hit = True
            incs.append(cert.step_bound)  # the step that did not fit
            break
        incs.append(state.residual_bound - before)
        refreshes += cert.refreshed in ("anchor", "hessian")  # data-pass refreshes
        done += 1
    budget = mech.budget
    if hit:
        supported, how = done, "measured"
    else:
        spent = state.residual_bound - beta0
        supported, how = (int(done * (budget - beta0) / spent) if spent > 0 else 10**9), f"extrapolated from {done}"
    times_ok = times[:-1] if hit else times
    times_ok = times_ok or times
    return dict(w0=w0, setup=setup, median=float(np.median(times_ok)), mean=float(np.mean(times_ok)),
                supported=supported, how=how, budget=budget, beta0=beta0, refreshes=refreshes, removed=done,
                state=state, mean_increment=float(np.mean(incs)), active=active)


def part1(X, y, Xt, yt, quick: bool) -> dict[str, dict[str, Any]]:
    n, d = X.shape
    print(f"\n== 1. MNIST 3 vs 8: n = {n}, d = {d}, test = {Xt.shape[0]}; lambda = {REF['lam']}, sigma = "
          f"{REF['sigma']}, eps = {EPS}, delta = {DELTA}")
    order = np.random.default_rng(1).permutation(n)
    k_tight = 300 if quick else 2000
    caps = {"paper (Cor.1, c, cholesky)": 10 if quick else 25, "paper bound, refine": n,
            "paper bound + analytic": n, "tight bound + paper cal.": k_tight, "tight + analytic, pcg": k_tight,
            "tight + analytic, refine": k_tight // 2, "tight + analytic, onepass": k_tight,
            "anchor O(d2), auto": 400 if quick else n,
            "anchor O(d2), never": 400 if quick else n}
    results: dict[str, dict[str, Any]] = {}
    for name, kw in MODES:
        mech = CertifiedRemoval(**REF, **kw)
        r = run_removals(mech, X, y, order, caps[name])
        # retraining from scratch (Alg. 1 with this mode's calibration), timed right after this mode's removals so
        # that both sides of the ratio see the same machine load
        r["retrain"], r["fit"] = retrain_seconds(mech, r["state"], X, y, r["active"], reps=1 if quick else 3)
        r["sk"] = sklearn_refit_seconds(X[r["active"]], y[r["active"]], REF["lam"], reps=1 if quick else 3)
        r["acc"] = accuracy(r["w0"], Xt, yt)
        if name.startswith("paper (Cor.1"):
            r["how"] = "timing only"
        results[name] = r
    # the paper-faithful count is the same Cor. 1 bound; it is counted with the refine solver (measured solve error
    # ≤ 1 % of the bound) because rebuilding the Hessian for each of ~250 removals would take minutes
    results["paper (Cor.1, c, cholesky)"]["supported"] = results["paper bound, refine"]["supported"]
    results["paper (Cor.1, c, cholesky)"]["how"] = "= paper bound, refine"
    base = results["paper (Cor.1, c, cholesky)"]["supported"]
    print("retrain = Alg. 2's retraining on the remaining rows (L-BFGS, fresh b, ||X||_2 bound reused); fit = a fit "
          "from scratch incl. the ||X||_2 bound.")
    print("sk refit = scikit-learn's LogisticRegression (lbfgs, C = 1/(lambda n), no intercept) on the same rows, "
          "timed in the same run: the primary denominator. Lethe's own retraining printed beside it.")
    print(f"{'mode':<28}{'sk refit s':>11}{'retrain s':>10}{'fit s':>7}{'median ms':>11}{'mean ms':>9}{'sk/':>8}"
          f"{'sk/':>8}{'retrain/':>10}{'test acc':>9}{'budget':>8}{'removals supported':>36}{'x paper':>9}")
    print(f"{'':<28}{'':>11}{'':>10}{'':>7}{'':>11}{'':>9}{'median':>8}{'mean':>8}{'mean':>10}")
    for name, r in results.items():
        print(f"{name:<28}{r['sk']:>11.3f}{r['retrain']:>10.3f}{r['fit']:>7.2f}{1e3 * r['median']:>11.2f}"
              f"{1e3 * r['mean']:>9.2f}{r['sk'] / r['median']:>8.0f}{r['sk'] / r['mean']:>8.0f}"
              f"{r['retrain'] / r['mean']:>10.0f}{r['acc']:>9.4f}{r['budget']:>8.3f}"
              f"{r['supported']:>10d} ({r['how']})".ljust(36 + 83) + f"{r['supported'] / base:>9.1f}")
    floor = dense_floor(d)
    never = results["anchor O(d2), never"]
    print(f"O(d^2) floor: the d x d BLAS operations of one anchor removal (ssymv, 2 dsymv, 1/32 dsyrk), timed alone: "
          f"{1e3 * floor:.3f} ms = 1/{never['retrain'] / floor:.0f} of retraining; the anchor removal itself: "
          f"{1e3 * never['median']:.3f} ms")
    results["anchor O(d2), never"]["floor"] = floor
    a = results["anchor O(d2), auto"]
    print(f"anchor setup (one O(n d^2) pass at training): {a['setup']:.2f} s incl. training; data-pass refreshes "
          f"during the run: auto {a['refreshes']}, never {results['anchor O(d2), never']['refreshes']}; "
          f"tight pcg: {results['tight + analytic, pcg']['refreshes']}, onepass: "
          f"{results['tight + analytic, onepass']['refreshes']}")
    return results


def dense_floor(d: int, reps: int = 2048, fold: int = 32) -> float:
    """Median seconds per removal of the d×d operations an O(d²) (anchor) removal cannot avoid, alone, on random
    matrices of the same size: the preconditioner (float32 ``ssymv``), the measured residual M v and the Gram
    product G v (two ``dsymv``), and the downdate of M, folded in by one rank-``fold`` update (``dsyrk``) every
    ``fold`` removals. Memory traffic, not arithmetic, sets this floor."""
    from scipy.linalg.blas import dsymv, dsyrk, ssymv

    rng = np.random.default_rng(0)
    B = rng.normal(size=(d, d))
    M = np.asfortranarray(B @ B.T + d * np.eye(d))
    G = M.copy(order="F")
    A32 = np.asfortranarray(np.linalg.inv(M), dtype=np.float32)
    x = rng.normal(size=d) / math.sqrt(d)
    Z = rng.normal(size=(fold, d)) * 1e-6
    ts = []
    for r in range(reps):
        t0 = time.perf_counter()
        v = np.asarray(ssymv(1.0, A32, x.astype(np.float32), lower=0), dtype=np.float64)
        dsymv(1.0, M, v, lower=0)
        dsymv(1.0, G, v, lower=0)
        ts.append(time.perf_counter() - t0)
        if r % fold == fold - 1:
            t0 = time.perf_counter()
            M = dsyrk(-1.0, Z, beta=1.0, c=M, trans=1, lower=0, overwrite_c=1)
            ts[-fold:] = [t + (time.perf_counter() - t0) / fold for t in ts[-fold:]]
    return statistics.median(ts)


def synthetic(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    w = rng.normal(size=d) * 3.0
    y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


def part2(quick: bool) -> dict[str, float]:
    d = 200
    ns = (2000, 20000) if quick else (10000, 100000)
    k = 100 if quick else 300
    print(f"\n== 2. n-scaling, synthetic: d = {d}, n = {ns[0]} and {ns[1]}; lambda = 1e-3, sigma = 10; {k} removals")
    out: dict[str, float] = {}
    print(f"{'solver':<22}" + "".join(f"{'median ms n=' + str(n):>22}" for n in ns) + f"{'ratio':>8}")
    for solver, refresh in (("anchor", "never"), ("onepass", "auto"), ("pcg", "auto")):
        med = []
        for n in ns:
            X, y = synthetic(n, d, seed=n)
            mech = CertifiedRemoval(**REF, bound="tight", calibration="analytic", solver=solver, refresh=refresh)
            r = run_removals(mech, X, y, np.random.default_rng(2).permutation(n), k)
            med.append(r["median"])
        out[solver] = med[1] / med[0]
        print(f"{solver + ' (' + refresh + ')':<22}" + "".join(f"{1e3 * m:>22.3f}" for m in med) +
              f"{med[1] / med[0]:>8.2f}")
    return out


def verified_sigma(kw: dict[str, Any], lam: float, X, y, Xt, yt, order, need: int, quick: bool) -> dict[str, Any]:
    """Smallest σ found whose model supports ``need`` removals (verified), or the most removals reached."""
    sigma_ref = 1.0
    probe = 50 if quick else 200
    mech = CertifiedRemoval(lam=lam, sigma=sigma_ref, epsilon=EPS, delta=DELTA, **kw)
    r = run_removals(mech, X, y, order, probe)
    # mean increase of the certified bound per removal (the step that forced a retraining counts in full)
    sigma = sigma_ref * 1.25 * (need * r["mean_increment"]) / (r["budget"] * (1 - 1e-3))
    most, most_sigma = 0, sigma
    for _ in range(6):
        mech = CertifiedRemoval(lam=lam, sigma=sigma, epsilon=EPS, delta=DELTA, **kw)
        v = run_removals(mech, X, y, order, need)
        if v["removed"] >= need:
            return dict(lam=lam, sigma=sigma, acc=accuracy(v["w0"], Xt, yt), acc_after=accuracy(v["state"].w, Xt, yt),
                        removed=v["removed"], median=v["median"])
        if v["removed"] <= most:  # more noise no longer buys removals: the target is out of reach at this λ
            break
        most, most_sigma = v["removed"], sigma
        # the certified steps grow with σ (w moves away from the data's optimum): re-estimate at this σ
        sigma = max(sigma * 1.3, sigma * 1.25 * (need * v["mean_increment"]) / (v["budget"] * (1 - 1e-3)))
    return dict(lam=lam, sigma=math.nan, acc=math.nan, acc_after=math.nan, removed=most, median=math.nan,
                most_sigma=most_sigma)


def part3(X, y, Xt, yt, quick: bool) -> dict[str, dict[str, Any]]:
    need = 200 if quick else 1000
    lams = (3e-4, 1e-3) if quick else (1e-4, 3e-4, 1e-3, 3e-3)
    print(f"\n== 3. best test accuracy at eps = {EPS}, delta = {DELTA} with >= {need} removals "
          f"(verified: {need} single-row removals without retraining)")
    order = np.random.default_rng(3).permutation(X.shape[0])
    modes = {"paper": dict(bound="paper", calibration="paper", solver="refine"),
             "ours": dict(bound="tight", calibration="analytic", solver="pcg"),
             "onepass": dict(bound="tight", calibration="analytic", solver="onepass")}
    best: dict[str, dict[str, Any]] = {}
    print(f"{'mode':<9}{'lambda':>9}{'sigma':>10}{'test acc':>10}{'acc after':>11}{'removals':>10}")
    for name, kw in modes.items():
        for lam in lams:
            r = verified_sigma(kw, lam, X, y, Xt, yt, order, need, quick)
            if math.isnan(r["sigma"]):
                print(f"{name:<9}{lam:>9.0e}   not reachable: at most {r['removed']} removals (sigma = "
                      f"{r['most_sigma']:.3g}; more noise lowered the count)")
                continue
            print(f"{name:<9}{lam:>9.0e}{r['sigma']:>10.3g}{r['acc']:>10.4f}{r['acc_after']:>11.4f}{r['removed']:>10d}")
            if not math.isnan(r["acc"]) and r["acc"] > best.get(name, {"acc": -1.0})["acc"]:
                best[name] = r
    for name, r in best.items():
        print(f"best {name}: test accuracy {r['acc']:.4f} at lambda = {r['lam']:.0e}, sigma = {r['sigma']:.3g} "
              f"({r['removed']} removals verified)")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small smoke run (not the reported figures)")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS threads for removal and retraining alike (default 1: robust to other load)")
    ap.add_argument("--parts", default="1,2,3", help="comma-separated subset of the parts 1,2,3 to run (default all)")
    args = ap.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"1", "2", "3"}:
        ap.error(f"--parts must name a subset of 1,2,3. Found {args.parts!r}.")
    threadpool_limits(args.threads)
    print(f"BLAS threads: {args.threads} (removals and retraining alike)")
    t_start = time.perf_counter()
    X, y, Xt, yt = load_mnist_binary(3, 8)
    res = part1(X, y, Xt, yt, args.quick) if "1" in parts else {}
    scale = part2(args.quick) if "2" in parts else {}
    best = part3(X, y, Xt, yt, args.quick) if "3" in parts else {}
    print("\n== 4. targets (same machine, same run)")
    checks: list[tuple[str, str, bool | str]] = []
    if res:
        checks += part1_checks(res)
    if scale:
        checks.append(("O(d^2) mode: time grows < 2x for 10x n", f"{scale['anchor']:.2f}x", scale["anchor"] < 2.0))
    for key, label in (("ours", "ours, pcg"), ("onepass", "onepass")):
        if best:
            checks.append((f">= 96% test accuracy with >= 1000 removals ({label})",
                           f"{best.get(key, {}).get('acc', math.nan):.4f}", best.get(key, {}).get("acc", 0.0) >= 0.96))
    for what, value, ok in checks:
        if args.quick and ok:
            label = "not verified (--quick)"  # a smoke run never labels a target met
        else:
            label = "met" if ok is True else ("NOT met" if ok is False else f"not verified ({ok})")
        print(f"  [{label}] {what}: {value}")
    if best:
        print(f"  paper mode, best accuracy with >= 1000 removals: {best.get('paper', {}).get('acc', math.nan):.4f}")
    print(f"total benchmark time: {time.perf_counter() - t_start:.0f} s")


def part1_checks(res: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """The targets that part 1 measures."""
    paper, tight, anchor, one = (res["paper (Cor.1, c, cholesky)"], res["tight + analytic, pcg"],
                                 res["anchor O(d2), never"], res["tight + analytic, onepass"])
    checks: list[tuple[str, str, bool | str]] = []
    for label, r in (("tightest mode (pcg)", tight), ("tight onepass mode", one)):
        more = r["supported"] >= 10 * paper["supported"]
        checks += [
            (f"{label} supports >= 10x the paper's removals",
             f"{r['supported']} ({r['how']}) vs {paper['supported']} = {r['supported'] / paper['supported']:.0f}x",
             more if (r["how"] == "measured" or not more) else "extrapolated"),
            (f"{label}: removal (mean, incl. flushes and refreshes) <= 1/100 of a scikit-learn refit",
             f"1/{r['sk'] / r['mean']:.0f} (1/{r['sk'] / r['median']:.0f} median; lethe's own retraining: "
             f"1/{r['retrain'] / r['mean']:.0f})", r["sk"] / r["mean"] >= 100)]
    checks.append(("O(d^2) mode: removal <= 1/1000 of a scikit-learn refit",
                   f"1/{anchor['sk'] / anchor['median']:.0f} (median; the d x d operations alone: "
                   f"1/{anchor['sk'] / anchor['floor']:.0f}; lethe's own retraining: "
                   f"1/{anchor['retrain'] / anchor['median']:.0f})",
                   anchor["sk"] / anchor["median"] >= 1000))
    return checks


if __name__ == "__main__":
    main()
