"""Issue 38: signed certificates, the ledger's hash chain, exports, deadlines and counts — through the console (FastAPI
TestClient), the API and the CLI."""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from lethe.cli import main as cli_main
from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.certdoc import load_document, service_key, verify_certificate
from lethe.curator.deadlines import AnswerPeriod, deadline_status
from lethe.curator.settings import Principal
from lethe.curator.store import CertificateRow, DeletionRequest

from .conftest import CSRF_RE, Setup

ALICE, BOB = Principal("alice", "requester"), Principal("bob", "requester")


@pytest.fixture
def cur(setup: Setup) -> Iterator[Curator]:
    c = Curator(setup.data_dir, settings=Settings(batch_size=4))
    yield c
    c.close()


def client(c: Curator) -> TestClient:
    return TestClient(create_app(c, run_worker=False), base_url="http://127.0.0.1")


def sign_in(cl: TestClient, token: str) -> str:
    page = cl.get("/console/login")
    csrf = CSRF_RE.search(page.text).group(1)  # type: ignore[union-attr]
    r = cl.post("/console/login", data={"token": token, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return CSRF_RE.search(cl.get("/console/requests").text).group(1)  # type: ignore[union-attr]


def done_request(c: Curator, key: str, who: Principal = ALICE) -> str:
    view, _ = c.submit_deletion("people", key, principal=who)
    c.process_pending(force=True)
    return str(view["id"])


def run_cli(*argv: str) -> tuple[int, str]:
    buf = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(buf):
        rc = cli_main(list(argv))
    return rc, buf.getvalue()


# -- 1. verifiable certificates ----------------------------------------------------------------------------------
def test_downloaded_certificate_verifies_and_one_edited_byte_fails(cur: Curator, setup: Setup, tmp_path: Path) -> None:
    rid = done_request(cur, setup.keys[3])
    with client(cur) as cl:
        sign_in(cl, setup.alice)
        r = cl.get(f"/console/requests/{rid}/certificate.json")
        assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment;")
        html = cl.get(f"/console/requests/{rid}/certificate.html").text
        keys = cl.get("/v1/keys").json()
    doc = r.json()
    assert doc["signature"]["alg"] == "Ed25519" and len(doc["ledger_event"]["hash"]) == 64
    assert doc["signature"]["key_id"] == keys["keys"][0]["key_id"]
    assert setup.keys[3] not in r.text and setup.keys[3] not in html  # no record key
    assert "batch" not in r.text and "events" not in r.text  # nothing of the batch or of the ledger's size
    good = tmp_path / "cert.json"
    good.write_text(r.text)
    rc, out = run_cli("certificate", "verify", str(good), "--public-key", keys["keys"][0]["public_key"])
    assert rc == 0 and out.startswith("VALID"), out
    (tmp_path / "cert.html").write_text(html)  # the HTML certificate embeds the same signed document
    assert run_cli("certificate", "verify", str(tmp_path / "cert.html"))[0] == 0
    # one byte edited: a digit of the ε, the request's time, the outcome
    text = r.text
    for old, new in (('"epsilon": 1.0', '"epsilon": 2.0'), (rid[:8], rid[:7] + ("0" if rid[7] != "0" else "1")),
                     ('"outcome": "removed"', '"outcome": "removeD"')):
        assert old in text, old
        bad = tmp_path / "bad.json"
        bad.write_text(text.replace(old, new, 1))
        rc, out = run_cli("certificate", "verify", str(bad))
        assert rc == 1 and out.startswith("INVALID") and "changed after it was signed" in out, out
    # another key: refused even though the document is intact
    (tmp_path / "elsewhere" / "secrets").mkdir(parents=True, exist_ok=True)
    other = service_key(tmp_path / "elsewhere")
    rc, out = run_cli("certificate", "verify", str(good), "--public-key", other.public()["public_key"])
    assert rc == 1 and "not by the trusted key" in out
    # with the exported ledger: its chain intact and holding this request's event
    rc, exported = run_cli("export", "ledger", "--format", "json", "--data-dir", str(setup.data_dir))
    (tmp_path / "ledger.json").write_text(exported)
    rc, out = run_cli("certificate", "verify", str(good), "--ledger", str(tmp_path / "ledger.json"))
    assert rc == 0 and "records this request done in an intact chain" in out, out
    events = json.loads(exported)
    mine = next(e for e in events if e["hash"] == doc["ledger_event"]["hash"])
    assert mine["request_id"] == rid and mine["kind"] == "request_done"
    (tmp_path / "cut.json").write_text(json.dumps([e for e in events if e is not mine]))
    rc, out = run_cli("certificate", "verify", str(good), "--ledger", str(tmp_path / "cut.json"))
    assert rc == 1 and "the ledger given is broken" in out, out
    # a forgery signed by another key and pointing at another request's event: refused on both counts
    forged = json.loads(text)
    forged["ledger_event"]["hash"] = events[0]["hash"]  # the first event: a dataset's registration
    assert not verify_certificate(forged).valid
    assert not verify_certificate(other.sign(forged), ledger=events).valid


def test_verify_page_checks_a_pasted_certificate(cur: Curator, setup: Setup) -> None:
    rid = done_request(cur, setup.keys[4])
    with client(cur) as cl:
        csrf = sign_in(cl, setup.alice)
        text = cl.get(f"/console/requests/{rid}/certificate.json").text
        page = cl.get("/console/verify")
        assert page.status_code == 200 and "cert-file" in page.text and service_key(cur.data_dir).key_id in page.text
        ok = cl.post("/console/verify", data={"csrf": csrf, "certificate": text})
        assert ok.status_code == 200 and "Valid" in ok.text and "one published version" in ok.text.lower()
        bad = cl.post("/console/verify", data={"csrf": csrf, "certificate": text.replace('"done"', '"dona"', 1)})
        assert bad.status_code == 422 and "Not valid" in bad.text and "changed after it was signed" in bad.text
        assert cl.post("/console/verify", data={"csrf": "x", "certificate": text}).status_code == 403


def test_printable_certificate_states_guarantee_observer_and_limits(cur: Curator, setup: Setup) -> None:
    rid = done_request(cur, setup.keys[5])
    with client(cur) as cl:
        sign_in(cl, setup.alice)
        html = cl.get(f"/console/requests/{rid}/certificate.html").text
    for words in ("What this guarantees", "Against whom", "What it does not cover", "observer: one published version",
                  "covers one published version only", "Signing key id", "Ledger event", "@media print", "A4"):
        assert words in html, words
    doc = load_document(html)
    assert doc["certificates"][0]["certificate"]["observer"] == "one published version"


def test_ledger_chain_fails_where_an_event_is_removed_or_edited(cur: Curator, setup: Setup, tmp_path: Path) -> None:
    done_request(cur, setup.keys[6])
    done_request(cur, setup.keys[8], BOB)
    d = ["--data-dir", str(setup.data_dir)]
    rc, out = run_cli("ledger", "verify", *d)
    assert rc == 0 and out.startswith("INTACT"), out
    head = out.split()[-1]
    rc, exported = run_cli("export", "ledger", "--format", "json", *d)
    (tmp_path / "ledger.json").write_text(exported)
    assert run_cli("ledger", "verify", "--file", str(tmp_path / "ledger.json"), "--head", head)[0] == 0
    events = json.loads(exported)
    # removed from the export: named
    cut = events[:5] + events[6:]
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    rc, out = run_cli("ledger", "verify", "--file", str(tmp_path / "cut.json"))
    assert rc == 1 and f"breaks at event {events[6]['id']}" in out and "removed" in out, out
    # removed and edited in the store itself (the triggers dropped, as someone with file access could)
    db = sqlite3.connect(setup.data_dir / "lethe.db")
    db.execute("DROP TRIGGER ledger_no_delete")
    db.execute("DROP TRIGGER ledger_no_update")
    victim = events[len(events) // 2]["id"]
    db.execute("DELETE FROM ledger WHERE id = ?", (victim,))
    db.commit()
    rc, out = run_cli("ledger", "verify", *d)
    assert rc == 1 and f"ids {victim}–{victim}" in out and "removed" in out, out
    edited = events[2]["id"]
    db.execute("UPDATE ledger SET kind = 'tampered' WHERE id = ?", (edited,))
    db.commit()
    db.close()
    rc, out = run_cli("ledger", "verify", *d)
    assert rc == 1 and f"breaks at event {edited}: event {edited} was edited" in out, out
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/ledger/verify").text
        assert f"The chain is broken at event {edited}" in page


def test_ledger_gaps_alone_do_not_break_the_chain() -> None:
    from lethe.curator.chain import GENESIS, link, verify_events

    evs, prev = [], GENESIS
    for i, eid in enumerate((1, 2, 5, 9)):  # ids skipped by rolled-back transactions
        e = {"id": eid, "at": f"2026-01-0{i + 1}T00:00:00", "kind": "k", "model_id": None, "version_id": None,
             "request_id": None, "payload": {"n": i}}
        prev = e["hash"] = link(prev, e)
        evs.append(e)
    assert verify_events(evs).intact
    assert not verify_events(evs, head="f" * 64).intact  # a published head not in the chain: rewritten


def test_keys_and_status_publish_key_and_head(cur: Curator, setup: Setup) -> None:
    done_request(cur, setup.keys[9])
    with client(cur) as cl:
        keys = cl.get("/v1/keys").json()  # public
        st = cl.get("/v1/status", headers={"Authorization": f"Bearer {setup.admin}"}).json()
    assert keys["ledger_head"]["hash"] and len(keys["ledger_head"]["hash"]) == 64
    assert set(keys["ledger_head"]) == {"hash", "at"}  # anyone: no event count
    admin_head = st["signing"]["ledger_head"]
    assert admin_head["events"] > 0 and admin_head["hash"] == keys["ledger_head"]["hash"]
    assert st["signing"]["keys"][0]["key_id"] == keys["keys"][0]["key_id"]
    secret = setup.data_dir / "secrets" / "signing_key"
    assert secret.stat().st_mode & 0o077 == 0 and len(secret.read_bytes()) == 32
    assert secret.read_bytes().hex() not in json.dumps(keys)


# -- 3. exports ------------------------------------------------------------------------------------------------------
def test_exports_round_trip_and_a_requester_sees_only_its_own(cur: Curator, setup: Setup, monkeypatch: Any) -> None:
    from lethe.curator import exports

    monkeypatch.setattr(exports, "PAGE", 2)  # many pages: the keyset paging neither skips nor repeats a row
    for k, who in ((setup.keys[10], ALICE), (setup.keys[11], BOB), (setup.keys[18], ALICE), (setup.keys[19], BOB)):
        cur.submit_deletion("people", k, principal=who)
    cur.process_pending(force=True)  # one batch: four certificates issued at the same instant
    cur.submit_deletion("people", "no-such-key", principal=ALICE)  # done at once: no record held
    cur.submit_deletion("people", setup.keys[12], principal=BOB)  # pending
    with cur.store.read() as s:
        all_requests = {r.id: r.requester for r in s.scalars(select(DeletionRequest))}
        all_certs = {c.id: c.request_id for c in s.scalars(select(CertificateRow))}
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        for fmt in ("csv", "json"):
            body = cl.get(f"/console/exports/requests.{fmt}").text
            rows = list(csv.DictReader(io.StringIO(body))) if fmt == "csv" else json.loads(body)
            assert sorted(r["id"] for r in rows) == sorted(all_requests)  # each once
            outcomes = {r["id"]: r["outcome"] for r in rows}
            assert set(outcomes.values()) >= {"removed", "no record held"}
            body = cl.get(f"/console/exports/certificates.{fmt}").text
            rows = list(csv.DictReader(io.StringIO(body))) if fmt == "csv" else json.loads(body)
            assert sorted(r["id"] for r in rows) == sorted(all_certs)
        ledger = json.loads(cl.get("/console/exports/ledger.json").text)
        assert [e["id"] for e in ledger] == sorted({e["id"] for e in ledger}) and len(ledger) > 10
        nrh = json.loads(cl.get("/console/exports/requests.json", params={"status": "no record held"}).text)
        assert [r["requester"] for r in nrh] == ["alice"]
        future = json.loads(cl.get("/console/exports/requests.json", params={"since": "2999-01-01"}).text)
        assert future == []
        assert cl.get("/console/exports/requests.json", params={"since": "yesterday"}).status_code == 422
    with client(cur) as cl:
        sign_in(cl, setup.alice)
        body = cl.get("/console/exports/requests.json").text
        mine = json.loads(body)
        assert sorted(r["id"] for r in mine) == sorted(k for k, v in all_requests.items() if v == "alice")
        certs = json.loads(cl.get("/console/exports/certificates.json").text)
        assert {c["request_id"] for c in certs} <= {r["id"] for r in mine} and certs
        for k in setup.keys:  # no record key, and bob's requests are absent
            assert k not in body
        assert "bob" not in body
        assert cl.get("/console/exports/ledger.json").status_code == 403
    rc, out = run_cli("export", "requests", "--format", "json", "--status", "pending", "--data-dir",
                      str(setup.data_dir))
    assert rc == 0 and [r["requester"] for r in json.loads(out)] == ["bob"]


# -- 4. deadlines and counts ------------------------------------------------------------------------------------------
def test_answer_period_is_calendar_months() -> None:
    p = AnswerPeriod.parse("1 month")
    assert p.due(_dt.datetime(2026, 1, 31, tzinfo=_dt.UTC)) == _dt.datetime(2026, 2, 28, tzinfo=_dt.UTC)
    assert AnswerPeriod.parse("30 days").due(_dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)).day == 31
    assert AnswerPeriod.parse("3m").due(_dt.datetime(2026, 11, 15, tzinfo=_dt.UTC)).month == 2
    with pytest.raises(ValueError, match="LETHE_ANSWER_PERIOD"):
        AnswerPeriod.parse("soon")
    t0 = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)
    assert deadline_status("done", t0, t0 + _dt.timedelta(days=40), p) == "answered late"
    assert deadline_status("done", t0, t0 + _dt.timedelta(days=3), p) == "answered in time"
    assert deadline_status("pending", t0, None, p, now=t0 + _dt.timedelta(days=32)) == "overdue"


def test_counts_and_overdue_on_first_page_and_metrics(cur: Curator, setup: Setup) -> None:
    done_request(cur, setup.keys[13])
    v, _ = cur.submit_deletion("people", setup.keys[14], principal=ALICE)
    old = _dt.datetime.now(_dt.UTC) - _dt.timedelta(days=45)
    db = sqlite3.connect(setup.data_dir / "lethe.db")
    db.execute("UPDATE deletion_requests SET submitted_at = ? WHERE id = ?",
               (old.replace(tzinfo=None).isoformat(sep=" "), v["id"]))
    db.commit()
    db.close()
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/requests").text
        metrics = cl.get("/metrics", headers={"Authorization": f"Bearer {setup.admin}"}).text
    badges = dict(re.findall(r'<span class="count">([\d,]+)</span> (pending|done|failed)</a>', page)[i][::-1]
                  for i in range(3))
    assert badges == {"pending": "1", "done": "1", "failed": "0"}, badges
    assert "Overdue — answer these first" in page and v["id"][:8] in page and 'class="overdue-row"' in page
    assert "<th scope=\"col\">Outcome</th>" in page and ">removed<" in page
    assert page.count('<span class="tag overdue">overdue</span>') == 1  # highlighted in the list too
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        rows = json.loads(cl.get("/console/exports/requests.json").text)
    by_id = {r["id"]: r for r in rows}
    assert by_id[v["id"]]["deadline_status"] == "overdue" and by_id[v["id"]]["outcome"] is None
    assert {r["deadline_status"] for r in rows if r["id"] != v["id"]} == {"answered in time"}
    assert "lethe_requests_overdue 1.0" in metrics and 'lethe_requests_open_by_age{band="within"} 0.0' in metrics


def test_ledger_page_names_models_and_versions(cur: Curator, setup: Setup) -> None:
    done_request(cur, setup.keys[15])
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/ledger").text
    assert "clf v2" in page and "clf v1" in page
    assert not re.search(r'data-label="Model / version">\d+ / \d+<', page)


# -- 5. the budget chart explained -----------------------------------------------------------------------------------
def test_budget_chart_marks_retrainings_and_remeasurements_with_a_legend(cur: Curator, setup: Setup) -> None:
    from lethe.curator.console.routes import _model_charts

    used = [10.0, 40.0, 0.0, 30.0, 20.0]
    vs = [{"number": i + 1, "retrained": i == 2, "accuracy": None, "removed": 1,
           "summary": {"budget": 1.0, "residual_bound": u / 100.0}} for i, u in enumerate(used)]
    ch = _model_charts({"id": 1, "name": "clf", "mechanism": "certified-removal"}, vs)
    svg = ch["budget"]
    assert ch["has_budget"]
    assert "retraining at version 3" in svg and "residual re-measured at version 5" in svg
    assert "re-measured at version 4" not in svg and "retraining at version 5" not in svg
    assert "1 retraining(s)" in svg and "1 re-measurement(s)" in svg
    assert "legend-retrain" in ch["budget_legend"] and "legend-remeasure" in ch["budget_legend"]
    # the chart follows the family's declared budget fields: none for a family without a budget (sharded), and a
    # family's own fields are not read off another's summary
    none = _model_charts({"id": 2, "name": "s", "mechanism": "sharded"}, vs)
    assert not none["has_budget"] and "no budget figures" in none["budget"]
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/models").text
    assert 'class="chart-legend"' in page and "starts at 0 %" in page


def test_api_serves_the_signed_certificate_to_its_requester_only(cur: Curator, setup: Setup) -> None:
    rid = done_request(cur, setup.keys[16])
    pending, _ = cur.submit_deletion("people", setup.keys[17], principal=ALICE)
    with client(cur) as cl:
        r = cl.get(f"/v1/deletions/{rid}/certificate.json", headers={"Authorization": f"Bearer {setup.alice}"})
        assert r.status_code == 200 and verify_certificate(r.json()).valid
        assert cl.get(f"/v1/deletions/{rid}/certificate.json",
                      headers={"Authorization": f"Bearer {setup.bob}"}).status_code == 404
        assert cl.get(f"/v1/deletions/{pending['id']}/certificate.json",
                      headers={"Authorization": f"Bearer {setup.alice}"}).status_code == 404


def test_ledger_check_page_against_a_published_head(cur: Curator, setup: Setup) -> None:
    done_request(cur, setup.keys[20])
    with client(cur) as cl:
        head = cl.get("/v1/keys").json()["ledger_head"]["hash"]
        sign_in(cl, setup.admin)
        ok = cl.get("/console/ledger/verify", params={"head": head}).text
        assert "The chain is intact" in ok and head in ok
        bad = cl.get("/console/ledger/verify", params={"head": "ab" * 32}).text
        assert "The chain is broken" in bad and "is not in the ledger" in bad
