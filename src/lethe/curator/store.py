"""The curator's store: SQLAlchemy tables, engine set-up and the append-only ledger.

Embedded default: one SQLite file under the data directory (WAL journal, ``synchronous=FULL`` so an acknowledged
request survives a crash, ``secure_delete=ON`` so deleted rows are overwritten with zeros). Any other SQLAlchemy URL
(e.g. ``postgresql+psycopg://...``) works for the tables; the purge guarantees of :mod:`lethe.curator.service` are
only those the database gives (see ``docs/curator.md``).

What is stored where (nothing here is secret except the token hashes, which are not reversible):

* ``datasets`` / ``records`` — the raw records: stable external key, features (float64 bytes), label.
* ``models`` / ``model_versions`` — model metadata; the weights and the secret perturbation live only in artifact
  files (:mod:`lethe.curator.artifacts`).
* ``deletion_requests`` — a request refers to its record by internal row id and to its key only by a keyed digest
  (HMAC), so that no plain key remains once the record is purged.
* ``certificates`` — the mechanism's certificate verbatim, plus request, model and version ids and timestamps.
* ``ledger`` — append-only events (budget, privacy, lifecycle). Updates and deletes are refused in code (a session
  hook) and, on SQLite, by triggers.
* ``tokens`` — API bearer tokens (SHA-256 of the token, scope, subject).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    Boolean,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
    insert,
    select,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker, validates

from lethe.curator.public import check_payload, public_certificate, public_error

SCHEMA_VERSION = 8
# meta.schema_version -> Alembic revision (lethe.curator.migrations)
REVISIONS = {1: "0001", 2: "0002", 3: "0003", 4: "0004", 5: "0005", 6: "0006", 7: "0007", 8: "0008"}

# (name, columns): composite indexes on ``deletion_requests`` for the console's keyset pagination under each filter
# of its Requests page (schema version 4; created by migration 0004 on older stores).
CONSOLE_INDEXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ix_console_req_time", ("submitted_at", "id")),
    ("ix_console_req_status_time", ("status", "submitted_at", "id")),
    ("ix_console_req_requester_time", ("requester", "submitted_at", "id")),
    ("ix_console_req_dataset_time", ("dataset_id", "submitted_at", "id")),
    ("ix_console_req_client_id", ("client_request_id",)),
)
DB_FILENAME = "lethe.db"


def utcnow() -> _dt.datetime:
    """Timezone-aware UTC now (stored naive-UTC by SQLite; always read back as UTC)."""
    return _dt.datetime.now(_dt.UTC)


def as_utc(t: _dt.datetime | None) -> _dt.datetime | None:
    """Attach UTC to a naive datetime read back from the database."""
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=_dt.UTC)


def iso(t: _dt.datetime | None) -> str | None:
    """ISO 8601 text of a stored timestamp (UTC)."""
    u = as_utc(t)
    return None if u is None else u.isoformat()


class Base(DeclarativeBase):
    """Declarative base of the curator's tables."""

    type_annotation_map = {dict[str, Any]: JSON}


class Meta(Base):
    """Key/value facts about the store (schema version)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Dataset(Base):
    """A registered data set: records with stable keys, a fixed number of features and a label."""

    __tablename__ = "datasets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    n_features: Mapped[int] = mapped_column(Integer)
    feature_names: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"names": [...]}
    key_column: Mapped[str] = mapped_column(String(200))
    label_column: Mapped[str] = mapped_column(String(200))
    normalize: Mapped[str] = mapped_column(String(16))  # "none" | "rows"
    source: Mapped[str] = mapped_column(Text)  # file name it was registered from (not a copy of it)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)


class Record(Base):
    """One raw record. Deleted (and purged) when a deletion request for its key is processed."""

    __tablename__ = "records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    key: Mapped[str] = mapped_column(String(512))
    features: Mapped[bytes] = mapped_column(LargeBinary)  # float64, little endian, n_features values
    label: Mapped[float] = mapped_column(Float)
    __table_args__ = (UniqueConstraint("dataset_id", "key", name="uq_record_key"),)


class Model(Base):
    """A named model on one dataset, driven by one mechanism; its versions are published one at a time."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    mechanism: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    current_version_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    # the operator's explicit opt-in, at training, to serve (predict, weights) a model whose certificates cover ONE
    # published version (issue 26: an observer of consecutive versions can identify deleted records); schema 5
    serve_unreleased: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ModelVersion(Base):
    """One model version. ``status``: published (exactly one per model) → superseded → destroyed."""

    __tablename__ = "model_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    artifact: Mapped[str] = mapped_column(Text)  # path relative to the data directory
    sha256: Mapped[str] = mapped_column(String(64))
    n_records: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)  # public budget facts of the state (never b)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    superseded_at: Mapped[_dt.datetime | None] = mapped_column(DateTime, nullable=True)
    destroyed_at: Mapped[_dt.datetime | None] = mapped_column(DateTime, nullable=True)
    __table_args__ = (UniqueConstraint("model_id", "number", name="uq_version_number"),)


class DeletionRequest(Base):
    """A deletion request. It names its record by row id and its key only by an HMAC digest.

    ``status``: pending → done, or failed (the mechanism refused it; nothing changed; see ``error``).
    """

    __tablename__ = "deletion_requests"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    requester: Mapped[str] = mapped_column(String(200))
    client_request_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    record_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    key_digest: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    submitted_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    processed_at: Mapped[_dt.datetime | None] = mapped_column(DateTime, nullable=True)
    __table_args__ = (
        UniqueConstraint("requester", "client_request_id", name="uq_client_request"),
        Index("ix_request_digest", "dataset_id", "key_digest"),
        # at most one live (pending or done) request per key and dataset: a database constraint, so concurrent
        # submissions cannot both be accepted (PostgreSQL's READ COMMITTED lets two check-then-insert run at once)
        Index("uq_live_request_key", "dataset_id", "key_digest", unique=True,
              sqlite_where=text("status != 'failed'"), postgresql_where=text("status != 'failed'")),
        *(Index(name, *cols) for name, cols in CONSOLE_INDEXES),
    )

    @validates("error")
    def _scrub_error(self, _key: str, value: str | None) -> str | None:
        # a mechanism's exception message can name row positions; keep only its type (lethe.curator.public)
        return public_error(value)


class CertificateRow(Base):
    """The certificate one request got from one model (or a raw-deletion receipt when no model exists)."""

    __tablename__ = "certificates"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "train" | "removal" | "deletion"
    request_id: Mapped[str | None] = mapped_column(ForeignKey("deletion_requests.id"), nullable=True, index=True)
    model_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    old_version_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    new_version_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    batch_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    mechanism: Mapped[str | None] = mapped_column(String(64), nullable=True)
    certificate: Mapped[dict[str, Any]] = mapped_column(JSON)
    submitted_at: Mapped[_dt.datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)

    @validates("certificate")
    def _publishable(self, _key: str, value: dict[str, Any]) -> dict[str, Any]:
        # stored already reduced to the allow-listed fields: no row positions, timings or solver diagnostics
        return public_certificate(value)


class LedgerEvent(Base):
    """An append-only event. Never updated, never deleted (enforced by :func:`_refuse_ledger_changes`)."""

    __tablename__ = "ledger"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    model_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    version_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    # SHA-256(previous event's hash ‖ canonical JSON of this event): the tamper-evident chain (lethe.curator.chain;
    # schema 8)
    hash: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Erasure(Base):
    """The erasure log: one key a deletion request named, as the keyed digest of its dataset
    (:meth:`lethe.curator.datadir.DataDirectory.key_digest`, HMAC under the secret pepper; never the key), kept when
    the dataset is dropped so that registering its source again does not bring the record back
    (:mod:`lethe.curator.erasures`). Schema version 6."""

    __tablename__ = "erasures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(Integer, index=True)  # the dataset the digest is keyed under
    dataset_name: Mapped[str] = mapped_column(String(200), index=True)  # its name when it was dropped
    source: Mapped[str] = mapped_column(Text)  # the file name it was registered from
    digest: Mapped[str] = mapped_column(String(64))
    erased_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (UniqueConstraint("dataset_id", "digest", name="uq_erasure"),)


class Token(Base):
    """An API bearer token: only its SHA-256 is stored. ``scope`` is "admin" or "requester"."""

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


# -- the privacy ledger per dataset (issue 36; schema 7, lethe.curator.lifetime) -------------------------------------
class PrivacyStream(Base):
    """One release stream of a model trained on a dataset's records: a private-release training (or retraining)
    and its releases. Kept when the model is dropped or retrained (then ``open`` is false and ``releases`` final): a
    record held throughout met every release of every stream. ``mu`` is μ₁ of one release (Δ/σ ≤ 1/(√T σ_BW(ε, δ))),
    ``releases`` the count published — the service's count, which an artifact's may not fall behind (a rollback)."""

    __tablename__ = "privacy_streams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(Integer, index=True)  # no foreign key: outlives a dropped dataset's row
    model_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    model: Mapped[str] = mapped_column(String(200))
    mechanism: Mapped[str] = mapped_column(String(64))
    mu: Mapped[float] = mapped_column(Float)
    horizon: Mapped[int] = mapped_column(Integer)
    releases: Mapped[int] = mapped_column(Integer)
    open: Mapped[bool] = mapped_column(Boolean, default=True)
    started_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    ended_at: Mapped[_dt.datetime | None] = mapped_column(DateTime, nullable=True)


class PrivacyBudget(Base):
    """The operator's lifetime budget of a dataset: (ε, δ) a record held throughout may spend over every release of
    every model trained on it (default :data:`lethe.curator.lifetime.DEFAULT_LIFETIME_EPSILON` at
    :data:`lethe.curator.lifetime.DEFAULT_LIFETIME_DELTA` when no row)."""

    __tablename__ = "privacy_budgets"
    dataset_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    set_at: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)


# -- the append-only ledger ----------------------------------------------------------------------------------------
class LedgerViolation(RuntimeError):
    """Something tried to update or delete a ledger event."""


@event.listens_for(Session, "before_flush")
def _refuse_ledger_changes(session: Session, flush_context: Any, instances: Any) -> None:
    for obj in list(session.dirty) + list(session.deleted):
        if isinstance(obj, LedgerEvent) and (obj in session.deleted or session.is_modified(obj)):
            raise LedgerViolation(f"The ledger is append-only: event {obj.id} cannot be changed or deleted.")


@event.listens_for(Session, "do_orm_execute")
def _refuse_bulk_ledger_changes(state: Any) -> None:
    if (state.is_update or state.is_delete) and any(
            getattr(m, "class_", None) is LedgerEvent for m in state.all_mappers):
        raise LedgerViolation("The ledger is append-only: bulk UPDATE/DELETE on it is refused.")


for _op in ("UPDATE", "DELETE"):
    event.listen(LedgerEvent.__table__, "after_create", DDL(
        f"CREATE TRIGGER IF NOT EXISTS ledger_no_{_op.lower()} BEFORE {_op} ON ledger "
        "BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END").execute_if(dialect="sqlite"))
event.listen(LedgerEvent.__table__, "after_create", DDL(
    "CREATE OR REPLACE FUNCTION lethe_ledger_append_only() RETURNS trigger AS $$ "
    "BEGIN RAISE EXCEPTION 'the ledger is append-only'; END; $$ LANGUAGE plpgsql; "
    "CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger "
    "FOR EACH ROW EXECUTE FUNCTION lethe_ledger_append_only();").execute_if(dialect="postgresql"))


# -- engines ---------------------------------------------------------------------------------------------------------
def sqlite_url(data_dir: str | Path) -> str:
    """The default database URL: ``sqlite:///<data_dir>/lethe.db``."""
    return f"sqlite:///{Path(data_dir).resolve() / DB_FILENAME}"


def _serialize_writers(engine: Engine) -> threading.Lock:
    """Let the threads of one process take SQLite's write lock in turn through a Python lock, taken before
    ``BEGIN IMMEDIATE`` and released at commit or rollback. Without it, concurrent writers of one process (the API
    server's request threads and its worker) meet SQLite's busy handler, which sleeps up to 100 ms between retries:
    a queue of waiters then waits in sleeps, not in turn. Other processes still wait in the busy handler."""
    mutex = threading.Lock()

    @event.listens_for(engine, "begin")
    def _take(conn: Any) -> None:
        mutex.acquire()
        conn.info["lethe_write_mutex"] = True

    def _give(conn: Any) -> None:
        if conn.info.pop("lethe_write_mutex", False):
            mutex.release()

    event.listen(engine, "commit", _give)
    event.listen(engine, "rollback", _give)
    return mutex


def _configure_sqlite(engine: Engine, *, immediate: bool, mutex: threading.Lock | None = None) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (below)
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA busy_timeout = 30000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = FULL")
        cur.execute("PRAGMA secure_delete = ON")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock at BEGIN: no deadlock-prone upgrade from a read transaction.
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except BaseException:
            if mutex is not None and conn.info.pop("lethe_write_mutex", False):
                mutex.release()  # no transaction began: no commit or rollback will release it
            raise


class Store:
    """Engines and session factories on one database: ``read()`` for queries, ``write()`` for changes.

    On SQLite, ``write()`` sessions start with ``BEGIN IMMEDIATE`` (one writer at a time, waiting up to the busy
    timeout); ``read()`` sessions use deferred transactions (WAL readers never block).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        # hide_parameters: a database error's text never carries the statement's values (record positions, key
        # digests, requester names), wherever it is logged or shown
        kwargs: dict[str, Any] = {"future": True, "hide_parameters": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.write_engine = create_engine(url, **kwargs)
        self.read_engine = create_engine(url, **kwargs) if self.is_sqlite else self.write_engine
        if self.is_sqlite:
            mutex = _serialize_writers(self.write_engine)  # registered first: held before BEGIN IMMEDIATE
            _configure_sqlite(self.write_engine, immediate=True, mutex=mutex)
            _configure_sqlite(self.read_engine, immediate=False)
        self.autocheckpoint = True  # see defer_checkpoints
        if self.is_sqlite:
            @event.listens_for(self.write_engine, "connect")
            def _checkpoints(dbapi_connection: Any, connection_record: Any) -> None:
                if not self.autocheckpoint:
                    dbapi_connection.execute("PRAGMA wal_autocheckpoint = 0")

        self._write = sessionmaker(self.write_engine, expire_on_commit=False)
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)

    def create(self) -> None:
        """Create a new store, or upgrade an existing one to this version's schema (Alembic, idempotent).

        A new database gets the tables from the models and is stamped with the newest revision. An existing one is
        upgraded with :mod:`lethe.curator.migrations`; one made before Alembic was used is first stamped with the
        revision of its ``meta.schema_version``. A store from a newer lethe is refused.
        """
        from alembic import command
        from sqlalchemy import inspect

        with self.write_engine.connect() as conn:
            insp = inspect(conn)
            has_meta, has_alembic = insp.has_table("meta"), insp.has_table("alembic_version")
            found = None
            if has_meta:
                value = conn.exec_driver_sql("SELECT value FROM meta WHERE key = 'schema_version'").scalar()
                found = int(value) if value is not None else None
        if found is not None and found > SCHEMA_VERSION:
            raise RuntimeError(f"The store has schema version {found}; this lethe knows versions up to "
                               f"{SCHEMA_VERSION}. Upgrade lethe.")
        with self.write_engine.begin() as conn:
            cfg = _alembic_config(conn)
            if found is None:
                Base.metadata.create_all(conn)
                command.stamp(cfg, REVISIONS[SCHEMA_VERSION])
            else:
                if not has_alembic:
                    command.stamp(cfg, REVISIONS[found])
                command.upgrade(cfg, "head")
                Base.metadata.create_all(conn)  # tables added since (none yet); idempotent
        with self.write() as s, s.begin():
            row = s.get(Meta, "schema_version")
            if row is None:
                s.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            elif row.value != str(SCHEMA_VERSION):
                row.value = str(SCHEMA_VERSION)

    def write(self) -> Session:
        """A session for one write transaction (use ``with store.write() as s, s.begin(): ...``)."""
        return self._write()

    def read(self) -> Session:
        """A session for reading."""
        return self._read()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()

    def defer_checkpoints(self) -> None:
        """SQLite: this process's commits no longer checkpoint the WAL themselves (``wal_autocheckpoint = 0``).

        For the API server while a worker process runs: SQLite checkpoints in whichever connection's commit finds
        the WAL over 1,000 pages, and a checkpoint copies pages into the database file and fsyncs it — hundreds of
        milliseconds on a busy disk, spent inside a submission group's commit. The worker checkpoints instead
        (:meth:`checkpoint`, after every batch; its own commits keep auto-checkpointing)."""
        if self.is_sqlite and self.autocheckpoint:
            self.autocheckpoint = False
            self.write_engine.dispose()  # pooled connections were opened with the default; new ones get 0

    def checkpoint(self) -> bool:
        """SQLite: ``PRAGMA wal_checkpoint(PASSIVE)`` — copy what the WAL holds into the database file without
        waiting for readers or blocking writers. Returns True if every frame was copied (else: a reader holds an
        older snapshot; the next checkpoint continues)."""
        if not self.is_sqlite:
            return True
        raw = self.write_engine.raw_connection()
        try:
            con: Any = raw.driver_connection
            busy, log_frames, done = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            raw.close()
        return bool(busy == 0 and log_frames == done)

    def insert_records(self, s: Session, rows: Iterable[tuple[int, int, str]], *,
                       on_chunk: Callable[[int], None] | None = None, chunk: int = 100_000) -> int:
        """Insert records (id, dataset id, key digest) — no values: those live in the data plane — within the write
        transaction of ``s``, at the driver's bulk speed; returns the number inserted.

        SQLite: ``executemany`` of one prepared statement on the transaction's own connection, with a page cache
        large enough (256 MiB, for this connection while it runs) that the key index's random inserts stay in
        memory. PostgreSQL (psycopg): ``COPY ... FROM STDIN``. Other databases: SQLAlchemy Core's executemany.
        ``on_chunk(k)`` is called after every ``chunk`` rows (a progress bar)."""
        conn = s.connection()
        dialect = conn.dialect.name
        driver: Any = conn.connection.driver_connection
        done = 0
        it = iter(rows)
        cur: Any = None
        if dialect == "sqlite":
            cur = driver.cursor()
            (old_cache,) = cur.execute("PRAGMA cache_size").fetchone()
            cur.execute("PRAGMA cache_size = -262144")
        try:
            while True:
                block = list(itertools.islice(it, chunk))
                if not block:
                    break
                if dialect == "sqlite":
                    cur.executemany("INSERT INTO records (id, dataset_id, key, features, label) "
                                    "VALUES (?, ?, ?, x'', 0.0)", block)
                elif dialect == "postgresql" and conn.dialect.driver == "psycopg":
                    with driver.cursor() as pg, pg.copy("COPY records (id, dataset_id, key, features, label) "
                                                        "FROM STDIN") as copy:
                        for rid, ds_id, key in block:
                            copy.write_row((rid, ds_id, key, b"", 0.0))
                else:
                    s.execute(insert(Record), [{"id": r, "dataset_id": d, "key": k, "features": b"", "label": 0.0}
                                               for r, d, k in block])
                done += len(block)
                if on_chunk is not None:
                    on_chunk(len(block))
        finally:
            if cur is not None:
                cur.execute(f"PRAGMA cache_size = {int(old_cache)}")
                cur.close()
        return done

    def raw_sqlite(self) -> Any:
        """A fresh autocommit ``sqlite3`` connection (for VACUUM and checkpoints), with the store's pragmas."""
        raw = self.write_engine.raw_connection()
        return raw


def _alembic_config(connection: Any) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parent / "migrations"))
    cfg.attributes["connection"] = connection
    return cfg


def add_event(session: Session, kind: str, payload: dict[str, Any] | None = None, *, model_id: int | None = None,
              version_id: int | None = None, request_id: str | None = None) -> LedgerEvent:
    """Append one ledger event (validated JSON-serialisable first: a bad payload records nothing)."""
    payload = check_payload(dict(payload or {}))  # no positions, raw values or keys (lethe.curator.public)
    json.dumps(payload, allow_nan=True)  # raises TypeError before anything is added
    ev = LedgerEvent(kind=kind, payload=payload, model_id=model_id, version_id=version_id, request_id=request_id,
                     at=_naive_utc(utcnow()))
    ev.hash = _chain_next(session, ev)
    session.add(ev)
    return ev


# -- the ledger's hash chain (schema 8; lethe.curator.chain) ---------------------------------------------------------
_HEAD = "lethe_ledger_head"
_PG_LEDGER_LOCK = 0x6C657468  # pg_advisory_xact_lock key: one ledger writer at a time chains onto the head


def ledger_head(session: Session) -> str:
    """The hash of the newest ledger event (the chain's head) as this transaction sees it, including events it added.

    The first call in a write transaction takes the ledger's lock on PostgreSQL (a transaction-scoped advisory
    lock: two writers cannot both chain onto the same head; SQLite's ``BEGIN IMMEDIATE`` already serialises them),
    then reads the head; later calls use the value this transaction left (:func:`_chain_next`)."""
    from lethe.curator.chain import GENESIS

    head = session.info.get(_HEAD)
    if head is None:
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LEDGER_LOCK})
        with session.no_autoflush:
            head = session.scalar(select(LedgerEvent.hash).where(LedgerEvent.hash.is_not(None))
                                  .order_by(LedgerEvent.id.desc()).limit(1)) or GENESIS
        session.info[_HEAD] = head
    return str(head)


def _naive_utc(t: _dt.datetime) -> _dt.datetime:
    """A ledger time as it is stored and hashed: naive UTC. (An aware time sent to PostgreSQL's ``timestamp without
    time zone`` is converted to the session's time zone: what is read back would no longer be what was hashed.)"""
    return t.astimezone(_dt.UTC).replace(tzinfo=None) if t.tzinfo is not None else t


def _chain_next(session: Session, event: Any) -> str:
    from lethe.curator.chain import link

    h = link(ledger_head(session), event)
    session.info[_HEAD] = h
    return h


@event.listens_for(Session, "after_transaction_end")
def _forget_head(session: Session, transaction: Any) -> None:
    session.info.pop(_HEAD, None)  # the next transaction reads the head again (another may have appended)


@event.listens_for(Session, "before_flush")
def _chain_pending(session: Session, flush_context: Any, instances: Any) -> None:
    # a LedgerEvent added without add_event: chained here, in the order it was added
    from sqlalchemy import inspect as _inspect

    new = [o for o in session.new if isinstance(o, LedgerEvent) and o.hash is None]
    for ev in sorted(new, key=lambda o: int(_inspect(o).insert_order or 0)):
        ev.at = _naive_utc(ev.at if ev.at is not None else utcnow())
        ev.hash = _chain_next(session, ev)


@event.listens_for(Session, "do_orm_execute")
def _chain_bulk_inserts(state: Any) -> None:
    # Core ``insert(LedgerEvent.__table__)`` with a list of rows (the publisher's and the intake's bulk paths): each
    # row gets its time (if missing) and its link, in list order, before the statement runs
    stmt = state.statement
    if not state.is_insert or getattr(stmt, "table", None) is not LedgerEvent.__table__:
        return
    params = state.parameters
    rows = params if isinstance(params, list) else [params] if isinstance(params, dict) else []
    for row in rows:
        if row.get("hash") is None:
            row["at"] = _naive_utc(row.get("at") or utcnow())
            row.setdefault("model_id", None)
            row.setdefault("version_id", None)
            row.setdefault("request_id", None)
            row["hash"] = _chain_next(state.session, row)


__all__ = [
    "CONSOLE_INDEXES", "Base", "CertificateRow", "Dataset", "DeletionRequest", "Erasure", "LedgerEvent",
    "LedgerViolation", "Meta", "Model", "ModelVersion", "PrivacyBudget", "PrivacyStream", "Record", "Store", "Token",
    "add_event", "as_utc", "iso", "ledger_head", "sqlite_url", "utcnow",
]
