"""The console's Requests page at 10⁶ requests: keyset pagination with and without the console's indexes.

Generates a curator SQLite store with N deletion requests (default 10⁶; 1,000 requesters, 3 datasets, statuses
done/pending/failed, one certificate per done request), then times :func:`lethe.curator.console.queries.list_requests`
(the query behind every Requests page) for each filter, first page and a page deep in the list, and the whole
rendered page through the app. Prints medians of repeats; the same queries without the indexes side by side.

    python benchmarks/bench_console.py            # N = 1,000,000 (≈ 1-2 min to generate)
    python benchmarks/bench_console.py --n 100000
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lethe.curator import Curator  # noqa: E402
from lethe.curator.console import queries as Q  # noqa: E402
from lethe.curator.migrations.steps import migrate_3_to_4  # noqa: E402


def generate(data_dir: Path, n: int, seed: int = 0) -> tuple[Curator, dict[str, str]]:
    c = Curator(data_dir)
    db = data_dir / "lethe.db"
    rng = np.random.default_rng(seed)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    now = _dt.datetime(2026, 1, 1)
    for i, name in enumerate(("patients", "claims", "visits")):
        con.execute("INSERT INTO datasets (id, name, n_features, feature_names, key_column, label_column, normalize,"
                    " source, created_at) VALUES (?, ?, 4, '{}', 'k', 'y', 'none', 'x.csv', ?)", (i + 1, name, now))
    con.execute("INSERT INTO models (id, name, dataset_id, mechanism, params, current_version_id, created_at) "
                "VALUES (1, 'clf', 1, 'certified-removal', '{}', 1, ?)", (now,))
    con.execute("INSERT INTO model_versions (id, model_id, number, parent_id, status, artifact, sha256, n_records, "
                "summary, created_at) VALUES (1, 1, 1, NULL, 'published', 'artifacts/x.npz', '0', 10, '{}', ?)",
                (now,))
    statuses = np.array(["done", "pending", "failed"])
    st = statuses[rng.choice(3, size=n, p=[0.97, 0.02, 0.01])]
    who = rng.integers(0, 1000, size=n)
    ds = rng.integers(1, 4, size=n)
    secs = np.sort(rng.integers(0, 365 * 86400, size=n))  # a year of requests, some on the same second
    probe: dict[str, str] = {}
    chunk = 50_000
    for start in range(0, n, chunk):
        reqs, certs = [], []
        for i in range(start, min(start + chunk, n)):
            rid = str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i))
            at = (now + _dt.timedelta(seconds=int(secs[i]))).strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLAlchemy's format
            client = f"ref-{i}" if i % 2 == 0 else None
            reqs.append((rid, f"requester-{who[i]:03d}", client, int(ds[i]), None, f"{i:064x}", str(st[i]), 1, None,
                         at, at if st[i] != "pending" else None))
            if st[i] == "done":
                certs.append((str(uuid.uuid4()), "removal", rid, 1, 1, 1, None, "certified-removal", "{}",
                              at, at))
            if i == n // 2:
                probe = {"id": rid, "client": client or "", "requester": f"requester-{who[i]:03d}"}
        con.executemany("INSERT INTO deletion_requests (id, requester, client_request_id, dataset_id, record_id, "
                        "key_digest, status, attempts, error, submitted_at, processed_at) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", reqs)
        con.executemany("INSERT INTO certificates (id, kind, request_id, model_id, old_version_id, new_version_id, "
                        "batch_id, mechanism, certificate, submitted_at, created_at) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", certs)
        con.commit()
    con.execute("ANALYZE")
    con.commit()
    con.close()
    return c, probe


def median_ms(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm the page cache
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def cases(c: Curator, probe: dict[str, str]) -> list[tuple[str, object]]:
    with c.store.read() as s:
        # a cursor in the middle of the list (the 500,000th newest request for N = 10⁶)
        row = s.execute(text("SELECT submitted_at, id FROM deletion_requests ORDER BY submitted_at DESC, id DESC "
                               "LIMIT 1 OFFSET :k"), {"k": N_DEEP}).one()
    deep = Q.encode_cursor(_dt.datetime.fromisoformat(str(row[0])), row[1])
    F = Q.RequestFilter
    return [
        ("newest 50, no filter", lambda s: Q.list_requests(s, F())),
        ("50 at the middle (cursor)", lambda s: Q.list_requests(s, F(), after=deep)),
        ("newer 50 from the middle", lambda s: Q.list_requests(s, F(), before=deep)),
        ("status = failed", lambda s: Q.list_requests(s, F(status="failed"))),
        ("status = failed, middle", lambda s: Q.list_requests(s, F(status="failed"), after=deep)),
        ("one requester (admin filter)", lambda s: Q.list_requests(s, F(requester=probe["requester"]))),
        ("requester's own, pending", lambda s: Q.list_requests(s, F(requester=probe["requester"], status="pending"))),
        ("dataset = claims", lambda s: Q.list_requests(s, F(dataset="claims"))),
        ("search: id prefix (8 chars)", lambda s: Q.list_requests(s, F(q=probe["id"][:8]))),
        ("search: client reference", lambda s: Q.list_requests(s, F(q=probe["client"] or "ref-0"))),
        ("status counts (page header)", lambda s: Q.status_counts(s)),
    ]


N_DEEP = 0


def main() -> None:
    global N_DEEP
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    N_DEEP = args.n // 2
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        c, probe = generate(Path(d) / "data", args.n)
        print(f"generated {args.n:,} requests in {time.perf_counter() - t:.0f} s; "
              f"database {os.path.getsize(Path(d) / 'data' / 'lethe.db') / 2**20:,.0f} MiB")
        with c.store.write_engine.begin() as conn:  # the indexes come with the store's schema (version 3)
            conn.execute(text("ANALYZE"))
        results: dict[str, list[float]] = {}
        for with_indexes in (True, False):
            if not with_indexes:
                with c.store.write_engine.begin() as conn:
                    for name, _ in Q.INDEXES:
                        conn.execute(text(f"DROP INDEX {name}"))
            with c.store.read() as s:
                for label, fn in cases(c, probe):
                    reps = args.repeats if with_indexes else max(3, args.repeats // 5)
                    results.setdefault(label, []).append(median_ms(lambda fn=fn: fn(s), reps))
        # the whole page through the app (session, query, template), indexes restored
        with c.store.write_engine.begin() as conn:
            migrate_3_to_4(conn)  # what the schema upgrade does: recreate them
        from fastapi.testclient import TestClient

        from lethe.curator.api import create_app
        token = c.create_token("bench-admin", "admin")
        with TestClient(create_app(c, run_worker=False), base_url="http://127.0.0.1") as cl:
            page = cl.get("/console/login").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
            cl.post("/console/login", data={"token": token, "csrf": csrf})
            full = median_ms(lambda: cl.get("/console/requests"), args.repeats)
            full_f = median_ms(lambda: cl.get("/console/requests?status=failed&dataset=claims"), args.repeats)
        c.close()
    print(f"\nRequests page queries at {args.n:,} requests (median ms; SQLite, warm cache)")
    print(f"{'query':34} {'with indexes':>13} {'without':>10} {'ratio':>8}")
    for label, (a, b) in results.items():
        print(f"{label:34} {a:13.2f} {b:10.2f} {b / a:8.0f}x")
    print(f"\nwhole page GET /console/requests (sign-in, query, render): {full:.1f} ms; "
          f"with status+dataset filters: {full_f:.1f} ms")


if __name__ == "__main__":
    main()
