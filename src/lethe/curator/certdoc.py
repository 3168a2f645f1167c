"""Verifiable certificates: the signed certificate document of a request, the published key and chain head, and the
offline checks behind ``lethe certificate verify`` and the console's verify page.

A certificate document (``format: lethe-certificate/1``) holds what the requester's certificate page shows — the
request (id, the requester's reference, dataset, times, outcome) and, per model, the certificate's requester fields
with ``observer`` (whom the guarantee covers) and ``horizon_spent`` — plus a plain statement of what it guarantees,
against whom and what it does not cover, and the hash of the ledger event that recorded the request done (an
auditor finds it in an exported ledger whose chain ``lethe ledger verify`` checks; ``lethe certificate verify FILE
--ledger EXPORT.json`` does both). The service signs the whole (:mod:`lethe.curator.signing`) at download, and
each certificate once more when its batch issues it (:func:`issue_record`, kept in the request's ``request_done``
ledger event and carried by the document as ``issue_signature``): an edit of a stored certificate after its issue
fails verification offline, although the document itself is signed over what the store holds at download. It names
no record key and nothing of another request: not the event's content (its batch id), its number or the ledger's
size — only its hash.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

import lethe
from lethe.curator.chain import verify_events
from lethe.curator.public import OBSERVER_ONE_VERSION, OBSERVER_RELEASES, public_certificate
from lethe.curator.settings import SECRETS_DIR
from lethe.curator.signing import KEY_FILE, SigningKey, Verdict, verify_document
from lethe.curator.store import CertificateRow, Dataset, DeletionRequest, LedgerEvent, Model, ModelVersion, iso, utcnow

FORMAT = "lethe-certificate/1"
ISSUE_FORMAT = "lethe-certificate-issue/1"
#: the member of a document's certificate holding its issue signature (recorded in the request's ``request_done``
#: ledger event when its batch published it)
ISSUE_SIGNATURE = "issue_signature"
_ISSUED_FIELDS = ("id", "kind", "model", "mechanism", "old_version", "new_version", "certificate")

_keys: dict[Path, SigningKey] = {}
_keys_lock = threading.Lock()


def service_key(data_dir: Path) -> SigningKey:
    """The service's signing key of the data directory ``data_dir`` (created on first use, owner-only)."""
    path = Path(data_dir) / SECRETS_DIR / KEY_FILE
    with _keys_lock:
        key = _keys.get(path)
        if key is None:
            key = _keys[path] = SigningKey.load(path)
        return key


def chain_head(s: Any) -> dict[str, Any]:
    """The newest event's id and hash, and the number of events."""
    row = s.execute(select(LedgerEvent.id, LedgerEvent.hash).where(LedgerEvent.hash.is_not(None))
                    .order_by(LedgerEvent.id.desc()).limit(1)).first()
    n = int(s.scalar(select(func.count()).select_from(LedgerEvent)) or 0)
    return {"event": row.id if row else None, "hash": row.hash if row else None, "events": n}


def published_keys(curator: Any, *, detail: bool = False) -> dict[str, Any]:
    """What ``GET /v1/keys`` answers (anyone): the public key(s) and the ledger's chain head (its hash). ``detail``
    (``GET /v1/status``, admins): also the head event's id and the number of events."""
    key = service_key(curator.data_dir)
    with curator.store.read() as s:
        head = chain_head(s)
    shown = head if detail else {"hash": head["hash"]}
    return {"keys": [key.public()], "ledger_head": {**shown, "at": utcnow().isoformat()}}


def statement(view: dict[str, Any]) -> dict[str, str]:
    """What the certificate guarantees, against whom, and what it does not cover — in plain words."""
    kind = view.get("kind")
    c = view.get("certificate") or {}
    model = view.get("model")
    if kind == "deletion":
        return {"guarantees": "The record was deleted from the service's database. No model had been trained on "
                              "this dataset, so no model had to forget it.",
                "against": "Anyone: the record is no longer stored by the service.",
                "not_covered": "Copies made outside this service before the deletion (exports, backups, other "
                               "systems) are not covered."}
    observer = c.get("observer") or OBSERVER_ONE_VERSION
    eps, delta = c.get("epsilon"), c.get("delta")
    if "epsilon_dd" in c:
        how = f"Rényi deletion privacy ε_dd = {c.get('epsilon_dd')} at order q = {c.get('q')}"
    elif eps is not None and float(eps) == 0.0 and not delta:
        how = "exact removal (ε = 0, δ = 0)"
    else:
        how = f"(ε = {eps}, δ = {delta})-certified removal"
    g = (f"Model “{model}” (version {view.get('new_version')}) is, by {how}, statistically indistinguishable "
         "from a model trained without the record. The record was deleted from the service's database.")
    if observer == OBSERVER_RELEASES:
        against = ("An observer of every model release the service publishes (all of them together), who may know "
                   "every other record.")
        not_covered = ("Not covered: copies of the data or of models made outside this service, and anything "
                       "published before the release schedule began.")
        if c.get("horizon_spent"):
            not_covered += (" The model's release horizon is spent: it publishes no further release, so the "
                            "removal will appear in no new release until the model is retrained.")
    else:
        against = ("An observer of ONE published version of the model. The guarantee covers one published version "
                   "only: someone who saw the versions before and after the removal can compare them, and that "
                   "comparison is not covered.")
        not_covered = ("Not covered: comparisons of consecutive versions (keep versions unpublished, or use a "
                       "released model), copies made outside this service, and the accuracy of the model.")
    return {"guarantees": g, "against": against, "not_covered": not_covered}


def shown_fields(kind: str, stored: dict[str, Any]) -> dict[str, Any]:
    """The fields of a stored certificate a requester's document shows: the requester allow-list, with ``observer``
    and the release schedule's ``horizon_spent`` (no other record's data)."""
    shown = public_certificate(stored, requester=True)
    if kind != "deletion":
        shown["observer"] = stored.get("observer", OBSERVER_ONE_VERSION)
        if "horizon_spent" in stored:
            shown["horizon_spent"] = bool(stored["horizon_spent"])
    return shown


def issue_body(request_id: str, view: dict[str, Any], issued_at: Any) -> dict[str, Any]:
    """What the service signs when a batch issues a certificate (``format: lethe-certificate-issue/1``): the request's
    id and the certificate as its document shows it (id, kind, model, mechanism, versions, the requester's fields),
    at the time of issue. A downloaded document carries the signature (``issue_signature``), so an edit of the stored
    certificate after its issue is found offline, even though the document itself is signed at download."""
    return {"format": ISSUE_FORMAT, "request_id": request_id, "issued_at": issued_at,
            **{k: view.get(k) for k in _ISSUED_FIELDS}}


def sign_issue(key: SigningKey, request_id: str, view: dict[str, Any], issued_at: str) -> dict[str, Any]:
    """The issue signature of a certificate (:func:`issue_body`): the signature member and the time it signs."""
    return {**key.sign(issue_body(request_id, view, issued_at))["signature"], "issued_at": issued_at}


def issue_record(key: SigningKey, stored: dict[str, Any], *, request_id: str, cert_id: str, kind: str,
                 model: str | None, mechanism: str | None, old_version: int | None, new_version: int | None,
                 now: Any) -> dict[str, Any]:
    """The issue signature of the certificate ``cert_id`` (``stored``: as the store keeps it), signed by ``key`` now,
    as the ``request_done`` ledger event records it (``payload["issued"]``: the certificate's id, the signature
    member and the time it signs; hash-chained with the event)."""
    view = {"id": cert_id, "kind": kind, "model": model, "mechanism": mechanism, "old_version": old_version,
            "new_version": new_version, "certificate": shown_fields(kind, stored)}
    return {"certificate": cert_id, **sign_issue(key, request_id, view, iso(now) or "")}


def check_issue_signatures(document: dict[str, Any], public_key: bytes) -> tuple[bool, str]:
    """Every certificate of ``document`` that carries an issue signature is the one the service signed at issue
    (same key). Returns (ok, what was checked or why not)."""
    rid = (document.get("request") or {}).get("id")
    n = 0
    for view in document.get("certificates") or []:
        sig = view.get(ISSUE_SIGNATURE) if isinstance(view, dict) else None
        if sig is None:
            continue
        if not isinstance(sig, dict):
            return False, "a certificate's issue signature is malformed"
        member = {k: v for k, v in sig.items() if k != "issued_at"}
        v = verify_document({**issue_body(str(rid), view, sig.get("issued_at")), "signature": member},
                            public_key=public_key)
        if not v.valid:
            return False, (f"certificate {view.get('id')} differs from the one the service signed when it was issued "
                           f"({v.reason})")
        n += 1
    return True, (f"{n} certificate(s) as signed at issue" if n else "no certificate signed at issue (issued before "
                  "issue signatures)")


def build_document(curator: Any, request_id: str) -> dict[str, Any] | None:
    """The signed certificate document of a done request with certificates; None otherwise. The caller checks that
    the reader may see the request (its requester, or an admin)."""
    with curator.store.read() as s:
        req = s.get(DeletionRequest, request_id)
        if req is None or req.status != "done":
            return None
        rows = s.scalars(select(CertificateRow).where(CertificateRow.request_id == request_id)
                         .order_by(CertificateRow.created_at, CertificateRow.id)).all()
        if not rows:
            return None
        ds = s.get(Dataset, req.dataset_id)
        certs = []
        for row in rows:
            model = s.get(Model, row.model_id) if row.model_id is not None else None
            old = s.get(ModelVersion, row.old_version_id) if row.old_version_id is not None else None
            new = s.get(ModelVersion, row.new_version_id) if row.new_version_id is not None else None
            stored = dict(row.certificate or {})
            view = {"id": row.id, "kind": row.kind, "model": model.name if model else None,
                    "mechanism": row.mechanism, "old_version": old.number if old else None,
                    "new_version": new.number if new else None, "issued_at": iso(row.created_at),
                    "certificate": shown_fields(row.kind, stored)}
            view["statement"] = statement(view)
            certs.append(view)
        ev = s.scalars(select(LedgerEvent).where(LedgerEvent.request_id == request_id,
                                                 LedgerEvent.kind == "request_done")
                       .order_by(LedgerEvent.id.desc()).limit(1)).first()
        ledger = {"kind": "request_done", "hash": ev.hash} if ev is not None and ev.hash is not None else None
        issued = (ev.payload or {}).get("issued") if ev is not None else None
        by_id = {v["id"]: v for v in certs}
        for rec in issued if isinstance(issued, list) else []:  # each certificate as signed when it was issued
            if isinstance(rec, dict) and rec.get("certificate") in by_id:
                by_id[rec["certificate"]][ISSUE_SIGNATURE] = {k: v for k, v in rec.items() if k != "certificate"}
        doc = {"format": FORMAT, "issuer": "lethe curator", "lethe_version": lethe.__version__,
               "request": {"id": req.id, "reference": req.client_request_id, "requester": req.requester,
                           "dataset": ds.name if ds else None, "submitted_at": iso(req.submitted_at),
                           "processed_at": iso(req.processed_at), "status": "done", "outcome": "removed"},
               "certificates": certs, "ledger_event": ledger, "signed_at": utcnow().isoformat()}
    return service_key(curator.data_dir).sign(doc)


def verify_certificate(document: Any, *, public_key: bytes | None = None,
                       ledger: list[dict[str, Any]] | None = None) -> Verdict:
    """Check a downloaded certificate offline: the signature over all of it; with ``ledger`` (an exported ledger,
    every event in id order) also that the ledger's chain is intact and holds the certificate's event, recording
    this request done."""
    v = verify_document(document, public_key=public_key)
    if not v.valid:
        return v
    if document.get("format") != FORMAT:
        return Verdict(False, f"unknown format {document.get('format')!r} (expected {FORMAT})", v.key_id)
    signer = public_key if public_key is not None else base64.b64decode(document["signature"]["public_key"])
    issued_ok, issued = check_issue_signatures(document, signer)
    if not issued_ok:
        return Verdict(False, issued, v.key_id)
    v = Verdict(True, f"{v.reason}; {issued}", v.key_id)
    led = document.get("ledger_event")
    if ledger is None:
        if led is None:
            return Verdict(True, f"{v.reason}; no ledger event (processed before the chain existed)", v.key_id)
        return Verdict(True, f"{v.reason}; ledger event {str(led.get('hash'))[:16]}… (check it in an exported "
                             "ledger with --ledger)", v.key_id)
    if led is None:
        return Verdict(False, "the certificate names no ledger event to find in the ledger", v.key_id)
    check = verify_events(ledger)
    if not check.intact:
        return Verdict(False, f"the ledger given is broken: {check.problems[0]}", v.key_id)
    ev = next((e for e in ledger if e.get("hash") == led.get("hash")), None)
    if ev is None:
        return Verdict(False, "the certificate's ledger event is not in the ledger given", v.key_id)
    rid = (document.get("request") or {}).get("id")
    if ev.get("request_id") != rid or ev.get("kind") != "request_done":
        return Verdict(False, f"ledger event {ev.get('id')} does not record this request done", v.key_id)
    return Verdict(True, f"{v.reason}; ledger event {ev.get('id')} records this request done in an intact chain "
                         f"of {check.events} events (head {check.head[:16]}…)", v.key_id)


def check_ledger(curator: Any, *, head: str | None = None) -> Any:
    """Walk the stored chain (:func:`lethe.curator.chain.verify_events`) in id order."""
    def rows() -> Any:
        last = 0
        with curator.store.read() as s:
            while True:
                batch = s.execute(select(LedgerEvent.id, LedgerEvent.at, LedgerEvent.kind, LedgerEvent.model_id,
                                         LedgerEvent.version_id, LedgerEvent.request_id, LedgerEvent.payload,
                                         LedgerEvent.hash).where(LedgerEvent.id > last)
                                  .order_by(LedgerEvent.id).limit(5000)).all()
                if not batch:
                    return
                yield from batch
                last = batch[-1].id

    return verify_events(rows(), head=head)


__all__ = ["FORMAT", "ISSUE_FORMAT", "ISSUE_SIGNATURE", "build_document", "chain_head", "check_issue_signatures",
           "check_ledger", "issue_body", "issue_record", "load_document", "published_keys", "service_key",
           "shown_fields", "sign_issue", "statement", "verify_certificate"]


def load_document(text: str) -> Any:
    """A certificate document from a downloaded file: the JSON itself, or the HTML certificate (which embeds the
    signed JSON in a ``<script type="application/json" id="lethe-certificate">`` block)."""
    import html as _html
    import json
    import re

    t = text.strip()
    if t.startswith("{"):
        try:
            return json.loads(t)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    m = re.search(r'<script type="application/json" id="lethe-certificate">(.*?)</script>', t, re.S)
    if m is None:
        raise ValueError("the file holds no signed certificate (neither JSON nor a lethe HTML certificate)")
    try:
        return json.loads(_html.unescape(m.group(1)))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the certificate embedded in the HTML is not valid JSON ({exc.msg})") from None
