"""Regenerate the console screenshots in docs/console/ (``make screenshots``).

Builds a demo data directory (a synthetic dataset of 600 records, a held-out set, a certified-removal model, 26
batches of deletions with retrainings), starts ``lethe serve`` on 127.0.0.1, and photographs every page at 1280
and 375 px wide with headless Chromium (Debian's ``chromium``, driven by Playwright).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.console.conftest import free_port, subprocess_env, write_data  # noqa: E402

from lethe.curator import Curator, Settings  # noqa: E402
from lethe.curator.console import health  # noqa: E402
from lethe.curator.console import queries as Q  # noqa: E402
from lethe.curator.service import Principal  # noqa: E402

PARAMS = {"lam": 1e-3, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}
WIDTHS = (1280, 375)
MAX_HEIGHT = 1800


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    return path


def build(tmp: Path) -> tuple[Path, dict[str, str]]:
    keys = write_data(tmp / "patients.csv", 600, d=8, prefix="patient")
    write_data(tmp / "holdout.csv", 400, d=8, seed=1, prefix="held")
    c = Curator(tmp / "data", settings=Settings(batch_size=4))
    tokens = {"ops": c.create_token("ops", "admin"), "alice": c.create_token("alice", "requester"),
              "bob": c.create_token("bob", "requester")}
    c.register_dataset("patients", tmp / "patients.csv", key="user_id", label="label")
    c.register_dataset("patients-holdout", tmp / "holdout.csv", key="user_id", label="label")
    c.train("patients", "risk-model", params=PARAMS, random_state=0)
    with c.store.read() as s:
        model_id = Q.models(s)[0]["id"]
    Q.append_event(c.store, Q.HOLDOUT_SET, {"model": "risk-model", "dataset": "patients-holdout"}, model_id=model_id)
    health.evaluate_holdout(c)
    principals = ("alice", "bob", "ops")
    i = 0
    for batch in range(26):
        for _ in range(4):
            who = principals[i % 3]
            c.submit_deletion("patients", keys[i], principal=Principal(who, "admin" if who == "ops" else "requester"),
                              client_request_id=f"{who}-{i:03d}" if who != "ops" else None)
            i += 1
        c.process_pending(force=True, max_batches=1)
        if batch % 5 != 3:  # some versions are superseded before an evaluation runs: gaps in the plot
            health.evaluate_holdout(c)
    for _ in range(3):  # left pending: the server runs without a worker
        c.submit_deletion("patients", keys[i], principal=Principal("alice", "requester"),
                          client_request_id=f"alice-{i:03d}")
        i += 1
    health.record_checkpoint(c)
    c.close()
    return tmp / "data", tokens


def main() -> None:
    from playwright.sync_api import sync_playwright

    exe = chromium()
    with tempfile.TemporaryDirectory() as d:
        data_dir, tokens = build(Path(d))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port), "--data-dir", str(data_dir), "--no-worker", "--log-level", "warning"],
                                env=subprocess_env())
        try:
            for _ in range(400):
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=exe, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run"])
                for width in WIDTHS:
                    ctx = browser.new_context(viewport={"width": width, "height": 900}, device_scale_factor=1)
                    page = ctx.new_page()
                    page.goto(url + "/console/login")
                    shot(page, "login", width)
                    page.fill("#token", tokens["ops"])
                    page.click("button[type=submit]")
                    page.wait_for_url("**/console/requests")
                    shot(page, "requests", width)
                    page.click("table.requests tbody tr:nth-child(4) a")  # a processed request
                    page.wait_for_selector(".certificate")
                    page.click(".certificate details summary")
                    shot(page, "request", width)
                    for name in ("models", "ledger", "health"):
                        page.goto(f"{url}/console/{name}")
                        shot(page, name, width)
                    ctx.close()
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def shot(page: object, name: str, width: int) -> None:
    path = HERE / f"{name}-{width}.png"
    height = page.evaluate("document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    clip = {"x": 0, "y": 0, "width": width, "height": min(height, MAX_HEIGHT)}  # long tables: the top only
    page.screenshot(path=str(path), full_page=True, clip=clip)  # type: ignore[attr-defined]
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
