"""Resident memory of `lethe serve` and its worker process after start (docs/curator.md, "Memory at start").

Two data directories: an empty one, and one with a `certified-removal` model on 200 × 10 synthetic records. For
each, ``--repeats`` starts of ``lethe serve`` (worker process, 127.0.0.1, a free port): once ``/healthz`` answers
and the memory of the server and its worker has stopped growing (bounded: 30 s), ``VmRSS`` of both is read from
``/proc``; the medians are printed. Linux only. Run: ``python benchmarks/bench_start_memory.py``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
from bench_service import stop  # the benchmarks directory is on sys.path when this script runs

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(data_dir: Path) -> tuple[float, float]:
    """(server MB, worker MB) after one start."""
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(data_dir), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        last, deadline = -1.0, time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = _rss_mb(proc.pid) + sum(_rss_mb(c) for c in _children(proc.pid))
            if abs(now - last) < 1.0:
                break
            last = now
        return _rss_mb(proc.pid), sum(_rss_mb(c) for c in _children(proc.pid))
    finally:
        stop(proc)  # SIGTERM, then SIGKILL after 60 s (bench_service's)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from lethe.curator import Curator

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        Curator(root / "empty").close()
        rng = np.random.default_rng(0)
        X = rng.normal(size=(200, 10))
        X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(10)])
        df.insert(0, "user_id", [f"user-{i}" for i in range(200)])
        df["label"] = (X @ rng.normal(size=10) > 0).astype(float)
        df.to_csv(root / "data.csv", index=False)
        c = Curator(root / "model")
        c.register_dataset("people", root / "data.csv", key="user_id", label="label")
        c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        c.close()
        print(f"load average {os.getloadavg()[0]:.2f}")
        for name in ("empty", "model"):
            runs = [measure(root / name) for _ in range(args.repeats)]
            server, worker = [r[0] for r in runs], [r[1] for r in runs]
            print(f"{name:>6}: server VmRSS median {statistics.median(server):.0f} MB "
                  f"({', '.join(f'{x:.0f}' for x in server)}); worker median {statistics.median(worker):.0f} MB "
                  f"({', '.join(f'{x:.0f}' for x in worker)})")
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
