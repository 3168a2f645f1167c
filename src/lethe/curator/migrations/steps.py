"""The schema migrations' steps: one function per Alembic revision of :mod:`lethe.curator.migrations`, each taking
the revision's connection (``store_step("migrate_1_to_2")`` in ``versions/``). They upgrade the tables of
:mod:`lethe.curator.store`; stores are never downgraded."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from sqlalchemy import Boolean, String, false, insert, text
from sqlalchemy.orm import Session

from lethe.curator.public import public_certificate
from lethe.curator.store import (
    CONSOLE_INDEXES,
    CertificateRow,
    Dataset,
    DeletionRequest,
    Erasure,
    Model,
    ModelVersion,
    PrivacyBudget,
    PrivacyStream,
    utcnow,
)

__all__ = ["migrate_1_to_2", "migrate_2_to_3", "migrate_3_to_4", "migrate_4_to_5", "migrate_5_to_6",
           "migrate_5_to_7", "migrate_chain_ledger"]


def migrate_1_to_2(connection: Any) -> None:
    """Schema 1 → 2 (Alembic revision 0002): duplicate live requests of one key (possible on PostgreSQL before
    the constraint) are marked failed except the earliest; stored certificates and request errors are reduced to
    their publishable fields (version 1 stored ``removed_indices``); the unique index ``uq_live_request_key`` is
    created."""
    from sqlalchemy import select

    with Session(connection) as s:
        seen: set[tuple[int, str]] = set()
        for req in s.scalars(select(DeletionRequest).where(DeletionRequest.status != "failed")
                             .order_by(DeletionRequest.submitted_at, DeletionRequest.id)):
            k = (req.dataset_id, req.key_digest)
            if k in seen:
                req.status = "failed"
                req.error = "a duplicate of an earlier request for the same key (closed by the schema upgrade)"
                req.processed_at = utcnow()
                req.record_id = None
            else:
                seen.add(k)
            req.error = req.error  # re-run the scrubbing validator
        for cert in s.scalars(select(CertificateRow)):
            cleaned = public_certificate(cert.certificate)
            if cleaned != cert.certificate:
                cert.certificate = cleaned
        s.flush()
    table: Any = DeletionRequest.__table__
    for ix in table.indexes:
        if ix.name == "uq_live_request_key":
            ix.create(connection, checkfirst=True)


def migrate_2_to_3(connection: Any) -> None:
    """Schema 2 → 3 (Alembic revision 0003): stored certificates reduced to their publishable fields (batches
    published with bulk inserts had bypassed the validator and kept the mechanism's timings and solver
    diagnostics). One pass over the certificates table."""
    from sqlalchemy import select

    with Session(connection) as s:
        for cert in s.scalars(select(CertificateRow)):
            cleaned = public_certificate(cert.certificate)
            if cleaned != cert.certificate:
                cert.certificate = cleaned
        s.flush()


def migrate_3_to_4(connection: Any) -> None:
    """Schema 3 → 4 (Alembic revision 0004): the console's composite indexes on ``deletion_requests``
    (:data:`CONSOLE_INDEXES`), which earlier versions created when the console started. Idempotent
    (``checkfirst``)."""
    names = {name for name, _ in CONSOLE_INDEXES}
    table: Any = DeletionRequest.__table__
    for ix in table.indexes:
        if ix.name in names:
            ix.create(connection, checkfirst=True)


def migrate_4_to_5(connection: Any) -> None:
    """Schema 4 → 5 (Alembic revision 0005): ``models.serve_unreleased`` (the operator's opt-in to serve a model
    whose certificates cover one published version; :mod:`lethe.curator.serving`), false for every existing model —
    so a model that was served before the upgrade is refused to model-readers after it until retrained with the
    opt-in or replaced by a ``released-logistic`` model. Idempotent (the column is added only where missing)."""
    from sqlalchemy import Column, inspect

    if "serve_unreleased" in {c["name"] for c in inspect(connection).get_columns("models")}:
        return
    col: Any = Column("serve_unreleased", Boolean(), nullable=False, server_default=false())
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    Operations(MigrationContext.configure(connection)).add_column("models", col)


def migrate_5_to_6(connection: Any) -> None:
    """Schema 5 → 6 (Alembic revision 0006): the erasure log (:class:`Erasure`). Datasets dropped before the upgrade
    get their entries from their requests, which every version kept: each dropped dataset's requests' key digests,
    under the name its ``dataset_dropped`` ledger event recorded. Idempotent."""
    from sqlalchemy import inspect, select

    if inspect(connection).has_table("erasures"):
        return
    table: Any = Erasure.__table__
    table.create(connection)
    from lethe.curator.settings import DROPPED_PREFIX

    with Session(connection) as s:  # their original name is not kept: they are found by their source file name
        now = utcnow()
        for ds_id, name, source in s.execute(select(Dataset.id, Dataset.name, Dataset.source)
                                             .where(Dataset.name.like(f"{DROPPED_PREFIX}%"))).all():
            digests = sorted(set(s.scalars(select(DeletionRequest.key_digest).where(
                DeletionRequest.dataset_id == ds_id, DeletionRequest.status != "failed"))))
            if digests:
                s.execute(insert(table), [{"dataset_id": ds_id, "dataset_name": name, "source": source,
                                           "digest": d, "erased_at": now} for d in digests])
        s.flush()


def migrate_5_to_7(connection: Any) -> None:
    """Schema 5 → 7 (Alembic revision 0007): the privacy ledger's tables (``privacy_streams``, ``privacy_budgets``),
    and an open stream for every existing ``released-logistic`` model, with the releases its published version's
    summary records and μ₁ bounded from its parameters (:func:`lethe.privacy.lifetime.stream_release_mu`). Streams
    of models retrained or dropped before the upgrade are not known to the store: the ledger then starts from the
    models that exist (the upgrade note in docs/release_privacy.md says so). Idempotent."""
    from sqlalchemy import select

    from lethe.privacy.lifetime import stream_release_mu

    for table in (PrivacyStream.__table__, PrivacyBudget.__table__):
        table.create(connection, checkfirst=True)  # type: ignore[attr-defined]
    with Session(connection) as s:
        known = set(s.scalars(select(PrivacyStream.model_id)))
        for m in s.scalars(select(Model).where(Model.mechanism == "released-logistic")):
            v = s.get(ModelVersion, m.current_version_id) if m.current_version_id is not None else None
            if m.id in known or v is None:
                continue
            p, summ = dict(m.params), dict(v.summary or {})
            s.add(PrivacyStream(dataset_id=m.dataset_id, model_id=m.id, model=m.name, mechanism=m.mechanism,
                                mu=stream_release_mu(float(p["epsilon"]), float(p["delta"]), int(p["horizon"])),
                                horizon=int(p["horizon"]), releases=int(summ.get("releases") or 1), open=True,
                                started_at=m.created_at))
        s.flush()


def migrate_chain_ledger(connection: Any) -> None:
    """Schema 5 → 8 (Alembic revision 0008): ``ledger.hash``, the tamper-evident chain. The column is added where
    missing and every existing event gets its link, in id order (the append-only triggers are lifted for this one
    pass and put back). Idempotent: events that carry a hash keep it."""
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import Column, inspect

    from lethe.curator.chain import GENESIS, link

    if "hash" not in {c["name"] for c in inspect(connection).get_columns("ledger")}:
        col: Any = Column("hash", String(64), nullable=True)
        Operations(MigrationContext.configure(connection)).add_column("ledger", col)
    dialect = connection.dialect.name
    rows = connection.execute(text("SELECT id, at, kind, model_id, version_id, request_id, payload, hash "
                                   "FROM ledger ORDER BY id")).mappings().all()
    if all(r["hash"] is not None for r in rows):
        return
    if dialect == "sqlite":
        for op in ("update", "delete"):
            connection.execute(text(f"DROP TRIGGER IF EXISTS ledger_no_{op}"))
    elif dialect == "postgresql":
        connection.execute(text("ALTER TABLE ledger DISABLE TRIGGER ledger_append_only"))
    head = GENESIS
    for r in rows:
        if r["hash"] is not None:
            head = r["hash"]
            continue
        payload = r["payload"]
        if isinstance(payload, str):
            payload = json.loads(payload)
        at = r["at"]
        if isinstance(at, str):
            at = _dt.datetime.fromisoformat(at)
        head = link(head, {**r, "payload": payload, "at": at})
        connection.execute(text("UPDATE ledger SET hash = :h WHERE id = :i"), {"h": head, "i": r["id"]})
    if dialect == "sqlite":
        for op in ("UPDATE", "DELETE"):
            connection.execute(text(
                f"CREATE TRIGGER IF NOT EXISTS ledger_no_{op.lower()} BEFORE {op} ON ledger "
                "BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END"))
    elif dialect == "postgresql":
        connection.execute(text("ALTER TABLE ledger ENABLE TRIGGER ledger_append_only"))
