"""Issue 35: an orphaned worker stops after its current batch, and a process waiting for the processing lock gets
its turn between two batches of a busy worker."""

from __future__ import annotations

import threading

from lethe.curator import Curator
from lethe.curator.locking import ProcessingLock
from lethe.curator.worker import run_worker


def _queue(c: Curator, n: int) -> None:
    for i in range(n):
        c.submit_deletion("people", f"user-{i:04d}")


def test_an_orphaned_worker_stops_after_its_batch(curator: Curator) -> None:
    _queue(curator, 12)  # three batches of 4
    # parent_pid names a process that is not this one's parent: the server that started the worker is gone
    done = run_worker(curator, drain=True, parent_pid=-1)
    assert done == 1
    assert curator.status()["requests"]["pending"] == 8


def test_a_waiting_process_gets_the_lock_between_two_batches(curator: Curator) -> None:
    _queue(curator, 12)
    other = ProcessingLock(curator.lock.path)  # another process's handle (flock: one per open file)
    got, finish = threading.Event(), threading.Event()

    def command() -> None:  # e.g. `lethe model retrain` started while the worker is busy
        with other.hold(timeout=60):
            got.set()
            finish.wait(60)

    announced = threading.Event()
    t: list[threading.Thread] = []

    def keep_going() -> bool:
        if not t:  # the command arrives during the first batch
            t.append(threading.Thread(target=command))
            t[0].start()
            while not curator.lock.waiters():
                pass
            announced.set()
        return not curator.lock.waiters()

    results = curator.process_pending(force=True, keep_going=keep_going)
    assert announced.is_set() and len(results) == 1  # stopped after one batch: the command waits
    assert curator.lock.yield_to_waiters(timeout=60)  # the worker resumes only once the command has the lock
    assert got.is_set() and not curator.lock.waiters()
    finish.set()
    t[0].join(60)
    assert curator.process_pending(force=True)  # the worker's turn again
    assert curator.status()["requests"]["pending"] == 0


def test_waiters_is_false_without_a_waiting_process(curator: Curator) -> None:
    with curator.lock.hold():
        assert not curator.lock.waiters()
    assert curator.lock.yield_to_waiters(timeout=1)
