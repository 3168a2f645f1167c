"""A long-running worker must not grow with the number of batches it has processed.

The worker (``lethe worker``, or the server's thread) lives for weeks and processes one batch after another through
:meth:`Curator.process_pending`. This test runs the same small batches as the worker does and compares what is
alive after batch ``WARM`` with what is alive after batch ``N``: the warm-up (first imports, SQLAlchemy's compiled
statements, the solver's caches) happens before ``WARM``; from then on nothing may accumulate.

Two measures, both after ``gc.collect()``:

* the objects the cyclic collector tracks, by type, and the *live* weak references (referent alive). Dead weak
  references are not counted: CPython's ``sqlite3.Connection`` keeps a list of weak references to its cursors and
  drops the dead ones only every 200th cursor (``Modules/_sqlite/connection.c``,
  ``_pysqlite_drop_unused_cursor_references``), so their number rises and falls by up to ~200 per pooled
  connection — bounded, but not monotone in N;
* the bytes still allocated at a line of lethe's own code (``tracemalloc``, innermost frame under ``lethe/``):
  atomic values (tuples of ints and strings) are not tracked by the collector, so a dict that keeps one such tuple per
  batch is invisible to the first measure. ``Curator._verified`` did exactly that — one (version, checksum, file
  stamp) entry per published version, never removed — until it was keyed by model.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
import weakref
from collections import Counter
from pathlib import Path

import pytest

import lethe
from lethe.curator import Curator, Settings

from .conftest import PARAMS, make_data

WARM, N, BATCH = 20, 80, 2
LETHE_DIR = str(Path(lethe.__file__).parent)


def _census() -> tuple[Counter[str], int, int]:
    """(tracked objects by type, live weak references, bytes allocated at a line of lethe's code)."""
    gc.collect()
    objs = gc.get_objects()
    types = Counter(type(o).__qualname__ for o in objs)
    live_refs = sum(1 for o in objs if isinstance(o, weakref.ref) and o() is not None)
    del objs
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, LETHE_DIR + "/*")])
    return types, live_refs, sum(stat.size for stat in snap.statistics("filename"))


def test_batches_do_not_accumulate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # pytest's log capture keeps every record emitted during the test; the curator's INFO lines (enabled on the
    # "lethe" logger by configure_file_logging in an earlier test of the same process) would grow here by design of
    # the capture, not of lethe
    caplog.set_level(logging.WARNING, logger="lethe")
    data = make_data(tmp_path / "data.csv", n=N * BATCH + 80)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=BATCH))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    c.warm_up()
    keys = iter(data.keys)
    tracemalloc.start(1)
    try:
        _census()  # its own first run fills caches (the ABC caches of Counter's isinstance checks: 42 weak references)
        seen: dict[int, tuple[Counter[str], int, int]] = {}
        for b in range(1, N + 1):
            for _ in range(BATCH):
                c.submit_deletion("people", next(keys))
            results = c.process_pending(force=True)
            assert results and all(r.status == "done" for r in results), results
            if b in (WARM, N):
                seen[b] = _census()
    finally:
        tracemalloc.stop()
        c.close()
    (types0, refs0, bytes0), (types1, refs1, bytes1) = seen[WARM], seen[N]
    for types in (types0, types1):
        del types["ReferenceType"]  # dead ones come and go with sqlite3's cursor list (above); live ones below
    grown = {t: n for t, n in (types1 - types0).items() if n > 20}
    assert not grown, f"tracked objects grew from batch {WARM} to {N}: {grown}"
    assert sum(types1.values()) - sum(types0.values()) <= 100
    assert refs1 - refs0 <= 5, f"live weak references grew from {refs0} to {refs1} over {N - WARM} batches"
    # before the fix: +29 KB here (≈ 480 bytes per batch: Curator._verified); after: +4.5 KB, once (arrays of the
    # solver's cache first built after batch WARM, SQLAlchemy's statement cache filling), flat from batch 50 to 300
    assert bytes1 - bytes0 <= 10240, f"memory allocated by lethe grew by {bytes1 - bytes0} B over {N - WARM} batches"
    assert c.serving.verified_models() <= 1  # one entry per model


_START = """
import sys
from fastapi.testclient import TestClient
from lethe.curator import Curator
from lethe.curator.api import create_app
from lethe.curator.worker import run_worker

c = Curator(sys.argv[1])
assert run_worker(c, once=True) == 0
with TestClient(create_app(c, run_worker="none")) as client:
    assert client.get("/healthz").status_code == 200
print(sorted(m for m in ("torch", "sklearn") if m in sys.modules))
"""


def test_start_imports_only_the_mechanisms_in_use(tmp_path: Path) -> None:
    """A server and a worker import at start the modules of the mechanisms the store's models use — not torch
    (noisy-finetune, ≈ 180 MB of resident memory per process) when no model needs it."""
    import subprocess
    import sys

    from .._server import subprocess_env

    data = make_data(tmp_path / "data.csv")
    empty, used = tmp_path / "empty", tmp_path / "used"
    Curator(empty).close()
    c = Curator(used)
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    assert c.mechanisms_in_use() == ("certified-removal",)
    c.close()
    out = {}
    for name, path in (("empty", empty), ("used", used)):
        run = subprocess.run([sys.executable, "-c", _START, str(path)], capture_output=True, text=True,
                             env=subprocess_env(), timeout=120, check=False)
        assert run.returncode == 0, run.stderr[-2000:]
        out[name] = run.stdout.strip().splitlines()[-1]
    assert out == {"empty": "[]", "used": "['sklearn']"}
