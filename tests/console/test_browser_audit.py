"""Issue 38 in a real headless Chromium (Debian's ``chromium`` through Playwright) against a live ``lethe serve``: a
certificate downloaded from the console verifies offline and fails with one byte edited; the verify page checks an
uploaded file; the printed certificate fits on at most two A4 pages (rendered to PDF by the browser and counted).

Skipped only when no Chromium executable exists on this machine (as ``test_browser.py``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lethe.curator import Curator

from .._server import lethe_cmd, start_server, stop_server, subprocess_env
from .conftest import CHROMIUM, NO_CHROMIUM, PARAMS, Live, build

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)


@pytest.fixture
def live3(tmp_path: Path) -> Iterator[Live]:
    """A service whose dataset has three models: a certificate with three sections (the longest to print)."""
    setup = build(tmp_path)
    c = Curator(setup.data_dir)
    try:
        c.train("people", "clf-b", params=PARAMS, random_state=1)
        c.train("people", "clf-c", params={**PARAMS, "epsilon": 0.5}, random_state=2)
    finally:
        c.close()
    url, proc = start_server(setup.data_dir, log_name="console-audit.log")
    try:
        yield Live(url, setup)
    finally:
        stop_server(proc)


def _verify(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lethe_cmd("certificate", "verify", str(path), *extra), capture_output=True, text=True,
                          env=subprocess_env(), timeout=120, check=False)


def _pdf_pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


def test_download_verify_tamper_upload_and_print(browser: Any, live3: Live, tmp_path: Path) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    ctx.set_default_timeout(30_000)
    try:
        page = ctx.new_page()
        page.goto(live3.url + "/console")
        page.get_by_label("Token").fill(live3.setup.alice)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/console/requests")
        page.get_by_text("Submit a deletion request").click()
        page.get_by_label("Dataset", exact=True).first.select_option("people")
        page.get_by_label("Record key").fill(live3.setup.keys[11])
        page.get_by_label("Your reference (optional)").fill("audit-2026-Q3-001")
        page.get_by_role("button", name="Submit request").click()
        page.wait_for_url("**/console/requests/*")
        page.wait_for_selector("#request-status:text('done')", timeout=60_000)
        # the signed JSON, downloaded as a user does
        with page.expect_download() as info:
            page.get_by_role("link", name="Download (signed JSON)").click()
        cert = tmp_path / info.value.suggested_filename
        info.value.save_as(cert)
        with page.expect_download() as info:
            page.get_by_role("link", name="Download the certificate (HTML)").click()
        html = tmp_path / info.value.suggested_filename
        info.value.save_as(html)
        key = page.request.get(live3.url + "/v1/keys").json()["keys"][0]["public_key"]
        ok = _verify(cert, "--public-key", key)
        assert ok.returncode == 0 and ok.stdout.startswith("VALID"), ok.stdout + ok.stderr
        assert _verify(html, "--public-key", key).returncode == 0
        raw = cert.read_bytes()
        i = raw.index(b'"reference": "audit-2026-Q3-00') + len(b'"reference": "audit-2026-Q3-00')
        edited = tmp_path / "edited.json"
        edited.write_bytes(raw[:i] + b"2" + raw[i + 1:])  # one byte
        bad = _verify(edited, "--public-key", key)
        assert bad.returncode == 1 and "changed after it was signed" in bad.stdout, bad.stdout
        # the verify page: the file chosen in the browser, read into the form by console.js
        page.goto(live3.url + "/console/verify")
        page.set_input_files("#cert-file", str(cert))
        page.wait_for_function("document.getElementById('cert-text').value.length > 100")
        page.get_by_role("button", name="Verify").click()
        assert "Valid:" in page.inner_text("#verdict")
        page.goto(live3.url + "/console/verify")
        page.set_input_files("#cert-file", str(edited))
        page.wait_for_function("document.getElementById('cert-text').value.length > 100")
        page.get_by_role("button", name="Verify").click()
        assert "Not valid:" in page.inner_text("#verdict")
        # printed: the downloaded file opened offline, rendered to A4 by the browser
        doc = ctx.new_page()
        doc.goto(html.resolve().as_uri())
        text = doc.inner_text("main")
        for words in ("What this guarantees", "Against whom", "What it does not cover", "one published version",
                      "Signing key id", "Ledger event"):
            assert words in text, words
        assert text.count("What this guarantees") == 3
        pdf = doc.pdf(format="A4", print_background=True)
        (tmp_path / "certificate.pdf").write_bytes(pdf)
        assert 1 <= _pdf_pages(pdf) <= 2, _pdf_pages(pdf)
        # without the print stylesheet the same page is longer: the count is of the real layout
        doc.emulate_media(media="screen")
        assert _pdf_pages(doc.pdf(format="A4", print_background=True)) > _pdf_pages(pdf)
    finally:
        ctx.close()


def test_audit_pages_fit_a_phone(browser: Any, live3: Live) -> None:
    ctx = browser.new_context(viewport={"width": 375, "height": 800})
    ctx.set_default_timeout(30_000)
    try:
        page = ctx.new_page()
        page.goto(live3.url + "/console")
        page.get_by_label("Token").fill(live3.setup.admin)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/console/requests")
        for path in ("/console/requests", "/console/exports", "/console/verify", "/console/ledger/verify"):
            page.goto(live3.url + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (path, width)
        assert page.get_by_role("heading", name="The stored hash chain").is_visible()
    finally:
        ctx.close()
