"""The curator on PostgreSQL (through SQLAlchemy), not only the embedded SQLite default.

Runs when ``LETHE_TEST_POSTGRES_URL`` names a database this test may wipe (``.ci/run`` starts the machine's
PostgreSQL cluster and sets it). The flow: register, train, delete by key, process, purge; the ledger's
append-only trigger; a repeated request refused with nothing changed.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from sqlalchemy import text

URL = os.environ.get("LETHE_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="LETHE_TEST_POSTGRES_URL not set (.ci/run sets it)")


def _csv(path, n=120, d=4, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", *[f"f{j}" for j in range(d)], "label"])
        for i in range(n):
            x = rng.normal(size=d)
            w.writerow([f"user-{i}", *x, 1 if x[0] > 0 else -1])


def test_flow_on_postgres(tmp_path):
    from lethe.curator.service import ConflictError, Curator

    assert URL is not None
    fresh = Curator(tmp_path / "wipe", database_url=URL)
    with fresh.store.write_engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
    fresh.close()
    _csv(tmp_path / "people.csv")
    c = Curator(tmp_path / "data", database_url=URL)
    try:
        c.register_dataset("people", tmp_path / "people.csv", key="user_id", label="label", normalize="rows")
        c.train("people", "clf", params={"lam": 0.01, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        req, created = c.submit_deletion("people", "user-7")
        assert created and req["status"] == "pending"
        results = c.process_pending(force=True)
        assert [r.status for r in results] == ["done"]
        status = c.request_status(req["id"])
        assert status["status"] == "done" and len(status["certificates"]) == 1
        cert = c.certificate(status["certificates"][0])
        json.dumps(cert, allow_nan=False)
        assert c.purge()
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("select count(*) from records")).scalar() == 119
            n_ledger = conn.execute(text("select count(*) from ledger")).scalar()
        with pytest.raises(Exception, match="append-only"), c.store.write_engine.begin() as conn:
            conn.execute(text("UPDATE ledger SET kind = 'tampered'"))
        with pytest.raises(ConflictError, match="already deleted"):
            c.submit_deletion("people", "user-7")
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("select count(*) from ledger")).scalar() == n_ledger
        assert c.budget("clf")["budget_left"] > 0
    finally:
        c.close()
