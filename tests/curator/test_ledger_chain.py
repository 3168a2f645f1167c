"""Issue 38: the ledger's hash chain (schema 8) — written with every event (ORM and bulk paths), computed for the
events of an upgraded store exactly as it would have been at insertion, and broken where an event is removed or
edited."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import select, text

from lethe.curator import Curator
from lethe.curator.certdoc import check_ledger
from lethe.curator.chain import GENESIS, link
from lethe.curator.store import REVISIONS, SCHEMA_VERSION, LedgerEvent

from .conftest import Data


def _events(c: Curator) -> list[LedgerEvent]:
    with c.store.read() as s:
        return list(s.scalars(select(LedgerEvent).order_by(LedgerEvent.id)))


def test_every_event_is_linked_to_the_one_before(curator: Curator, data: Data) -> None:
    for k in data.keys[:6]:  # submissions (bulk inserts), a batch (bulk + ORM events), a token (ORM)
        curator.submit_deletion("people", k)
    curator.process_pending(force=True)
    curator.create_token("auditor", "admin")
    evs = _events(curator)
    assert len(evs) > 10 and all(e.hash is not None for e in evs)
    prev = GENESIS
    for e in evs:
        assert e.hash == link(prev, e), e.id
        prev = e.hash
    assert check_ledger(curator).intact


def test_upgrade_from_version_5_chains_existing_events_as_at_insertion(curator: Curator, data: Data) -> None:
    for k in data.keys[:5]:
        curator.submit_deletion("people", k)
    curator.process_pending(force=True)
    before = [(e.id, e.hash) for e in _events(curator)]
    with curator.store.write_engine.begin() as conn:  # make it look like a version-5 store
        conn.execute(text("ALTER TABLE ledger DROP COLUMN hash"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
        conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
    data_dir = curator.data_dir
    curator.close()
    c = Curator(data_dir)
    try:
        assert [(e.id, e.hash) for e in _events(c)] == before  # the migration's links are the insertion's
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
            triggers = set(conn.execute(text("SELECT name FROM sqlite_master WHERE type='trigger'")).scalars())
        assert {"ledger_no_update", "ledger_no_delete"} <= triggers  # put back after the one pass
        c.submit_deletion("people", data.keys[7])
        assert check_ledger(c).intact and check_ledger(c).events == len(before) + 1
        Curator(data_dir).close()  # idempotent
        assert [(e.id, e.hash) for e in _events(c)][: len(before)] == before
    finally:
        c.close()


PG_URL = os.environ.get("LETHE_TEST_POSTGRES_URL")


@pytest.mark.skipif(not PG_URL, reason="LETHE_TEST_POSTGRES_URL not set (.ci/run sets it)")
def test_chain_on_postgres_in_another_time_zone(tmp_path: Path, data: Data) -> None:
    """PostgreSQL converts an aware time sent to a ``timestamp without time zone`` column to the session's zone: the
    chain hashes the naive UTC time it stores, so a session in New York keeps it intact (it broke at event 1)."""
    assert PG_URL is not None
    url = PG_URL + ("&" if "?" in PG_URL else "?") + "options=-c%20timezone%3DAmerica/New_York"
    fresh = Curator(tmp_path / "wipe", database_url=url)
    with fresh.store.write_engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    fresh.close()
    c = Curator(tmp_path / "pg", database_url=url)
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label")
        c.train("people", "clf", params={"lam": 0.01, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        for k in data.keys[:5]:
            c.submit_deletion("people", k)
        c.process_pending(force=True)
        check = check_ledger(c)
        assert check.intact and check.events > 10, check.problems
        with c.store.read_engine.connect() as conn:
            before = [tuple(r) for r in conn.execute(text("SELECT id, hash FROM ledger ORDER BY id"))]
        with c.store.write_engine.begin() as conn:  # a version-5 store: the migration links the same chain
            conn.execute(text("ALTER TABLE ledger DROP COLUMN hash"))
            conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
            conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
        c.close()
        c = Curator(tmp_path / "pg", database_url=url)
        with c.store.read_engine.connect() as conn:
            assert [tuple(r) for r in conn.execute(text("SELECT id, hash FROM ledger ORDER BY id"))] == before
        with pytest.raises(Exception, match="append-only"), c.store.write_engine.begin() as conn:
            conn.execute(text("UPDATE ledger SET kind = 'tampered'"))  # the trigger is back
    finally:
        c.close()
