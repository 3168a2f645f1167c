"""Prometheus instruments per curator (issue 25, item 4): ``/metrics`` from ``prometheus_client`` gauges and
histograms updated from the ledger's new events, with the names and values of the earlier full recomputation
(:func:`lethe.curator.api.render_metrics` of :meth:`Curator.metrics`, every done request re-read), compared after
every step of a flow; a scrape reads only the events recorded since the previous one; updates made by another
process (a worker) are seen; released models export their stream's privacy."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from lethe.curator import Curator, Settings
from lethe.curator.api import create_app, render_metrics
from lethe.curator.metrics import PER_RELEASED_MODEL
from lethe.curator.store import LedgerEvent, utcnow

from .conftest import PARAMS, Data

RELEASED = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 8, "cadence": 2}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def families(text: str) -> dict[str, tuple[str, str]]:
    return {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(text)}


def assert_same_as_reference(c: Curator) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The instruments' exposition has every family and sample of the full recomputation, with equal values (sums
    of observations to 1e-12 relative: they are added in another order), and only the released models' families
    besides."""
    new_text, ref_text = c.prometheus.render(), render_metrics(c.metrics())
    new, ref = samples(new_text), samples(ref_text)
    fam_new, fam_ref = families(new_text), families(ref_text)
    assert {k: v for k, v in fam_new.items() if k not in PER_RELEASED_MODEL} == fam_ref
    extra = {k for k in new if k not in ref}
    assert {name for name, _ in extra} <= set(PER_RELEASED_MODEL), extra
    for key, value in ref.items():
        assert key in new, key
        if key[0].endswith("_sum"):
            assert new[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
        else:
            assert new[key] == value, key
    return new


@pytest.fixture
def cur(tmp_path: Path, data: Data) -> Iterator[Curator]:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=3))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.register_dataset("other", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "clf", params=PARAMS, random_state=0)
    c.train("people", "rel", mechanism="released-logistic", params=RELEASED)
    yield c
    c.close()


def test_same_names_and_values_as_the_full_recomputation_after_every_step(cur: Curator, data: Data) -> None:
    assert_same_as_reference(cur)
    steps: list[Any] = [
        lambda: [cur.submit_deletion("people", k) for k in data.keys[:5]],
        lambda: cur.process_pending(force=True),  # batches of 3 and 2
        lambda: cur.submit_deletion("people", "never-there"),  # done at once, no record held (not "done" delays)
        lambda: cur.submit_deletion("people", data.keys[1]),  # already deleted: answered like never there
        lambda: [cur.submit_deletion("other", k) for k in data.keys[:2]],  # a dataset without a model
        lambda: cur.process_pending(force=True),
        lambda: cur.retrain("clf", random_state=1),
        lambda: cur.submit_deletion("people", data.keys[9]),  # pending at the scrape
        lambda: cur.drop_model("clf"),  # its gauges disappear
        lambda: cur.process_pending(force=True),
    ]
    for step in steps:
        step()
        got = assert_same_as_reference(cur)
    # 5 + 2 ("other") + 1 removed, 1 done at once; the repeat of keys[1] by its requester is its own old request
    assert got[("lethe_requests", (("status", "done"),))] == 9.0
    assert got[("lethe_batch_size_count", ())] == 4.0 and got[("lethe_batch_size_sum", ())] == 8.0
    assert not any(dict(labels).get("model") == "clf" for _name, labels in got)


def test_released_models_export_their_stream(cur: Curator, data: Data) -> None:
    for k in data.keys[:3]:
        cur.submit_deletion("people", k)
        cur.process_pending(force=True)
    got = assert_same_as_reference(cur)
    b = cur.budget("rel")
    lab = (("model", "rel"),)
    assert got[("lethe_model_stream_epsilon_spent", lab)] == b["epsilon_spent"] > 0
    assert got[("lethe_model_stream_epsilon", lab)] == b["epsilon"] == 1.0
    assert got[("lethe_model_releases_left", lab)] == b["releases_left"] == RELEASED["horizon"] - b["releases"]
    assert got[("lethe_model_pending_removals", lab)] == b["pending_removals"] == 1  # 3 steps, cadence 2
    assert got[("lethe_model_last_release_timestamp_seconds", lab)] == b["released_at"]
    assert not any(name in PER_RELEASED_MODEL and dict(labels).get("model") == "clf" for name, labels in got)


def test_a_scrape_reads_only_new_events(cur: Curator, data: Data) -> None:
    cur.prometheus.render()
    read = cur.prometheus.events_read
    cur.prometheus.render()
    assert cur.prometheus.events_read == read  # nothing happened: nothing read
    for k in data.keys[:3]:
        cur.submit_deletion("people", k)
    cur.process_pending(force=True)
    with cur.store.read() as s:
        total = s.query(LedgerEvent).count()
    cur.prometheus.render()
    new = cur.prometheus.events_read - read
    assert 0 < new < total  # the new events only, not the ledger (nor every request) again
    assert_same_as_reference(cur)


def test_changes_made_by_another_process_are_seen(cur: Curator, data: Data) -> None:
    """The API server's curator and a worker's are two Curator objects on one data directory: the worker's batch
    is in the server's next scrape."""
    admin = cur.create_token("ops", "admin")
    worker = Curator(cur.data_dir, settings=Settings(batch_size=3))
    try:
        with TestClient(create_app(cur, run_worker=False), base_url="http://127.0.0.1") as client:
            h = {"Authorization": f"Bearer {admin}"}
            before = samples(client.get("/metrics", headers=h).text)
            for k in data.keys[:4]:
                cur.submit_deletion("people", k)
            worker.process_pending(force=True)
            after = samples(client.get("/metrics", headers=h).text)
        assert before[("lethe_requests", (("status", "done"),))] == 0.0
        assert after[("lethe_requests", (("status", "done"),))] == 4.0
        assert after[("lethe_batch_size_count", ())] == 2.0
        assert after[("lethe_model_version", (("model", "clf"),))] == 3.0
        assert not any(name.endswith("_created") for name, _ in after)
    finally:
        worker.close()


def test_an_event_committed_after_a_later_one_is_not_lost(cur: Curator) -> None:
    """PostgreSQL assigns ledger ids before commit: an event may become visible after a later id was read. The sync
    looks skipped ids up again (here: ids inserted explicitly out of order)."""
    cur.prometheus.render()
    with cur.store.read() as s:
        last = int(s.query(LedgerEvent).order_by(LedgerEvent.id.desc()).first().id)  # type: ignore[union-attr]
    now = utcnow()
    with cur.store.write() as s, s.begin():
        s.add(LedgerEvent(id=last + 2, kind="records_deleted", payload={"count": 7}, at=now))
    got = samples(cur.prometheus.render())
    assert got[("lethe_batch_size_count", ())] == 1.0
    with cur.store.write() as s, s.begin():  # the earlier id commits late
        s.add(LedgerEvent(id=last + 1, kind="records_deleted", payload={"count": 5}, at=now))
    got = samples(cur.prometheus.render())
    assert got[("lethe_batch_size_count", ())] == 2.0 and got[("lethe_batch_size_sum", ())] == 12.0
    got = samples(cur.prometheus.render())  # and is counted once
    assert got[("lethe_batch_size_count", ())] == 2.0
    assert math.isfinite(got[("lethe_batch_size_sum", ())])
