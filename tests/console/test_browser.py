"""The console end to end in a real headless Chromium (Debian's ``chromium``, driven by Playwright) against a live
``lethe serve`` on 127.0.0.1.

Skipped only when no Chromium executable exists on this machine (``.ci/run`` installs Debian's package first).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import CHROMIUM, NO_CHROMIUM, Live

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 375, "height": 800}, accept_downloads=True)
    ctx.set_default_timeout(30_000)
    try:
        yield ctx
    finally:
        ctx.close()


def sign_in(page: Any, live: Live, token: str) -> None:
    page.goto(live.url + "/console")
    assert "/console/login" in page.url
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/requests")


def test_submit_follow_download_sign_out(context: Any, live: Live, tmp_path: Path) -> None:
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, live, live.setup.alice)
    assert page.get_by_role("heading", name="Deletion requests").is_visible()
    # submit through the form (keyboard-reachable controls with labels)
    page.get_by_text("Submit a deletion request").click()
    page.get_by_label("Dataset", exact=True).first.select_option("people")
    key = live.setup.keys[9]
    page.get_by_label("Record key").fill(key)
    page.get_by_label("Your reference (optional)").fill("case-2026-17")
    page.get_by_role("button", name="Submit request").click()
    page.wait_for_url("**/console/requests/*")
    rid = page.url.rsplit("/", 1)[1]
    # the page reloads itself (console.js) until the worker has published the certificate
    page.wait_for_selector("#request-status:text('done')", timeout=60_000)
    text = page.inner_text("main")
    assert "Certificate" in text and "no longer contains the record" in text
    assert "ε = 1" in text and "Guo et al. 2020" in text and "Retraining" in text
    assert "shown to the operator only" in text and "remains" not in text  # nothing of the batch to a requester
    assert key not in page.content() and "removed_indices" not in page.content()
    with page.expect_download() as dl_info:
        page.get_by_role("link", name="Download the certificate (HTML)").click()
    dl = dl_info.value
    saved = tmp_path / dl.suggested_filename
    dl.save_as(saved)
    html = saved.read_text()
    assert rid in html and "Certificate of deletion" in html and "case-2026-17" in html
    assert key not in html and "removed_indices" not in html
    # the list shows it, with the version it produced
    page.goto(live.url + "/console/requests")
    row = page.locator("table.requests tbody tr", has_text="case-2026-17")
    assert row.count() == 1 and "done" in row.inner_text() and "clf v2" in row.inner_text()
    # sign out: the session is gone
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/login")
    page.goto(live.url + "/console/requests")
    assert "/console/login" in page.url
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_requester_cannot_see_anothers_request(context: Any, live: Live) -> None:
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.setup.bob}"}) as bob:
        r = bob.post("/v1/deletions", json={"dataset": "people", "key": live.setup.keys[20], "request_id": "bob-7"})
        assert r.status_code == 202, r.text
        bob_id = r.json()["id"]
    page = context.new_page()
    sign_in(page, live, live.setup.alice)
    assert "bob-7" not in page.inner_text("main")
    page.get_by_label("Request id").fill(bob_id)
    page.get_by_role("button", name="Filter").click()
    assert "No requests match" in page.inner_text("main")
    resp = page.goto(f"{live.url}/console/requests/{bob_id}")
    assert resp is not None and resp.status == 404
    assert "Unknown request" in page.inner_text("main") and "bob" not in page.inner_text("main")
    resp = page.goto(f"{live.url}/console/requests/{bob_id}/certificate.html")
    assert resp is not None and resp.status == 404
    resp = page.goto(f"{live.url}/console/ledger")
    assert resp is not None and resp.status == 403


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Another site (another port on 127.0.0.1) serving a form that posts to the console without a CSRF token."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802
        body = (f'<!doctype html><form method="post" action="{self.target}/console/requests">'
                '<input name="dataset" value="people"><input name="key" value="user-0030">'
                '<button type="submit">win a prize</button></form>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_forged_forms_are_refused(context: Any, live: Live) -> None:
    page = context.new_page()
    sign_in(page, live, live.setup.admin)
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.setup.admin}"}) as api:
        before = api.get("/v1/status").json()["requests"]
    # 1. a forged form on another site, submitted in the signed-in browser
    _Attacker.target = live.url
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        page.goto(f"http://127.0.0.1:{srv.server_address[1]}/")
        with page.expect_navigation():
            page.get_by_role("button", name="win a prize").click()
        assert "Refused" in page.inner_text("body")
    finally:
        srv.shutdown()
        srv.server_close()
    # 2. a same-origin post with the session cookie but without the token
    resp = context.request.post(live.url + "/console/requests", form={"dataset": "people", "key": "user-0031"},
                                headers={"Origin": live.url}, max_redirects=0)
    assert resp.status == 403 and "security token" in resp.text()
    # 3. and a wrong token
    resp = context.request.post(live.url + "/console/requests", headers={"Origin": live.url}, max_redirects=0,
                                form={"dataset": "people", "key": "user-0031", "csrf": "forged"})
    assert resp.status == 403
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.setup.admin}"}) as api:
        assert api.get("/v1/status").json()["requests"] == before  # nothing was submitted
    # the session still works for the real form
    page.goto(live.url + "/console/requests")
    assert page.get_by_role("heading", name="Deletion requests").is_visible()


def test_admin_pages_render_at_phone_width(context: Any, live: Live) -> None:
    page = context.new_page()
    sign_in(page, live, live.setup.admin)
    for name, heading in (("models", "Models"), ("ledger", "Ledger"), ("health", "Health")):
        resp = page.goto(f"{live.url}/console/{name}")
        assert resp is not None and resp.status == 200
        assert page.get_by_role("heading", name=heading, exact=True).is_visible()
        # nothing wider than the 375 px viewport except inside scrollable table regions
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= 375, (name, overflow)
    page.goto(f"{live.url}/console/models")
    assert page.locator("svg.chart").count() == 3
    # keyboard: the skip link is the first stop and moves focus to the content
    page.goto(f"{live.url}/console/health")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.goto(f"{live.url}/console/ledger/verify")
    assert "The chain is intact" in page.inner_text("main")
