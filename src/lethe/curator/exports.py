"""Exports for an audit: requests (with outcome, times and deadline status), certificates and the ledger, as CSV or
JSON, filtered by a date range and a status — the console's export links and ``lethe export``.

A requester's export (``requester=`` its name) holds its own requests and their certificates only: the store keeps
no record key (only keyed digests, never exported), so no export names a key; nor does one name another requester's
request. The ledger export is for operators.

Rows are read in pages (keyset on the time and the id): an export of 10⁶ requests streams, it is not built in memory.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select

from lethe.curator.chain import canonical_time
from lethe.curator.deadlines import OPEN_STATUSES, AnswerPeriod, deadline_status
from lethe.curator.public import public_certificate, shown_status
from lethe.curator.store import CertificateRow, Dataset, DeletionRequest, LedgerEvent, Model, ModelVersion, as_utc, iso

KINDS = ("requests", "certificates", "ledger")
FORMATS = ("csv", "json")
#: status filters: a request's status, or its outcome
REQUEST_STATUSES = ("pending", "done", "failed", "removed", "no record held", "refused")
OUTCOMES = {"removed", "no record held", "refused"}

REQUEST_COLUMNS = ("id", "reference", "requester", "dataset", "status", "outcome", "submitted_at", "processed_at",
                   "due_at", "deadline_status", "certificates")
CERTIFICATE_COLUMNS = ("id", "request_id", "kind", "model", "old_version", "new_version", "mechanism", "issued_at",
                       "guarantee", "epsilon", "delta", "observer", "retrained", "certificate")
LEDGER_COLUMNS = ("id", "at", "kind", "model", "version", "request_id", "payload", "hash")
PAGE = 2000


@dataclass(frozen=True)
class ExportFilter:
    """``since`` ≤ time < ``until`` (UTC; either may be None), a status (requests: pending, done, failed, or an
    outcome: removed, no record held, refused; certificates: their kind; ledger: the event kind), and for a
    requester, its name."""

    since: _dt.datetime | None = None
    until: _dt.datetime | None = None
    status: str | None = None
    requester: str | None = None


def parse_time(value: str | None, name: str) -> _dt.datetime | None:
    """``YYYY-MM-DD`` or an ISO 8601 time (naive: UTC) → aware UTC; None or empty → None."""
    if value is None or not str(value).strip():
        return None
    try:
        t = _dt.datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be a date (YYYY-MM-DD) or an ISO 8601 time. Found {value!r}.") from None
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t.astimezone(_dt.UTC)


def _naive(t: _dt.datetime | None) -> _dt.datetime | None:
    return None if t is None else t.astimezone(_dt.UTC).replace(tzinfo=None)


def outcome(status: str, n_certs: int) -> str | None:
    """removed (certificates or a receipt), no record held (done with none), refused (failed), None while open."""
    if status == "done":
        return "removed" if n_certs else "no record held"
    if status == "failed":
        return "refused"
    return None


def _pages(s: Any, stmt: Any, time_col: Any, id_col: Any) -> Iterator[Any]:
    last: tuple[Any, Any] | None = None
    while True:
        q = stmt
        if last is not None:
            q = q.where(or_(time_col > last[0], and_(time_col == last[0], id_col > last[1])))
        rows = s.execute(q.order_by(time_col, id_col).limit(PAGE)).all()
        if not rows:
            return
        yield from rows
        last = (getattr(rows[-1], time_col.key), getattr(rows[-1], id_col.key))


def _range(stmt: Any, col: Any, flt: ExportFilter) -> Any:
    if flt.since is not None:
        stmt = stmt.where(col >= _naive(flt.since))
    if flt.until is not None:
        stmt = stmt.where(col < _naive(flt.until))
    return stmt


def requests(s: Any, flt: ExportFilter, *, period: AnswerPeriod | None = None,
             now: _dt.datetime | None = None) -> Iterator[dict[str, Any]]:
    """Requests submitted in the range, oldest first, with outcome and deadline status."""
    period = period or AnswerPeriod.from_env()
    R = DeletionRequest
    stmt = _range(select(R.id, R.client_request_id, R.requester, R.dataset_id, R.status, R.submitted_at,
                         R.processed_at), R.submitted_at, flt)
    st = flt.status
    if st is not None:
        if st not in REQUEST_STATUSES:
            raise ValueError(f"status must be one of {REQUEST_STATUSES}. Found {st!r}.")
        stmt = stmt.where(R.status.in_({"pending": OPEN_STATUSES, "done": ("done",), "failed": ("failed",),
                                        "removed": ("done",), "no record held": ("done",),
                                        "refused": ("failed",)}[st]))
    if flt.requester is not None:
        stmt = stmt.where(R.requester == flt.requester)
    names = dict(s.execute(select(Dataset.id, Dataset.name)).all())
    buf: list[Any] = []

    def flush() -> Iterator[dict[str, Any]]:
        ids = [r.id for r in buf]
        n = dict(s.execute(select(CertificateRow.request_id, func.count()).where(CertificateRow.request_id.in_(ids))
                           .group_by(CertificateRow.request_id)).all()) if ids else {}
        for r in buf:
            out = outcome(r.status, int(n.get(r.id, 0)))
            if st in OUTCOMES and out != st:
                continue
            sub = as_utc(r.submitted_at)
            assert sub is not None
            yield {"id": r.id, "reference": r.client_request_id, "requester": r.requester,
                   "dataset": names.get(r.dataset_id), "status": shown_status(r.status), "outcome": out,
                   "submitted_at": iso(r.submitted_at), "processed_at": iso(r.processed_at),
                   "due_at": period.due(sub).isoformat(),
                   "deadline_status": deadline_status(r.status, sub, as_utc(r.processed_at), period, now),
                   "certificates": int(n.get(r.id, 0))}
        buf.clear()

    for row in _pages(s, stmt, R.submitted_at, R.id):
        buf.append(row)
        if len(buf) >= 500:
            yield from flush()
    yield from flush()


def certificates(s: Any, flt: ExportFilter) -> Iterator[dict[str, Any]]:
    """Certificates issued in the range (``status``: their kind). A requester's: those of its own requests, with the
    requester's fields of each certificate only."""
    C = CertificateRow
    stmt = _range(select(C.id, C.request_id, C.kind, C.model_id, C.old_version_id, C.new_version_id, C.mechanism,
                         C.created_at, C.certificate), C.created_at, flt)
    if flt.status is not None:
        stmt = stmt.where(C.kind == flt.status)
    if flt.requester is not None:
        stmt = stmt.join(DeletionRequest, DeletionRequest.id == C.request_id).where(
            DeletionRequest.requester == flt.requester)
    models = dict(s.execute(select(Model.id, Model.name)).all())
    numbers: dict[int, int] = {}

    def number(vid: int | None) -> int | None:
        if vid is None:
            return None
        if vid not in numbers:
            numbers[vid] = s.scalar(select(ModelVersion.number).where(ModelVersion.id == vid))
        return numbers[vid]

    for r in _pages(s, stmt, C.created_at, C.id):
        cert = public_certificate(dict(r.certificate or {}), requester=flt.requester is not None)
        yield {"id": r.id, "request_id": r.request_id, "kind": r.kind, "model": models.get(r.model_id),
               "old_version": number(r.old_version_id), "new_version": number(r.new_version_id),
               "mechanism": r.mechanism, "issued_at": iso(r.created_at), "guarantee": cert.get("guarantee"),
               "epsilon": cert.get("epsilon"), "delta": cert.get("delta"), "observer": cert.get("observer"),
               "retrained": cert.get("retrained"), "certificate": cert}


def ledger(s: Any, flt: ExportFilter) -> Iterator[dict[str, Any]]:
    """Ledger events in the range (``status``: the event kind), in id order, with model names and version numbers
    and each event's chain hash. A whole export (no filter) can be checked offline: ``lethe ledger verify --file``."""
    L = LedgerEvent
    stmt = _range(select(L.id, L.at, L.kind, L.model_id, L.version_id, L.request_id, L.payload, L.hash), L.at, flt)
    if flt.status is not None:
        stmt = stmt.where(L.kind == flt.status)
    models = dict(s.execute(select(Model.id, Model.name)).all())
    last = 0
    while True:
        rows = s.execute(stmt.where(L.id > last).order_by(L.id).limit(PAGE)).all()
        if not rows:
            return
        vids = {r.version_id for r in rows if r.version_id is not None}
        nums = dict(s.execute(select(ModelVersion.id, ModelVersion.number).where(ModelVersion.id.in_(vids))).all()) \
            if vids else {}
        for r in rows:
            yield {"id": r.id, "at": canonical_time(r.at), "kind": r.kind, "model": models.get(r.model_id),
                   "model_id": r.model_id, "version": nums.get(r.version_id), "version_id": r.version_id,
                   "request_id": r.request_id, "payload": r.payload, "hash": r.hash}
        last = rows[-1].id


def rows(s: Any, kind: str, flt: ExportFilter) -> Iterator[dict[str, Any]]:
    """The rows of one export kind (``requests``, ``certificates``, ``ledger``)."""
    if kind == "requests":
        return requests(s, flt)
    if kind == "certificates":
        return certificates(s, flt)
    if kind == "ledger":
        if flt.requester is not None:
            raise PermissionError("The ledger export is for operators (admin scope).")
        return ledger(s, flt)
    raise ValueError(f"kind must be one of {KINDS}. Found {kind!r}.")


def columns(kind: str) -> tuple[str, ...]:
    return {"requests": REQUEST_COLUMNS, "certificates": CERTIFICATE_COLUMNS, "ledger": LEDGER_COLUMNS}[kind]


def _cell(v: Any) -> Any:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    if v is None:
        return ""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v  # no formula injection into a spreadsheet
    return v


def render(kind: str, it: Iterator[dict[str, Any]], fmt: str) -> Iterator[str]:
    """The export as text chunks: CSV (a header, one row per item; lists and dicts as compact JSON) or JSON (one
    array; each item a line)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}. Found {fmt!r}.")
    if fmt == "json":
        yield "[\n"
        first = True
        for row in it:
            yield ("" if first else ",\n") + json.dumps(row, sort_keys=True, allow_nan=True, default=str)
            first = False
        yield "\n]\n"
        return
    cols = columns(kind)
    if kind == "ledger":
        cols = (*cols[:4], "model_id", "version", "version_id", *cols[5:])
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(cols)
    for row in it:
        w.writerow([_cell(row.get(c)) for c in cols])
        if out.tell() > 1 << 16:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


__all__ = ["CERTIFICATE_COLUMNS", "FORMATS", "KINDS", "LEDGER_COLUMNS", "REQUEST_COLUMNS", "REQUEST_STATUSES",
           "ExportFilter", "certificates", "columns", "ledger", "outcome", "parse_time", "render", "requests", "rows"]
