"""Typed read views of the curator, shared by the HTTP API, the CLI and the console: requests (one keyset cursor
encoding, :func:`encode_cursor`), certificates, model versions, status, metrics and the ledger.

Nothing shown identifies a deleted record: a request never shows its key, nor anything of the other requests of its
batch; certificates are reduced to their allow-listed fields (:mod:`lethe.curator.public`).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, tuple_

from lethe.curator import lifetime
from lethe.curator import store as db
from lethe.curator.datasets import DatasetCatalog
from lethe.curator.errors import InvalidInputError, NotFoundError
from lethe.curator.faults import service_faults
from lethe.curator.public import (
    FORBIDDEN_PAYLOAD_KEYS,
    SHOWN_STATUS,
    check_payload,
    public_certificate,
    public_error,
    request_outcome,
    requester_error,
    shown_status,
)
from lethe.curator.retention import Retention
from lethe.curator.serving import Serving
from lethe.curator.settings import CLI_PRINCIPAL, DROPPED_PREFIX, REQUEST_STATUSES, Principal, Settings
from lethe.curator.store import as_utc, iso
from lethe.curator.validation import check_name, lookup_id, seconds_between
from lethe.curator.wakeup import read_state


# -- the one cursor encoding of request pages -------------------------------------------------------------------------
def encode_cursor(at: Any, rid: str) -> str:
    """An opaque page cursor: the (submitted_at, id) of a request (the last one shown, or the first one for the
    page of newer requests)."""
    u = as_utc(at)
    raw = json.dumps([u.isoformat() if u is not None else None, rid]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: Any) -> tuple[Any, str]:
    """Inverse of :func:`encode_cursor`: (submitted_at as stored — naive UTC —, id). A malformed cursor is an
    :class:`InvalidInputError` (a ``ValueError``) naming the parameter."""
    try:
        if not isinstance(cursor, str) or len(cursor) > 200:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, rid = json.loads(raw)
        at = dt.datetime.fromisoformat(at_text)
        if not isinstance(rid, str) or not rid or len(rid) > 64:
            raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise InvalidInputError("cursor must be the next_cursor of a previous page.") from None
    # stored naive UTC on SQLite, aware on PostgreSQL: compare like with like
    return (at.astimezone(dt.UTC).replace(tzinfo=None) if at.tzinfo is not None else at), rid


def keyset(cursor: tuple[Any, str], *, newer: bool = False) -> Any:
    """The condition "after this cursor" of a page of requests ordered newest first by (submitted_at, id): the older
    requests, or with ``newer`` the newer ones. A row-value comparison: one range on the (…, submitted_at, id)
    indexes (SQLite ≥ 3.15, PostgreSQL)."""
    at, rid = cursor
    key = tuple_(db.DeletionRequest.submitted_at, db.DeletionRequest.id)
    return key > tuple_(at, rid) if newer else key < tuple_(at, rid)


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±∞: e.g. an unbounded budget) replaced by None, in dicts, lists
    and tuples: what JSON can carry."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def public_payload(payload: Any) -> Any:
    """A stored ledger payload as shown: events written by older versions may hold fields the rule now refuses."""
    try:
        return check_payload(dict(payload or {}))
    except ValueError:
        return {k: v for k, v in dict(payload or {}).items() if k not in FORBIDDEN_PAYLOAD_KEYS}


@dataclass(eq=False)
class ReadViews:
    """The curator's read-only answers.

    Parameters
    ----------
    store, settings : the store and the processing settings (shown by :meth:`status`).
    data_dir : the data directory (a worker process reports its state there).
    serving : artifact verification (faults shown by :meth:`status` and :meth:`metrics`).
    retention : whether a purge is pending.
    warm_count : the number of models whose solver state this process keeps.
    """

    store: db.Store
    settings: Settings
    data_dir: Path
    serving: Serving
    retention: Retention
    warm_count: Callable[[], int]

    # -- requests -----------------------------------------------------------------------------------------------------
    @staticmethod
    def request_view(s: Any, req: Any, principal: Principal = CLI_PRINCIPAL, *, new: bool = False) -> dict[str, Any]:
        """A request as its requester or an admin sees it: never the key, nor anything of the other requests of its
        batch; errors reduced to what may be shown (:mod:`lethe.curator.public`). ``new``: created in this
        transaction under a fresh id, so no certificate can name it yet (one query fewer per submission)."""
        ds = s.get(db.Dataset, req.dataset_id)
        certs = [] if new else s.scalars(select(db.CertificateRow.id).where(db.CertificateRow.request_id == req.id)
                                         .order_by(db.CertificateRow.created_at, db.CertificateRow.id)).all()
        error = public_error(req.error) if principal.is_admin else requester_error(req.error)
        ds_name = ds.name if ds is not None and not ds.name.startswith(DROPPED_PREFIX) else None
        return {"id": req.id, "request_id": req.client_request_id, "dataset": ds_name,
                "requester": req.requester, "status": shown_status(req.status), "attempts": req.attempts,
                "error": error, "outcome": request_outcome(req.status, len(certs)),
                "submitted_at": iso(req.submitted_at), "processed_at": iso(req.processed_at),
                "seconds_to_publication": seconds_between(req.submitted_at, req.processed_at),
                "certificates": list(certs)}

    def request_status(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """A request's state; a requester sees only its own requests (others are reported as unknown)."""
        rid = lookup_id(request_id)
        with self.store.read() as s:
            req = s.get(db.DeletionRequest, rid) if rid is not None else None
            if req is None or not (principal.is_admin or req.requester == principal.name):
                raise NotFoundError("Unknown request id.")
            return self.request_view(s, req, principal)

    def list_requests(self, principal: Principal = CLI_PRINCIPAL, *, status: str | None = None,
                      dataset: str | None = None, request_id: str | None = None, requester: str | None = None,
                      limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """Deletion requests, newest first, one page at a time.

        A requester sees only its own requests (``requester`` is then ignored unless it names the caller); an admin
        sees all and may filter by ``requester``. Filters: ``status`` (pending, done, failed), ``dataset`` (name),
        ``request_id`` (the client-chosen id). ``limit``: 1 to 500. ``cursor``: the ``next_cursor`` of the previous
        page (opaque). Returns ``{"items": [request views], "next_cursor": str | None}``.
        """
        if status is not None and status not in REQUEST_STATUSES:
            raise InvalidInputError(f"status must be one of {REQUEST_STATUSES}. Found {status!r}.")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
            raise InvalidInputError(f"limit must be an integer from 1 to 500. Found {limit!r}.")
        if request_id is not None:
            check_name("request_id", request_id)
        after = decode_cursor(cursor) if cursor is not None else None
        with self.store.read() as s:
            q = select(db.DeletionRequest)
            if not principal.is_admin:
                q = q.where(db.DeletionRequest.requester == principal.name)
            elif requester is not None:
                check_name("requester", requester)
                q = q.where(db.DeletionRequest.requester == requester)
            if status is not None:
                q = q.where(db.DeletionRequest.status.in_(
                    [status, *(k for k, v in SHOWN_STATUS.items() if v == status)]))
            if dataset is not None:
                check_name("dataset", dataset)
                q = q.where(db.DeletionRequest.dataset_id == DatasetCatalog.find(s, dataset).id)
            if request_id is not None:
                q = q.where(db.DeletionRequest.client_request_id == request_id)
            if after is not None:
                q = q.where(keyset(after))
            rows = s.scalars(q.order_by(db.DeletionRequest.submitted_at.desc(), db.DeletionRequest.id.desc())
                             .limit(limit + 1)).all()
            items = [self.request_view(s, r, principal) for r in rows[:limit]]
            nxt = encode_cursor(rows[limit - 1].submitted_at, rows[limit - 1].id) if len(rows) > limit else None
        return {"items": items, "next_cursor": nxt}

    def certificate(self, certificate_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """One certificate by id (a requester: only those of its own requests)."""
        cid = lookup_id(certificate_id)
        with self.store.read() as s:
            row = s.get(db.CertificateRow, cid) if cid is not None else None
            if row is None:
                raise NotFoundError("Unknown certificate id.")
            if not principal.is_admin:
                req = s.get(db.DeletionRequest, row.request_id) if row.request_id else None
                if req is None or req.requester != principal.name:
                    raise NotFoundError("Unknown certificate id.")
            return self.certificate_view(s, row, principal)

    def request_certificates(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> list[dict[str, Any]]:
        """The certificates of one request (one per model of its dataset, or a deletion receipt)."""
        view = self.request_status(request_id, principal=principal)
        with self.store.read() as s:
            rows = s.scalars(select(db.CertificateRow).where(db.CertificateRow.request_id == view["id"])
                             .order_by(db.CertificateRow.created_at, db.CertificateRow.id)).all()
            return [self.certificate_view(s, r, principal) for r in rows]

    @staticmethod
    def certificate_view(s: Any, row: db.CertificateRow, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """A certificate as shown: the allow-listed fields (:func:`lethe.curator.public.public_certificate`); a
        requester gets neither the batch id nor the batch's data-dependent numbers."""
        model = s.get(db.Model, row.model_id) if row.model_id is not None else None
        old = s.get(db.ModelVersion, row.old_version_id) if row.old_version_id is not None else None
        new = s.get(db.ModelVersion, row.new_version_id) if row.new_version_id is not None else None
        requester = not principal.is_admin
        # a requester is told no version number or id: the service's counters count every removal step and every
        # publication, other people's included (issue 36); operators see them
        return {"id": row.id, "kind": row.kind, "request_id": row.request_id,
                "batch_id": None if requester else row.batch_id,
                "model": model.name if model else None, "mechanism": row.mechanism,
                "old_version": old.number if old and not requester else None,
                "new_version": new.number if new and not requester else None,
                "old_version_id": None if requester else row.old_version_id,
                "new_version_id": None if requester else row.new_version_id,
                "submitted_at": iso(row.submitted_at), "issued_at": iso(row.created_at),
                "certificate": public_certificate(row.certificate, requester=requester),
                # what the request's own record was exposed to, per stream (issue 36; lethe.curator.exposure)
                "exposure": _request_exposure(s, row.request_id)}

    def model_versions(self, model: str) -> list[dict[str, Any]]:
        """A model's version history, oldest first (operators): number, status, records, timestamps, the public
        budget facts of the version and the certificate it was published with (training or the removal batch, with
        the number of requests the batch served)."""
        with self.store.read() as s:
            m = Serving.find_model(s, model)
            versions = s.scalars(select(db.ModelVersion).where(db.ModelVersion.model_id == m.id)
                                 .order_by(db.ModelVersion.number)).all()
            out = []
            for v in versions:
                cert = s.scalars(select(db.CertificateRow).where(db.CertificateRow.new_version_id == v.id)
                                 .order_by(db.CertificateRow.created_at, db.CertificateRow.id)).first()
                n_req = s.scalar(select(func.count()).select_from(db.CertificateRow)
                                 .where(db.CertificateRow.new_version_id == v.id,
                                        db.CertificateRow.request_id.is_not(None)))
                parent = s.get(db.ModelVersion, v.parent_id) if v.parent_id is not None else None
                out.append({"model": m.name, "version": v.number, "version_id": v.id, "status": v.status,
                            "parent_version": parent.number if parent else None, "n_records": v.n_records,
                            "published_at": iso(v.created_at), "superseded_at": iso(v.superseded_at),
                            "destroyed_at": iso(v.destroyed_at), "budget": dict(v.summary),
                            "kind": cert.kind if cert else None, "batch_id": cert.batch_id if cert else None,
                            "n_requests": int(n_req or 0),
                            "certificate": public_certificate(cert.certificate) if cert else None})
        return out

    # -- operators' views ---------------------------------------------------------------------------------------------
    def mechanisms_in_use(self) -> tuple[str, ...]:
        """The mechanisms of the store's models, sorted: what a server or a worker imports before it serves (a
        mechanism nobody uses — e.g. one that needs torch, ≈ 180 MB — is imported when a model of
        it is first used)."""
        with self.store.read() as s:
            return tuple(s.scalars(select(db.Model.mechanism).distinct().order_by(db.Model.mechanism)))

    def status(self) -> dict[str, Any]:
        """Datasets, models and request counts."""
        with self.store.read() as s:
            datasets = []
            privacy: dict[str, Any] = {}
            for ds in s.scalars(select(db.Dataset).where(db.Dataset.name.not_like(f"{DROPPED_PREFIX}%"))
                                .order_by(db.Dataset.id)):
                n = s.scalar(select(func.count()).select_from(db.Record).where(db.Record.dataset_id == ds.id))
                datasets.append({"name": ds.name, "n_records": int(n or 0), "n_features": ds.n_features})
                # the privacy ledger (issue 36): every release of every model on the dataset's records
                privacy[ds.name] = lifetime.summary_fields(s, ds.id)
            models = []
            for m in s.scalars(select(db.Model).order_by(db.Model.id)):
                v = s.get(db.ModelVersion, m.current_version_id)
                models.append({"name": m.name, "mechanism": m.mechanism, "version": v.number if v else None,
                               "n_records": v.n_records if v else None,
                               "budget_left": v.summary.get("budget_left") if v else None})
            counts = dict(s.execute(select(db.DeletionRequest.status, func.count())
                                    .group_by(db.DeletionRequest.status)).all())
            oldest = s.scalar(select(func.min(db.DeletionRequest.submitted_at))
                              .where(db.DeletionRequest.status.in_(("pending", "waiting"))))
        faults = service_faults(self.serving, self.store, self.retention)
        storage = self.retention.storage.probe()  # a write under the data directory, now (see lethe.curator.storage)
        if storage is not None:
            faults.append({"storage": str(self.data_dir), "error": storage["error"], "repair": storage["repair"]})
        worker = read_state(self.data_dir)  # a worker process's own report (lethe.curator.wakeup)
        warm = self.warm_count() or (int(worker.get("warm_models", 0)) if worker is not None else 0)
        return {"data_dir": str(self.data_dir), "database": self.safe_url(), "healthy": not faults,
                "faults": faults, "datasets": datasets, "models": models, "privacy": privacy,
                # a follower (stored "waiting") is pending to everyone who reads a count (lethe.curator.public)
                "requests": {"pending": int(counts.get("pending", 0)) + int(counts.get("waiting", 0)),
                             **{k: int(counts.get(k, 0)) for k in ("done", "failed")}},
                "oldest_pending": iso(oldest), "purge_pending": self.retention.purge_pending(), "warm_models": warm,
                "worker_process": None if worker is None else
                {k: worker.get(k) for k in ("pid", "started_at", "ready", "warm_models")},
                "settings": {"batch_size": self.settings.batch_size, "max_delay": self.settings.max_delay}}

    def metrics(self) -> dict[str, Any]:
        """Numbers for monitoring (``GET /metrics`` renders them in Prometheus' format): request counts by status,
        the delays from submission to publication of done requests, batch sizes, and per model the version, the
        budget used and left, the ε spent and the retrainings; artifact faults and whether a purge is pending.
        Counts, delays and budgets only — nothing about any record."""
        with self.store.read() as s:
            counts = dict(s.execute(select(db.DeletionRequest.status, func.count())
                                    .group_by(db.DeletionRequest.status)).all())
            times = s.execute(select(db.DeletionRequest.submitted_at, db.DeletionRequest.processed_at)
                              .where(db.DeletionRequest.status == "done")).all()
            batches = [e.payload.get("count") for e in
                       s.scalars(select(db.LedgerEvent).where(db.LedgerEvent.kind == "records_deleted"))]
            models = []
            for m in s.scalars(select(db.Model).order_by(db.Model.id)):
                v = s.get(db.ModelVersion, m.current_version_id)
                if v is not None:
                    models.append({"model": m.name, "version": v.number, **dict(v.summary),
                                   **(lifetime.summary_fields(s, m.dataset_id)
                                      if (v.summary or {}).get("observer") == "every published release" else {})})
        delays = []
        for sub, done in times:
            a, b = as_utc(sub), as_utc(done)
            if a is not None and b is not None:
                delays.append(max((b - a).total_seconds(), 0.0))
        for stored, shown in SHOWN_STATUS.items():
            counts[shown] = counts.get(shown, 0) + counts.pop(stored, 0)
        return {"requests": {k: int(counts.get(k, 0)) for k in REQUEST_STATUSES}, "publication_seconds": delays,
                "batch_sizes": [int(b) for b in batches if isinstance(b, int)], "models": models,
                "faults": len(service_faults(self.serving, self.store, self.retention)),
                "storage_fault": self.retention.storage.probe() is not None,
                "purge_pending": self.retention.purge_pending()}

    def safe_url(self) -> str:
        return self.store.write_engine.url.render_as_string(hide_password=True)

    def ledger(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent ledger events (newest last)."""
        with self.store.read() as s:
            rows = s.scalars(select(db.LedgerEvent).order_by(db.LedgerEvent.id.desc()).limit(limit)).all()
            return [{"id": e.id, "at": iso(e.at), "kind": e.kind, "model_id": e.model_id, "version_id": e.version_id,
                     "request_id": e.request_id, "payload": public_payload(e.payload)} for e in reversed(rows)]

    def pending_count(self) -> int:
        with self.store.read() as s:
            return int(s.scalar(select(func.count()).select_from(db.DeletionRequest)
                                .where(db.DeletionRequest.status.in_(("pending", "waiting")))) or 0)



__all__ = ["ReadViews", "decode_cursor", "encode_cursor", "json_safe", "keyset", "public_payload"]


def _request_exposure(s: Any, request_id: str | None) -> dict[str, Any] | None:
    """The exposure of the record a request deleted (:func:`lethe.curator.exposure.exposure_of_request`); None for a
    certificate of no request or a request that held no record."""
    from lethe.curator.exposure import exposure_of_request

    req = s.get(db.DeletionRequest, request_id) if request_id is not None else None
    return exposure_of_request(s, req) if req is not None else None
