"""Logging and progress display of the curator: a log file per process under ``<data_dir>/logs`` whose tracebacks
withhold exception messages (they may name rows), and progress bars only where a person watches."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lethe.curator.settings import LOG_DIR


class NoBar:
    """The stand-in for a progress bar where none is shown."""

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None


def progress_bar(progress: bool, **kwargs: Any) -> Any:
    """A tqdm bar if ``progress``, else a no-op one.

    tqdm's constructor takes ``tqdm.get_lock()`` even when the bar is disabled, and that lock is a
    ``multiprocessing`` RLock shared with every process forked after it was made. A worker killed (SIGKILL, OOM)
    while holding it would leave every other process of the service hanging at its next bar, so the unattended
    paths (the worker, the server) never construct one.
    """
    if not progress:
        return NoBar()
    from tqdm import tqdm

    return tqdm(**kwargs)


class ScrubbingFormatter(logging.Formatter):
    """Tracebacks keep their frames but not the exception's message, which a mechanism may have written with row
    positions ("indices must be distinct. Found 17 ...") — logs follow the publication rule too."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's API
        import traceback

        etype, _value, tb = ei
        frames = "".join(traceback.format_tb(tb)) if tb is not None else ""
        name = etype.__name__ if etype is not None else "Exception"
        return f"Traceback (most recent call last):\n{frames}{name} (message withheld: it may name rows)"


class DroppingFileHandler(logging.FileHandler):
    """A log file that survives a full disk: a record that cannot be written (``ENOSPC``, a read-only file system,
    any error of the stream) is dropped and counted — no traceback on stderr for each one, as
    :meth:`logging.Handler.handleError` prints — and the first record written again says how many were dropped."""

    def __init__(self, filename: str | Path, mode: str = "a", encoding: str | None = None,
                 delay: bool = False) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=delay)
        self.dropped = 0  # records dropped since the last one written
        self.dropped_total = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.dropped:  # say first how many records are missing before this one (the note is not counted)
            missing, self.dropped = self.dropped, 0
            super().emit(logging.LogRecord(record.name, logging.WARNING, __file__, 0,
                                           "logging: %d record(s) dropped (the log file could not be written)",
                                           (missing,), None))
            if self.dropped:  # still failing: the note was dropped too
                self.dropped, self.dropped_total = missing, self.dropped_total - 1
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's API
        self.dropped += 1
        self.dropped_total += 1


def configure_file_logging(data_dir: str | Path, name: str) -> Callable[[], None]:
    """Log ``lethe.*`` INFO and above to ``<data_dir>/logs/<name>.log`` (mode 0600). Returns a remover.

    The curator never logs keys, features or labels: only ids, counts and error types.
    """
    path = Path(data_dir).resolve() / LOG_DIR / f"{name}.log"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    handler = DroppingFileHandler(path)
    handler.setFormatter(ScrubbingFormatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("lethe")
    logger.addHandler(handler)
    level = logger.level
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)

    def remove() -> None:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(level)  # as it was: a remover undoes what it set up

    return remove




__all__ = ["DroppingFileHandler", "NoBar", "ScrubbingFormatter", "configure_file_logging", "progress_bar"]
