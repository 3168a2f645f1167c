"""The processing lock: one process (and one thread of it) changes models at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from lethe.curator.errors import BusyError


# -- the processing lock ----------------------------------------------------------------------------------------------
class ProcessingLock:
    """An exclusive ``flock`` on ``<data_dir>/processing.lock`` (released by the OS if the holder dies), plus a
    re-entrant thread lock so threads of one process (the API server and its embedded worker) take turns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0

    @contextlib.contextmanager
    def hold(self, timeout: float | None = 60.0) -> Iterator[None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._thread_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise BusyError(f"Another thread is processing {self.path.parent}; gave up after {timeout} s.")
        try:
            if self._depth == 0:
                self._fd = self._acquire_file(deadline, timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None
        finally:
            self._thread_lock.release()

    def acquire(self, timeout: float | None = 60.0) -> Callable[[], None]:
        """Take the lock as :meth:`hold` does, without a ``with`` block; return the function that releases it
        (call it exactly once, in a ``finally``)."""
        cm = self.hold(timeout)
        cm.__enter__()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                cm.__exit__(None, None, None)

        return release

    def _acquire_file(self, deadline: float | None, timeout: float | None) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    raise BusyError(f"Another process is processing {self.path.parent}; "
                                    f"gave up after {timeout} s.") from None
                time.sleep(0.05)



__all__ = ["ProcessingLock"]
