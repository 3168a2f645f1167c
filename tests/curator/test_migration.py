"""Schema upgrade 1 → 2 through Alembic (lethe.curator.migrations): legacy duplicates closed, stored certificates
rewritten without row positions, the unique constraint on live requests in place; a store from a newer lethe is
refused; reopening is idempotent."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from lethe.curator import Curator
from lethe.curator.store import CONSOLE_INDEXES, REVISIONS, SCHEMA_VERSION


def _reopen_upgraded(curator: Curator, request_id: str) -> tuple[Curator, dict]:
    """Close ``curator`` and open its store again (which upgrades it): checks that the store is stamped with the
    current schema version and Alembic revision, and returns the reopened curator (to close) with the stored
    certificate of ``request_id``, read with plain SQL."""
    data_dir = curator.data_dir
    curator.close()
    c = Curator(data_dir)
    with c.store.read_engine.connect() as conn:
        raw = conn.execute(text("SELECT certificate FROM certificates WHERE request_id = :r"),
                           {"r": request_id}).scalar()
        assert conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar() == str(
            SCHEMA_VERSION)
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
    return c, json.loads(raw)


def test_upgrade_from_version_1(curator: Curator) -> None:
    view, _ = curator.submit_deletion("people", "user-0001")
    curator.process_pending(force=True)
    pending, _ = curator.submit_deletion("people", "user-0002")
    with curator.store.write_engine.begin() as conn:  # make it look like a version-1 store
        conn.execute(text("DROP INDEX uq_live_request_key"))
        conn.execute(text("DROP TABLE alembic_version"))  # version 1 did not use Alembic
        conn.execute(text("UPDATE certificates SET certificate = json_set(certificate, '$.removed_indices', "
                          "json('[1]'), '$.seconds', 0.5) WHERE request_id = :r"), {"r": view["id"]})
        conn.execute(text("INSERT INTO deletion_requests (id, requester, client_request_id, dataset_id, record_id, "
                          "key_digest, status, attempts, submitted_at) SELECT 'dup-1', 'bob', NULL, dataset_id, "
                          "record_id, key_digest, 'pending', 0, datetime(submitted_at, '+1 second') "
                          "FROM deletion_requests WHERE id = :r"),
                     {"r": pending["id"]})
        conn.execute(text("UPDATE meta SET value = '1' WHERE key = 'schema_version'"))
        raw = conn.execute(text("SELECT certificate FROM certificates WHERE request_id = :r"),
                           {"r": view["id"]}).scalar()
    assert "removed_indices" in json.loads(raw)
    c, cert = _reopen_upgraded(curator, view["id"])
    try:
        assert "removed_indices" not in cert and "seconds" not in cert
        assert c.request_status("dup-1")["status"] == "failed"
        assert c.request_status(pending["id"])["status"] == "pending"
        with pytest.raises(IntegrityError), c.store.write_engine.begin() as conn:
            conn.execute(text("INSERT INTO deletion_requests (id, requester, dataset_id, key_digest, status, "
                              "attempts, submitted_at) SELECT 'dup-2', 'carol', dataset_id, key_digest, 'pending', 0, "
                              "submitted_at FROM deletion_requests WHERE id = :r"), {"r": pending["id"]})
        c.process_pending(force=True)
        assert c.request_status(pending["id"])["status"] == "done"
    finally:
        c.close()


def test_new_store_is_stamped_and_newer_store_refused(curator: Curator) -> None:
    with curator.store.read_engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
    data_dir = curator.data_dir
    curator.close()
    Curator(data_dir).close()  # reopening changes nothing
    c = Curator(data_dir)
    with c.store.write_engine.begin() as conn:
        conn.execute(text("UPDATE meta SET value = '99' WHERE key = 'schema_version'"))
    c.close()
    with pytest.raises(Exception, match="schema version 99"):
        Curator(data_dir)


def test_upgrade_from_version_2_reduces_stored_certificates(curator: Curator) -> None:
    """Version 2 stores written by the bulk publication kept solver diagnostics in their certificates; the upgrade
    to version 3 rewrites them to the allow-listed fields."""
    from lethe.curator.public import CERTIFICATE_FIELDS

    view, _ = curator.submit_deletion("people", "user-0001")
    curator.process_pending(force=True)
    with curator.store.write_engine.begin() as conn:  # as a version-2 store of the affected commits left it
        conn.execute(text("UPDATE certificates SET certificate = json_set(certificate, '$.solve_error', 0.001, "
                          "'$.seconds', 0.5, '$.remainder_bound', 0.01) WHERE request_id = :r"), {"r": view["id"]})
        conn.execute(text("UPDATE alembic_version SET version_num = '0002'"))
        conn.execute(text("UPDATE meta SET value = '2' WHERE key = 'schema_version'"))
    c, cert = _reopen_upgraded(curator, view["id"])
    try:
        assert cert and set(cert) <= set(CERTIFICATE_FIELDS) and "budget" in cert
    finally:
        c.close()


def _request_indexes(c: Curator) -> set[str]:
    with c.store.read_engine.connect() as conn:
        return set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'index' "
                                     "AND tbl_name = 'deletion_requests'")).scalars())


def test_upgrade_from_version_3_adds_the_console_indexes(curator: Curator) -> None:
    wanted = {name for name, _ in CONSOLE_INDEXES}
    assert wanted <= _request_indexes(curator)  # a new store has them without the console
    view, _ = curator.submit_deletion("people", "user-0001")
    with curator.store.write_engine.begin() as conn:  # make it look like a version-3 store
        for name in wanted:
            conn.execute(text(f"DROP INDEX {name}"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0003'"))
        conn.execute(text("UPDATE meta SET value = '3' WHERE key = 'schema_version'"))
    assert not wanted & _request_indexes(curator)
    data_dir = curator.data_dir
    curator.close()
    c = Curator(data_dir)
    try:
        assert wanted <= _request_indexes(c)
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar() == str(
                SCHEMA_VERSION)
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
        assert c.request_status(view["id"])["status"] == "pending"  # nothing else changed
    finally:
        c.close()


def _model_columns(c: Curator) -> set[str]:
    with c.store.read_engine.connect() as conn:
        return {row[1] for row in conn.execute(text("PRAGMA table_info(models)"))}


def test_upgrade_from_version_4_adds_serve_unreleased_false(curator: Curator) -> None:
    """Schema 5 (issue 26): ``models.serve_unreleased``; every model of an upgraded store gets false — served to
    admins only until an operator opts in (``lethe model retrain --serve-unreleased``)."""
    from lethe.curator.errors import UnreleasedModelError
    from lethe.curator.settings import Principal

    reader = Principal("viewer", "model-reader")
    assert curator.public_model("clf", principal=reader)["model"] == "clf"  # the fixture opted in
    with curator.store.write_engine.begin() as conn:  # make it look like a version-4 store
        conn.execute(text("ALTER TABLE models DROP COLUMN serve_unreleased"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0004'"))
        conn.execute(text("UPDATE meta SET value = '4' WHERE key = 'schema_version'"))
    assert "serve_unreleased" not in _model_columns(curator)
    data_dir = curator.data_dir
    curator.close()
    c = Curator(data_dir)
    try:
        assert "serve_unreleased" in _model_columns(c)
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
        with pytest.raises(UnreleasedModelError):
            c.predict("clf", [[0.0] * 10], principal=reader)
        assert c.public_model("clf")["model"] == "clf"  # the operator still reads it
        c.retrain("clf", random_state=1, serve_unreleased=True)
        assert c.public_model("clf", principal=reader)["version"] == 2
        Curator(data_dir).close()  # reopening an upgraded store changes nothing (idempotent)
    finally:
        c.close()
