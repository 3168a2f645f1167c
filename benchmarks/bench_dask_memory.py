"""Benchmark: peak memory of the dense in-memory path (issue 14, the comparison point of the Dask backend).

For each solver, a fresh process generates ``--rows`` × ``--features`` float64 features (‖xᵢ‖ ≤ 1), trains certified
logistic regression with a cache and removes ``--removals`` rows one at a time; it prints its peak RSS (VmHWM)
and the peak *above* the RSS it had before the features existed, as a multiple of the feature bytes (the issue's
target: ≤ 1.5× during fit and removal). ``--src`` runs the same measurement on other lethe sources (e.g. the
main branch's ``src``) side by side.

Run: ``python benchmarks/bench_dask_memory.py --rows 1000000`` (a few minutes); add ``--src /path/to/other/src``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def child(args: argparse.Namespace) -> None:
    import numpy as np

    from lethe.certified.estimators import CertifiedLogisticRegression
    from lethe.certified.mechanism import CertifiedRemoval, NewtonCache

    # a tiny fit and removal first: the modules they import lazily (scipy.optimize, ...) are then loaded before the
    # baseline, so the figures count memory that grows with the data, not ~50 MiB of code loaded once
    rs = np.random.default_rng(1)
    Xw = rs.normal(size=(300, args.features)) / (2.0 * np.sqrt(args.features))
    yw = np.where(rs.normal(size=300) > 0, 1.0, -1.0)
    if args.estimator:
        CertifiedLogisticRegression(lam=1e-3, sigma=10.0, solver=args.solver, random_state=0).fit(Xw, yw).remove([0])
    else:
        mw = CertifiedRemoval(lam=1e-3, sigma=10.0, solver=args.solver, bound="tight", calibration="analytic")
        cw = NewtonCache()
        sw, _ = mw.train(Xw, yw, random_state=0, cache=cw)
        mw.remove(sw, Xw, yw, [0], cache=cw, check_input=False)
    del Xw, yw
    base = _status("VmRSS")
    rng = np.random.default_rng(0)
    n, d = args.rows, args.features
    dtype = np.float32 if args.float32 else np.float64
    X = np.empty((n, d), dtype=dtype)
    for s in range(0, n, 65536):  # generated in blocks: no temporary copy
        B = rng.normal(size=(min(65536, n - s), d))
        B /= np.maximum(np.linalg.norm(B, axis=1, keepdims=True), 1.0) * 1.2
        X[s:s + B.shape[0]] = B
    w_true = rng.normal(size=d) * 3
    y = np.where(X @ w_true + rng.logistic(size=n) > 0, 1.0, -1.0)
    feat = X.nbytes
    data_rss = _status("VmRSS")
    if args.estimator:
        est = CertifiedLogisticRegression(lam=1e-3, sigma=10.0, solver=args.solver, random_state=0).fit(X, y)
        fit_peak = _status("VmHWM")
        for i in range(args.removals):
            est.remove([i])
    else:
        mech = CertifiedRemoval(lam=1e-3, sigma=10.0, solver=args.solver, bound="tight", calibration="analytic")
        cache = NewtonCache()
        state, _ = mech.train(X, y, random_state=0, cache=cache)
        fit_peak = _status("VmHWM")
        active = np.ones(n, dtype=bool)
        for i in range(args.removals):
            state, _ = mech.remove(state, X, y, [i], active=active, cache=cache, check_input=False)
            active[i] = False
    peak = _status("VmHWM")
    mib = feat / 2**20
    print(f"  {args.label:<10} {args.solver:<8} {'estimator' if args.estimator else 'mechanism':<9} "
          f"{'float32' if args.float32 else 'float64'}: features {mib:.0f} MiB; peak RSS {peak:.0f} MiB (fit "
          f"{fit_peak:.0f}); above the pre-data RSS {base:.0f} MiB: fit {(fit_peak - base) / mib:.2f}x, "
          f"fit + {args.removals} removals {(peak - base) / mib:.2f}x the feature bytes (data alone "
          f"{(data_rss - base) / mib:.2f}x)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--removals", type=int, default=100)
    ap.add_argument("--solvers", default="pcg,anchor,onepass")
    ap.add_argument("--src", default=None, help="other lethe sources to measure side by side")
    ap.add_argument("--variants", default="float64,float32,estimator",
                    help="which lines per solver: mechanism on float64 / float32 input, estimator (float64)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--solver", default="pcg", help=argparse.SUPPRESS)
    ap.add_argument("--estimator", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--float32", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    here = str(Path(__file__).resolve().parents[1] / "src")
    srcs = [("this", here)] + ([("other", args.src)] if args.src else [])
    print(f"dense path, {args.rows} x {args.features}, {args.removals} removals; one fresh process per line")
    for solver in args.solvers.split(","):
        for label, src in srcs:
            chosen = {"float64": [], "float32": ["--float32"], "estimator": ["--estimator"]}
            for extra in (chosen[v] for v in args.variants.split(",")):
                env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
                subprocess.run([sys.executable, __file__, "--child", "--solver", solver, "--rows", str(args.rows),
                                "--features", str(args.features), "--removals", str(args.removals), "--label", label,
                                *extra], env=env, check=False)


if __name__ == "__main__":
    main()
