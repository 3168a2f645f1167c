"""Certificates signed when their batch issues them (issue 38, item 1): the downloaded document carries each
certificate's issue signature, so a stored certificate edited after its issue is found offline — the document itself
is signed at download, over whatever the store then holds. A document without issue signatures (issued before them,
or a follower's copy) still verifies as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.certdoc import ISSUE_SIGNATURE, build_document, service_key, verify_certificate
from lethe.curator.store import CertificateRow

from .conftest import Setup


@pytest.fixture
def cur(setup: Setup) -> Iterator[Curator]:
    c = Curator(setup.data_dir, settings=Settings(batch_size=4))
    yield c
    c.close()


def _done(c: Curator, key: str) -> str:
    view, _ = c.submit_deletion("people", key)
    c.process_pending(force=True)
    return str(view["id"])


def test_each_certificate_is_signed_when_issued_and_an_edit_after_issue_is_found(cur: Curator, setup: Setup) -> None:
    rid = _done(cur, setup.keys[7])
    doc = build_document(cur, rid)
    assert doc is not None
    (cert,) = doc["certificates"]
    sig = cert[ISSUE_SIGNATURE]
    assert sig["key_id"] == service_key(cur.data_dir).key_id and sig["issued_at"]
    v = verify_certificate(doc)
    assert v.valid and "1 certificate(s) as signed at issue" in v.reason, v.reason
    # the stored certificate edited after its issue (a larger budget claimed): the download signs the edited content,
    # and the issue signature no longer matches it
    with cur.store.write() as s, s.begin():
        row = s.scalar(select(CertificateRow).where(CertificateRow.request_id == rid))
        stored = dict(row.certificate)
        stored["epsilon"] = float(stored["epsilon"]) * 10
        s.execute(CertificateRow.__table__.update().where(CertificateRow.id == row.id).values(certificate=stored))
    edited = build_document(cur, rid)
    assert edited is not None and edited["certificates"][0]["certificate"]["epsilon"] != cert["certificate"]["epsilon"]
    bad = verify_certificate(edited)
    assert not bad.valid and "differs from the one the service signed when it was issued" in bad.reason, bad.reason
    # the issue signature moved onto another request's document: refused too
    other = _done(cur, setup.keys[8])
    moved = build_document(cur, other)
    assert moved is not None
    moved["certificates"][0][ISSUE_SIGNATURE] = sig
    assert not verify_certificate(service_key(cur.data_dir).sign(moved)).valid


def test_a_document_without_issue_signatures_verifies_as_before(cur: Curator, setup: Setup) -> None:
    rid = _done(cur, setup.keys[9])
    doc = build_document(cur, rid)
    assert doc is not None
    for cert in doc["certificates"]:
        cert.pop(ISSUE_SIGNATURE)
    v = verify_certificate(service_key(cur.data_dir).sign(doc))
    assert v.valid and "no certificate signed at issue" in v.reason
    assert json.loads(json.dumps(doc))  # plain JSON
