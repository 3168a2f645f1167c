"""Predictions and weights are only ever served from released models (issue 26, part 3, item 2).

A model whose mechanism certifies ONE published version (certified removal, Noisy-GD, noisy fine-tuning, sharded) is
refused to model-readers — ``POST /v1/models/{m}/predict`` and ``GET /v1/models/{m}`` answer 403 naming the mechanism
and the two ways out — unless an operator opted in at training (``serve_unreleased``, stored with the model, in the
ledger and the console). ``released-logistic`` is served without it. Admins and the CLI keep reading every model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.errors import InvalidInputError, UnreleasedModelError
from lethe.curator.serving import UNRELEASED_WARNING
from lethe.curator.settings import Principal
from lethe.curator.store import LedgerEvent, Model

from .conftest import PARAMS, Data

RELEASED = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 12, "cadence": 1}
READER = Principal("viewer", "model-reader")
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def cur(tmp_path: Path, data: Data) -> Iterator[Curator]:
    """A store with three models of one dataset: ``plain`` (certified removal, no opt-in), ``opted`` (certified
    removal, opted in) and ``rel`` (released-logistic)."""
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "plain", params=PARAMS, random_state=0)
    c.train("people", "opted", params=PARAMS, random_state=0, serve_unreleased=True)
    c.train("people", "rel", mechanism="released-logistic", params=RELEASED)
    yield c
    c.close()


@pytest.fixture
def http(cur: Curator) -> Iterator[Any]:
    tokens = {"viewer": cur.create_token("viewer", "model-reader"), "ops": cur.create_token("ops", "admin")}
    with TestClient(create_app(cur, run_worker=False), base_url="http://127.0.0.1") as client:
        def call(who: str, method: str, url: str, **kw: Any) -> Any:
            return client.request(method, url, headers={"Authorization": f"Bearer {tokens[who]}"}, **kw)
        call.client = client  # type: ignore[attr-defined]
        call.tokens = tokens  # type: ignore[attr-defined]
        yield call


def test_refused_to_model_readers_without_the_opt_in(cur: Curator, http: Any, data: Data) -> None:
    x = {"features": data.X[:3].tolist()}
    for method, url, body in (("POST", "/v1/models/plain/predict", x), ("GET", "/v1/models/plain", None)):
        r = http("viewer", method, url, json=body)
        assert r.status_code == 403, r.text
        detail = r.json()["detail"]
        # names the mechanism, the reason and the two ways out
        assert "'certified-removal'" in detail and UNRELEASED_WARNING in detail
        assert "--mechanism released-logistic" in detail and "--serve-unreleased" in detail
        # the operator (admin token) keeps reading it
        assert http("ops", method, url, json=body).status_code == 200
    # a refusal is decided before the input is looked at: a malformed body is refused the same way (no oracle on
    # the model's shape for a caller who may not use it)
    assert http("viewer", "POST", "/v1/models/plain/predict", json={"features": [[1.0]]}).status_code == 403
    assert http("viewer", "POST", "/v1/models/plain/predict", json={}).status_code == 403
    # the library facade: a model-reader principal is refused, the CLI's (admin) default is served
    with pytest.raises(UnreleasedModelError, match="certifies one published version"):
        cur.predict("plain", data.X[:2].tolist(), principal=READER)
    with pytest.raises(UnreleasedModelError):
        cur.public_model("plain", principal=READER)
    assert len(cur.predict("plain", data.X[:2].tolist())["predictions"]) == 2
    assert cur.public_model("plain")["arrays"]["w"]
    # still refused after a removal (a new version of the same mechanism)
    cur.submit_deletion("people", data.keys[5])
    cur.process_pending(force=True)
    assert http("viewer", "GET", "/v1/models/plain").status_code == 403
    assert cur.budget("plain")["served"] == "operators"


def test_opt_in_serves_and_is_recorded(cur: Curator, http: Any, data: Data) -> None:
    x = {"features": data.X[:3].tolist()}
    pred = http("viewer", "POST", "/v1/models/opted/predict", json=x)
    assert pred.status_code == 200 and pred.json()["predictions"] == cur.predict("opted", x["features"])[
        "predictions"]
    assert http("viewer", "GET", "/v1/models/opted").json()["arrays"]["w"]
    # stored with the model, shown in the budget (admin), recorded in the ledger's train event with its warning
    with cur.store.read() as s:
        flags = dict(s.execute(select(Model.name, Model.serve_unreleased)).all())
        trains = {e.payload["mechanism"] + ":" + str(e.model_id): e.payload
                  for e in s.scalars(select(LedgerEvent).where(LedgerEvent.kind == "train"))}
    assert flags == {"plain": False, "opted": True, "rel": False}
    assert cur.budget("opted")["served"] == "opt-in" and cur.budget("opted")["serve_unreleased"] is True
    payloads = sorted((p["served"], p["serve_unreleased"], p.get("warning")) for p in trains.values())
    assert payloads == [("operators", False, None), ("opt-in", True, UNRELEASED_WARNING), ("releases", False, None)]
    # the console's models page says it plainly, per model
    client = http.client
    page = client.get("/console/login")
    csrf = CSRF_RE.search(page.text)
    assert csrf is not None
    r = client.post("/console/login", data={"token": http.tokens["ops"], "csrf": csrf.group(1)},
                    follow_redirects=False)
    assert r.status_code == 303
    html = client.get("/console/models").text
    sections = {m.group(1): m.group(2) for m in re.finditer(r'<h2 id="model-\d+-h">(\w+)</h2>(.*?)</section>', html,
                                                            re.S)}
    assert set(sections) == {"plain", "opted", "rel"}
    assert UNRELEASED_WARNING in sections["opted"] and "by your opt-in" in sections["opted"]
    assert UNRELEASED_WARNING not in sections["plain"] and "admins only" in sections["plain"]
    assert "private releases" in sections["rel"] and UNRELEASED_WARNING not in sections["rel"]
    # what the release schedule reveals, in plain words (docs/release_privacy.md §3); the default is "steps"
    assert "its release times reveal when a held record&#39;s deletion was processed" in sections["rel"] or \
        "its release times reveal when a held record's deletion was processed" in sections["rel"]


def test_released_model_served_without_opt_in(cur: Curator, http: Any, data: Data) -> None:
    x = {"features": data.X[:3].tolist()}
    r = http("viewer", "POST", "/v1/models/rel/predict", json=x)
    assert r.status_code == 200, r.text
    pub = http("viewer", "GET", "/v1/models/rel").json()
    assert set(pub["arrays"]) == {"w"}  # the release only, never the centre
    assert cur.budget("rel")["served"] == "releases"
    cur.submit_deletion("people", data.keys[7])
    cur.process_pending(force=True)
    # a model-reader is told the release number (the service's version number also counts batches that published
    # no release: docs/release_privacy.md §3); operators see the version
    assert http("viewer", "GET", "/v1/models/rel").json()["version"] == cur.budget("rel")["release_version"] == 1
    assert cur.public_model("rel")["version"] == 2


def test_opt_in_is_validated_and_refused_where_meaningless(cur: Curator) -> None:
    with pytest.raises(TypeError, match="serve_unreleased must be a bool"):
        cur.train("people", "m1", params=PARAMS, serve_unreleased="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="serve_unreleased .* publishes private releases"):
        cur.train("people", "m2", mechanism="released-logistic", params=RELEASED, serve_unreleased=True)
    with pytest.raises(InvalidInputError, match="publishes private"):
        cur.retrain("rel", serve_unreleased=True)
    with cur.store.read() as s:  # nothing was created or changed
        assert set(s.scalars(select(Model.name))) == {"plain", "opted", "rel"}
    assert cur.budget("rel")["version"] == 1


def test_retrain_sets_or_withdraws_the_opt_in(cur: Curator, data: Data) -> None:
    cur.retrain("plain", random_state=1)  # None keeps the stored choice
    with pytest.raises(UnreleasedModelError):
        cur.public_model("plain", principal=READER)
    cur.retrain("plain", random_state=2, serve_unreleased=True)
    assert cur.public_model("plain", principal=READER)["version"] == 3
    cur.retrain("plain", random_state=3)
    assert cur.public_model("plain", principal=READER)["version"] == 4  # kept
    cur.retrain("plain", random_state=4, serve_unreleased=False)
    with pytest.raises(UnreleasedModelError):
        cur.predict("plain", data.X[:1].tolist(), principal=READER)
    events = [e["payload"].get("served") for e in cur.ledger(200) if e["kind"] == "retrain"]
    assert events == ["operators", "opt-in", "opt-in", "operators"]


def test_other_mechanisms_are_refused_too(tmp_path: Path, data: Data) -> None:
    """Every mechanism whose certificates say "one published version" is refused (here: sharded, exact)."""
    c = Curator(tmp_path / "d2")
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "sh", mechanism="sharded", params={"estimator": "logistic-regression", "n_shards": 2},
                random_state=0)
        with pytest.raises(UnreleasedModelError, match="'sharded'"):
            c.predict("sh", data.X[:2].tolist(), principal=READER)
        assert np.asarray(c.predict("sh", data.X[:2].tolist())["predictions"]).shape == (2,)
    finally:
        c.close()
