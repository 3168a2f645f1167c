"""The processing worker: resumes interrupted work, then processes due batches until stopped.

Run it as its own process (``lethe worker``) or as a thread of the API server (``lethe serve``, the default). Any
number of workers may point at one data directory: the processing lock lets one batch run at a time. Killing a
worker at any point (even with SIGKILL) loses nothing: the next start recovers (see
:meth:`lethe.curator.service.Curator.recover`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from lethe.curator.adapters import available_mechanisms, get_adapter
from lethe.curator.public import log_failure
from lethe.curator.service import BusyError, Curator

log = logging.getLogger("lethe.curator.worker")


def run_worker(curator: Curator, *, once: bool = False, drain: bool = False, stop: threading.Event | None = None,
               on_ready: Callable[[], None] | None = None, progress: bool = False) -> int:
    """Process deletion requests; return the number of batches processed.

    Parameters
    ----------
    curator : the service.
    once : process what is due (everything with ``drain``) and return, instead of looping.
    drain : treat every pending request as due (ignore ``max_delay``).
    stop : set it to make the loop return after the current batch.
    on_ready : called once recovery has finished (e.g. to print "ready").
    """
    stop = stop or threading.Event()
    for name in available_mechanisms():  # warm up lazy imports so the first batch is not slowed by them
        get_adapter(name)
    curator.recover()
    try:
        curator.warm_up()  # the models' solver state, built once now rather than in the first batch
    except Exception as exc:  # not fatal: a batch rebuilds what it needs (and reports a failure there)
        log_failure(log, "worker: warm-up failed", exc)
    if on_ready is not None:
        on_ready()
    batches = 0
    while True:
        try:
            results = curator.process_pending(force=drain, progress=progress)
            batches += len(results)
        except BusyError:
            results = []
        except Exception as exc:  # keep serving: the batch's transaction rolled back; it is retried on the next poll
            log_failure(log, "worker: processing failed; will retry", exc)
            results = []
            if once:
                raise
        if once:
            return batches
        if stop.is_set():
            return batches
        if results:
            continue  # more may be due at once: requests that arrived during this batch form the next one
        # sleep until a request is committed in this process (API server) or the poll interval has passed
        curator.work_available.wait(curator.settings.poll_interval)
        curator.work_available.clear()
        if stop.is_set():
            return batches


class BackgroundWorker:
    """The worker as a daemon thread (used by the API server)."""

    def __init__(self, curator: Curator) -> None:
        self.curator = curator
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lethe-worker", daemon=True)

    def _run(self) -> None:
        try:
            run_worker(self.curator, stop=self.stop_event)
        except Exception as exc:
            log_failure(log, "worker thread stopped", exc)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        self.curator.work_available.set()
        self.thread.join(timeout)


__all__ = ["BackgroundWorker", "run_worker"]
