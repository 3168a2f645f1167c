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
    re-entrant thread lock so threads of one process (the API server and its embedded worker) take turns.

    Fair turns: a process that finds the lock taken says so with a shared ``flock`` on ``<path>.wait`` while it
    waits (released once it holds the lock, or gives up). The worker, which takes the lock again and again (one
    batch after another), checks :meth:`waiters` between batches and, when someone waits, releases the lock and
    :meth:`yield_to_waiters` — it takes the lock again only after every waiter got it — so a management command
    (``lethe model retrain``, ``lethe dataset add``, ``lethe process``) is not starved by a steady stream.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wait_path = path.with_name(path.name + ".wait")
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
        waiting: int | None = None  # our shared lock on the wait file while we wait (see the class notes)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        os.close(fd)
                        raise BusyError(f"Another process is processing {self.path.parent}; "
                                        f"gave up after {timeout} s.") from None
                    if waiting is None:
                        waiting = self._announce()
                    time.sleep(0.05)
        finally:
            if waiting is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(waiting, fcntl.LOCK_UN)
                os.close(waiting)

    def _announce(self) -> int | None:
        """Take a shared lock on the wait file: the holder sees that someone waits (None if it cannot be opened,
        e.g. on a read-only storage: the wait is then merely unannounced)."""
        try:
            wfd = os.open(self.wait_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        while True:
            try:
                fcntl.flock(wfd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return wfd
            except BlockingIOError:  # a yielding holder holds it exclusively for an instant
                time.sleep(0.005)

    def waiters(self) -> bool:
        """Whether another process waits for the lock (it announced its wait: see the class notes)."""
        try:
            wfd = os.open(self.wait_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(wfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(wfd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(wfd)

    def yield_to_waiters(self, timeout: float = 60.0) -> bool:
        """Called without the lock: wait until every process that announced its wait has taken the lock (or given
        up), at most ``timeout`` seconds. True if none waits any more."""
        try:
            wfd = os.open(self.wait_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(wfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(wfd, fcntl.LOCK_UN)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.01)
        finally:
            os.close(wfd)



__all__ = ["ProcessingLock"]
