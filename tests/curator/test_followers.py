"""Issue 35: every follower request reaches an end — also when it is committed concurrently with its leader's batch.

On PostgreSQL (READ COMMITTED) the race has two orders, both reproduced here deterministically:

* the intake reads the leader as pending, the leader's batch publishes, then the intake commits the follower (its
  decision came from a snapshot taken before the batch committed);
* the batch selects the leader's followers, the intake commits a follower, then the batch commits.

On SQLite writers are serialised, so the tests build the same interleavings from inside the transaction: the first
by deciding from the snapshot the intake would have read before the batch (the leader pending, its record present),
the second by inserting the follower on the batch's own connection right after its followers were selected. With
``LETHE_TEST_POSTGRES_URL`` set, the same two orders run with real concurrent transactions on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text

from lethe.curator import Curator, Settings
from lethe.curator import intake as intake_mod
from lethe.curator.settings import Principal
from lethe.curator.store import CertificateRow, DeletionRequest, Record, utcnow

from .conftest import PARAMS, make_data

ALICE, BOB = Principal("alice", "requester"), Principal("bob", "requester")
PG_URL = os.environ.get("LETHE_TEST_POSTGRES_URL")


def _req(c: Curator, rid: str) -> DeletionRequest:
    with c.store.read() as s:
        r = s.get(DeletionRequest, rid)
        assert r is not None
        return r


def _cert_bodies(c: Curator, rid: str) -> list[Any]:
    with c.store.read() as s:
        return sorted((row.model_id, row.new_version_id, str(row.certificate)) for row in
                      s.scalars(select(CertificateRow).where(CertificateRow.request_id == rid)))


def _stale_decide(leader_snapshot: dict[str, Any]) -> Any:
    """``decide`` as the intake would call it on the snapshot read before the leader's batch committed."""
    real = intake_mod.decide

    def decide(sub: Any, known: Any) -> Any:
        if sub.principal.name == "bob" and known.live is not None and known.live.status != "pending":
            stale = intake_mod.NewRequest(**leader_snapshot)
            known = dataclasses.replace(known, live=stale, record_id=stale.record_id)
        return real(sub, known)

    return decide


def _leader_snapshot(c: Curator, rid: str) -> dict[str, Any]:
    r = _req(c, rid)
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(intake_mod.NewRequest)}


def _assert_completed_like_leader(c: Curator, leader: str, follower: str) -> None:
    f = _req(c, follower)
    assert f.status == "done", f"the follower stayed {f.status!r}"
    assert _cert_bodies(c, follower) == _cert_bodies(c, leader) != []
    assert c.status()["requests"]["pending"] == 0 and c.status()["healthy"]


def test_follower_committed_after_its_leaders_batch_completes(curator: Curator, monkeypatch: Any) -> None:
    """Order 1: the follower's decision predates the batch, its commit follows it."""
    lead, _ = curator.submit_deletion("people", "user-0001", principal=ALICE)
    snap = _leader_snapshot(curator, lead["id"])
    curator.process_pending(force=True)
    assert _req(curator, lead["id"]).status == "done"
    monkeypatch.setattr(intake_mod, "decide", _stale_decide(snap))
    fol, created = curator.submit_deletion("people", "user-0001", principal=BOB)
    assert created and fol["status"] == "pending"  # answered as a follower (from the stale snapshot)
    _assert_completed_like_leader(curator, lead["id"], fol["id"])


def _insert_after_followers_selected(c: Curator, insert: Any) -> list[str]:
    """Run ``insert()`` once, right after the batch's transaction selected the leader's followers."""
    fired: list[str] = []

    def after(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if not fired and "FROM deletion_requests" in statement and "record_id IN" in statement \
                and "waiting" in [p for p in (params if isinstance(params, tuple | list) else params.values())]:
            fired.append(insert(cursor))

    event.listen(c.store.write_engine, "after_cursor_execute", after)
    return fired


def test_follower_committed_while_its_leaders_batch_publishes_completes(curator: Curator) -> None:
    """Order 2: the batch selected the followers before the follower was written, and commits after it."""
    lead, _ = curator.submit_deletion("people", "user-0002", principal=ALICE)
    r = _req(curator, lead["id"])
    fid = str(uuid.uuid4())
    owner = curator.directory.owner_digest(r.key_digest, "bob")

    def insert(cursor: Any) -> str:  # what the intake's transaction writes, on the batch's connection (SQLite)
        cursor.connection.execute(
            "INSERT INTO deletion_requests (id, requester, dataset_id, record_id, key_digest, status, attempts, "
            "submitted_at) VALUES (?, 'bob', ?, ?, ?, 'waiting', 0, ?)",
            (fid, r.dataset_id, r.record_id, owner, utcnow().replace(tzinfo=None).isoformat(sep=" ")))
        return fid

    fired = _insert_after_followers_selected(curator, insert)
    curator.process_pending(force=True)
    assert fired == [fid]
    _assert_completed_like_leader(curator, lead["id"], fid)


def test_a_stuck_follower_is_a_visible_fault_and_recovery_ends_it(curator: Curator, monkeypatch: Any) -> None:
    """A follower left waiting (the checks after each commit did not run: a crash) is counted pending, is a fault
    in ``status``, ``/healthz``'s count and the console, and the next processing ends it."""
    from lethe.curator.console.health import check
    from lethe.curator.followers import Followers

    monkeypatch.setattr(Followers, "settle_pairs", lambda self, pairs: 0)  # the crash: no check after a commit
    lead, _ = curator.submit_deletion("people", "user-0003", principal=ALICE)
    snap = _leader_snapshot(curator, lead["id"])
    curator.process_pending(force=True)
    monkeypatch.setattr(intake_mod, "decide", _stale_decide(snap))
    fol, _ = curator.submit_deletion("people", "user-0003", principal=BOB)
    monkeypatch.undo()
    st = curator.status()
    assert _req(curator, fol["id"]).status == "waiting"
    assert st["requests"]["pending"] == 1 and not st["healthy"]
    assert any(f.get("requests") == 1 for f in st["faults"])
    h = check(curator)
    assert any("cannot reach an end" in f.title for f in h.faults) and h.counts["pending"] == 1
    curator.process_pending()
    got = _req(curator, fol["id"])
    assert got.status == "done" and got.record_id is None
    assert curator.status()["healthy"] and curator.status()["requests"]["pending"] == 0
    with curator.store.read() as s:  # the receipt names who removed the record; the record is gone
        assert s.scalar(select(Record.id).where(Record.id == snap["record_id"])) is None
    assert len(curator.request_certificates(fol["id"])) == 1


# -- PostgreSQL: the same two orders with real concurrent transactions -----------------------------------------------
@pytest.fixture
def pg_curator(tmp_path: Path) -> Any:
    if not PG_URL:
        pytest.skip("LETHE_TEST_POSTGRES_URL not set (.ci/run sets it)")
    wipe = Curator(tmp_path / "wipe", database_url=PG_URL)
    with wipe.store.write_engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    wipe.close()
    data = make_data(tmp_path / "data.csv")
    c = Curator(tmp_path / "lethe-data", database_url=PG_URL, settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    yield c
    c.close()


def test_postgres_follower_decided_before_and_committed_after_the_batch(pg_curator: Curator,
                                                                        monkeypatch: Any) -> None:
    c = pg_curator
    lead, _ = c.submit_deletion("people", "user-0005", principal=ALICE)
    decided, go = threading.Event(), threading.Event()
    real = intake_mod.decide

    def decide(sub: Any, known: Any) -> Any:  # bob's transaction pauses after its reads and decision
        out = real(sub, known)
        if sub.principal.name == "bob":
            decided.set()
            assert go.wait(60)
        return out

    monkeypatch.setattr(intake_mod, "decide", decide)
    answer: list[Any] = []
    t = threading.Thread(target=lambda: answer.append(c.submit_deletion("people", "user-0005", principal=BOB)))
    t.start()
    assert decided.wait(60)
    c.process_pending(force=True)  # the leader's batch commits while bob's transaction is open
    go.set()
    t.join(60)
    fol = answer[0][0]
    assert fol["status"] == "pending"
    _assert_completed_like_leader(c, lead["id"], fol["id"])


def test_postgres_follower_committed_while_the_batch_publishes(pg_curator: Curator) -> None:
    c = pg_curator
    lead, _ = c.submit_deletion("people", "user-0006", principal=ALICE)
    answer: list[Any] = []
    threads: list[threading.Thread] = []

    def insert(cursor: Any) -> str:
        # bob's submission starts between the batch's select of the followers and its commit: it reads the leader
        # as pending; its ledger event then waits for the ledger chain's lock, which this batch holds (one writer
        # chains onto the head at a time), so it commits right after the batch — the race the followers fix closes
        t = threading.Thread(target=lambda: answer.append(c.submit_deletion("people", "user-0006",
                                                                            principal=BOB)))
        t.start()
        threads.append(t)
        t.join(2)
        return "started"

    fired = _insert_after_followers_selected(c, insert)
    c.process_pending(force=True)
    threads[0].join(60)
    assert fired and answer, "bob's submission did not end"
    _assert_completed_like_leader(c, lead["id"], str(answer[0][0]["id"]))
