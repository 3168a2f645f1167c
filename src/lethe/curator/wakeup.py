"""How processes on one data directory tell a worker process that work has arrived, and what the worker tells them.

* **Wake-up**: a worker process (``lethe worker``, or the one ``lethe serve`` starts) binds a Unix datagram socket
  ``<data_dir>/worker.sock``; every process that commits a deletion request sends it one byte (best effort, never
  blocking: a full buffer already holds a wake-up), so the worker starts the batch at once instead of at its next
  poll. Nothing is sent but that byte. Without the socket (the path is too long for ``AF_UNIX``, or no worker runs)
  the worker finds the requests at its next poll (``--poll-interval``).
* **State**: the worker process writes ``<data_dir>/worker.state`` (JSON: its pid, start time, whether it is ready,
  how many models it keeps warm) atomically, so that the API server, which does not process, can report the worker
  (``GET /v1/status``: ``worker``, ``warm_models``). It holds no record, key or value.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
from pathlib import Path
from typing import Any

from lethe.io import write_bytes_atomic

log = logging.getLogger("lethe.curator.worker")

WAKE_SOCKET = "worker.sock"
STATE_FILE = "worker.state"
#: sun_path holds 108 bytes on Linux (104 on BSDs); longer data-directory paths do without the wake-up socket
MAX_SOCKET_PATH = 100


def wake_path(data_dir: str | Path) -> Path | None:
    """The wake-up socket's path, or None when it is too long for ``AF_UNIX``."""
    path = Path(data_dir) / WAKE_SOCKET
    return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH else None


class WakeSender:
    """Sends the wake-up byte to ``<data_dir>/worker.sock`` (thread-safe; errors are ignored: the worker polls)."""

    def __init__(self, data_dir: str | Path) -> None:
        path = wake_path(data_dir)
        self.path = None if path is None else str(path)
        self._sock: socket.socket | None = None

    def send(self) -> None:
        if self.path is None:
            return
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(b"\0", self.path)
        except OSError:  # no worker listening (no socket, or a stale one), or a wake-up already queued
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class WakeListener:
    """The worker's end: binds ``<data_dir>/worker.sock`` (replacing a stale one) and waits on it."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = wake_path(data_dir)
        self.sock: socket.socket | None = None
        self._ino: int | None = None
        if self.path is None:
            log.info("worker: the data directory's path is too long for a wake-up socket; polling only")
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # a dead worker's (a live one's stops receiving; it still polls)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            sock.setblocking(False)
            self.sock, self._ino = sock, os.stat(self.path).st_ino
        except OSError as exc:
            log.warning("worker: no wake-up socket (%s); polling only", type(exc).__name__)

    def wait(self, timeout: float) -> bool:
        """Wait until woken or ``timeout`` seconds have passed; True if woken. Drains queued wake-ups."""
        if self.sock is None:
            select.select([], [], [], timeout)
            return False
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        with contextlib.suppress(OSError):
            while True:
                self.sock.recv(64)
        return True

    def close(self) -> None:
        if self.sock is None:
            return
        self.sock.close()
        self.sock = None
        with contextlib.suppress(OSError):  # only our own socket file (a newer worker may have replaced it)
            assert self.path is not None
            if os.stat(self.path).st_ino == self._ino:
                os.unlink(self.path)


def write_state(data_dir: str | Path, state: dict[str, Any]) -> None:
    """Replace ``<data_dir>/worker.state`` atomically (mode 0600)."""
    write_bytes_atomic(Path(data_dir) / STATE_FILE, json.dumps(state).encode(), mode=0o600, fsync=False)


def clear_state(data_dir: str | Path, pid: int) -> None:
    """Remove the state file if it is ``pid``'s."""
    path = Path(data_dir) / STATE_FILE
    state = read_state(data_dir, alive_only=False)
    if state is not None and state.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(path)


def read_state(data_dir: str | Path, *, alive_only: bool = True) -> dict[str, Any] | None:
    """The worker process's last state, or None (no file, unreadable, or — with ``alive_only`` — its process is
    gone)."""
    try:
        with open(Path(data_dir) / STATE_FILE) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int):
        return None
    if alive_only:
        try:
            os.kill(state["pid"], 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, another user's
            pass
    return state


__all__ = ["STATE_FILE", "WAKE_SOCKET", "WakeListener", "WakeSender", "clear_state", "read_state", "wake_path",
           "write_state"]
