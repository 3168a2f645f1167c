"""The curator on PostgreSQL (through SQLAlchemy), not only the embedded SQLite default.

Runs when ``LETHE_TEST_POSTGRES_URL`` names a database this test may wipe (``.ci/run`` starts the machine's
PostgreSQL cluster and sets it). The flow: register, train, delete by key, process, purge; the ledger's
append-only trigger; a repeated request refused with nothing changed.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from sqlalchemy import text

URL = os.environ.get("LETHE_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="LETHE_TEST_POSTGRES_URL not set (.ci/run sets it)")


def _csv(path, n=120, d=4, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", *[f"f{j}" for j in range(d)], "label"])
        for i in range(n):
            x = rng.normal(size=d)
            w.writerow([f"user-{i}", *x, 1 if x[0] > 0 else -1])


def test_flow_on_postgres(tmp_path):
    from lethe.curator.service import Curator

    assert URL is not None
    fresh = Curator(tmp_path / "wipe", database_url=URL)
    with fresh.store.write_engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    fresh.close()
    _csv(tmp_path / "people.csv")
    c = Curator(tmp_path / "data", database_url=URL)
    try:
        c.register_dataset("people", tmp_path / "people.csv", key="user_id", label="label", normalize="rows")
        c.train("people", "clf", params={"lam": 0.01, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        req, created = c.submit_deletion("people", "user-7")
        assert created and req["status"] == "pending"
        results = c.process_pending(force=True)
        assert [r.status for r in results] == ["done"]
        status = c.request_status(req["id"])
        assert status["status"] == "done" and len(status["certificates"]) == 1
        cert = c.certificate(status["certificates"][0])
        json.dumps(cert, allow_nan=False)
        assert c.purge()
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("select count(*) from records")).scalar() == 119
            n_ledger = conn.execute(text("select count(*) from ledger")).scalar()
        with pytest.raises(Exception, match="append-only"), c.store.write_engine.begin() as conn:
            conn.execute(text("UPDATE ledger SET kind = 'tampered'"))
        again, created = c.submit_deletion("people", "user-7")  # a repeat by its owner: its own request
        assert not created and again["id"] == req["id"]
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("select count(*) from ledger")).scalar() == n_ledger
        assert c.budget("clf")["budget_left"] > 0
    finally:
        c.close()


def _wipe(tmp_path):
    from lethe.curator.service import Curator

    fresh = Curator(tmp_path / "wipe", database_url=URL)
    with fresh.store.write_engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    fresh.close()


def test_concurrent_submissions_race_on_postgres(tmp_path):
    """40 pairs of simultaneous submissions of one key by two requesters, and 40 pairs of one request_id sent twice
    at once, through the HTTP API on PostgreSQL: 0 duplicates, 0 5xx, and every accepted request ends done (one bad
    request never fails a batch). Since issue 26 both requesters of one key are answered 202 (the second request
    follows the first and completes with it: a 409 would tell the second requester that someone else had asked)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from lethe.curator.service import Curator
    from lethe.curator.store import DeletionRequest

    from .conftest import start_server, stop_server

    assert URL is not None
    _wipe(tmp_path)
    _csv(tmp_path / "people.csv", n=200)
    c = Curator(tmp_path / "data", database_url=URL)
    c.register_dataset("people", tmp_path / "people.csv", key="user_id", label="label", normalize="rows")
    c.train("people", "clf", params={"lam": 0.01, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
    tokens = {n: c.create_token(n, "requester") for n in ("alice", "bob")}
    c.close()
    url, proc = start_server(tmp_path / "data", "--database-url", URL, "--batch-size", "8")
    codes: list[int] = []
    try:
        clients = {n: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {t}"}, timeout=60)
                   for n, t in tokens.items()}

        def pair(jobs):
            barrier = threading.Barrier(2)

            def one(job):
                who, body = job
                barrier.wait()
                return clients[who].post("/v1/deletions", json=body)

            with ThreadPoolExecutor(2) as ex:
                return list(ex.map(one, jobs))

        accepted = []
        for i in range(40):  # the same key from two requesters at once
            body = {"dataset": "people", "key": f"user-{i}"}
            rs = pair([("alice", body), ("bob", body)])
            codes += [r.status_code for r in rs]
            assert sorted(r.status_code for r in rs) == [202, 202], [r.text for r in rs]
            accepted += [r.json()["id"] for r in rs if r.status_code == 202]
        for i in range(40, 80):  # the same request_id twice at once: one request, answered twice
            body = {"dataset": "people", "key": f"user-{i}", "request_id": f"ticket-{i}"}
            rs = pair([("alice", body), ("alice", body)])
            codes += [r.status_code for r in rs]
            assert sorted(r.status_code for r in rs) == [200, 202], [r.text for r in rs]
            assert rs[0].json()["id"] == rs[1].json()["id"]
            accepted.append(rs[0].json()["id"])
        assert not [code for code in codes if code >= 500]
        deadline = time.monotonic() + 300
        while True:
            states = [clients["alice"].get(f"/v1/deletions/{rid}").json().get("status") for rid in accepted[-5:]]
            states += [clients["bob"].get(f"/v1/deletions/{rid}").json().get("status") for rid in accepted[-5:]]
            if "pending" not in states or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        stop_server(proc)
    c = Curator(tmp_path / "data", database_url=URL)
    try:
        with c.store.read() as s:
            rows = s.query(DeletionRequest).all()
        assert len(rows) == 120  # 2 × 40 (a follower per key) + 40 (one per request_id): no duplicate was written
        assert len({(r.dataset_id, r.key_digest) for r in rows}) == 120  # a follower is filed under its own digest
        c.process_pending(force=True)
        statuses = [c.request_status(r.id)["status"] for r in rows]
        assert statuses.count("done") == 120, statuses
        assert c.dataset_info("people")["n_records"] == 120
    finally:
        c.close()


def _pg_files(conn) -> list:
    """Every file of the cluster (heap, indexes, WAL), or None if this process cannot read them."""
    from pathlib import Path

    root = Path(conn.execute(text("SHOW data_directory")).scalar())
    try:
        files = [p for p in root.rglob("*") if p.is_file()]
        for p in files[:1]:
            p.read_bytes()
    except OSError:
        return None
    return files


def test_no_plain_key_or_value_reaches_postgres(tmp_path):
    """Purge on PostgreSQL costs what the deletions cost, because nothing needs purging there: the server never
    receives a record's plain key or values (the data plane holds the values and is erased in place; the records
    table holds key digests). Checked on the cluster's own files — heap, indexes and WAL — after a deletion: no
    byte of the deleted record's key or features, while the same search finds its key digest (the search works)."""
    import hashlib
    import hmac
    import struct
    import uuid

    from lethe.curator.service import Curator

    _wipe(tmp_path)
    tag = uuid.uuid4().hex[:12]  # keys found nowhere else in the cluster
    rng = np.random.default_rng(5)
    n, d = 60, 4
    X = rng.normal(size=(n, d))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)
    with open(tmp_path / "p.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", *[f"f{j}" for j in range(d)], "label"])
        for i in range(n):
            w.writerow([f"{tag}-{i}", *(repr(float(v)) for v in X[i]), 1 if X[i, 0] > 0 else -1])
    c = Curator(tmp_path / "data", database_url=URL)
    try:
        c.register_dataset("people", tmp_path / "p.csv", key="user_id", label="label")
        c.train("people", "clf", params={"lam": 0.01}, random_state=0)
        target = 13
        c.submit_deletion("people", f"{tag}-{target}")
        assert [r.status for r in c.process_pending(force=True)] == ["done"]
        with c.store.write_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("CHECKPOINT")
            files = _pg_files(conn)
        if files is None:
            pytest.skip("the cluster's files are not readable by this user")
        pepper = (tmp_path / "data" / "secrets" / "key_pepper").read_bytes()
        digest = hmac.new(pepper, f"1\x00{tag}-{target}".encode(), hashlib.sha256).hexdigest().encode()
        pats = {"key": f"{tag}-{target}".encode(), "tag": tag.encode()}
        pats.update({f"f{j}": struct.pack("<d", float(v)) for j, v in enumerate(X[target])})
        found: dict[str, int] = {}
        for p in files:
            try:
                blob = p.read_bytes()
            except OSError:  # a file removed meanwhile (WAL recycling)
                continue
            for name, pat in [*pats.items(), ("digest", digest)]:
                if pat in blob:
                    found[name] = found.get(name, 0) + 1
        assert "digest" in found, "the search did not find the key digest the requests table keeps"
        assert set(found) == {"digest"}, f"plain bytes of records found in PostgreSQL's files: {found}"
    finally:
        c.close()


def test_ledger_ids_skipped_by_aborted_transactions_are_not_tampering(tmp_path):
    """Issue 35: on PostgreSQL an aborted transaction consumes ledger ids (sequences are not rolled back); the
    console's chain check explains the gap instead of calling it a deletion."""
    from lethe.curator.console import health
    from lethe.curator.service import Curator
    from lethe.curator.store import add_event

    assert URL is not None
    _wipe(tmp_path)
    c = Curator(tmp_path / "data", database_url=URL)
    try:
        with c.store.write() as s, s.begin():
            add_event(s, "note", {"n": 1})
        for _ in range(3):  # a crash or a refused batch: the inserts roll back, their ids stay used
            with c.store.write() as s:
                s.begin()
                add_event(s, "note", {"n": 2})
                s.flush()
                s.rollback()
        with c.store.write() as s, s.begin():
            add_event(s, "note", {"n": 3})
        report = health.verify_chain(c)
        assert report.intact, report.problems
        assert report.gaps and "aborted transactions" in report.gaps[0] and "deleted" not in report.gaps[0]
    finally:
        c.close()
