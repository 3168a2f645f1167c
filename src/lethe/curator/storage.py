"""Storage health: whether the data directory can be written, as operators see it (``/healthz``, ``lethe status``,
the console's Health page) and as the worker uses it (no batch is attempted while a write would fail).

A full disk (``ENOSPC``), a read-only file system or lost permissions make every submission fail (507) and every
batch fail. :class:`StorageHealth` notices it two ways:

* a **probe**: a small file written (``os.write``), fsynced and removed under ``<data_dir>``, plus the free space
  (``statvfs``) against a floor — any process checks the directory's present state this way, so ``lethe status`` (a
  process of its own) sees what the server and the worker see;
* **reports**: a storage failure observed by the service (a submission answered 507, a batch that failed with
  ``OSError``) marks the storage faulty at once.

The fault lasts until a write succeeds again (the next successful probe). With the SQLite default the database lives
in the data directory, so the probe covers it; an external database (PostgreSQL) has its own monitoring.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

from lethe.curator.errors import storage_message
from lethe.curator.files import write_zeros

#: the probe file (removed after each probe; recovery ignores it: it is not under ``artifacts/`` or ``data/``)
PROBE_FILE = ".storage-probe"
#: free space under which the storage is reported as (nearly) full: a batch writes artifacts of this order
MIN_FREE_BYTES = 4 * 1024 * 1024


def is_storage_error(exc: BaseException) -> bool:
    """True for failures of the storage itself (full, read-only, permissions, I/O), not of a computation."""
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM):
        return True
    text = str(getattr(exc, "orig", None) or exc).lower()
    return "disk is full" in text or "no space" in text or "readonly database" in text or "read-only" in text


class StorageHealth:
    """The storage state of one data directory (thread-safe).

    Parameters
    ----------
    data_dir : the data directory.
    min_free_bytes : free space below which the storage is reported full (0: only a failed write counts).
    """

    def __init__(self, data_dir: str | Path, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        if isinstance(min_free_bytes, bool) or not isinstance(min_free_bytes, int) or min_free_bytes < 0:
            raise TypeError(f"min_free_bytes must be an integer >= 0. Found {min_free_bytes!r}.")
        self.data_dir = Path(data_dir)
        self.min_free_bytes = min_free_bytes
        self._mutex = threading.Lock()
        self._fault: dict[str, Any] | None = None
        self.failures = 0  # storage failures reported or probed since the start

    def report_failure(self, exc: BaseException) -> None:
        """A write failed: the storage is faulty until a probe succeeds."""
        message = storage_message(exc, self.data_dir)
        with self._mutex:
            self.failures += 1
            since = self._fault["since"] if self._fault is not None else time.time()
            self._fault = {"error": message, "errno": getattr(exc, "errno", None), "since": since,
                           "repair": f"free space (or restore write access) under {self.data_dir}"}

    def probe(self) -> dict[str, Any] | None:
        """Write, fsync and remove a small file in the data directory and check the free space; return the fault
        (None when a write succeeded and the free space is above the floor — which clears a reported fault)."""
        path = self.data_dir / PROBE_FILE
        try:
            try:
                write_zeros(path, 4096)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            st = os.statvfs(self.data_dir)
            free = st.f_bavail * st.f_frsize
            if free < self.min_free_bytes:
                raise OSError(errno.ENOSPC, f"only {free} bytes free (floor {self.min_free_bytes})")
        except OSError as exc:
            self.report_failure(exc)
            return self.fault()
        with self._mutex:
            self._fault = None
        return None

    def fault(self) -> dict[str, Any] | None:
        """The current storage fault (None if healthy), without probing."""
        with self._mutex:
            return None if self._fault is None else dict(self._fault)


__all__ = ["MIN_FREE_BYTES", "PROBE_FILE", "StorageHealth", "is_storage_error"]
