"""Management commands under a steady stream of deletions (issue 35): how many give up waiting for the processing
lock.

A ``lethe serve`` (with its worker process) receives ~3 submissions a second for the whole run while ``lethe
process`` — a management command that takes the processing lock, as ``lethe model retrain`` and ``lethe dataset add``
do — runs ``--commands`` times, one after the other, each with a lock timeout of ``--timeout`` seconds. Prints the
number of commands that gave up (BusyError) and the longest wait.

    PYTHONPATH=src python benchmarks/bench_lock_turns.py --commands 90
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests._server import lethe_cmd, start_server, stop_server, subprocess_env  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--commands", type=int, default=90)
    ap.add_argument("--rate", type=float, default=3.0, help="submissions per second")
    ap.add_argument("--rows", type=int, default=20000)
    args = ap.parse_args()
    from lethe.curator import Curator

    tmp = Path(tempfile.mkdtemp(prefix="lethe-turns-"))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.5
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(20)])
    df.insert(0, "user_id", [f"u{i}" for i in range(args.rows)])
    df["label"] = (X[:, 0] > 0).astype(float)
    df.to_csv(tmp / "people.csv", index=False)
    c = Curator(tmp / "data")
    c.register_dataset("people", tmp / "people.csv", key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
    token = c.create_token("alice", "requester")
    c.close()
    url, proc = start_server(tmp / "data")
    stop = threading.Event()
    sent = [0]

    def stream() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as cl:
            i = 0
            while not stop.is_set():
                cl.post("/v1/deletions", json={"dataset": "people", "key": f"u{i}"})
                sent[0] += 1
                i += 1
                stop.wait(1.0 / args.rate)

    t = threading.Thread(target=stream)
    t.start()
    gave_up, longest = 0, 0.0
    try:
        for _ in range(args.commands):
            t0 = time.monotonic()
            out = subprocess.run([*lethe_cmd("process"), "--data-dir", str(tmp / "data")], capture_output=True,
                                 text=True, env=subprocess_env())
            longest = max(longest, time.monotonic() - t0)
            if out.returncode != 0 and "gave up" in out.stderr:
                gave_up += 1
    finally:
        stop.set()
        t.join()
        stop_server(proc)
    print(f"{args.commands} management commands beside {sent[0]} submissions (~{args.rate:g}/s): "
          f"{gave_up} gave up waiting for the processing lock; longest command {longest:.1f} s")


if __name__ == "__main__":
    main()
