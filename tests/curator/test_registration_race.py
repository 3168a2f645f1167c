"""Registration during service (issue 28): ``lethe dataset add`` while a worker runs must never lose the dataset.

The worker's recovery (run at every ``process_pending``) destroys data-plane files no dataset refers to — a crashed
registration's. A registration in flight wrote its files before its transaction committed, without the processing
lock, so recovery destroyed them as orphans: the dataset stayed registered with no files. Here a second curator on
the same data directory (its own processing-lock descriptor, as another process has) runs ``process_pending`` in a
loop while datasets are registered; every dataset must keep its files, and the health checks must say so.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from lethe.curator import Curator, Settings
from lethe.curator.errors import BusyError

from .conftest import PARAMS, make_data


def _lost(c: Curator, names: list[str]) -> list[str]:
    """The datasets among ``names`` whose data-plane files are gone or short (checked here, independently of the
    curator's own health check)."""
    from lethe.curator.dataplane import DataPlane

    lost = []
    with c.store.read() as s:
        for name in names:
            ds = c.datasets.find(s, name)
            plane = s.get(DataPlane, ds.id)
            for rel, width in ((plane.features_path, plane.n_features), (plane.labels_path, 1)):
                p = c.data_dir / rel
                if not p.is_file() or p.stat().st_size != 8 * plane.n_rows * width:
                    lost.append(name)
                    break
    return lost


def test_registration_while_recovery_loops_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "lethe-data"
    server = Curator(data_dir, settings=Settings(batch_size=4, poll_interval=0.01))
    client = Curator(data_dir)
    small = [make_data(tmp_path / f"small{i}.csv", n=40, d=3, seed=i) for i in range(20)]
    large = make_data(tmp_path / "large.csv", n=20_000, d=10, seed=99)
    stop = threading.Event()
    rounds = [0]
    errors: list[BaseException] = []

    def worker() -> None:  # what `lethe serve`'s worker does between polls, as fast as it can
        while not stop.is_set():
            try:
                server.process_pending(lock_timeout=0.05)
            except BusyError:
                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            rounds[0] += 1

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        names, refused = [], []
        for name, d in [*((f"small{i}", small[i]) for i in range(20)), ("large", large)]:
            try:
                client.register_dataset(name, d.csv, key="user_id", label="label")
                names.append(name)
            except OSError as exc:  # before the fix: recovery destroyed the file being written (ENOENT)
                refused.append((name, type(exc).__name__))
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert rounds[0] > 0  # the recovery loop did run beside the registrations
    server.recover()  # one more recovery after everything: still nothing may be collected
    lost = _lost(server, names)
    print(f"registered {len(names)}, refused {len(refused)}, registered but lost {len(lost)}, "
          f"recovery rounds {rounds[0]}")
    assert refused == [] and lost == []
    assert server.status()["healthy"], server.status()["faults"]
    # every dataset is usable: its rows read back exactly, and a model trains on it
    c = Curator(data_dir)
    with c.store.read() as s:
        for name, d in [*((f"small{i}", small[i]) for i in range(20)), ("large", large)]:
            ds = c.datasets.find(s, name)
            _ids, X, y = c.datasets.current_data(s, ds.id, ds.n_features)
            np.testing.assert_array_equal(np.asarray(X), d.X)
            np.testing.assert_array_equal(np.asarray(y, dtype=float), d.y)
    c.train("large", "clf", params=PARAMS, random_state=0)
    for cur in (server, client, c):
        cur.close()


def test_crashed_registration_files_are_still_collected(tmp_path: Path) -> None:
    """The lock does not make recovery blind: files a registration left without committing (it died between its
    write and its commit) are destroyed by the next recovery."""
    c = Curator(tmp_path / "lethe-data")
    fpath, lpath = c.matrices.write(np.ones((3, 2)), np.zeros(3))  # no dataset refers to these
    assert {fpath, lpath} <= set(c.matrices.all_files())
    out = c.recover()
    assert out["orphans_destroyed"] == 3  # features, labels, the row check values
    assert c.matrices.all_files() == []
    c.close()


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_health_checks_name_a_dataset_without_its_files(tmp_path: Path, damage: str) -> None:
    """A dataset whose files are gone or cut short is a fault in `status` (unhealthy), `/healthz` (degraded) and
    the console's Health page; before, all three said all was well."""
    from fastapi.testclient import TestClient

    from lethe.curator.api import create_app
    from lethe.curator.console import health

    d = make_data(tmp_path / "d.csv", n=30, d=4)
    c = Curator(tmp_path / "lethe-data")
    c.register_dataset("people", d.csv, key="user_id", label="label")
    assert c.status()["healthy"]
    plane = c.matrices.all_files()
    target = c.data_dir / next(p for p in plane if p.endswith(".features"))
    if damage == "delete":
        target.unlink()
    else:
        with open(target, "r+b") as f:
            f.truncate(8 * 4 * 10)
    st = c.status()
    assert not st["healthy"]
    assert [f["dataset"] for f in st["faults"]] == ["people"]
    assert any("people" in f.title for f in health.check(c).faults)
    token = c.create_token("ops", scope="admin")
    app = create_app(c, run_worker="none")
    with TestClient(app) as client:
        r = client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "degraded" and r.json()["faults"] == 1
        assert "detail" not in r.json()  # the details are for operators
        r = client.get("/healthz", headers={"Authorization": f"Bearer {token}"})
        assert r.json()["detail"]["faults"][0]["dataset"] == "people"
    c.close()
