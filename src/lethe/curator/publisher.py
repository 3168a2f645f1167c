"""The version publisher: the one place a model version is published, its parent superseded, and certificates
written (training, removal batches, deletion receipts).

Artifacts are saved before publication as files nobody refers to (:meth:`VersionPublisher.new_artifact` destroys
them again if the publication fails); a batch's new versions, certificates, ledger events, record deletions and
request states are then written in ONE transaction (:meth:`VersionPublisher.publish_batch`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from lethe.curator import lifetime
from lethe.curator.artifacts import Artifact, ArtifactStore
from lethe.curator.certdoc import issue_record
from lethe.curator.public import check_payload, public_certificate
from lethe.curator.store import (
    CertificateRow,
    DeletionRequest,
    LedgerEvent,
    Model,
    ModelVersion,
    Record,
    Store,
    add_event,
    utcnow,
)

# what a batch reads of its requests (rows, not ORM objects: a batch of hundreds costs no object loading)
REQUEST_COLUMNS = (DeletionRequest.id, DeletionRequest.record_id, DeletionRequest.status,
                   DeletionRequest.submitted_at)

#: the certificate of a raw deletion where no model was trained on the dataset
_NO_MODEL_RECEIPT = {"operation": "delete",
                     "guarantee": "raw record deleted; no model had been trained on this dataset",
                     "epsilon": 0.0, "delta": 0.0}
_DROPPED_RECEIPT = {"operation": "delete", "guarantee": "raw record deleted with its dataset; no model had been "
                    "trained on it", "epsilon": 0.0, "delta": 0.0}


@dataclass(frozen=True)
class NewVersion:
    """One model's new version computed by a batch, saved but not yet published.

    model_id, name, mechanism : the model.
    old : the published version it replaces (a snapshot read before the computation).
    certificate : the mechanism's certificate of the removal (or retraining).
    artifact, sha256 : the saved artifact's path (relative to the data directory) and checksum.
    summary : the version's public budget facts.
    """

    model_id: int
    name: str
    mechanism: str
    old: ModelVersion
    certificate: dict[str, Any]
    artifact: str
    sha256: str
    summary: dict[str, Any]


@dataclass(eq=False)
class VersionPublisher:
    """Publishes versions and writes certificates.

    Parameters
    ----------
    store, artifacts : the store and the artifact files.
    """

    store: Store
    artifacts: ArtifactStore
    #: the service's signing key (:func:`lethe.curator.certdoc.service_key`): each certificate a batch issues is
    #: signed then, in its request's ``request_done`` event (:func:`lethe.curator.certdoc.issue_record`); None: the
    #: documents are signed at download only
    signer: Callable[[], Any] | None = None

    @contextlib.contextmanager
    def new_artifact(self, artifact: Artifact, binding: dict[str, Any]) -> Iterator[tuple[str, str]]:
        """Save an artifact; destroy it again if the block that should publish it fails."""
        relpath, sha = self.artifacts.save(artifact, binding)
        try:
            yield relpath, sha
        except BaseException:
            self.artifacts.destroy(relpath)
            raise

    @staticmethod
    def publish_version(s: Any, model: Model, old: ModelVersion | None, *, artifact: str, sha256: str,
                        n_records: int, summary: dict[str, Any], now: Any,
                        announce: dict[str, Any] | None) -> ModelVersion:
        """Within the write transaction ``s``: publish a new version of ``model`` after ``old`` (None: its first),
        supersede ``old`` and make the new one current. ``announce``: the payload of a ``version_published`` ledger
        event (its number and parent are added), or None for none (a model's first version is recorded by its
        ``train`` event)."""
        v = ModelVersion(model_id=model.id, number=old.number + 1 if old is not None else 1,
                         parent_id=old.id if old is not None else None, status="published", artifact=artifact,
                         sha256=sha256, n_records=n_records, summary=summary, created_at=now)
        s.add(v)
        if old is not None:
            old.status = "superseded"
            old.superseded_at = now
        s.flush()
        model.current_version_id = v.id
        if announce is not None:
            add_event(s, "version_published",
                      {**announce, "number": v.number, "parent": old.id if old is not None else None},
                      model_id=model.id, version_id=v.id)
        return v

    @staticmethod
    def train_certificate(s: Any, model: Model, version: ModelVersion, old: ModelVersion | None,
                          certificate: dict[str, Any], now: Any) -> None:
        """Within ``s``: the certificate of a version trained from scratch (Guo et al. 2020, Alg. 2: training resets
        the residual bound)."""
        s.add(CertificateRow(id=str(uuid.uuid4()), kind="train", model_id=model.id,
                             old_version_id=old.id if old is not None else None, new_version_id=version.id,
                             mechanism=model.mechanism, certificate=certificate, created_at=now))

    @staticmethod
    def dropped_dataset_receipts(s: Any, requests: list[DeletionRequest], batch_id: str, now: Any) -> None:
        """Within ``s``: the pending requests of a dataset being dropped are done — each gets a raw-deletion receipt
        (no model was trained on the dataset) and its record reference is cleared."""
        for req in requests:
            s.add(CertificateRow(id=str(uuid.uuid4()), kind="deletion", request_id=req.id, batch_id=batch_id,
                                 certificate=dict(_DROPPED_RECEIPT), submitted_at=req.submitted_at, created_at=now))
            req.record_id = None
            req.status = "done"
            req.processed_at = now
            add_event(s, "request_done", {"batch_id": batch_id}, request_id=req.id)

    def publish_release(self, item: NewVersion, batch_id: str) -> tuple[int, int]:
        """Publish, in one transaction, a version that a mechanism released on its schedule without a new removal
        (a family with :attr:`~lethe.families.Capability.RELEASE_SCHEDULE` and a time cadence): the version, its
        certificate (kind ``release``: the version's
        own, like a training's; no request is attached) and a ``release`` ledger event with the version's public
        facts. Returns (version number, version id). Refuses (nothing written) if the model moved since
        ``item.old`` was read."""
        now = utcnow()
        with self.store.write() as s, s.begin():
            m = s.get(Model, item.model_id)
            old = s.get(ModelVersion, item.old.id)
            if m is None or old is None or m.current_version_id != old.id or old.status != "published":
                raise RuntimeError(f"release {batch_id}: model {item.name} changed")
            certificate = _count_release(s, m, item)
            add_event(s, "release", {"batch_id": batch_id, **item.summary}, model_id=item.model_id,
                      version_id=old.id)
            v = self.publish_version(s, m, old, artifact=item.artifact, sha256=item.sha256,
                                     n_records=old.n_records, summary=item.summary, now=now,
                                     announce={"batch_id": batch_id, "release": True})
            s.add(CertificateRow(id=str(uuid.uuid4()), kind="release", model_id=m.id, old_version_id=old.id,
                                 new_version_id=v.id, batch_id=batch_id, mechanism=item.mechanism,
                                 certificate=certificate, created_at=now))
            return v.number, v.id

    def publish_batch(self, batch_id: str, dataset_id: int, ds_name: str, request_ids: list[str],
                      new: list[NewVersion]) -> tuple[dict[str, int], dict[int, int]]:
        """Publish a batch in one transaction: every model's new version, one certificate per request and model
        (a deletion receipt per request if the dataset has no model), the records deleted, the requests done, the
        ledger events. Returns (model name → new version number, model id → new version id). Refuses (nothing
        written) if anything moved since the batch's snapshot."""
        now = utcnow()
        versions: dict[str, int] = {}
        new_ids: dict[int, int] = {}
        with self.store.write() as s, s.begin():
            # validate: nothing moved since the snapshot (the lock makes this a safety net)
            rows = {r.id: r for r in s.execute(select(*REQUEST_COLUMNS).where(DeletionRequest.id.in_(request_ids)))}
            reqs = [rows.get(rid) for rid in request_ids]
            if any(r is None or r.status != "pending" for r in reqs):
                raise RuntimeError(f"batch {batch_id}: a request is no longer pending")
            n_models = s.scalar(select(func.count()).select_from(Model).where(Model.dataset_id == dataset_id))
            if n_models != len(new):
                raise RuntimeError(f"batch {batch_id}: the models of the dataset changed")
            published: list[tuple[int, ModelVersion, ModelVersion, str, dict[str, Any]]] = []
            for item in new:
                m = s.get(Model, item.model_id)
                old = s.get(ModelVersion, item.old.id)
                if m is None or old is None or m.current_version_id != old.id or old.status != "published":
                    raise RuntimeError(f"batch {batch_id}: model {item.name} changed")
                cert = _count_release(s, m, item)
                # record first (ledger), then update state
                add_event(s, "retrain" if cert.get("retrained") else "remove",
                          {"batch_id": batch_id, "n_removed": len(request_ids), **item.summary,
                           "step_bound": cert.get("step_bound")}, model_id=item.model_id, version_id=old.id)
                v = self.publish_version(s, m, old, artifact=item.artifact, sha256=item.sha256,
                                         n_records=old.n_records - len(request_ids), summary=item.summary, now=now,
                                         announce={"batch_id": batch_id})
                # stored reduced to the allow-listed fields (no timings or solver diagnostics): the bulk insert
                # below does not run the ORM's validator on CertificateRow.certificate
                published.append((item.model_id, old, v, item.mechanism, public_certificate(cert)))
                versions[item.name] = v.number
                new_ids[item.model_id] = v.id
            # per request: its certificates, its record deleted, its state, a ledger event — as bulk statements
            # (one statement per table, not one ORM round trip per request)
            certs: list[dict[str, Any]] = []
            events: list[dict[str, Any]] = []
            key = self.signer() if self.signer is not None else None  # each certificate signed as issued
            name_of = {item.model_id: item.name for item in new}
            record_ids: list[int] = []
            done_payload = check_payload({"batch_id": batch_id})
            for req in reqs:
                assert req is not None
                if req.record_id is None:
                    raise RuntimeError(f"batch {batch_id}: a record vanished")
                record_ids.append(int(req.record_id))
            # the requests that follow one of these (the same key, pending under another requester's request when
            # they were submitted: lethe.curator.intake) complete with it, with the same certificates
            followers = list(s.execute(select(*REQUEST_COLUMNS).where(
                DeletionRequest.dataset_id == dataset_id, DeletionRequest.status == "waiting",
                DeletionRequest.record_id.in_(record_ids)))) if record_ids else []
            for req in [*reqs, *followers]:
                assert req is not None
                issued: list[dict[str, Any]] = []
                if published:
                    for model_id, old, v, mech, cert in published:
                        cid = str(uuid.uuid4())
                        if key is not None:
                            issued.append(issue_record(key, cert, request_id=req.id, cert_id=cid, kind="removal",
                                                       model=name_of[model_id], mechanism=mech,
                                                       old_version=old.number, new_version=v.number, now=now))
                        certs.append({"id": cid, "kind": "removal", "request_id": req.id,
                                      "model_id": model_id, "old_version_id": old.id, "new_version_id": v.id,
                                      "batch_id": batch_id, "mechanism": mech, "certificate": cert,
                                      "submitted_at": req.submitted_at, "created_at": now})
                else:
                    cid = str(uuid.uuid4())
                    receipt = public_certificate({**_NO_MODEL_RECEIPT, "n_removed": len(reqs)})
                    if key is not None:
                        issued.append(issue_record(key, receipt, request_id=req.id, cert_id=cid, kind="deletion",
                                                   model=None, mechanism=None, old_version=None, new_version=None,
                                                   now=now))
                    certs.append({"id": cid, "kind": "deletion", "request_id": req.id,
                                  "model_id": None, "old_version_id": None, "new_version_id": None,
                                  "batch_id": batch_id, "mechanism": None, "certificate": receipt,
                                  "submitted_at": req.submitted_at, "created_at": now})
                events.append({"kind": "request_done",
                               "payload": check_payload({**done_payload, "issued": issued}) if issued else done_payload,
                               "model_id": None, "version_id": None, "request_id": req.id, "at": now})
            gone: Any = s.execute(delete(Record).where(Record.id.in_(record_ids)))
            if gone.rowcount != len(record_ids):
                raise RuntimeError(f"batch {batch_id}: a record vanished")
            s.execute(update(DeletionRequest).where(DeletionRequest.id.in_([*request_ids,
                                                                             *(f.id for f in followers)]))
                      .values(record_id=None, status="done", processed_at=now)
                      .execution_options(synchronize_session=False))
            # Core executemany: no ORM work while this transaction holds the write lock the submissions wait for
            cert_table: Any = CertificateRow.__table__
            ledger_table: Any = LedgerEvent.__table__
            s.execute(insert(cert_table), certs)
            s.execute(insert(ledger_table), events)
            add_event(s, "records_deleted", {"batch_id": batch_id, "dataset": ds_name, "count": len(reqs)})
        return versions, new_ids


def _count_release(s: Any, model: Model, item: NewVersion) -> dict[str, Any]:
    """Within the publishing transaction: a released model's version moves the store's count of its stream's
    releases (refused if the artifact's count is behind it: a rollback, :func:`lethe.curator.lifetime.record_releases`)
    and its certificate states the dataset's lifetime ε beside the stream's. Other mechanisms: unchanged."""
    if item.summary.get("observer") != "every published release":
        return item.certificate
    lifetime.record_releases(s, model.id, item.summary)
    return {**item.certificate, **lifetime.summary_fields(s, model.dataset_id)}


__all__ = ["REQUEST_COLUMNS", "NewVersion", "VersionPublisher"]
