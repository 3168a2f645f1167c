"""Issue 35: a read-only storage is a documented fault everywhere — submissions 507, ``lethe status`` exit 3 with
the fault named, the console's Health page a fault page (not a 500) — and a broken pipe is not a storage failure.

Read-only is simulated as the kernel shows it after remounting the file system read-only: every write under the
data directory fails with ``EROFS`` (``os.open`` for writing, ``os.write``, the artifact writer) and SQLite refuses
writes ("attempt to write a readonly database")."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from lethe.curator import Curator
from lethe.curator.api import create_app
from lethe.curator.artifacts import ArtifactStore

from .conftest import lethe_cmd, subprocess_env

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _erofs(*_a: Any, **_k: Any) -> Any:
    raise OSError(errno.EROFS, "Read-only file system")


def read_only(monkeypatch: pytest.MonkeyPatch, c: Curator,
              sqlite_says: str = "attempt to write a readonly database") -> None:
    root = str(c.data_dir.resolve())
    real_open, real_write = os.open, os.write

    def open_(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if flags & WRITE_FLAGS and os.path.abspath(os.fspath(path)).startswith(root):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *a, **k)

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(root):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_write(fd, data)

    def refuse(conn: Any, cursor: Any, statement: str, *a: Any) -> None:
        if statement.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "BEGIN"):
            raise sqlite3.OperationalError(sqlite_says)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(ArtifactStore, "save", _erofs)
    event.listen(c.store.write_engine, "before_cursor_execute", refuse)
    monkeypatch.setattr(sys.modules[__name__], "_undo", lambda: event.remove(c.store.write_engine,
                                                                              "before_cursor_execute", refuse))


def _undo() -> None:  # replaced by read_only
    pass


@pytest.mark.parametrize("sqlite_says", ["attempt to write a readonly database", "disk I/O error"])
def test_read_only_storage_is_a_documented_fault(curator: Curator, monkeypatch: pytest.MonkeyPatch,
                                                 sqlite_says: str) -> None:
    from lethe.curator.console.health import check

    admin = curator.create_token("ops", "admin")
    alice = curator.create_token("alice", "requester")
    with TestClient(create_app(curator, run_worker="none"), base_url="http://127.0.0.1") as cl:
        page = cl.get("/console/login")
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        assert cl.post("/console/login", data={"token": admin, "csrf": csrf},
                       follow_redirects=False).status_code == 303
        read_only(monkeypatch, curator, sqlite_says)
        try:
            r = cl.post("/v1/deletions", json={"dataset": "people", "key": "user-0001"},
                        headers={"Authorization": f"Bearer {alice}"})
            assert r.status_code == 507, r.text
            h = cl.get("/console/health")
            assert h.status_code == 200 and "cannot be written" in h.text
            hz = cl.get("/healthz").json()
            assert hz["status"] == "degraded" and hz["storage"] == "faulty"
            st = curator.status()
            assert not st["healthy"] and any("storage" in f for f in st["faults"])
            assert any("cannot be written" in f.title for f in check(curator).faults)
        finally:
            _undo()


def test_cli_status_on_a_read_only_data_dir_exits_3(tmp_path: Path, curator: Curator) -> None:
    """The CLI opens the data directory itself: on a read-only one (here: a file system the CLI's user cannot
    write, simulated by an LD-free hook — the directory's mode 0500 for a non-root user, or the EROFS hook), it
    still answers with the storage fault and exit status 3."""
    curator.close()
    hook = tmp_path / "sitecustomize.py"
    hook.write_text(
        "import errno, os\n"
        f"ROOT = {str(curator.data_dir.resolve())!r}\n"
        "_open = os.open\n"
        "def _ro(path, flags, *a, **k):\n"
        "    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and os.path.abspath(os.fspath(path)).startswith(ROOT):\n"
        "        raise OSError(errno.EROFS, 'Read-only file system', os.fspath(path))\n"
        "    return _open(path, flags, *a, **k)\n"
        "os.open = _ro\n"
        "_chmod = os.chmod\n"
        "def _chmod_ro(path, *a, **k):\n"
        "    if os.path.abspath(os.fspath(path)).startswith(ROOT):\n"
        "        raise OSError(errno.EROFS, 'Read-only file system', os.fspath(path))\n"
        "    return _chmod(path, *a, **k)\n"
        "os.chmod = _chmod_ro\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    out = subprocess.run([*lethe_cmd(), "status", "--data-dir", str(curator.data_dir)], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    assert "read-only" in out.stderr and '"healthy": false' in out.stdout


def test_a_broken_pipe_is_not_a_storage_failure(curator: Curator) -> None:
    """`lethe ledger | head -1`: the reader closes the pipe; lethe exits quietly, as Unix tools do."""
    for i in range(40):
        curator.submit_deletion("people", f"user-{i:04d}")
    curator.close()
    env = subprocess_env()
    cmd = " ".join([*lethe_cmd(), "ledger", "--limit", "1000", "--data-dir", str(curator.data_dir)])
    out = subprocess.run(f"set -o pipefail; {cmd} | head -c 10 >/dev/null; echo \"rc=${{PIPESTATUS[0]}}\"",
                         shell=True, executable="/bin/bash", capture_output=True, text=True, env=env)
    assert "storage" not in out.stderr and "error" not in out.stderr, out.stderr
    assert "rc=141" in out.stdout or "rc=0" in out.stdout, out.stdout
