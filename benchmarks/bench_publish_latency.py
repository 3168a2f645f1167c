"""How long a deletion takes to be published, through HTTP, with the service's defaults (issue 37, item 4).

A new user's run: a 1,000-row table (UCI Adult, the first ROWS rows, encoded by the public schema
``examples/adult_schema.yaml``), a model trained with ``lethe train``'s defaults, ``lethe serve`` with its defaults on
127.0.0.1, then DELETIONS deletion requests posted one per ``--interval`` seconds by a requester, each followed to
``done``. Prints the latency from submission to publication (median, 95th percentile, worst), the number of batches
(new versions) and the retrainings, and the target: every deletion published within 60 s.

    OMP_NUM_THREADS=1 python benchmarks/bench_publish_latency.py [--rows 1000] [--deletions 50] [--interval 0.2]

Bounded: the loop stops after ``--timeout`` seconds (default 900) whatever happened; the server is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _lethe(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "lethe.cli", *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"lethe {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--deletions", type=int, default=50)
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between two submissions")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--train-args", default="", help="extra arguments of `lethe train` (default: none)")
    args = ap.parse_args()

    from lethe.datasets import load_adult

    train, _ = load_adult()
    df = train.iloc[: args.rows].copy()
    df.insert(0, "id", [f"person-{i:05d}" for i in range(len(df))])
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        csv = tmpd / "table.csv"
        df.to_csv(csv, index=False)
        data_dir = tmpd / "lethe-data"
        common = ["--data-dir", str(data_dir)]
        _lethe("dataset", "add", "table", str(csv), "--schema", str(REPO / "examples" / "adult_schema.yaml"),
               "--key", "id", *common, env=env)
        t0 = time.perf_counter()
        _lethe("train", "table", "clf", *args.train_args.split(), *common, env=env)
        fit_s = time.perf_counter() - t0
        token = _lethe("token", "create", "app", "--scope", "requester", *common, env=env).split()[-1]
        port = _free_port()
        log = open(tmpd / "serve.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port), *common], stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            rng = np.random.default_rng(0)
            keys = [df["id"].iloc[i] for i in rng.choice(len(df), size=args.deletions, replace=False)]
            hdr = {"Authorization": f"Bearer {token}"}
            sent: dict[str, float] = {}
            done: dict[str, float] = {}
            stop = time.monotonic() + args.timeout
            with httpx.Client(base_url=url, headers=hdr, timeout=30) as cl:
                for k in keys:
                    r = cl.post("/v1/deletions", json={"dataset": "table", "key": k})
                    r.raise_for_status()
                    sent[r.json()["id"]] = time.monotonic()
                    time.sleep(args.interval)
                while len(done) < len(sent) and time.monotonic() < stop:
                    for rid in [r for r in sent if r not in done]:
                        st = cl.get(f"/v1/deletions/{rid}").json()
                        if st.get("status") in ("done", "failed"):
                            done[rid] = time.monotonic()
                    time.sleep(0.2)
            admin = _lethe("token", "create", "ops", "--scope", "admin", *common, env=env).split()[-1]
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as cl:
                versions = cl.get("/v1/models/clf/versions").json()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
    lat = np.array([done[r] - sent[r] for r in done]) if done else np.array([np.inf])
    items = versions if isinstance(versions, list) else versions.get("versions", [])
    n_versions = len(items)
    print(f"table: UCI Adult, first {args.rows} rows (schema examples/adult_schema.yaml); lethe train defaults "
          f"(fit {fit_s:.1f} s incl. start-up); lethe serve defaults")
    print(f"deletions submitted: {len(sent)}, published: {len(done)} (timeout {args.timeout:.0f} s)")
    print(f"latency submission -> done: median {np.median(lat):.1f} s, p95 {np.percentile(lat, 95):.1f} s, "
          f"worst {lat.max():.1f} s")
    print(f"model versions after the run: {n_versions} (batches = versions - 1)")
    ok = len(done) == len(sent) and lat.max() <= 60.0
    print(json.dumps({"target_all_within_60s": bool(ok)}))


if __name__ == "__main__":
    main()
