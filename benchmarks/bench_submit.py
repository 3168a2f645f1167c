"""Benchmark: deletion submissions in one process, group commit against one transaction per submission.

A Curator on a fresh SQLite store (``synchronous=FULL``) of ``--n`` records × 10 features; ``--threads`` threads
submit ``--requests`` deletion requests for distinct keys through

* **group**: ``Curator.submit_deletion`` (group commit: one transaction, one fsync, per group of concurrent
  submissions), and
* **serial**: ``DeletionIntake.submit_alone`` (one transaction per submission: what ``submit_deletion`` did before group
  commit, and what it falls back to when a group fails as a whole),

alternately, ``--repeats`` times each on a new store. Printed: submissions/s and p50/p99 latency, medians of the
repeats, and the ratio. No HTTP, no worker: the write path only (``benchmarks/bench_service.py`` measures the server).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_submit.py [--requests 2000] [--threads 12] [--repeats 3]``.
Benchmarks are not tests: figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lethe.curator import Curator, Principal


def _store(root: Path, n: int) -> Curator:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 10))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(10)])
    df.insert(0, "user_id", [f"k{i}" for i in range(n)])
    df["label"] = (X[:, 0] > 0).astype(float)
    df.to_csv(root / "data.csv", index=False)
    c = Curator(root / "lethe")
    c.register_dataset("people", root / "data.csv", key="user_id", label="label")
    return c


def run(mode: str, n: int, requests: int, threads: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        c = _store(Path(tmp), n)
        who = Principal("alice", "requester")
        submit = c.submit_deletion if mode == "group" else (
            lambda ds, key, principal: c.intake.submit_alone(ds, key, principal, None))
        keys = [f"k{i}" for i in range(requests)]
        lat: list[float] = []
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not keys:
                        return
                    key = keys.pop()
                t = time.perf_counter()
                submit("people", key, principal=who)
                lat.append(time.perf_counter() - t)

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - t0
        c.close()
    lat.sort()
    return requests / elapsed, 1e3 * lat[len(lat) // 2], 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="records in the store")
    ap.add_argument("--requests", type=int, default=2000, help="submissions per run (distinct keys, <= n)")
    ap.add_argument("--threads", type=int, default=12, help="concurrent submitting threads")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if not 0 < a.requests <= a.n:
        raise ValueError(f"--requests must be in [1, --n]. Found {a.requests!r}.")
    res: dict[str, list[tuple[float, float, float]]] = {"serial": [], "group": []}
    for _ in range(a.repeats):
        for mode in ("serial", "group"):
            res[mode].append(run(mode, a.n, a.requests, a.threads))
    med = {m: [statistics.median(r[i] for r in res[m]) for i in range(3)] for m in res}
    print(f"{a.requests} submissions, {a.threads} threads, SQLite synchronous=FULL, medians of {a.repeats}")
    print(f"{'':24}{'serial':>12}{'group':>12}{'ratio':>10}")
    for i, name in enumerate(("submissions/s", "p50 ms", "p99 ms")):
        s, g = med["serial"][i], med["group"][i]
        print(f"{name:24}{s:12.1f}{g:12.1f}{g / s:10.2f}")


if __name__ == "__main__":
    main()
