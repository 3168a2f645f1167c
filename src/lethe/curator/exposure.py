"""Per record, what it has been exposed to (issue 36): the releases of every stream that held it, and their ε.

The dataset's ledger (:mod:`lethe.curator.lifetime`) gives the lifetime ε of a record held THROUGHOUT. A record
deleted earlier met fewer releases: for each stream (:class:`lethe.curator.store.PrivacyStream`) of its dataset,

* **kept** (still held, or its deletion request still pending): every release the stream has published so far
  (and, while the stream is open, the rest of its horizon: ``committed``);
* **deleted**: the releases published before its removal was published — the removal's certificate names the
  stream's version without the record: if that version published a release (``published: true``), that release is
  the first without the record and the ones before it held it; if not (the cadence or the clock had not come round,
  or the horizon was spent), every release published up to then held it and the next release (if any) is the first
  without it;
* **never**: a stream that started after the record's deletion was processed (a retraining, a new model).

Its exposure ε at the budget's δ is the exact μ-GDP composition of those releases (√(Σ k_s μ₁,s²),
:mod:`lethe.privacy.lifetime`): an upper bound on what the releases reveal about it, never above the dataset's
lifetime ε. The view names the record's key to nobody but the operator (``lethe budget --dataset D --key K``, the CLI
of a data directory) and to the requester who asked for its deletion, for that request only
(:meth:`lethe.curator.service.Curator.request_exposure`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from lethe.curator import lifetime
from lethe.curator.store import CertificateRow, DeletionRequest, ModelVersion, PrivacyStream, Record

__all__ = ["exposure_of_key", "exposure_of_request"]


def _stream_at(streams: list[PrivacyStream], model_id: int | None, when: Any) -> PrivacyStream | None:
    """The stream of ``model_id`` open at ``when``."""
    for st in streams:
        if st.model_id == model_id and st.started_at <= when and (st.ended_at is None or when <= st.ended_at):
            return st
    return None


def _exposure(s: Any, dataset_id: int, req: DeletionRequest | None, held: bool) -> dict[str, Any]:
    """The per-stream exposure of the record that ``req`` deleted (or that is ``held``; ``req`` pending)."""
    _eps_b, delta, _ = lifetime.budget(s, dataset_id)
    streams = list(s.scalars(select(PrivacyStream).where(PrivacyStream.dataset_id == dataset_id)
                             .order_by(PrivacyStream.id)))
    # a done request under the key's own digest removed its record (one that held none is filed under another
    # digest, DataDirectory.owner_digest); the record reference itself is cleared once it is done
    deleted = req is not None and req.status == "done" and req.processed_at is not None
    removal: dict[int, tuple[int, bool, int | None]] = {}  # stream id -> (releases that held it, published, release)
    if deleted:
        assert req is not None
        for cert in s.scalars(select(CertificateRow).where(CertificateRow.request_id == req.id)
                              .order_by(CertificateRow.created_at)):
            st = _stream_at(streams, cert.model_id, cert.created_at)
            v = s.get(ModelVersion, cert.new_version_id) if cert.new_version_id is not None else None
            if st is None or v is None or st.id in removal:
                continue
            summ = dict(v.summary or {})
            if summ.get("releases") is None:
                continue
            published = bool((cert.certificate or {}).get("published", True))
            k = int(summ["releases"]) - (1 if published else 0)
            removal[st.id] = (k, published, summ.get("release_version") if published else None)
    rows, spent, committed = [], [], []
    for st in streams:
        if deleted and req is not None and st.started_at >= req.processed_at:
            k, state, first_without = 0, "never held (started after the deletion)", None
        elif st.id in removal:
            k, published, rel = removal[st.id]
            state = "deleted" if published else "deleted (removal not yet in a release then)"
            first_without = rel if published else k
        elif deleted:  # the stream ended before the deletion was processed: every release held the record
            k, state, first_without = st.releases, "held throughout (stream ended before the deletion)", None
        else:
            k, state, first_without = st.releases, "pending deletion" if req is not None else "kept", None
        live = st.open and not deleted
        spent.append(lifetime.stream_pair(st, k))  # a tree stream: its whole μ once it held the record
        committed.append(lifetime.stream_pair(st, st.horizon if live else k))
        rows.append({"model": st.model, "open": bool(st.open), "releases": st.releases, "releases_held": k,
                     "state": state, "first_release_without": first_without, "mu_per_release": st.mu})
    return {"status": "deleted" if deleted else ("pending" if req is not None else ("kept" if held else "not held")),
            "exposure_epsilon": lifetime.gdp_epsilon(lifetime.lifetime_mu(spent), delta),
            "exposure_epsilon_committed": lifetime.gdp_epsilon(lifetime.lifetime_mu(committed), delta),
            "exposure_delta": delta, "exposure_releases": int(sum(k for _, k in spent)), "streams": rows}


def exposure_of_key(store: Any, datasets: Any, digest_of: Any, dataset: str, key: str) -> dict[str, Any]:
    """The exposure of the record with ``key`` in ``dataset`` (operators only: ``lethe budget --dataset D --key K``).
    ``digest_of(dataset_id, key)`` is the service's keyed digest of a key."""
    with store.read() as s:
        ds = datasets.find(s, dataset)
        digest = digest_of(ds.id, key)
        held = s.scalar(select(Record.id).where(Record.dataset_id == ds.id,
                                                Record.key == datasets.record_key(ds, key, digest))) is not None
        req = s.scalar(select(DeletionRequest).where(DeletionRequest.dataset_id == ds.id,
                                                     DeletionRequest.key_digest == digest,
                                                     DeletionRequest.status.in_(("pending", "done")))
                       .order_by(DeletionRequest.submitted_at.desc()))
        return {"dataset": ds.name, "key": key, **_exposure(s, ds.id, req, held)}


def exposure_of_request(s: Any, req: DeletionRequest) -> dict[str, Any] | None:
    """The exposure of the record a request deleted (None if the request held no record: nothing to say, and the
    same answer as for a key never held)."""
    if req.status not in ("pending", "done") or (req.status == "pending" and req.record_id is None):
        return None
    if req.status == "done" and s.scalar(select(CertificateRow.id).where(CertificateRow.request_id == req.id,
                                                                        CertificateRow.model_id.is_not(None))) is None:
        return None  # it held no record (or no model was trained on it): nothing was exposed through a release
    return _exposure(s, req.dataset_id, req, held=req.status == "pending")
