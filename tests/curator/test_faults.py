"""Faults operators see (issue 28): a full disk is visible, logging survives it, the worker backs off without
rebuilding its solver state, and every answer says ``nosniff``.

A full disk is simulated by making ``os.write`` raise ``ENOSPC`` for files under the data directory (the storage
probe writes with it) and the artifact writer raise ``ENOSPC`` (what a batch hits first on a full disk).
"""

from __future__ import annotations

import errno
import io
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lethe.curator import Curator
from lethe.curator.adapters import get_adapter
from lethe.curator.api import create_app
from lethe.curator.artifacts import ArtifactStore
from lethe.curator.logs import configure_file_logging
from lethe.curator.public import log_failure
from lethe.curator.worker import run_worker

from .conftest import Data


def _enospc(*_a: Any, **_k: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def fill_disk(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    """Writes under ``data_dir`` through ``os.write`` and the artifact writer fail with ENOSPC."""
    real_write = os.write
    root = str(data_dir.resolve())

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(root):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(ArtifactStore, "save", _enospc)


# -- health ---------------------------------------------------------------------------------------------------------
def test_full_disk_degrades_healthz_status_and_metrics_until_a_write_succeeds(
        curator: Curator, monkeypatch: pytest.MonkeyPatch) -> None:
    from lethe.cli import main

    token = curator.create_token("ops", scope="admin")
    app = create_app(curator, run_worker="none")
    with TestClient(app) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        with monkeypatch.context() as m:
            fill_disk(m, curator.data_dir)
            r = client.get("/healthz")
            assert r.status_code == 200
            assert r.json()["status"] == "degraded" and r.json()["storage"] == "faulty"
            detail = client.get("/healthz", headers={"Authorization": f"Bearer {token}"}).json()["detail"]
            assert "full" in detail["storage"]["error"]
            st = curator.status()
            assert not st["healthy"] and any("storage" in f for f in st["faults"])
            assert main(["status", "--data-dir", str(curator.data_dir)]) != 0  # `lethe status` exits non-zero
            metrics = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
            assert "lethe_storage_fault 1.0" in metrics
        # space again: the next write succeeds and the fault clears
        assert client.get("/healthz").json() == {"status": "ok"}
        assert curator.status()["healthy"]
        assert main(["status", "--data-dir", str(curator.data_dir)]) == 0


def test_a_507_marks_the_storage_faulty(curator: Curator, data: Data, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission refused for a full disk reports the fault at once (before any probe)."""
    from sqlalchemy.exc import OperationalError

    token = curator.create_token("app", scope="requester")
    app = create_app(curator, run_worker="none")

    def full(*_a: Any, **_k: Any) -> Any:
        raise OperationalError("INSERT", {}, Exception("database or disk is full"))

    with TestClient(app) as client:
        monkeypatch.setattr(Curator, "submit_deletions", full)
        r = client.post("/v1/deletions", json={"dataset": "people", "key": data.keys[0]},
                        headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 507
        fault = curator.retention.storage.fault()
        assert fault is not None and "full" in fault["error"]


# -- logging --------------------------------------------------------------------------------------------------------
def test_logging_survives_a_full_disk_without_tracebacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remove = configure_file_logging(tmp_path, "worker")
    handler = logging.getLogger("lethe").handlers[-1]
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    log = logging.getLogger("lethe.curator.worker")
    try:
        with monkeypatch.context() as m:
            m.setattr(handler.stream, "write", _enospc)  # type: ignore[attr-defined]
            for _ in range(100):
                try:
                    raise OSError(errno.ENOSPC, "No space left on device")
                except OSError as exc:
                    log_failure(log, "worker: processing failed; will retry", exc)
        assert stderr.getvalue() == ""  # before: "--- Logging error ---" and a traceback per record
        assert handler.dropped == 100  # type: ignore[attr-defined]
        log.warning("space again")
        handler.flush()
        text = (tmp_path / "logs" / "worker.log").read_text()
        assert "100 record(s) dropped" in text and "space again" in text
        assert handler.dropped == 0 and handler.dropped_total == 100  # type: ignore[attr-defined]
    finally:
        remove()


# -- the worker -----------------------------------------------------------------------------------------------------
def test_backoff_delay_doubles_and_is_bounded() -> None:
    from lethe.curator.worker import MAX_BACKOFF, backoff_delay

    delays = [backoff_delay(k) for k in range(0, 40)]
    assert delays[0] == 0.0 and delays[1:5] == [1.0, 2.0, 4.0, 8.0]
    assert all(b >= a for a, b in zip(delays, delays[1:], strict=False))
    assert max(delays) == MAX_BACKOFF
    assert backoff_delay(10_000) == MAX_BACKOFF  # no overflow


class _Stop(threading.Event):
    """The worker's stop event; its waits (the backoff) are recorded instead of slept, and it is set after ``n``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        if len(self.waits) >= self.n:
            self.set()
        return self.is_set()


def test_worker_backs_off_on_a_full_disk_and_keeps_its_warm_state(
        curator: Curator, data: Data, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a retry every poll (≈ 1.6/s in the audit), each rebuilding the solver state, each logged with a
    traceback. Now: waits of 1, 2, 4 … s, no batch attempted while the storage cannot be written, the warm state
    kept, failures logged at the 1st, 2nd, 4th, 8th … in a row."""
    adapter_cls = type(get_adapter("certified-removal"))
    rebuilds = [0]
    counting = [False]
    real_restore = adapter_cls.restore

    def restore(self: Any, *args: Any, **kwargs: Any) -> Any:
        if counting[0]:
            rebuilds[0] += 1
        return real_restore(self, *args, **kwargs)

    monkeypatch.setattr(adapter_cls, "restore", restore)
    for k in data.keys[:3]:
        curator.submit_deletion("people", k)
    polls: list[float] = []

    def poll_wait(seconds: float) -> None:  # the poll between attempts (woken by new requests)
        polls.append(seconds)
        if len(polls) + len(stop.waits) >= 40:
            stop.set()

    def ready() -> None:
        counting[0] = True  # the start's warm-up is not a rebuild

    stop = _Stop(8)
    with monkeypatch.context() as m:
        fill_disk(m, curator.data_dir)
        caplog.set_level(logging.INFO, logger="lethe")
        run_worker(curator, drain=True, stop=stop, wait=poll_wait, on_ready=ready)
    assert stop.waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert rebuilds[0] == 0
    logged = [r for r in caplog.records if "processing failed" in r.getMessage()]
    assert len(logged) == 4  # failures 1, 2, 4, 8
    assert curator.pending_count() == 3  # nothing was counted against the requests' attempts either
    # space again: the next attempt processes the batch from the kept warm state (no rebuild)
    assert run_worker(curator, once=True, drain=True) >= 1
    assert curator.pending_count() == 0
    assert rebuilds[0] == 0
    assert curator.status()["healthy"]


def test_a_batch_failing_as_a_whole_is_backed_off_not_retried_at_once(curator: Curator, data: Data,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that fails as a whole (here: its artifact cannot be written, while the probe still succeeds — a disk
    that fills during the batch) comes back as ``retry``; before, the worker took it again at once (``results`` was
    not empty), as fast as it could."""
    curator.submit_deletion("people", data.keys[0])
    monkeypatch.setattr(ArtifactStore, "save", _enospc)
    stop = _Stop(2)
    polls: list[float] = []

    def poll_wait(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) >= 50:
            stop.set()

    run_worker(curator, drain=True, stop=stop, wait=poll_wait)
    assert stop.waits == [1.0, 2.0]  # before: no wait at all between the attempts
    assert polls == []


def test_worker_recovers_from_a_failure_and_resets_its_backoff(curator: Curator, data: Data,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure that is not the storage's (the batch itself raised) is backed off too; one success resets it."""
    calls = [0]
    real = Curator.process_pending

    def flaky(self: Curator, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= 3:
            raise RuntimeError("transient")
        return real(self, **kwargs)

    monkeypatch.setattr(Curator, "process_pending", flaky)
    stop = _Stop(10**6)
    polls: list[float] = []

    def poll_wait(seconds: float) -> None:
        polls.append(seconds)
        if calls[0] >= 6:
            stop.set()

    run_worker(curator, stop=stop, wait=poll_wait)
    assert stop.waits == [1.0, 2.0, 4.0]  # backoff while failing; then ordinary polls
    assert len(polls) >= 1


# -- headers --------------------------------------------------------------------------------------------------------
def test_every_answer_says_nosniff(curator: Curator) -> None:
    token = curator.create_token("ops", scope="admin")
    app = create_app(curator, run_worker="none", max_body_bytes=1024)
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as client:
        answers = [client.get("/healthz"), client.get("/v1/status", headers=auth), client.get("/v1/status"),
                   client.get("/v1/models/nope/budget", headers=auth), client.get("/metrics", headers=auth),
                   client.post("/v1/deletions", content=b"x" * 4096, headers=auth),
                   client.post("/v1/deletions", json={"dataset": 1}, headers=auth)]
        codes = [r.status_code for r in answers]
        assert codes == [200, 200, 401, 404, 200, 413, 422], codes
        for r in answers:
            assert r.headers.get("x-content-type-options") == "nosniff", r.request.url
