"""Benchmark: the per-removal cost of the estimators' default (``solver="auto"`` → ``anchor``) at large n, and where it
goes (issue 15).

Generates ``--rows`` × ``--features`` rows (‖xᵢ‖ ≤ 1), fits ``CertifiedLogisticRegression`` with λ = 1e-3, σ = 10,
removes ``--warm`` rows one at a time, then times ``--removals`` more through ``remove()`` (median and mean, one
BLAS thread) and profiles a further ``--removals`` with cProfile (the ``--top`` functions by own time). At
n = 10⁶ × 100 the O(d²) step itself takes ≈ 0.03 ms. Since issue 25 the rest is: ONE comparison of the
solver cache's own copy of the row mask with the model's (O(n): the C library's ``memcmp`` over 1 MB, 0.025–0.04 ms
on the 2-core development machine, ``NewtonCache.synced_count``/``same_mask``: what keeps a stale cache from ever
certifying — it costs time, never soundness), the step's BLAS-2 products and Python bookkeeping; no row count, no
copy of the mask (the estimator's mask is cleared in place, ``clear_active``), no hash of the mask, no second
validation, and the certificate's ε spent (the exact analytic-Gaussian inversion, ≈ 0.04 ms) is computed when it is
first read (``Certificate.epsilon_spent``): the median is printed without and with reading it.
To compare with an older tree, run this file with ``PYTHONPATH`` pointing
at that tree's ``src``.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_removal_overhead.py`` (about a minute; 0.8 GB of features).

``--keys int`` or ``--keys str`` (issue 37) fits with record keys (``sample_ids``) and times, in the same run,
``--removals`` more removals by key (``remove(keys=[k])``) after the by-index ones, printing both medians and their
ratio (the target: by key ≤ 2× by index). The first removal by key builds the model's key → row map
(:mod:`lethe.keymap`, O(n), once); it is timed apart.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np

from lethe.certified.estimators import CertifiedLogisticRegression


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--removals", type=int, default=1000)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--keys", choices=("none", "int", "str"), default="none",
                    help="also time removals by record key (integer or string keys) in the same run")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, args.features))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X @ rng.normal(size=args.features) > 0, 1, -1)
    ids = None if args.keys == "none" else (7 * np.arange(args.rows, dtype=np.int64) + 3 if args.keys == "int"
                                            else np.char.add("customer-", np.arange(args.rows).astype(str)))
    est = CertifiedLogisticRegression(lam=1e-3, sigma=10.0, random_state=0).fit(X, y, sample_ids=ids)
    del X
    rows = rng.permutation(args.rows)[: args.warm + (3 if ids is None else 4) * args.removals + 1]
    t0 = time.perf_counter()
    est.remove([int(rows[0])])
    print(f"solver {est.solver!r} -> {est.solver_!r}; first removal (forms the removal machinery) "
          f"{time.perf_counter() - t0:.3f} s")
    for i in rows[1: args.warm]:
        est.remove([int(i)])
    times, cpu = [], []
    for i in rows[args.warm: args.warm + args.removals]:
        t0, c0 = time.perf_counter(), time.process_time()
        est.remove([int(i)])
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(f"{args.removals} removals after {args.warm} warm ones: median {1e3 * np.median(times):.3f} ms, "
          f"mean {1e3 * np.mean(times):.3f} ms; CPU time of this process (less sensitive to other processes on a "
          f"shared machine): median {1e3 * np.median(cpu):.3f} ms")
    if ids is not None:
        by_key = rows[args.warm + 3 * args.removals:]
        t0 = time.perf_counter()
        est.remove(keys=[ids[int(by_key[0])]])
        print(f"first removal by {args.keys} key (builds the key -> row map, once): "
              f"{1e3 * (time.perf_counter() - t0):.1f} ms")
        key_times = []
        for i in by_key[1:]:
            k = ids[int(i)]
            t0 = time.perf_counter()
            est.remove(keys=[k])
            key_times.append(time.perf_counter() - t0)
        print(f"{len(key_times)} removals by {args.keys} key: median {1e3 * np.median(key_times):.3f} ms, mean "
              f"{1e3 * np.mean(key_times):.3f} ms; by index (above) median {1e3 * np.median(times):.3f} ms; "
              f"ratio of medians {np.median(key_times) / np.median(times):.2f}")
    read = []
    for i in rows[args.warm + args.removals: args.warm + 2 * args.removals]:
        t0 = time.perf_counter()
        float(est.remove([int(i)]).epsilon_spent)  # the certificate's ε spent, read at once
        read.append(time.perf_counter() - t0)
    print(f"{len(read)} more removals, each reading its certificate's epsilon_spent: median "
          f"{1e3 * np.median(read):.3f} ms")
    prof = cProfile.Profile()
    prof.enable()
    for i in rows[args.warm + 2 * args.removals: args.warm + 3 * args.removals]:
        est.remove([int(i)])
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
