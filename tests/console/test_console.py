"""The console with FastAPI's TestClient: sign-in, sessions, CSRF, CSP, access rules, pagination, ledger check."""

from __future__ import annotations

import datetime as _dt
import io
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.console import health
from lethe.curator.console import queries as Q
from lethe.curator.console.certificate import explain
from lethe.curator.console.plots import chart
from lethe.curator.store import DeletionRequest, LedgerEvent

from .conftest import CSRF_RE, Setup

PAGES = ("/console/requests", "/console/models", "/console/ledger", "/console/ledger/verify", "/console/health")


@pytest.fixture
def cur(setup: Setup) -> Iterator[Curator]:
    c = Curator(setup.data_dir, settings=Settings(batch_size=4))
    yield c
    c.close()


def client(c: Curator, base: str = "http://127.0.0.1") -> TestClient:
    return TestClient(create_app(c, run_worker=False), base_url=base)


def csrf_of(html: str) -> str:
    m = CSRF_RE.search(html)
    assert m is not None, html[:500]
    return m.group(1)


def sign_in(cl: TestClient, token: str) -> str:
    """Sign in; returns the session's CSRF token."""
    page = cl.get("/console/login")
    r = cl.post("/console/login", data={"token": token, "csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return csrf_of(cl.get("/console/requests").text)


def submit(cl: TestClient, csrf: str, key: str, **extra: str) -> Any:
    return cl.post("/console/requests", data={"dataset": "people", "key": key, "csrf": csrf, **extra},
                   follow_redirects=False)


def test_pages_need_a_session(cur: Curator) -> None:
    with client(cur) as cl:
        for path in PAGES:
            r = cl.get(path, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"].startswith("/console/login?next=")
        r = cl.get("/console/models/clf/public.npz", follow_redirects=False)
        assert r.status_code == 303


def test_sign_in_cookie_and_headers(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        login = cl.get("/console/login")
        csp = login.headers["content-security-policy"]
        assert "unsafe-inline" not in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
        assert login.headers["x-frame-options"] == "DENY" and login.headers["x-content-type-options"] == "nosniff"
        r = cl.post("/console/login", data={"token": setup.admin, "csrf": csrf_of(login.text)},
                    follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/requests"
        cookie = [h for h in r.headers.get_list("set-cookie") if h.startswith("lethe_console=")][0]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback
        assert setup.admin not in cookie
        for path in PAGES:
            page = cl.get(path)
            assert page.status_code == 200, (path, page.text[:300])
            assert "unsafe-inline" not in page.headers["content-security-policy"]
            # nothing the CSP would block: no inline script, no style element or attribute
            assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), path
            assert "<style" not in page.text and " style=" not in page.text, path


def test_cookie_is_secure_over_tls(cur: Curator, setup: Setup) -> None:
    with client(cur, "https://127.0.0.1") as cl:
        login = cl.get("/console/login")
        r = cl.post("/console/login", data={"token": setup.admin, "csrf": csrf_of(login.text)},
                    follow_redirects=False)
        cookie = [h for h in r.headers.get_list("set-cookie") if h.startswith("lethe_console=")][0]
        assert "Secure" in cookie and "HttpOnly" in cookie


def test_bad_sign_in_is_refused(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        login = cl.get("/console/login")
        r = cl.post("/console/login", data={"token": "lethe_wrong", "csrf": csrf_of(login.text)},
                    follow_redirects=False)
        assert r.status_code == 401 and "Unknown or revoked token" in r.text
        assert not any(h.startswith("lethe_console=") for h in r.headers.get_list("set-cookie"))
        # a sign-in form without its CSRF token (login CSRF) is refused even with a valid token
        r = cl.post("/console/login", data={"token": setup.admin}, follow_redirects=False)
        assert r.status_code == 403
        r = cl.post("/console/login", data={"token": setup.admin, "csrf": csrf_of(login.text)},
                    headers={"origin": "http://evil.example"}, follow_redirects=False)
        assert r.status_code == 403


def test_state_changing_forms_need_the_csrf_token(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        csrf = sign_in(cl, setup.admin)
        before = cur.status()["requests"]
        assert submit(cl, "", setup.keys[0]).status_code == 403
        assert submit(cl, "x" + csrf, setup.keys[0]).status_code == 403
        r = cl.post("/console/requests", data={"dataset": "people", "key": setup.keys[0]}, follow_redirects=False)
        assert r.status_code == 403 and "security token" in r.text
        r = cl.post("/console/requests", data={"dataset": "people", "key": setup.keys[0], "csrf": csrf},
                    headers={"origin": "http://127.0.0.1:9"}, follow_redirects=False)
        assert r.status_code == 403
        assert cl.post("/console/ledger/checkpoint", data={"x": "1"}, follow_redirects=False).status_code == 403
        assert cl.post("/console/logout", data={"x": "1"}, follow_redirects=False).status_code == 403
        r = cl.post("/console/requests", content=json.dumps({"csrf": csrf}),
                    headers={"content-type": "application/json"}, follow_redirects=False)
        assert r.status_code == 415
        assert cur.status()["requests"] == before
        # with the token it works
        r = submit(cl, csrf, setup.keys[0])
        assert r.status_code == 303 and r.headers["location"].startswith("/console/requests/")
        assert cur.status()["requests"]["pending"] == before["pending"] + 1


def test_logout_ends_the_session(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        csrf = sign_in(cl, setup.alice)
        cookie = cl.cookies.get("lethe_console")
        r = cl.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login"
        cl.cookies.set("lethe_console", cookie, path="/console")  # replaying the old cookie does not work
        assert cl.get("/console/requests", follow_redirects=False).status_code == 303


def test_revoked_token_ends_the_session(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        sign_in(cl, setup.alice)
        assert cl.get("/console/requests").status_code == 200
        cur.revoke_token("alice")
        assert cl.get("/console/requests", follow_redirects=False).status_code == 303


def test_requester_sees_only_own_requests(cur: Curator, setup: Setup) -> None:
    with client(cur) as a, client(cur) as b:
        ca, cb = sign_in(a, setup.alice), sign_in(b, setup.bob)
        ra = submit(a, ca, setup.keys[1], request_id="alice-1").headers["location"]
        rb = submit(b, cb, setup.keys[2], request_id="bob-1").headers["location"]
        bob_id = rb.rsplit("/", 1)[1]
        cur.process_pending(force=True)
        assert a.get(ra).status_code == 200
        for path in (rb, rb + "/certificate.html"):
            r = a.get(path)
            assert r.status_code == 404 and "Unknown request" in r.text
            assert "bob" not in r.text and "Certificate" not in r.text
        listing = a.get("/console/requests").text
        assert "alice-1" in listing and "bob-1" not in listing and bob_id[:8] not in listing
        # the requester filter cannot be widened by a requester
        assert "bob-1" not in a.get("/console/requests?requester=bob").text
        assert "bob-1" not in a.get(f"/console/requests?q={bob_id}").text
        # requesters have no admin pages
        for path in ("/console/models", "/console/ledger", "/console/health", "/console/models/clf/public.npz"):
            assert a.get(path).status_code == 403


def test_certificate_in_words_never_identifies_the_record(cur: Curator, setup: Setup) -> None:
    key = setup.keys[7]
    with client(cur) as cl:
        csrf = sign_in(cl, setup.alice)
        loc = submit(cl, csrf, key).headers["location"]
        pending = cl.get(loc).text
        assert "pending" in pending and "data-refresh" in pending
        cur.process_pending(force=True)
        page = cl.get(loc).text
        assert "done" in page and "ε = 1" in page and "δ = 0.0001" in page and "Guo et al. 2020" in page
        assert "Retraining" in page and "shown to the operator only" in page
        # the requester sees nothing that depends on the other records of the batch
        for hidden in ("remains", "records removed in this batch", "accumulated gradient residual",
                       "gradient residual added", "budget left", "other record(s)"):
            assert hidden not in page, hidden
        dl = cl.get(loc + "/certificate.html")
        assert dl.status_code == 200 and dl.headers["content-disposition"].startswith("attachment;")
        assert "unsafe-inline" not in dl.headers["content-security-policy"]
        for html in (page, dl.text):  # no row position, no key
            assert "removed_indices" not in html and "removed indices" not in html
            assert key not in html
            assert "Certificate" in html
        assert "Certificate of deletion" in dl.text and loc.rsplit("/", 1)[1] in dl.text
        assert "remains" not in dl.text and "records removed in this batch" not in dl.text
    # the operator sees the batch's figures on the page, and sends the data subject the requester's view
    with client(cur) as admin:
        sign_in(admin, setup.admin)
        page = admin.get(loc).text
        assert "removal budget" in page and "remains" in page and "records removed in this batch" in page
        assert "removed_indices" not in page and key not in page
        dl = admin.get(loc + "/certificate.html").text
        assert "remains" not in dl and "records removed in this batch" not in dl


def test_public_model_download_has_no_secret(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        r = cl.get("/console/models/clf/public.npz")
        assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment;")
        with np.load(io.BytesIO(r.content), allow_pickle=False) as z:
            names = set(z.files)
            meta = json.loads(bytes(z["__lethe_meta__"]).decode())
            w = z["w"]
        assert names == {"w", "__lethe_meta__"} and meta["version"] == 1 and meta["public"] is True
        assert w.shape == (6,)
        assert cl.get("/console/models/nope/public.npz").status_code == 404


def _insert_requests(cur: Curator, n: int, seed: int = 0) -> list[tuple[_dt.datetime, str]]:
    rng = np.random.default_rng(seed)
    t0 = _dt.datetime(2026, 1, 1)
    rows = []
    with cur.store.write() as s, s.begin():
        for i in range(n):
            at = t0 + _dt.timedelta(seconds=int(rng.integers(0, 40)))  # many ties on the timestamp
            rid = str(uuid.UUID(int=int(rng.integers(0, 2**62)) * 7 + i))
            s.add(DeletionRequest(id=rid, requester=("alice", "bob")[i % 2], dataset_id=1, key_digest=f"{i:064x}",
                                  status=("done", "pending", "failed")[i % 3], attempts=0, submitted_at=at))
            rows.append((at, rid))
    return rows


def test_keyset_pagination_walks_every_request_once(cur: Curator) -> None:
    rows = _insert_requests(cur, 237)
    want = [rid for _, rid in sorted(rows, reverse=True)]
    with cur.store.read() as s:
        seen: list[str] = []
        page = Q.list_requests(s, Q.RequestFilter(), limit=50)
        pages = [page]
        while page.next_cursor:
            page = Q.list_requests(s, Q.RequestFilter(), after=page.next_cursor, limit=50)
            pages.append(page)
        for p in pages:
            seen += [r["id"] for r in p.rows]
        assert seen == want and len(pages) == 5 and pages[0].prev_cursor is None
        # and back: 'newer' from the last page gives the previous pages
        back = Q.list_requests(s, Q.RequestFilter(), before=pages[-1].prev_cursor, limit=50)
        assert [r["id"] for r in back.rows] == [r["id"] for r in pages[-2].rows]
        # filters
        mine = Q.list_requests(s, Q.RequestFilter(requester="bob", status="failed"), limit=500).rows
        assert mine and {(r["requester"], r["status"]) for r in mine} == {("bob", "failed")}
        assert len(mine) == sum(1 for i in range(237) if i % 2 == 1 and i % 3 == 2)
        hit = Q.list_requests(s, Q.RequestFilter(q=want[5][:13]), limit=50).rows
        assert want[5] in [r["id"] for r in hit] and all(r["id"].startswith(want[5][:13]) for r in hit)
        with pytest.raises(ValueError, match="cursor"):
            Q.list_requests(s, Q.RequestFilter(), after="garbage!")


def test_requests_page_rejects_bad_filters(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        assert cl.get("/console/requests?status=nope").status_code == 422
        assert cl.get("/console/requests?after=%%%").status_code == 422
        assert cl.get("/console/ledger?before=x").status_code == 422


def test_indexes_are_created(cur: Curator) -> None:
    with cur.store.read() as s:  # part of the store's schema (version 4): no console start needed
        names = set(s.scalars(text("SELECT name FROM sqlite_master WHERE type='index' "
                                   "AND tbl_name='deletion_requests'")))
        plan = " ".join(str(r[-1]) for r in s.execute(text(
            "EXPLAIN QUERY PLAN SELECT id FROM deletion_requests WHERE requester = 'a' "
            "ORDER BY submitted_at DESC, id DESC LIMIT 51")))
    assert {n for n, _ in Q.INDEXES} <= names
    assert "ix_console_req_requester_time" in plan and "TEMP B-TREE" not in plan


def test_ledger_chain_detects_changes_and_gaps(cur: Curator, setup: Setup) -> None:
    cur.submit_deletion("people", setup.keys[3])
    cur.process_pending(force=True)
    report = health.verify_chain(cur)
    assert report.intact and report.triggers is True and report.checkpoints_ok == 0
    with client(cur) as cl:
        csrf = sign_in(cl, setup.admin)
        assert cl.post("/console/ledger/checkpoint", data={"csrf": csrf}, follow_redirects=False).status_code == 303
        assert "The chain is intact" in cl.get("/console/ledger/verify").text
        assert "Last checkpoint" in cl.get("/console/ledger").text
    assert health.verify_chain(cur).checkpoints_ok == 1
    # an attacker with database access drops the triggers and edits an old event
    with cur.store.write_engine.begin() as conn:
        conn.execute(text("DROP TRIGGER ledger_no_update"))
        conn.execute(text("UPDATE ledger SET payload = '{\"dataset\": \"x\"}' WHERE id = 1"))
    report = health.verify_chain(cur)
    assert not report.intact
    assert any("no longer hash" in p for p in report.problems)
    assert any("triggers" in p for p in report.problems)
    with cur.store.write_engine.begin() as conn:
        conn.execute(text("DROP TRIGGER ledger_no_delete"))
        conn.execute(text("DELETE FROM ledger WHERE id = 2"))
    assert any("missing" in p for p in health.verify_chain(cur).problems)
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/ledger").text
        assert "Events are missing" in page
        assert "The chain is broken" in cl.get("/console/ledger/verify").text


def test_holdout_accuracy_and_charts(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        csrf = sign_in(cl, setup.admin)
        r = cl.post("/console/models/clf/holdout", data={"dataset": "people", "csrf": csrf}, follow_redirects=False)
        assert r.status_code == 422  # its own training data is not a held-out set
        r = cl.post("/console/models/clf/holdout", data={"dataset": "people-holdout", "csrf": csrf},
                    follow_redirects=False)
        assert r.status_code == 303
        for k in setup.keys[10:14]:
            cur.submit_deletion("people", k)
        cur.process_pending(force=True)
        health.evaluate_holdout(cur)  # (the console's evaluator thread may have been first)
        assert health.evaluate_holdout(cur) == 0  # each version is evaluated once
        with cur.store.read() as s:
            acc = Q.holdout_accuracies(s, 1)
            vs = Q.model_versions(s, 1)
        assert set(acc) == {1, 2} and all(0.5 < a <= 1.0 for a in acc.values())
        assert [(v["number"], v["removed"]) for v in vs] == [(1, 0), (2, 4)]
        page = cl.get("/console/models").text
        assert page.count("<svg") == 3 and "Held-out accuracy" in page and "people-holdout" in page
        assert " style=" not in page


def test_chart_marks_retrainings_and_gaps() -> None:
    svg = chart("t", "title", "desc", [1, 2, 3, 4], [0.0, 50.0, None, 10.0], unit="%", marks=[4])
    assert svg.count("<polyline") == 2  # the unknown value breaks the line
    assert "retraining at version 4" in svg and "stroke-dasharray" in svg
    assert 'aria-labelledby="t-title t-desc"' in svg and "style=" not in svg
    assert "No data yet" in chart("e", "t", "d", [1], [None])


def test_health_reports_a_corrupt_artifact(cur: Curator, setup: Setup) -> None:
    h = health.check(cur)
    assert h.faults == [] and h.worker == "idle"
    with cur.store.read() as s:
        rel = Q.published_versions(s)[0]["artifact"]
    path = cur.artifacts.resolve(rel)
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    titles = [f.title for f in health.check(cur).faults]
    assert any("version 1" in t and "checksum" in t for t in titles), titles
    with client(cur) as cl:
        sign_in(cl, setup.admin)
        page = cl.get("/console/health").text
        assert "Needs an operator" in page and "checksum" in page and str(cur.data_dir) not in page
    # a held-out evaluation of the corrupt version records nothing
    with cur.store.read() as s:
        n0 = len(s.scalars(select(LedgerEvent)).all())
    assert health.evaluate_holdout(cur) == 0
    with cur.store.read() as s:
        assert len(s.scalars(select(LedgerEvent)).all()) == n0


def test_open_redirect_is_refused(cur: Curator, setup: Setup) -> None:
    with client(cur) as cl:
        login = cl.get("/console/login?next=//evil.example/x")
        assert "evil.example" not in login.text
        r = cl.post("/console/login", data={"token": setup.admin, "csrf": csrf_of(login.text),
                                            "next": "https://evil.example/"}, follow_redirects=False)
        assert r.headers["location"] == "/console/requests"


def test_chart_points_lie_inside_the_plot() -> None:
    from lethe.curator.console import plots

    ys = [95.07, 95.1, 95.4, 96.1, 95.0]
    svg = chart("a", "t", "d", [1, 2, 3, 4, 5], ys, unit="%", y_min=None, y_max=100.0)
    cys = [float(v) for v in re.findall(r'<circle cx="[^"]+" cy="([^"]+)"', svg)]
    assert len(cys) == 5
    assert all(plots.TOP - 1e-9 <= cy <= plots.H - plots.BOTTOM + 1e-9 for cy in cys), cys
    labels = re.findall(r'text-anchor="end"[^>]*>([^<]+)</text>', svg)
    assert float(labels[0].split()[0]) <= min(ys) and float(labels[-1].split()[0]) >= 100.0


def test_explain_shows_only_public_fields() -> None:
    """Whatever a stored certificate holds, only the allow-listed fields reach a page."""
    cert = {"operation": "remove", "guarantee": "(epsilon, delta)-certified removal (Guo et al. 2020, Def. 1)",
            "epsilon": 1.0, "delta": 1e-4, "step_bound": 0.01, "residual_bound": 0.02, "budget": 0.2,
            "budget_left": 0.18, "retrained": False, "n_removed": 3, "removed_indices": [17, 4242, 99],
            "edits": [{"replacements": [{"index": 4242, "x": [0.5], "label": 1.0}]}], "key": "user-0042"}
    view = {"id": "c1", "kind": "removal", "model": "clf", "mechanism": "certified-removal", "old_version": 3,
            "new_version": 4, "certificate": cert}
    mine = explain(view)  # a requester's view: nothing of the batch
    text = " ".join([mine.headline, *(a + " " + b for a, b in mine.sentences), *(a + " " + b for a, b in mine.details)])
    for hidden in ("5.0 %", "90.0 %", "other record(s)", "0.02", "0.18", "records removed in this batch"):
        assert hidden not in text, hidden
    assert "ε = 1" in text and "shown to the operator only" in text
    ex = explain(view, operator=True)
    text = " ".join([ex.headline, *(a + " " + b for a, b in ex.sentences), *(a + " " + b for a, b in ex.details)])
    for leak in ("4242", "17", "99", "removed_indices", "replacements", "user-0042"):
        assert leak not in text, leak
    assert "ε = 1" in text and "5.0 %" in text and "10.0 %" in text and "90.0 %" in text
    assert "2 other record(s)" in ex.headline and ex.retrained is False


def test_a_token_without_the_delete_scope_cannot_delete_through_the_console(cur: Curator, setup: Setup) -> None:
    """Issue 35: the console refuses deletions to a model-reader token, as the API does (403), and shows it no
    submission form; the service refuses such a principal whatever the front end."""
    from lethe.curator.errors import PermissionDeniedError
    from lethe.curator.settings import Principal

    reader = cur.create_token("viewer", "model-reader")
    with client(cur) as cl:
        csrf = sign_in(cl, reader)
        assert "Submit a deletion request" not in cl.get("/console/requests").text
        r = submit(cl, csrf, setup.keys[0])
        assert r.status_code == 403 and "scope" in r.text
    with cur.store.read() as s:
        assert s.scalar(select(DeletionRequest.id)) is None
    with pytest.raises(PermissionDeniedError):
        cur.submit_deletion("people", setup.keys[0], principal=Principal("viewer", "model-reader"))
