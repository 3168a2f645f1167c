"""The processing worker: resumes interrupted work, then processes due batches until stopped.

Three ways to run it, all equivalent for the guarantees (every batch is published by one transaction under the
processing lock; a worker killed at any point — even with SIGKILL — loses nothing, the next start recovers, see
:meth:`lethe.curator.service.Curator.recover`):

* ``lethe serve`` (default ``--worker process``): the server starts ``lethe worker`` as a child process and
  supervises it (:class:`WorkerProcess`): restarted after it dies (after 1 s, doubling up to 30 s while it keeps
  dying), stopped with the server (SIGTERM: it finishes its batch; SIGKILL after 30 s), and it exits by itself if the
  server dies. The batches' numerical work then never competes with the API for one interpreter's GIL.
* ``lethe worker``: a worker on its own (another machine's API servers, a container of its own). Any number of
  workers may point at one data directory: the processing lock lets one batch run at a time.
* ``lethe serve --worker thread``: the worker as a thread of the server (:class:`BackgroundWorker`; one process, the
  GIL shared with the API).

A worker process learns of new requests through ``<data_dir>/worker.sock`` (:mod:`lethe.curator.wakeup`) at once,
and polls every ``--poll-interval`` seconds in any case.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lethe.curator.adapters import get_adapter
from lethe.curator.errors import BusyError, StorageError
from lethe.curator.public import log_failure
from lethe.curator.service import Curator
from lethe.curator.storage import is_storage_error

log = logging.getLogger("lethe.curator.worker")

#: the first wait after a failed attempt (seconds); it doubles with each failure in a row, up to MAX_BACKOFF
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0


def backoff_delay(failures: int, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """The wait after ``failures`` failed attempts in a row: ``first · 2^(failures − 1)``, at most ``cap``
    (0 when nothing failed)."""
    if failures <= 0:
        return 0.0
    return float(min(cap, first * 2.0 ** min(failures - 1, 62)))


def run_worker(curator: Curator, *, once: bool = False, drain: bool = False, stop: threading.Event | None = None,
               on_ready: Callable[[], None] | None = None, progress: bool = False,
               wait: Callable[[float], object] | None = None, parent_pid: int | None = None,
               on_state: Callable[[], None] | None = None,
               backoff: Callable[[float], object] | None = None) -> int:
    """Process deletion requests; return the number of batches processed.

    Parameters
    ----------
    curator : the service.
    once : process what is due (everything with ``drain``) and return, instead of looping.
    drain : treat every pending request as due (ignore ``max_delay``).
    stop : set it to make the loop return after the current batch.
    on_ready : called once recovery has finished (e.g. to print "ready").
    wait : ``wait(seconds)`` sleeps until woken or the time has passed (a worker process: its wake-up socket);
        default: the curator's ``work_available`` event (set by submissions committed in this process).
    parent_pid : return (after the current batch) once this process is no longer the parent (the server that
        started this worker died).
    on_state : called after recovery and whenever the set of warm models changed (a worker process writes its
        state file).
    backoff : ``backoff(seconds)`` waits after a failed attempt, not woken by new requests (default: ``stop.wait``).
        The wait doubles with each failure in a row (:func:`backoff_delay`: 1 s, 2 s, 4 s … up to 60 s) and is back
        to nothing after a success.

    Notes
    -----
    Before each attempt the worker checks that the data directory can be written
    (:meth:`lethe.curator.storage.StorageHealth.probe`). While it cannot (a full disk), no batch is attempted — so
    no batch computes a removal it cannot publish and drops its warm solver state for it, to rebuild it at the
    next attempt — and the worker waits with the backoff; ``/healthz`` and ``lethe status`` report the fault.
    """
    stop = stop or threading.Event()
    curator.recover()
    for name in curator.mechanisms_in_use():  # warm up lazy imports so the first batch is not slowed by them
        get_adapter(name)
    try:
        curator.warm_up()  # the models' solver state, built once now rather than in the first batch
    except Exception as exc:  # not fatal: a batch rebuilds what it needs (and reports a failure there)
        log_failure(log, "worker: warm-up failed", exc)
    gc.collect()  # what exists now (imports, the warm models) is never traversed again by a full collection,
    gc.freeze()   # whose pauses would otherwise fall inside a batch's transaction (the submissions wait for it)
    if on_ready is not None:
        on_ready()
    warm_seen = curator.warm_state()
    if on_state is not None:
        on_state()

    def wait_event(seconds: float) -> None:
        curator.work_available.wait(seconds)
        curator.work_available.clear()

    sleep = wait or wait_event
    pause = backoff or stop.wait
    lock = curator.lock

    def orphaned() -> bool:
        return parent_pid is not None and os.getppid() != parent_pid

    def keep_going() -> bool:
        # between two batches: an orphaned worker stops after its batch (its server died: the new server's worker
        # takes over); when another process waits for the processing lock, it gets its turn now
        return not stop.is_set() and not orphaned() and not lock.waiters()

    storage = curator.retention.storage
    batches = 0
    failures = 0
    while True:
        failed = False
        try:
            fault = storage.probe()
            if fault is not None:
                raise StorageError(fault["error"])
            results = curator.process_pending(force=drain, progress=progress, keep_going=keep_going)
            batches += len(results)
            if any(r.status == "retry" for r in results):  # a batch failed as a whole (nothing published): back
                failed = True                                # off, not an immediate retry; a storage fault is seen
                failures += 1                                # by the probe (and reported) before the next attempt
                storage.probe()
        except BusyError:
            results = []
        except Exception as exc:  # keep serving: the batch's transaction rolled back; it is retried after a backoff
            failed = True
            if is_storage_error(exc) or isinstance(exc, StorageError):
                storage.report_failure(exc)
            failures += 1
            if failures == 1 or failures & (failures - 1) == 0:  # the 1st, 2nd, 4th, 8th … failure in a row
                log_failure(log, "worker: processing failed; will retry" if failures == 1 else
                            f"worker: processing failed again ({failures} in a row); will retry", exc)
            results = []
            if once:
                raise
        if not failed and failures:
            log.info("worker: processing works again after %d failed attempt(s)", failures)
            failures = 0
        if on_state is not None and curator.warm_state() != warm_seen:
            warm_seen = curator.warm_state()
            on_state()
        if once or stop.is_set():
            return batches
        if orphaned():
            log.warning("worker: the server that started it is gone; stopping")
            return batches
        if lock.waiters():  # a fair turn: the lock is taken again only after the waiting command had it
            lock.yield_to_waiters()
        if failed:
            pause(backoff_delay(failures))  # not shortened by new requests: they would only fail the same way
            if stop.is_set():
                return batches
            continue
        if results:
            continue  # more may be due at once: requests that arrived during this batch form the next one
        sleep(curator.settings.poll_interval)  # until a request is committed, or the poll interval has passed
        if stop.is_set():
            return batches


class BackgroundWorker:
    """The worker as a daemon thread of the API server (``lethe serve --worker thread``)."""

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


class WorkerProcess:
    """The worker as a supervised child process of the API server (``lethe serve``'s default).

    The child is a fresh interpreter (``python -m lethe.cli worker``: spawned, never forked, so it inherits no
    lock, thread or open database connection of the server) on the same data directory, database (passed in its
    environment, not on its command line) and settings. If it dies it is started again, after ``restart_delay``
    seconds, doubling up to ``max_restart_delay`` while it keeps dying within a minute of its start; its next start
    recovers whatever it left half-done, exactly as after a crash. :meth:`stop` sends SIGTERM (the worker finishes
    its current batch) and SIGKILL after ``stop_timeout`` seconds (safe: nothing is lost). The child stops by itself
    once the server is gone (it checks its parent between batches).
    """

    def __init__(self, curator: Curator, *, restart_delay: float = 1.0, max_restart_delay: float = 30.0,
                 stop_timeout: float = 30.0) -> None:
        self.curator = curator
        self.restart_delay = restart_delay
        self.max_restart_delay = max_restart_delay
        self.stop_timeout = stop_timeout
        self.restarts = 0
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._supervise, name="lethe-worker-supervisor", daemon=True)

    @property
    def pid(self) -> int | None:
        """The running child's process id (None between restarts)."""
        with self._mutex:
            return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def command(self) -> list[str]:
        s = self.curator.settings
        return [sys.executable, "-m", "lethe.cli", "worker", "--data-dir", str(self.curator.data_dir),
                "--batch-size", str(s.batch_size), "--max-delay", repr(float(s.max_delay)),
                "--poll-interval", repr(float(s.poll_interval)), "--max-attempts", str(s.max_attempts),
                "--budget-share", repr(float(s.budget_share)), "--publish-within", repr(float(s.publish_within)),
                "--parent-pid", str(os.getpid())]

    def environment(self) -> dict[str, str]:
        from lethe.curator import dask_plane

        env = dict(os.environ)
        env["LETHE_DATABASE_URL"] = self.curator.store.url  # in the environment: a password stays out of `ps`
        env.pop("LETHE_DASK_ADDRESS", None)
        if dask_plane.configured_address() is not None:
            env["LETHE_DASK_ADDRESS"] = str(dask_plane.configured_address())
        src = Path(__file__).resolve().parents[2]  # a source checkout: the child imports this lethe too
        if src.name not in ("site-packages", "dist-packages"):  # (an installed one is found anyway; putting
            old = env.get("PYTHONPATH")                        # site-packages first could shadow the stdlib)
            env["PYTHONPATH"] = str(src) + (os.pathsep + old if old else "")
        return env

    def start(self) -> None:
        self.thread.start()

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        with self._mutex:  # no child starts once stop() has begun
            if self._stop.is_set():
                return None
            self._proc = subprocess.Popen(self.command(), env=self.environment(), stdin=subprocess.DEVNULL,
                                          close_fds=True)
            return self._proc

    def _supervise(self) -> None:
        delay = self.restart_delay
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                proc = self._spawn()
            except OSError as exc:
                log.error("worker process could not be started (%s); retrying in %.0f s", type(exc).__name__, delay)
                proc = None
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.max_restart_delay)
                continue
            if proc is None:
                return
            log.info("worker process %d started", proc.pid)
            code = proc.wait()
            if self._stop.is_set():
                return
            self.restarts += 1
            if time.monotonic() - started > 60.0:
                delay = self.restart_delay  # it ran for a while: a new failure, not a crash loop
            log.error("worker process %d exited with status %s; starting another in %.0f s", proc.pid, code, delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self.max_restart_delay)

    def stop(self) -> None:
        self._stop.set()
        with self._mutex:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("worker process %d did not stop within %.0f s; killed", proc.pid, self.stop_timeout)
                proc.kill()
                proc.wait(10)
        self.thread.join(self.stop_timeout)


__all__ = ["BackgroundWorker", "WorkerProcess", "backoff_delay", "run_worker"]
