"""The worker as a process of its own (``lethe serve``'s default): supervised, restarted after a crash, gone with
the server; woken by committed submissions; the artifacts it publishes are not read back before the next batch,
yet a file changed afterwards is still caught."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.store import Model, ModelVersion
from lethe.curator.wakeup import STATE_FILE, WAKE_SOCKET, WakeListener, read_state

from .conftest import Data, Server, start_server, stop_server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _worker_pid(url: str, admin: str, *, other_than: int | None = None, timeout: float = 60.0) -> int:
    """The worker process's pid from ``GET /v1/status`` once it is ready (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
        w = st.get("worker_process")
        if w is not None and w.get("ready") and w["pid"] != other_than:
            return int(w["pid"])
        time.sleep(0.1)
    raise AssertionError("no ready worker process reported")


def _done(url: str, token: str, rid: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = httpx.get(f"{url}/v1/deletions/{rid}", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        if view["status"] != "pending":
            return view
        time.sleep(0.1)
    raise AssertionError("the request was not processed")


def _submit(url: str, token: str, key: str) -> str:
    r = httpx.post(url + "/v1/deletions", json={"dataset": "people", "key": key},
                   headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def test_serve_supervises_a_worker_process(server: Server, data: Data) -> None:
    pid = _worker_pid(server.url, server.admin)
    assert pid != server.proc.pid and _alive(pid)
    assert (server.data_dir / WAKE_SOCKET).exists() and (server.data_dir / STATE_FILE).exists()
    assert _done(server.url, server.alice, _submit(server.url, server.alice, data.keys[0]))["status"] == "done"
    os.kill(pid, signal.SIGKILL)  # a crash: the server starts another worker, which finishes the work
    rid = _submit(server.url, server.alice, data.keys[1])
    new = _worker_pid(server.url, server.admin, other_than=pid)
    assert new != pid and not _alive(pid)
    view = _done(server.url, server.alice, rid)
    assert view["status"] == "done" and len(view["certificates"]) == 1
    stop_server(server.proc)  # the server stops its worker (SIGTERM) and the worker removes its files
    assert not _alive(new)
    assert not (server.data_dir / WAKE_SOCKET).exists() and not (server.data_dir / STATE_FILE).exists()


def test_the_worker_process_stops_when_the_server_dies(server: Server) -> None:
    pid = _worker_pid(server.url, server.admin)
    server.proc.kill()  # SIGKILL: the server cannot stop its worker; the worker notices its parent is gone
    server.proc.wait(10)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    assert read_state(server.data_dir) is None  # a dead worker's state is not reported as a live one


@pytest.mark.parametrize("mode", ["thread", "none"])
def test_other_worker_modes(server: Server, data: Data, mode: str) -> None:
    stop_server(server.proc)
    url, proc = start_server(server.data_dir, "--worker", mode, log_name=f"serve-{mode}.log")
    try:
        rid = _submit(url, server.alice, data.keys[2])
        st = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {server.admin}"}, timeout=30).json()
        assert st["worker_process"] is None
        if mode == "thread":
            assert _done(url, server.alice, rid)["status"] == "done"
        else:  # nobody processes until a worker runs
            time.sleep(0.5)
            c = Curator(server.data_dir)
            try:
                assert c.request_status(rid)["status"] == "pending"
            finally:
                c.close()
    finally:
        stop_server(proc)


def test_create_app_refuses_an_unknown_worker_mode(curator: Curator) -> None:
    with pytest.raises(ValueError, match="run_worker"):
        create_app(curator, run_worker="fork")


def test_a_committed_submission_wakes_a_worker_process(curator: Curator, data: Data) -> None:
    listener = WakeListener(curator.data_dir)
    try:
        assert listener.sock is not None
        assert not listener.wait(0.0)  # nothing yet
        curator.submit_deletion("people", data.keys[3])
        assert listener.wait(10.0)
        assert not listener.wait(0.0)  # drained
        with pytest.raises(Exception):  # noqa: B017 - a refused submission commits nothing and wakes nobody
            curator.submit_deletion("no-such-dataset", data.keys[4])  # (an unknown key is accepted: issue 26)
        assert not listener.wait(0.2)
    finally:
        listener.close()
    assert not (curator.data_dir / WAKE_SOCKET).exists()


def test_published_artifacts_are_not_read_back_but_a_later_change_is_caught(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
    assert c.verify_models() == []
    loads: list[str] = []
    load = c.artifacts.load

    def counting(relpath: str, *a: object, **k: object) -> object:
        loads.append(relpath)
        return load(relpath, *a, **k)  # type: ignore[arg-type]

    c.artifacts.load = counting  # type: ignore[method-assign]
    for k in data.keys[:3]:
        c.submit_deletion("people", k)
    c.process_pending(force=True)
    with c.store.read() as s:
        m = s.scalar(select(Model))
        v = s.get(ModelVersion, m.current_version_id)
        relpath = v.artifact
    assert v.number == 2
    loads.clear()
    assert c.verify_models() == [] and relpath not in loads  # the worker wrote it: not read back
    path = c.data_dir / relpath
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # tampered on disk after the publication
    path.write_bytes(bytes(blob))
    faults = c.verify_models()
    assert relpath in loads and len(faults) == 1 and faults[0]["version"] == 2
    c.close()
