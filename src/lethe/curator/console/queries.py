"""Every database read (and the two ledger appends) of the console, in one module so that it can be swapped for
public :class:`~lethe.curator.service.Curator` methods once those exist. Page cursors are the curator's own
(:func:`lethe.curator.views.encode_cursor`, :func:`~lethe.curator.views.keyset`): one encoding for the API and the
console.

Read-only on the curator's tables, except :func:`append_event` (the ledger is append-only by design: checkpoints
of its hash chain and held-out accuracies are appended, never changed).

Nothing returned here identifies a deleted record: requests carry their id, the requester's name, dataset, status
and times — never the key (the store keeps only its HMAC digest, which is never read here) nor a row position.
Certificates are reduced to a fixed list of public fields by :mod:`lethe.curator.console.certificate`.

Keyset pagination: requests are listed newest first by ``(submitted_at, id)``; a cursor is the last row's pair.
The store's schema (version 4, :data:`lethe.curator.store.CONSOLE_INDEXES`) has the composite indexes that make
every filter of the Requests page an index range scan (measured by ``benchmarks/bench_console.py`` on 10⁶
requests).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.orm import Session

from lethe.curator.public import SHOWN_STATUS, shown_status
from lethe.curator.serving import served_to
from lethe.curator.store import (
    CONSOLE_INDEXES,
    CertificateRow,
    Dataset,
    DeletionRequest,
    LedgerEvent,
    Model,
    ModelVersion,
    Token,
    add_event,
    as_utc,
    iso,
)
from lethe.curator.views import decode_cursor, encode_cursor, keyset

log = logging.getLogger("lethe.curator.console")

STATUSES = ("pending", "done", "failed")

# (name, columns): the store's composite indexes for keyset pagination under each filter of the Requests page
# (created with the schema: migration 0004 for older stores).
INDEXES = CONSOLE_INDEXES


# -- requests ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestFilter:
    """Filters of the Requests page. ``requester`` is forced to the caller's name for requesters."""

    status: str | None = None
    dataset: str | None = None
    requester: str | None = None
    q: str | None = None  # a request id (or its first characters), or the client's request id


@dataclass(frozen=True)
class RequestPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None  # older rows
    prev_cursor: str | None  # newer rows


def datasets(s: Session) -> list[dict[str, Any]]:
    return [{"id": d.id, "name": d.name, "n_features": d.n_features}
            for d in s.scalars(select(Dataset).order_by(Dataset.name))]


def list_requests(s: Session, flt: RequestFilter, *, after: str | None = None, before: str | None = None,
                  limit: int = 50) -> RequestPage:
    """One page of requests, newest first. ``after``: rows older than that cursor; ``before``: newer rows."""
    conds: list[Any] = []
    if flt.status:
        conds.append(DeletionRequest.status.in_([flt.status, *(k for k, v in SHOWN_STATUS.items()
                                                               if v == flt.status)]))
    if flt.requester:
        conds.append(DeletionRequest.requester == flt.requester)
    if flt.dataset:
        ds_id = s.scalar(select(Dataset.id).where(Dataset.name == flt.dataset))
        conds.append(DeletionRequest.dataset_id == (ds_id if ds_id is not None else -1))
    if flt.q:
        q = flt.q.strip()
        # an id prefix is a range on the primary key; a client request id uses its index
        conds.append(or_(and_(DeletionRequest.id >= q, DeletionRequest.id < q + "\x7f"),
                         DeletionRequest.client_request_id == q))
    newer = before is not None and after is None
    cur = decode_cursor(before if newer else after) if (before or after) else None  # type: ignore[arg-type]
    stmt = select(DeletionRequest.id, DeletionRequest.client_request_id, DeletionRequest.requester,
                  DeletionRequest.dataset_id, DeletionRequest.status, DeletionRequest.attempts,
                  DeletionRequest.submitted_at, DeletionRequest.processed_at).where(*conds)
    if cur is not None:
        stmt = stmt.where(keyset(cur, newer=newer))
    if newer:
        stmt = stmt.order_by(DeletionRequest.submitted_at.asc(), DeletionRequest.id.asc())
    else:
        stmt = stmt.order_by(DeletionRequest.submitted_at.desc(), DeletionRequest.id.desc())
    rows = s.execute(stmt.limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    if newer:
        rows = list(reversed(rows))
    names = dict(s.execute(select(Dataset.id, Dataset.name)).all())
    versions = _versions_of(s, [r.id for r in rows])
    out = [{"id": r.id, "request_id": r.client_request_id, "requester": r.requester,
            "dataset": names.get(r.dataset_id), "status": shown_status(r.status), "attempts": r.attempts,
            "submitted_at": iso(r.submitted_at), "processed_at": iso(r.processed_at),
            "versions": versions.get(r.id, [])} for r in rows]
    if not rows:
        return RequestPage(out, None, None)
    first, last = rows[0], rows[-1]
    older_exists = more if not newer else True
    newer_exists = (cur is not None) if not newer else more
    return RequestPage(out, encode_cursor(last.submitted_at, last.id) if older_exists else None,
                       encode_cursor(first.submitted_at, first.id) if newer_exists else None)


def _versions_of(s: Session, request_ids: list[str]) -> dict[str, list[str]]:
    """'model v<number>' of the versions each request produced."""
    if not request_ids:
        return {}
    rows = s.execute(select(CertificateRow.request_id, Model.name, ModelVersion.number)
                     .join(Model, Model.id == CertificateRow.model_id)
                     .join(ModelVersion, ModelVersion.id == CertificateRow.new_version_id)
                     .where(CertificateRow.request_id.in_(request_ids))
                     .order_by(Model.name)).all()
    out: dict[str, list[str]] = {}
    for rid, model, number in rows:
        out.setdefault(str(rid), []).append(f"{model} v{number}")
    return out


def get_request(s: Session, request_id: str) -> dict[str, Any] | None:
    """A request (without its key digest or record id), or None."""
    r = s.get(DeletionRequest, request_id)
    if r is None:
        return None
    ds = s.get(Dataset, r.dataset_id)
    return {"id": r.id, "request_id": r.client_request_id, "requester": r.requester,
            "dataset": ds.name if ds else None, "status": shown_status(r.status), "attempts": r.attempts,
            "error": r.error,
            "submitted_at": iso(r.submitted_at), "processed_at": iso(r.processed_at)}


def certificates_of(s: Session, request_id: str) -> list[dict[str, Any]]:
    """The request's certificate rows with the model's name and the two version numbers (raw certificate dict)."""
    rows = s.scalars(select(CertificateRow).where(CertificateRow.request_id == request_id)
                     .order_by(CertificateRow.created_at)).all()
    out = []
    for row in rows:
        model = s.get(Model, row.model_id) if row.model_id is not None else None
        old = s.get(ModelVersion, row.old_version_id) if row.old_version_id is not None else None
        new = s.get(ModelVersion, row.new_version_id) if row.new_version_id is not None else None
        out.append({"id": row.id, "kind": row.kind, "model": model.name if model else None,
                    "mechanism": row.mechanism, "old_version": old.number if old else None,
                    "new_version": new.number if new else None, "issued_at": iso(row.created_at),
                    "submitted_at": iso(row.submitted_at), "certificate": dict(row.certificate or {})})
    return out


def status_counts(s: Session, requester: str | None = None) -> dict[str, int | None]:
    """Requests by status. Over every requester only pending and failed are counted (index ranges over few rows);
    ``done`` is None then: counting 10⁶ done requests on each page view would cost a scan."""
    if requester is not None:
        stmt = (select(DeletionRequest.status, func.count()).where(DeletionRequest.requester == requester)
                .group_by(DeletionRequest.status))
        counts = dict(s.execute(stmt).all())
        for stored, shown in SHOWN_STATUS.items():  # a follower ("waiting") is pending to everyone
            counts[shown] = counts.get(shown, 0) + counts.pop(stored, 0)
        return {k: int(counts.get(k, 0)) for k in STATUSES}
    out: dict[str, int | None] = {"done": None}
    for st in ("pending", "failed"):
        kept = [st, *(k for k, v in SHOWN_STATUS.items() if v == st)]
        out[st] = int(s.scalar(select(func.count()).select_from(DeletionRequest)
                               .where(DeletionRequest.status.in_(kept))) or 0)
    return {k: out[k] for k in STATUSES}


def token_active(s: Session, name: str) -> bool:
    """True while the token named ``name`` exists and is not revoked (sessions end when it is revoked)."""
    tok = s.scalar(select(Token).where(Token.name == name))
    return tok is not None and not tok.revoked


# -- models --------------------------------------------------------------------------------------------------------
def models(s: Session) -> list[dict[str, Any]]:
    out = []
    for m in s.scalars(select(Model).order_by(Model.name)):
        ds = s.get(Dataset, m.dataset_id)
        v = s.get(ModelVersion, m.current_version_id) if m.current_version_id is not None else None
        out.append({"id": m.id, "name": m.name, "dataset": ds.name if ds else None, "dataset_id": m.dataset_id,
                    "mechanism": m.mechanism, "params": dict(m.params or {}),
                    "version": v.number if v else None, "version_id": v.id if v else None,
                    "n_records": v.n_records if v else None, "summary": dict(v.summary or {}) if v else {},
                    "published_at": iso(v.created_at) if v else None,
                    "served": served_to(dict(v.summary or {}) if v else {}, bool(m.serve_unreleased))})
    return out


def model_versions(s: Session, model_id: int, limit: int = 500) -> list[dict[str, Any]]:
    """The latest ``limit`` versions of a model, oldest first, with the number of records each batch removed and
    whether the batch retrained (from the version's certificate)."""
    vs = list(reversed(s.scalars(select(ModelVersion).where(ModelVersion.model_id == model_id)
                                 .order_by(ModelVersion.number.desc()).limit(limit)).all()))
    # the batch that made version v is recorded as a "remove" or "retrain" event on its parent version
    parents = [v.parent_id for v in vs if v.parent_id is not None]
    batch: dict[int, tuple[int, bool]] = {}
    if parents:
        for vid, kind, payload in s.execute(select(LedgerEvent.version_id, LedgerEvent.kind, LedgerEvent.payload)
                                            .where(LedgerEvent.kind.in_(("remove", "retrain")),
                                                   LedgerEvent.model_id == model_id,
                                                   LedgerEvent.version_id.in_(parents))):
            batch[vid] = (int((payload or {}).get("n_removed") or 0), kind == "retrain")
    acc = holdout_accuracies(s, model_id)
    out = []
    for v in vs:
        summ = dict(v.summary or {})
        out.append({"id": v.id, "number": v.number, "status": v.status, "n_records": v.n_records,
                    "created_at": iso(v.created_at), "summary": summ,
                    "removed": batch.get(v.parent_id, (0, False))[0] if v.parent_id is not None else 0,
                    "retrained": batch.get(v.parent_id, (0, False))[1] if v.parent_id is not None else False,
                    "accuracy": acc.get(v.number)})
    return out


def version_artifact(s: Session, model_name: str) -> tuple[str, str, int, str, dict[str, Any]] | None:
    """(artifact path, sha256, version number, mechanism, params) of the model's published version."""
    m = s.scalar(select(Model).where(Model.name == model_name))
    if m is None or m.current_version_id is None:
        return None
    v = s.get(ModelVersion, m.current_version_id)
    if v is None:
        return None
    return v.artifact, v.sha256, v.number, m.mechanism, dict(m.params or {})


def published_versions(s: Session) -> list[dict[str, Any]]:
    return [{"model_id": v.model_id, "id": v.id, "number": v.number, "artifact": v.artifact, "sha256": v.sha256}
            for v in s.scalars(select(ModelVersion).where(ModelVersion.status == "published"))]


def superseded_versions(s: Session) -> list[dict[str, Any]]:
    return [{"model_id": v.model_id, "number": v.number, "superseded_at": iso(v.superseded_at)}
            for v in s.scalars(select(ModelVersion).where(ModelVersion.status == "superseded"))]


# -- held-out evaluation (ledger events appended by the console) ---------------------------------------------------
HOLDOUT_SET = "holdout_assigned"
HOLDOUT_ACCURACY = "holdout_accuracy"


def holdout_assignments(s: Session) -> dict[int, str]:
    """model id -> the dataset named as its held-out set (the latest assignment wins)."""
    out: dict[int, str] = {}
    for ev in s.scalars(select(LedgerEvent).where(LedgerEvent.kind == HOLDOUT_SET).order_by(LedgerEvent.id)):
        if ev.model_id is not None:
            out[ev.model_id] = str(ev.payload.get("dataset"))
    return out


def holdout_accuracies(s: Session, model_id: int) -> dict[int, float]:
    """version number -> held-out accuracy recorded for it."""
    out: dict[int, float] = {}
    for payload in s.scalars(select(LedgerEvent.payload).where(LedgerEvent.kind == HOLDOUT_ACCURACY,
                                                               LedgerEvent.model_id == model_id)):
        out[int(payload["version"])] = float(payload["accuracy"])
    return out


def append_event(store: Any, kind: str, payload: dict[str, Any], *, model_id: int | None = None,
                 version_id: int | None = None) -> int:
    """Append one ledger event (the only write of the console); returns its id."""
    with store.write() as s, s.begin():
        ev = add_event(s, kind, payload, model_id=model_id, version_id=version_id)
        s.flush()
        return int(ev.id)


# -- ledger ----------------------------------------------------------------------------------------------------------
CHECKPOINT = "ledger_checkpoint"


def ledger_page(s: Session, *, before: int | None = None, kind: str | None = None,
                limit: int = 50) -> tuple[list[dict[str, Any]], int | None]:
    """Ledger events newest first; returns (events, cursor of the next older page or None)."""
    stmt = select(LedgerEvent)
    if before is not None:
        stmt = stmt.where(LedgerEvent.id < before)
    if kind:
        stmt = stmt.where(LedgerEvent.kind == kind)
    rows = s.scalars(stmt.order_by(LedgerEvent.id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    events = [{"id": e.id, "at": iso(e.at), "kind": e.kind, "model_id": e.model_id, "version_id": e.version_id,
               "request_id": e.request_id, "payload": e.payload} for e in rows]
    return events, (rows[-1].id if more and rows else None)


def ledger_kinds(s: Session) -> list[str]:
    return list(s.scalars(select(LedgerEvent.kind).distinct().order_by(LedgerEvent.kind)))


def ledger_bounds(s: Session) -> tuple[int, int | None, int | None]:
    """(count, min id, max id) of the ledger."""
    n, lo, hi = s.execute(select(func.count(), func.min(LedgerEvent.id), func.max(LedgerEvent.id))).one()
    return int(n or 0), lo, hi


def event_digest_input(e: LedgerEvent | Any) -> bytes:
    """The canonical bytes of one event in the hash chain (id, time, kind, references, payload)."""
    at = as_utc(e.at)
    return json.dumps([e.id, at.isoformat() if at else None, e.kind, e.model_id, e.version_id, e.request_id,
                       e.payload], sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


GENESIS = hashlib.sha256(b"lethe ledger").hexdigest()


def iter_chain(s: Session, batch: int = 5000) -> Iterator[tuple[LedgerEvent, str]]:
    """Every event in id order with the chain head after it: h_i = SHA-256(h_(i-1) ‖ canonical(event_i))."""
    head = GENESIS
    last = 0
    while True:
        rows = s.scalars(select(LedgerEvent).where(LedgerEvent.id > last).order_by(LedgerEvent.id)
                         .limit(batch)).all()
        if not rows:
            return
        for e in rows:
            head = hashlib.sha256(head.encode() + event_digest_input(e)).hexdigest()
            yield e, head
        last = rows[-1].id
        s.expunge_all()


def sqlite_triggers(s: Session) -> set[str]:
    """Names of the ledger's append-only triggers (SQLite only; empty elsewhere)."""
    if s.get_bind().dialect.name != "sqlite":
        return set()
    return set(s.scalars(text("SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name='ledger'")))


__all__ = [
    "CHECKPOINT", "GENESIS", "HOLDOUT_ACCURACY", "HOLDOUT_SET", "INDEXES", "STATUSES", "RequestFilter",
    "RequestPage", "append_event", "certificates_of", "datasets", "decode_cursor", "encode_cursor",
    "get_request", "holdout_accuracies", "holdout_assignments", "iter_chain", "ledger_bounds", "ledger_kinds",
    "ledger_page", "list_requests", "model_versions", "models", "published_versions", "sqlite_triggers",
    "status_counts", "superseded_versions", "token_active", "version_artifact",
]
