"""Issue 35: no false "Artifact … is missing" fault while versions are published.

A status check (another process: ``lethe status`` beside a server) reads a model's published version, then opens
its artifact; a batch publishing meanwhile supersedes and destroys that version. The check must not report it.
The interleaving is reproduced deterministically (a batch published from inside the check's artifact load), then
with a steady stream of publications beside 200 status calls."""

from __future__ import annotations

import threading
from typing import Any

from lethe.curator import Curator, Settings
from lethe.curator.console import health
from lethe.curator.settings import Principal

from .conftest import Data

ALICE = Principal("alice", "requester")


def _publish_one(c: Curator, key: str) -> None:
    c.submit_deletion("people", key, principal=ALICE)
    c.process_pending(force=True)


def test_a_version_superseded_during_the_check_is_no_fault(curator: Curator, data: Data, monkeypatch: Any) -> None:
    other = Curator(curator.data_dir, settings=Settings(batch_size=4))  # `lethe status` in its own process
    try:
        assert other.status()["healthy"]
        keys = iter(data.keys[10:])
        for check in (lambda: other.status()["faults"], lambda: health.check(other).faults):
            _publish_one(curator, next(keys))  # a version the checker has not verified yet
            real = other.artifacts.load
            armed = [True]

            def load(relpath: str, sha: str, *a: Any, armed: list[bool] = armed, real: Any = real,
                     **k: Any) -> Any:
                if armed[0]:  # the batch publishes between the check's read and its load
                    armed[0] = False
                    _publish_one(curator, next(keys))
                return real(relpath, sha, *a, **k)

            monkeypatch.setattr(other.artifacts, "load", load)
            assert check() == []
            assert not armed[0]  # the interleaving happened
            monkeypatch.undo()
    finally:
        other.close()


def test_steady_publication_beside_200_status_calls(curator: Curator, data: Data) -> None:
    other = Curator(curator.data_dir, settings=Settings(batch_size=4))
    stop = threading.Event()
    published = [0]

    def stream() -> None:
        for key in data.keys[5:150]:
            if stop.is_set():
                return
            _publish_one(curator, key)
            published[0] += 1

    t = threading.Thread(target=stream)
    t.start()
    try:
        false = [f for _ in range(200) for f in other.status()["faults"]]
    finally:
        stop.set()
        t.join()
        other.close()
    assert false == [] and published[0] > 0
