"""Issue 35: one altered kept row of a data file is a fault operators see (``lethe status``, ``/healthz``, the
console) with its remedy — not a silent failure of every deletion while health stays green. Erased rows (zeros)
are not faults; the remedy (drop, register again, retrain) clears it without re-ingesting erased records."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import select

from lethe.curator import Curator
from lethe.curator.api import create_app
from lethe.curator.console.health import check
from lethe.curator.dataplane import DataPlane

from .conftest import PARAMS, Data


def _features(c: Curator) -> tuple[np.memmap, DataPlane]:
    with c.store.read() as s:
        plane = s.scalars(select(DataPlane)).first()
        assert plane is not None
    X = np.memmap(c.matrices.resolve(plane.features_path), dtype="<f8", mode="r+",
                  shape=(plane.n_rows, plane.n_features))
    return X, plane


def test_an_altered_kept_row_is_a_visible_fault_with_its_remedy(curator: Curator, data: Data) -> None:
    curator.submit_deletion("people", "user-0001")
    curator.process_pending(force=True)  # row 1 erased (zeros): not a fault
    assert curator.status()["healthy"]
    X, _plane = _features(curator)
    X[7, 3] = X[7, 3] + 1e-9  # one kept row altered
    X.flush()
    del X
    st = curator.status()
    assert not st["healthy"]
    fault = next(f for f in st["faults"] if f.get("dataset") == "people")
    assert "1 kept row(s)" in fault["error"] and "register it again" in fault["repair"]
    with TestClient(create_app(curator, run_worker="none"), base_url="http://127.0.0.1") as cl:
        assert cl.get("/healthz").json()["status"] == "degraded"
    assert any("people" in f.title for f in check(curator).faults)
    # the remedy: drop, register again from the source, retrain — healthy, and user-0001 stays erased
    curator.drop_model("clf")
    curator.drop_dataset("people")
    again = curator.register_dataset("people", data.csv, key="user_id", label="label")
    assert again["not_reingested"] == 1
    curator.train("people", "clf", params=PARAMS, random_state=0)
    assert curator.status()["healthy"]
