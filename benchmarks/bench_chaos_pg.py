"""Chaos on PostgreSQL with follower requests (issue 35): ``lethe serve`` (127.0.0.1, started here, stopped by pid)
is SIGKILLed at random moments while clients submit deletions, many of them *follower pairs* — alice asks for a key,
then bob asks for the same key a fraction of a second later, aiming at the moment alice's batch publishes (bob's
request then follows alice's: stored ``waiting``, shown ``pending``, completed with her batch). Bob's delay follows a
staircase: longer after he was a follower, shorter after he came late (her batch had published), so his submissions
gather around her batch's commit — the window where a follower could be missed (issue 35).

Each round starts a server (worker as a process or a thread, a random batch size), runs two client threads (single
submissions; pairs) and kills the server — at a random time, or just after a leader was acknowledged, so the kill
lands in its batch. A process worker is killed with its server, or left orphaned (it stops on its own; killed by pid
after ``--orphan-grace`` s). Submissions not answered (connection reset by a kill) are retried in a later round with
the same ``request_id`` (idempotent). After the last round a server is started, drains, and the run is checked from
the store and from the HTTP API (each requester's own token):

* stuck: a request ``pending`` or ``waiting`` after the drain (bounded wait);
* lost: an acknowledged request unknown to the store or the API, or not ended in the API;
* duplicated: a second request stored for one (requester, request_id), a retry answered with another id, a
  request completed twice in the ledger, or records removed other than once per key removed (the store's records,
  ``/v1/status`` and the model's record count against the keys whose request ended ``removed``);
* followers: every follower pair (bob's request seen ``waiting`` when acknowledged, or already completed with
  certificates) ends with alice's status and outcome; ``same certificates`` counts those that carry copies of
  alice's certificates (the others hold recovery's receipt);
* ``lethe ledger verify`` exits 0.

    createdb lethe_chaos_x
    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_chaos_pg.py \\
        --database-url 'postgresql+psycopg://root@/lethe_chaos_x?host=/var/run/postgresql' --kills 50 --pairs 100

The database named by the URL is wiped (its ``public`` schema dropped). Bounded: ``--max-rounds`` and
``--time-cap`` seconds for the chaos, ``--drain-cap`` for the drain. Benchmarks are not tests: the figures are
printed (the exit code is 1 when a check fails); ``tests/curator/test_chaos_pg.py`` runs a small version.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests._server import lethe_cmd, start_server, subprocess_env  # noqa: E402

DATASET = "people"
WHO = ("alice", "bob", "carol")  # carol submits the single requests


@dataclass
class Sub:
    """One submission: requester, key, its ``request_id``; the id the server answered (None until acknowledged)."""

    who: str
    key: str
    rid: str
    pair: int | None = None
    id: str | None = None
    ids_seen: set[str] = field(default_factory=set)
    seen: str | None = None  # bob's stored status right after the acknowledgement ("waiting": a follower)
    certs_seen: int = 0


@dataclass
class Run:
    subs: list[Sub] = field(default_factory=list)
    retry: list[Sub] = field(default_factory=list)
    kills: int = 0
    triggered_kills: int = 0
    kills_with_worker: int = 0
    orphans_left: int = 0
    orphans_killed: int = 0
    rounds: int = 0
    delay: float = 0.1  # bob's delay after alice's acknowledgement (s), adapted (see _round)
    unanswered: int = 0
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _wipe(url_db: str) -> None:
    from sqlalchemy import create_engine, text

    eng = create_engine(url_db)
    with eng.begin() as c:
        c.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    eng.dispose()


def _setup(root: Path, url_db: str, n: int, seed: int) -> dict[str, str]:
    import numpy as np
    import pandas as pd

    from lethe.curator import Curator

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.5
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(8)])
    df.insert(0, "user_id", [f"u{i}" for i in range(n)])
    df["label"] = (X[:, 0] > 0).astype(float)
    df.to_csv(root / "people.csv", index=False)
    c = Curator(root / "data", database_url=url_db)
    try:
        c.register_dataset(DATASET, root / "people.csv", key="user_id", label="label")
        c.train(DATASET, "clf", params={"lam": 1e-2, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        tokens = {who: c.create_token(who, "requester") for who in WHO}
        tokens["admin"] = c.create_token("ops", "admin")
    finally:
        c.close()
    return tokens


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Clients:
    def __init__(self, url: str, tokens: dict[str, str], url_db: str) -> None:
        import httpx
        from sqlalchemy import create_engine

        self.http = {w: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[w]}"}, timeout=20)
                     for w in WHO}
        self.eng = create_engine(url_db)

    def close(self) -> None:
        for c in self.http.values():
            c.close()
        self.eng.dispose()

    def post(self, run: Run, sub: Sub) -> bool:
        import httpx

        try:
            r = self.http[sub.who].post("/v1/deletions", json={"dataset": DATASET, "key": sub.key,
                                                               "request_id": sub.rid})
        except httpx.HTTPError:
            with run.lock:
                run.unanswered += 1
            return False
        if r.status_code in (200, 202):
            rid = str(r.json()["id"])
            sub.ids_seen.add(rid)
            sub.id = rid
            return True
        if r.status_code >= 500 or r.status_code == 429:
            with run.lock:
                run.unanswered += 1
            return False
        with run.lock:
            run.refused.append(f"{sub.who} {sub.key}: {r.status_code} {r.text[:200]}")
        sub.id = ""  # refused: not retried
        return True

    def classify(self, sub: Sub) -> None:
        """Bob's stored status right after his request was acknowledged (``waiting``: a follower)."""
        from sqlalchemy import text

        with self.eng.connect() as c:
            row = c.execute(text("SELECT status FROM deletion_requests WHERE id = :i"), {"i": sub.id}).first()
            n = c.execute(text("SELECT count(*) FROM certificates WHERE request_id = :i"), {"i": sub.id}).scalar()
        sub.seen, sub.certs_seen = (row[0] if row else None), int(n or 0)


def _round(run: Run, root: Path, url_db: str, tokens: dict[str, str], rng: random.Random, keys: list[str],
           pair_delay: float, max_wait: float, orphans: list[tuple[int, float]], orphan_grace: float) -> None:
    mode = rng.choices(["process", "thread"], weights=[3, 1])[0]
    batch = rng.choice([1, 2, 8, 64])
    url, proc = start_server(root / "data", "--database-url", url_db, "--batch-size", str(batch), "--worker", mode,
                             log_name="chaos-server.log")
    cl = Clients(url, tokens, url_db)
    stop = threading.Event()
    leader_acked = threading.Event()

    def singles() -> None:
        while not stop.is_set() and keys:
            with run.lock:
                sub = run.retry.pop(0) if run.retry else None
            if sub is None:
                key = keys.pop()
                sub = Sub("carol", key, f"carol-{key}")
                run.subs.append(sub)
            if not cl.post(run, sub):
                with run.lock:
                    run.retry.append(sub)
            elif sub.who == "bob" and sub.id:
                cl.classify(sub)
            time.sleep(rng.uniform(0, 0.05))

    def pairs() -> None:
        while not stop.is_set() and keys:
            key = keys.pop()
            pair = len(run.subs)
            a, b = Sub("alice", key, f"alice-{key}", pair), Sub("bob", key, f"bob-{key}", pair)
            run.subs += [a, b]
            if not cl.post(run, a):
                with run.lock:
                    run.retry += [a, b]  # bob after alice, in a later round
                continue
            leader_acked.set()
            time.sleep(run.delay * rng.uniform(0.7, 1.3))
            if not cl.post(run, b):
                with run.lock:
                    run.retry.append(b)
            elif b.id:
                cl.classify(b)
                # a staircase on bob's delay: later after a follower, earlier after a late request (alice's batch
                # had published), so bob's submissions gather around the moment her batch commits
                if b.seen == "waiting" or (b.seen == "done" and b.certs_seen):
                    run.delay = min(run.delay * 1.15, pair_delay)
                elif b.seen == "done":
                    run.delay = max(run.delay / 1.15, 0.002)

    threads = [threading.Thread(target=singles), threading.Thread(target=pairs)]
    for t in threads:
        t.start()
    try:
        if rng.random() < 0.5:  # after a random time, just after the next leader's acknowledgement: in its batch
            time.sleep(rng.uniform(0.0, max_wait))
            leader_acked.clear()
            leader_acked.wait(max_wait)
            time.sleep(rng.uniform(0.0, 2 * run.delay))  # around her batch's commit (the staircase's estimate)
            run.triggered_kills += 1
        else:
            time.sleep(rng.uniform(0.1, max_wait))
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        run.kills += 1
        if workers and rng.random() < 0.5:
            for w in workers:
                _kill(w)
            run.kills_with_worker += 1
        else:
            orphans += [(w, time.monotonic() + orphan_grace) for w in workers]
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        cl.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    run.rounds += 1


def _reap(run: Run, orphans: list[tuple[int, float]], *, final: bool = False) -> None:
    for pid, deadline in list(orphans):
        if not _alive(pid):
            orphans.remove((pid, deadline))
            run.orphans_left += 1
        elif final or time.monotonic() > deadline:
            _kill(pid)
            orphans.remove((pid, deadline))
            run.orphans_killed += 1


def _count_open(url_db: str) -> int:
    from sqlalchemy import create_engine, text

    eng = create_engine(url_db)
    try:
        with eng.connect() as c:
            return int(c.execute(text("SELECT count(*) FROM deletion_requests "
                                      "WHERE status IN ('pending', 'waiting')")).scalar() or 0)
    finally:
        eng.dispose()


def _check(run: Run, root: Path, url_db: str, tokens: dict[str, str], drain_cap: float, n: int) -> dict[str, Any]:
    import httpx
    from sqlalchemy import create_engine, text

    url, proc = start_server(root / "data", "--database-url", url_db, "--batch-size", "64",
                             log_name="chaos-server.log")
    try:
        cl = Clients(url, tokens, url_db)
        for _ in range(20):  # the submissions never answered, again (the same request_id): bounded
            todo, run.retry = run.retry, []
            for sub in todo:
                if not cl.post(run, sub):
                    run.retry.append(sub)
                elif sub.who == "bob" and sub.id:
                    cl.classify(sub)
            if not run.retry:
                break
            time.sleep(0.5)
        cl.close()
        t0 = time.monotonic()
        while _count_open(url_db) and time.monotonic() - t0 < drain_cap:
            time.sleep(0.5)
        drain = time.monotonic() - t0
        views: dict[str, dict[str, Any]] = {}
        with httpx.Client(base_url=url, timeout=30) as http:
            for sub in run.subs:
                if sub.id:
                    r = http.get(f"/v1/deletions/{sub.id}", headers={"Authorization": f"Bearer {tokens[sub.who]}"})
                    views[sub.id] = r.json() if r.status_code == 200 else {"status": f"HTTP {r.status_code}"}
            status = http.get("/v1/status", headers={"Authorization": f"Bearer {tokens['admin']}"}).json()
            budget = http.get("/v1/models/clf/budget", headers={"Authorization": f"Bearer {tokens['admin']}"}).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    verify = subprocess.run(lethe_cmd("ledger", "verify", "--data-dir", str(root / "data"), "--database-url",
                                      url_db), capture_output=True, text=True, env=subprocess_env(), timeout=300)
    eng = create_engine(url_db)
    try:
        with eng.connect() as c:
            rows = {r.id: r for r in c.execute(text(
                "SELECT id, requester, client_request_id, status FROM deletion_requests")).all()}
            by_status: dict[str, int] = {}
            for r in rows.values():
                by_status[r.status] = by_status.get(r.status, 0) + 1
            per_client = c.execute(text("SELECT count(*) FROM (SELECT requester, client_request_id FROM "
                                        "deletion_requests GROUP BY 1, 2 HAVING count(*) > 1) d")).scalar()
            ends = c.execute(text("SELECT request_id, count(*) FROM ledger WHERE kind IN ('request_done', "
                                  "'request_failed') AND request_id IS NOT NULL GROUP BY 1")).all()
            certs: dict[str, list[tuple[Any, Any]]] = {}
            for r in c.execute(text("SELECT request_id, model_id, new_version_id FROM certificates")).all():
                certs.setdefault(r.request_id, []).append((r.model_id, r.new_version_id))
            records = int(c.execute(text("SELECT count(*) FROM records")).scalar() or 0)
    finally:
        eng.dispose()
    acked = [s for s in run.subs if s.id]
    ended = {rid: k for rid, k in ends}
    removed_keys = {s.key for s in acked if views.get(s.id, {}).get("outcome") == "removed"}
    lost = [s for s in acked if s.id not in rows or views.get(s.id, {}).get("status") not in ("done", "failed")]
    stuck = [r for r in rows.values() if r.status in ("pending", "waiting")]
    dup_ids = [s for s in acked if len(s.ids_seen) > 1]
    twice = [rid for rid, k in ended.items() if k > 1]
    # a request done at once (no record held: no certificate) has no end event by design; every other end has one
    never = [rid for rid, r in rows.items() if rid not in ended and (r.status == "failed"
                                                                     or (r.status == "done" and certs.get(rid)))]
    model_n = budget.get("n_records")
    ds = next((d for d in status.get("datasets", []) if d.get("name") == DATASET), {})
    pairs: dict[int, dict[str, Sub]] = {}
    for s in acked:
        if s.pair is not None:
            pairs.setdefault(s.pair, {})[s.who] = s
    follower_pairs = differ = same_certs = 0
    for p in pairs.values():
        a, b = p.get("alice"), p.get("bob")
        if a is None or b is None or not (b.seen == "waiting" or (b.seen == "done" and b.certs_seen)):
            continue
        follower_pairs += 1
        va, vb = views.get(a.id or "", {}), views.get(b.id or "", {})
        if (va.get("status"), va.get("outcome")) != (vb.get("status"), vb.get("outcome")):
            differ += 1
        elif sorted(certs.get(a.id or "", [])) == sorted(certs.get(b.id or "", [])):
            same_certs += 1
    settled = {"race": 0, "recovery": 0}  # followers completed by the race checks / by recovery (the logs)
    for log in (root / "data" / "logs").glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if m := re.search(r"(\d+) follower request\(s\) completed after their leader's batch", line):
                settled["race"] += int(m.group(1))
            elif m := re.search(r"recovery: (\d+) follower request\(s\) without a pending leader", line):
                settled["recovery"] += int(m.group(1))
    return {
        "rounds": run.rounds, "SIGKILLs of the server": run.kills,
        "  of them just after a leader's acknowledgement": run.triggered_kills,
        "  with its worker process": run.kills_with_worker,
        "orphaned workers that stopped on their own / killed": f"{run.orphans_left} / {run.orphans_killed}",
        "submissions (acknowledged)": len(acked), "unanswered attempts (retried)": run.unanswered,
        "never acknowledged": len([s for s in run.subs if s.id is None]), "refused (4xx)": len(run.refused),
        "pairs acknowledged": sum(1 for p in pairs.values() if len(p) == 2),
        "bob's delay after alice (last, adapted) ms": round(1e3 * run.delay, 1),
        "follower pairs": follower_pairs, "  bob seen waiting": sum(1 for p in pairs.values()
                                                                   if p.get("bob") and p["bob"].seen == "waiting"),
        "  completed by the race checks / by recovery (logs)": f"{settled['race']} / {settled['recovery']}",
        "  follower outcome differs from leader": differ, "  with the leader's certificates": same_certs,
        "drain s": round(drain, 1), "requests by status (store)": dict(sorted(by_status.items())),
        "STUCK (pending/waiting)": len(stuck), "LOST": len(lost),
        "DUPLICATED (rows per request_id / ids per retry / ended twice)": f"{per_client} / {len(dup_ids)} / "
                                                                           f"{len(twice)}",
        "ended without a ledger event": len(never),
        "records: store / /v1/status / model / n - removed": f"{records} / {ds.get('n_records')} / {model_n} / "
                                                              f"{n - len(removed_keys)}",
        "API pending after drain": status.get("requests", {}).get("pending"),
        "lethe ledger verify": (verify.stdout.strip() or verify.stderr.strip())[:80],
        "_ok": (not stuck and not lost and not per_client and not dup_ids and not twice and not differ
                and not never and verify.returncode == 0
                and records == n - len(removed_keys) == model_n == ds.get("n_records")),
        "_follower_pairs": follower_pairs, "_kills": run.kills, "_refused": run.refused[:5],
    }


def run_chaos(url_db: str, *, kills: int, pairs: int, n: int = 3000, seed: int = 0, pair_delay: float = 3.0,
              max_wait: float = 2.5, max_rounds: int | None = None, time_cap: float = 3600.0,
              drain_cap: float = 300.0, orphan_grace: float = 20.0, workdir: Path | None = None) -> dict[str, Any]:
    """Run the chaos (see the module's description) until ``kills`` kills and ``pairs`` follower pairs (bounded by
    ``max_rounds`` and ``time_cap``), drain, check; returns the summary (``_ok``: every check passed)."""
    rng = random.Random(seed)
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="lethe-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    _wipe(url_db)
    tokens = _setup(root, url_db, n, seed)
    keys = [f"u{i}" for i in range(n)]
    rng.shuffle(keys)
    run = Run(delay=min(0.1, pair_delay))
    orphans: list[tuple[int, float]] = []
    max_rounds = max_rounds or 4 * kills + 20
    t0 = time.monotonic()
    try:
        while run.rounds < max_rounds and time.monotonic() - t0 < time_cap and len(keys) > 50:
            followers = sum(1 for s in run.subs if s.who == "bob" and (s.seen == "waiting"
                                                                       or (s.seen == "done" and s.certs_seen)))
            if run.kills >= kills and followers >= pairs:
                break
            _reap(run, orphans)
            _round(run, root, url_db, tokens, rng, keys, pair_delay, max_wait, orphans, orphan_grace)
        deadline = time.monotonic() + orphan_grace
        while orphans and time.monotonic() < deadline:
            _reap(run, orphans)
            time.sleep(0.2)
        _reap(run, orphans, final=True)
        out = _check(run, root, url_db, tokens, drain_cap, n)
        out["chaos s"] = round(time.monotonic() - t0, 1)
        return out
    finally:
        for pid, _ in orphans:
            _kill(pid)
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)


def show(summary: dict[str, Any]) -> None:
    width = max(len(k) for k in summary) + 2
    for k, v in summary.items():
        if not k.startswith("_"):
            print(f"{k.ljust(width)}{v}")
    print(f"{'all checks passed'.ljust(width)}{summary['_ok']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", default=os.environ.get("LETHE_TEST_POSTGRES_URL"),
                    help="postgresql+psycopg://... (wiped!); default $LETHE_TEST_POSTGRES_URL")
    ap.add_argument("--kills", type=int, default=50, help="SIGKILLs of the server (at least)")
    ap.add_argument("--pairs", type=int, default=100, help="follower pairs (at least)")
    ap.add_argument("--n", type=int, default=3000, help="records (keys are never reused)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pair-delay", type=float, default=3.0, help="bob's delay after alice: at most this (s)")
    ap.add_argument("--max-wait", type=float, default=2.5, help="a round lasts at most this long before its kill")
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--time-cap", type=float, default=3600.0, help="seconds of chaos (cap)")
    ap.add_argument("--orphan-grace", type=float, default=20.0,
                    help="an orphaned worker (its server killed) is killed by pid after this many seconds")
    ap.add_argument("--drain-cap", type=float, default=300.0, help="seconds for the final drain (cap)")
    ap.add_argument("--workdir", default=None, help="keep the data directory (and the servers' log) here")
    args = ap.parse_args()
    if not args.database_url:
        ap.error("--database-url (or LETHE_TEST_POSTGRES_URL) is required")
    print(f"chaos on PostgreSQL: {args.kills} kills, {args.pairs} follower pairs, {args.n} records, seed "
          f"{args.seed}; cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}", flush=True)
    out = run_chaos(args.database_url, kills=args.kills, pairs=args.pairs, n=args.n, seed=args.seed,
                    pair_delay=args.pair_delay, max_wait=args.max_wait, max_rounds=args.max_rounds,
                    time_cap=args.time_cap, drain_cap=args.drain_cap, orphan_grace=args.orphan_grace,
                    workdir=Path(args.workdir) if args.workdir else None)
    show(out)
    if out["_refused"]:
        print("refused:", *out["_refused"], sep="\n  ")
    sys.exit(0 if out["_ok"] else 1)


if __name__ == "__main__":
    main()
