"""Benchmark: certified removal vs retraining on MNIST 3 vs 8 (Guo et al. 2020 §4.1 settings).

Prints, from one run on this machine: training time, median time per removal, their ratio, test accuracy, and the
number of single-point removals supported before the budget forces retraining — *measured* by removing random
points until the first retraining (not extrapolated). Both Newton solvers are measured side by side:
``cholesky`` (the paper: rebuild and factorise the Hessian each removal) and ``refine`` (lethe's default: cached
factorisation + iterative refinement; same Eq. 3 step and same certificate).

Run: ``make bench`` or ``python benchmarks/bench_removal.py [--max-removals N]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_mnist_binary
from lethe.experiments._common import remove_until_retrained

PARAMS = dict(lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4)
# the paper-faithful certificate (Cor. 1/2 with gamma = 1/4, c = sqrt(2 log(1.5/delta))); the tighter modes are
# measured by benchmarks/bench_fast_removal.py
FAITHFUL = dict(bound="paper", calibration="paper")


def run(solver: str, X, y, Xt, yt, max_removals: int, seed: int = 0) -> dict:
    t0 = time.perf_counter()
    clf = CertifiedLogisticRegression(**PARAMS, **FAITHFUL, solver=solver, random_state=seed).fit(X, y)
    t_train = time.perf_counter() - t0
    acc = clf.score(Xt, yt)
    order = np.random.default_rng(seed + 1).permutation(X.shape[0])
    done, retrained = remove_until_retrained(clf, order, max_removals)
    times = [c.seconds for c in done] + ([retrained.seconds] if retrained is not None else [])
    return dict(solver=solver, t_train=t_train, median=float(np.median(times)), acc=acc, acc_after=clf.score(Xt, yt),
                supported=len(done), hit=retrained is not None, n=len(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-removals", type=int, default=3000)
    ap.add_argument("--cholesky-removals", type=int, default=60,
                    help="removals timed with the (slow) paper solver; its count of supported removals is the same "
                         "Cor. 1 bound, so it is only timed")
    args = ap.parse_args()
    X, y, Xt, yt = load_mnist_binary(3, 8)
    print(f"MNIST 3 vs 8: n = {X.shape[0]}, d = {X.shape[1]}, test = {Xt.shape[0]}; "
          f"lambda = {PARAMS['lam']}, sigma = {PARAMS['sigma']}, eps = {PARAMS['epsilon']}, delta = {PARAMS['delta']}")
    fast = run("refine", X, y, Xt, yt, args.max_removals)
    slow = run("cholesky", X, y, Xt, yt, args.cholesky_removals)
    print(f"{'solver':<10}{'train s':>9}{'median removal ms':>19}{'removal/train':>15}{'test acc':>10}"
          f"{'acc after':>11}{'removals supported':>21}")
    for r in (fast, slow):
        sup = (f"{r['supported']} (measured)" if r["hit"] else f">= {r['supported']} (budget not hit in {r['n']})")
        print(f"{r['solver']:<10}{r['t_train']:>9.2f}{1e3 * r['median']:>19.2f}{r['median'] / r['t_train']:>15.4f}"
              f"{r['acc']:>10.4f}{r['acc_after']:>11.4f}{sup:>21}")
    print(f"targets: accuracy >= 0.95 -> {fast['acc']:.4f}; >= 250 removals -> {fast['supported']}; "
          f"removal <= 1/20 of training -> 1/{fast['t_train'] / fast['median']:.0f} (refine), "
          f"1/{slow['t_train'] / slow['median']:.1f} (cholesky)")


if __name__ == "__main__":
    main()
