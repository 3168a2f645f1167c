"""No lock or descriptor is left behind by an exception at any executed line (issue 35): the release counters' file
lock (:func:`lethe.model_keys.record_counts`), a model's own lock (:func:`lethe._locking.serialised`, and a certified
model's ``remove_rows`` and ``resync``) and the temporary file of an atomic write (:func:`lethe.io.write_bytes_atomic`).

The faults are those of ``test_exceptions_families.py`` (its tracer raises at the k-th executed line of lethe's code,
for every k; for a certified removal, every line of the modules that take and release the lock, plus a sample). The
tracebacks of the counts faults are all kept alive while the next calls run, as a caller that logs or stores the
exception does: the lock must not depend on the traceback being dropped (it did: a fault as the lock's block ended,
or at its ``close`` line, kept the lock held by the traceback's frames, and the next call waited
``COUNTS_LOCK_WAIT`` and refused). Racing writers, in threads and in processes, never lose an update to the counts
file (a lost update lowers a count, which would let a rolled-back release file load).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import lethe.model_keys as model_keys
from lethe._locking import SerialisedModel, instance_lock, serialised
from lethe.io import write_bytes_atomic
from lethe.model_keys import record_counts, recorded_counts

from .test_exceptions_families import Fault, _run


@pytest.fixture()
def keys(tmp_path, monkeypatch):
    """A fresh key location."""
    monkeypatch.setenv(model_keys.KEY_FILE_ENV, str(tmp_path / "keys" / "model.key"))
    return tmp_path / "keys"


def _open_fds() -> set[str]:
    """This process's open descriptors, after collecting what earlier code left unreferenced."""
    gc.collect()
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")
def test_a_fault_at_any_line_of_record_counts_leaves_the_lock_free_while_its_traceback_is_kept(keys, monkeypatch):
    monkeypatch.setattr(model_keys, "COUNTS_LOCK_WAIT", 0.5)  # a lock left held fails fast (KeyFileError)
    # the counts file and its lock file exist, with both streams (the lines run depend on the file's entries)
    record_counts("s", {"n": 1})
    record_counts("t", {"n": 0})
    fds = _open_fds()
    err, lines = _run(lambda: record_counts("s", {"n": 2}), None)
    assert err is None and len(lines) > 20
    kept = []
    for at in range(1, len(lines) + 1):
        n = recorded_counts("s")["n"]
        err, _ = _run(lambda at=at: record_counts("s", {"n": 2 + at}), at)
        assert isinstance(err, Fault), at
        kept.append(err)  # with its traceback, and the frames it holds
        after = recorded_counts("s")["n"]
        assert after in (n, 2 + at), f"a fault at {lines[at - 1]} wrote {after}"  # as it was or written
        # the next call, in this thread and in another, takes the lock at once (it waited 0.5 s and refused)
        record_counts("s", {"n": 1})  # never lowers
        assert recorded_counts("s")["n"] == after
        done: list[BaseException | None] = []

        def other(at: int = at, done: list[BaseException | None] = done) -> None:
            try:
                record_counts("t", {"n": at})
                done.append(None)
            except BaseException as e:  # noqa: BLE001 - reported below
                done.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert done == [None], f"after a fault at {lines[at - 1]}: {done}"
    assert recorded_counts("s")["n"] >= 2 + len(lines) - 1 and recorded_counts("t")["n"] == len(lines)
    assert sorted(p.name for p in keys.iterdir()) == ["model.key.counts", "model.key.counts.lock"]  # no temporary
    del kept, err
    assert _open_fds() <= fds  # every descriptor closed once the faults are dropped (none left bare)


_WORKER = """
import sys
from lethe.model_keys import record_counts, recorded_counts
w, rounds = sys.argv[1], int(sys.argv[2])
for j in range(1, rounds + 1):
    record_counts("shared", {w: j})
    record_counts(w, {"n": j})
    seen = recorded_counts("shared").get(w, 0)
    if seen < j:  # another writer wrote counts read before this one's write: an update lost
        sys.exit(f"{w}: wrote {j}, then read {seen}")
"""


def test_threads_and_processes_racing_record_counts_never_lose_an_update(keys):
    """Three processes and three threads each raise their own counter of one shared stream, and their own stream,
    40 times; each reads its counter back after every write. A writer that read the file before another's write and
    wrote after it would lower that counter (seen in this test with the lock taken out of ``record_counts``)."""
    rounds = 40
    record_counts("shared", {})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, f"p{i}", str(rounds)], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    failures: list[str] = []

    def thread(w: str) -> None:
        try:
            for j in range(1, rounds + 1):
                record_counts("shared", {w: j})
                record_counts(w, {"n": j})
                seen = recorded_counts("shared").get(w, 0)
                if seen < j:
                    failures.append(f"{w}: wrote {j}, then read {seen}")
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(f"{w}: {e!r}")

    threads = [threading.Thread(target=thread, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            failures.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    assert not failures
    workers = [f"p{i}" for i in range(3)] + [f"t{i}" for i in range(3)]
    assert recorded_counts("shared") == {w: rounds for w in workers}
    assert all(recorded_counts(w) == {"n": rounds} for w in workers)


class _Model(SerialisedModel):
    @serialised
    def step(self, x: int) -> int:
        return x + 1


def test_a_fault_at_any_line_of_a_serialised_call_leaves_the_models_lock_free():
    """A fault raised as the locked call returns (the ``with`` block's exit) skipped the release: the model's lock
    stayed held, and every call from another thread waited forever."""
    m = _Model()
    m.step(0)  # the lock exists (its creation runs more lines, once)
    err, lines = _run(lambda: m.step(1), None)
    assert err is None and lines
    for at in range(1, len(lines) + 1):
        err, _ = _run(lambda: m.step(1), at)
        assert isinstance(err, Fault), at
        assert _lock_is_free(m), f"a fault at {lines[at - 1]} left the model's lock held"
    print(len(lines), "lines executed;", len(lines), "faults, lock free after each")


def _lock_is_free(model: object) -> bool:
    """Whether another thread can take ``model``'s lock at once (never waits)."""
    free: list[bool] = []

    def other() -> None:
        lock = instance_lock(model)
        free.append(lock.acquire(blocking=False))
        if free[-1]:
            lock.release()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    return free == [True]


@pytest.mark.parametrize("call", ["remove_rows", "resync"])
def test_a_fault_at_any_line_of_a_certified_removal_leaves_the_models_lock_free(call):
    """``remove_rows`` and ``resync`` took the lock in a ``with`` block of their own, ending after the removal
    returned: a fault there left it held (as in ``serialised``)."""
    from lethe.certified.estimators import CertifiedLogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, 0] > 0).astype(int)

    def fresh() -> CertifiedLogisticRegression:
        m = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
        m.resync()  # the lock exists
        return m

    def run(m: CertifiedLogisticRegression) -> object:
        return m.remove_rows(np.array([3])) if call == "remove_rows" else m.resync()

    first = fresh()
    err, lines = _run(lambda: run(first), None)
    assert err is None and lines
    # every line of the two modules that take and release the lock (each block's exit included), and an even sample
    # of the rest (a fault deeper in the removal leaves through the same lines)
    points = sorted({k for k, (f, _) in enumerate(lines, 1) if f.endswith(("_locking.py", "estimators_logistic.py"))}
                    | set(np.linspace(1, len(lines), 40, dtype=int).tolist()))
    for at in points:
        m = fresh()
        err, _ = _run(lambda m=m: run(m), at)
        assert isinstance(err, Fault), at
        assert _lock_is_free(m), f"a fault at {lines[at - 1]} left the model's lock held"
    print(call, len(lines), "lines executed;", len(points), "faults, lock free after each")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")
def test_a_fault_at_any_line_of_an_atomic_write_leaves_no_descriptor_open(tmp_path):
    """A fault between ``mkstemp`` and ``fdopen`` left the temporary's bare descriptor open for good (nothing closes
    an int); the target is as it was or written, and a temporary is left only by a fault inside its own cleanup."""
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    err, lines = _run(lambda: write_bytes_atomic(target, b"new", mode=0o600), None)
    assert err is None and lines
    for at in range(1, len(lines) + 1):
        target.write_bytes(b"old")
        fds = _open_fds()
        err, _ = _run(lambda: write_bytes_atomic(target, b"new", mode=0o600), at)
        assert isinstance(err, Fault), at
        del err
        assert target.read_bytes() in (b"old", b"new")
        assert _open_fds() <= fds, f"a fault at {lines[at - 1]} left a descriptor open"
        assert [p.name for p in tmp_path.iterdir()] == ["f.bin"], f"a fault at {lines[at - 1]} left a temporary"
