"""Mechanism ``sharded`` through the curator: exact sharded unlearning (SISA) end to end — training partitioned by the
records' key digests, deletions that retrain only the affected shards, versions equal to a fit from scratch on the
remaining records, certificates through the public allow-list, the artifact (secret, compacted, authenticated)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sqlalchemy import select

from lethe.curator import Curator, InvalidInputError, Settings
from lethe.curator.adapters import get_adapter
from lethe.curator.public import CERTIFICATE_FIELDS, REQUESTER_CERTIFICATE_FIELDS
from lethe.curator.serving import Serving
from lethe.curator.store import Model, ModelVersion, Record
from lethe.sharded import ShardedClassifier
from lethe.sharded.adapter import ShardedAdapter

from .conftest import Data, make_data, snapshot, start_server, stop_server

HGB = {"estimator": "hist-gradient-boosting", "n_shards": 4, "max_iter": 15}


def _published(c: Curator, model: str) -> tuple[Any, ShardedAdapter]:
    """The published version's full artifact (secret arrays included: operator-side) and its adapter."""
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == model))
        v = s.get(ModelVersion, m.current_version_id)
        rel, sha, params = v.artifact, v.sha256, dict(m.params)
    adapter = get_adapter("sharded", params)
    assert isinstance(adapter, ShardedAdapter)
    return c.artifacts.load(rel, sha, Serving.binding(model, "sharded", params, 10)), adapter


def _remaining(c: Curator, data: Data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, key digests) of the records still present, in record order (what a fresh fit is given)."""
    with c.store.read() as s:
        digests = list(s.scalars(select(Record.key).order_by(Record.id)))
    with c.store.read() as s:
        ds_id = s.scalar(select(Model.dataset_id))
    kept = [i for i, k in enumerate(data.keys) if c.key_digest(ds_id, k) in set(digests)]
    return data.X[kept], data.y[kept], np.asarray(digests)


def _fresh(estimator: Any, art: Any, X: np.ndarray, y: np.ndarray, keys: np.ndarray, S: int) -> ShardedClassifier:
    """A sharded model fitted from scratch with the version's hash key and random state."""
    return ShardedClassifier(estimator, n_shards=S, aggregation="mean_proba", key=bytes(art.arrays["hash_key"]),
                             random_state=int(art.meta["random_state"])).fit(X, y, sample_ids=keys)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(("params", "estimator"), [
    (HGB, lambda: HistGradientBoostingClassifier(max_iter=15, early_stopping=False)),
    ({"estimator": "logistic-regression", "n_shards": 3, "C": 0.5}, lambda: LogisticRegression(C=0.5)),
])
def test_deletions_equal_a_fresh_fit_on_the_remaining_records(tmp_path: Path, data: Data, params, estimator) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=100))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "sh", mechanism="sharded", params=params, random_state=3)
    art1, adapter = _published(c, "sh")
    X0, y0, keys0 = _remaining(c, data)
    full = adapter.model(art1, X0, y0)
    # version 1 is the fit from scratch with its key and seeds, partitioned by the key digests
    assert np.array_equal(full.predict_proba(data.X),
                          _fresh(estimator(), art1, X0, y0, keys0, params["n_shards"]).predict_proba(data.X))
    before = np.asarray(c.predict("sh", data.X.tolist())["predictions"])
    for batch in (["user-0003"], ["user-0010", "user-0042", "user-0150"]):
        for k in batch:
            c.submit_deletion("people", k)
        res = c.process_pending(force=True)
        assert [r.status for r in res] == ["done"]
    art, _ = _published(c, "sh")
    X, y, keys = _remaining(c, data)
    assert X.shape[0] == 196 and art.meta["n"] == 196
    model = adapter.model(art, X, y)
    fresh = _fresh(estimator(), art, X, y, keys, params["n_shards"])
    # bit for bit: every probability of every row, and the service's predictions
    assert np.array_equal(model.predict_proba(data.X), fresh.predict_proba(data.X))
    served = np.asarray(c.predict("sh", data.X.tolist())["predictions"])
    assert np.array_equal(served, fresh.predict(data.X).astype(float))
    # the test can fail: the model before the deletions is not the fresh fit on the remaining records
    assert not np.array_equal(full.predict_proba(data.X), fresh.predict_proba(data.X))
    assert before.shape == served.shape
    # the hash key and the seeds are the version's own, kept from training (an exact removal draws nothing)
    assert bytes(art.arrays["hash_key"]) == bytes(art1.arrays["hash_key"])
    assert np.array_equal(art.arrays["seeds"], art1.arrays["seeds"])
    c.close()


def test_removal_retrains_only_the_affected_shards_and_the_artifact_forgets(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=100))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "sh", mechanism="sharded", params=HGB, random_state=0)
    art1, adapter = _published(c, "sh")
    X0, y0, _ = _remaining(c, data)
    m1 = adapter.model(art1, X0, y0)
    with c.store.read() as s:
        ds_id = s.scalar(select(Model.dataset_id))
    digest = c.key_digest(ds_id, "user-0007")
    shard = int(m1.shard_of_[list(m1.keys_).index(digest)])
    c.submit_deletion("people", "user-0007")
    c.process_pending(force=True)
    art2, _ = _published(c, "sh")
    X, y, _ = _remaining(c, data)
    m2 = adapter.model(art2, X, y)
    # one shard fit for the removal (4 at training), and only the record's shard changed
    assert (art1.meta["state"]["n_shard_fits"], art2.meta["state"]["n_shard_fits"]) == (4, 5)
    for s in range(4):
        same = np.array_equal(m1.estimators_[s].predict_proba(data.X), m2.estimators_[s].predict_proba(data.X))
        assert same == (s != shard), s
    assert m2.n_removed_ == 1
    # the deleted record's key digest and values are not in the new version (compacted to the remaining records)
    assert digest not in set(art2.arrays["keys"].tolist()) and digest in set(art1.arrays["keys"].tolist())
    row = data.X[7].tobytes()
    assert all(row not in a.tobytes() for a in art2.arrays.values())
    # every array is secret: the public model shows none of them (not the shards, the keys or the hash key)
    assert c.public_model("sh")["arrays"] == {}
    c.close()


def test_certificates_say_exact_and_never_name_the_shard(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=100))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "sh", mechanism="sharded", params=HGB, random_state=0)
    req, _ = c.submit_deletion("people", "user-0020")
    c.process_pending(force=True)
    op = c.request_certificates(req["id"])
    assert len(op) == 1
    body = op[0]["certificate"]
    assert body["guarantee"] == "exact" and body["epsilon"] == 0.0 and body["delta"] == 0.0
    assert body["n_removed"] == 1 and body["n_remaining"] == 199 and body["operation"] == "remove"
    assert set(body) <= CERTIFICATE_FIELDS
    for forbidden in ("retrained_shards", "restart_slices", "rows_replayed", "seconds", "n_shards_retrained"):
        assert forbidden not in body
    budget = c.budget("sh")
    assert budget["guarantee"] == "exact" and budget["n"] == 199 and budget["n_shards"] == 4
    # the public summary: the guarantee, the parameters and the count; nothing per shard
    with c.store.read() as s:
        summary = s.scalar(select(ModelVersion.summary).where(ModelVersion.number == 2))
    assert set(summary) == {"mechanism", "guarantee", "epsilon", "delta", "n", "estimator", "n_shards"}
    ledger = str(c.ledger())
    assert "retrained_shards" not in ledger and "restart_slices" not in ledger
    c.close()


def test_params_are_validated_and_a_refusal_changes_nothing(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d")
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    before = snapshot(c)
    for params, match in (({"estimator": "random-forest"}, "estimator must be one of"),
                          ({"estimator": "mlp", "max_depth": 3}, "Unknown parameter"),
                          ({"random_state": 1}, "Unknown parameter"),
                          ({"n_shards": 0}, "n_shards must be in"),
                          ({"aggregation": "median"}, "aggregation must be one of"),
                          ({"max_iter": -5}, "max_iter")):
        with pytest.raises(InvalidInputError, match=match):
            c.train("people", "sh", mechanism="sharded", params=params)
    assert snapshot(c) == before
    c.close()


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_retrain_and_mlp(tmp_path: Path) -> None:
    data = make_data(tmp_path / "small.csv", n=80, d=10, seed=1)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=100))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "mlp", mechanism="sharded",
            params={"estimator": "mlp", "n_shards": 2, "hidden_layer_sizes": [8], "max_iter": 30}, random_state=0)
    c.submit_deletion("people", "user-0001")
    assert [r.status for r in c.process_pending(force=True)] == ["done"]
    out = c.retrain("mlp", random_state=1)
    assert out["version"] == 3 and out["n"] == 79 and out["guarantee"] == "exact"
    assert len(c.predict("mlp", data.X[:3].tolist())["predictions"]) == 3
    c.close()


def test_http_deletion_on_a_sharded_model(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=1))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    # opted in (issue 26): a sharded model's consecutive versions are exact retrainings, not private releases
    c.train("people", "sh", mechanism="sharded", params=HGB, random_state=5, serve_unreleased=True)
    admin, alice = c.create_token("ops", "admin"), c.create_token("alice", "requester")
    reader = c.create_token("viewer", "model-reader")  # weights and predictions are this scope's (issue 26)
    c.close()
    url, proc = start_server(c.data_dir, log_name="uvicorn-stdout.log")
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {alice}"}, timeout=30) as h:
            r = h.post("/v1/deletions", json={"dataset": "people", "key": "user-0099"})
            assert r.status_code == 202, r.text
            rid = r.json()["id"]
            for _ in range(600):
                done = h.get(f"/v1/deletions/{rid}").json()
                if done["status"] != "pending":
                    break
                time.sleep(0.05)
            assert done["status"] == "done", done
            cert = h.get(f"/v1/deletions/{rid}/certificates").json()[0]["certificate"]
            assert cert["guarantee"] == "exact" and cert["epsilon"] == 0.0 and cert["delta"] == 0.0
            assert set(cert) <= REQUESTER_CERTIFICATE_FIELDS and "n_removed" not in cert
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {reader}"}, timeout=30) as h:
            pred = h.post("/v1/models/sh/predict", json={"features": data.X[:4].tolist()}).json()
            assert pred["version"] == 2
            public = h.get("/v1/models/sh")
            assert public.status_code == 200 and public.json()["arrays"] == {}  # no shard, key or hash key published
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as h:
            op = h.get(f"/v1/certificates/{h.get(f'/v1/deletions/{rid}/certificates').json()[0]['id']}").json()
            assert op["certificate"]["n_removed"] == 1 and set(op["certificate"]) <= CERTIFICATE_FIELDS
    finally:
        stop_server(proc)
    c2 = Curator(c.data_dir)
    art, adapter = _published(c2, "sh")
    X, y, keys = _remaining(c2, data)
    fresh = _fresh(HistGradientBoostingClassifier(max_iter=15, early_stopping=False), art, X, y, keys, 4)
    assert np.array_equal(adapter.model(art, X, y).predict_proba(data.X), fresh.predict_proba(data.X))
    assert np.array_equal(np.asarray(pred["predictions"]), fresh.predict(data.X[:4]).astype(float))
    c2.close()


def test_console_pages_render_a_sharded_model(tmp_path: Path, data: Data) -> None:
    from ..console.test_console import PAGES, client, sign_in

    c = Curator(tmp_path / "d", settings=Settings(batch_size=100))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "sh", mechanism="sharded", params=HGB, random_state=0)
    req, _ = c.submit_deletion("people", "user-0030")
    c.process_pending(force=True)
    admin = c.create_token("ops", "admin")
    with client(c) as cl:
        sign_in(cl, admin)
        for page in PAGES:
            r = cl.get(page)
            assert r.status_code == 200, (page, r.text[:300])
        models = cl.get("/console/models").text
        assert "sharded" in models and "retrained_shards" not in models
        cert = cl.get(f"/console/requests/{req['id']}")
        assert cert.status_code == 200 and "exact" in cert.text and "retrained_shards" not in cert.text
    c.close()
