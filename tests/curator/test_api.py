"""The HTTP API end to end against a real uvicorn server on 127.0.0.1 (started and stopped by the fixture)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from lethe.curator import Curator
from lethe.curator.public import CERTIFICATE_FIELDS, REQUESTER_CERTIFICATE_FIELDS

from .conftest import Data, Server, snapshot


def client(server: Server, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def wait_done(c: httpx.Client, rid: str) -> dict[str, Any]:
    for _ in range(400):
        body = c.get(f"/v1/deletions/{rid}").json()
        if body["status"] != "pending":
            return body
        time.sleep(0.05)
    raise AssertionError("not processed")


def test_deletion_end_to_end(server: Server, data: Data) -> None:
    with client(server, server.alice) as alice, client(server, server.admin) as admin:
        r = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0005", "request_id": "a-1"})
        assert r.status_code == 202, r.text
        req = r.json()
        assert req["status"] in ("pending", "done") and req["requester"] == "alice" and req["request_id"] == "a-1"
        assert "key" not in req
        done = wait_done(alice, req["id"])
        assert done["status"] == "done" and len(done["certificates"]) == 1
        # idempotent resubmission: same answer, 200, no new request
        again = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0005", "request_id": "a-1"})
        assert again.status_code == 200 and again.json()["id"] == req["id"]
        certs = alice.get(f"/v1/deletions/{req['id']}/certificates").json()
        assert len(certs) == 1
        cert = certs[0]
        assert cert["kind"] == "removal" and cert["model"] == "clf"
        assert (cert["old_version"], cert["new_version"]) == (1, 2)
        # the requester's view: the guarantee and its parameters, nothing of the batch (no counts, no bounds)
        assert set(cert["certificate"]) <= REQUESTER_CERTIFICATE_FIELDS and cert["batch_id"] is None
        assert cert["certificate"]["epsilon"] == 1.0 and "n_removed" not in cert["certificate"]
        assert alice.get(f"/v1/certificates/{cert['id']}").json() == cert
        body = admin.get(f"/v1/certificates/{cert['id']}").json()["certificate"]
        assert body["n_removed"] == 1 and body["n_remaining"] == 199 and body["residual_bound"] <= body["budget"]
        assert "removed_indices" not in body and set(body) <= CERTIFICATE_FIELDS
        budget = admin.get("/v1/models/clf/budget").json()
        assert budget["version"] == 2 and budget["n_records"] == 199 and budget["removals_since_training"] == 1
        assert budget["residual_bound"] == pytest.approx(body["residual_bound"])
        assert "b" not in budget and "w" not in budget
        pred = alice.post("/v1/models/clf/predict", json={"features": data.X[:5].tolist()})
        assert pred.status_code == 200 and pred.json()["version"] == 2
        assert set(pred.json()["predictions"]) <= {0.0, 1.0}
        status = admin.get("/v1/status").json()
        assert status["requests"]["done"] == 1 and status["datasets"][0]["n_records"] == 199
        schema = httpx.get(server.url + "/openapi.json").json()
        assert {"/v1/deletions", "/v1/deletions/{request_id}", "/v1/certificates/{certificate_id}",
                "/v1/models/{model}/predict", "/v1/models/{model}/budget"} <= set(schema["paths"])
        assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_bad_requests_get_4xx_and_change_nothing(server: Server) -> None:
    c = Curator(server.data_dir)
    before = snapshot(c)
    ok = {"dataset": "people", "key": "user-0001"}
    with client(server, None) as anon, client(server, "lethe_wrong") as wrong, \
            client(server, server.alice) as alice, client(server, server.bob) as bob, \
            client(server, server.admin) as admin:
        cases: list[tuple[httpx.Response, int, str]] = [
            (anon.post("/v1/deletions", json=ok), 401, "Missing bearer token"),
            (wrong.post("/v1/deletions", json=ok), 401, "Unknown or revoked token"),
            (httpx.post(server.url + "/v1/deletions", json=ok, headers={"Authorization": "Basic eDp5"}), 401, ""),
            (alice.get("/v1/models/clf/budget"), 403, "admin scope"),
            (alice.get("/v1/status"), 403, "admin scope"),
            (alice.post("/v1/deletions", json={"dataset": "people", "key": "nobody"}), 404, "Unknown key"),
            (alice.post("/v1/deletions", json={"dataset": "nope", "key": "user-0001"}), 404, "Unknown dataset"),
            (alice.post("/v1/deletions", json={"dataset": "people"}), 422, "missing"),
            (alice.post("/v1/deletions", json={**ok, "extra": 1}), 422, "extra"),
            (alice.post("/v1/deletions", json={**ok, "key": ""}), 422, "at least 1 character"),
            (alice.post("/v1/deletions", content=b"{not json", headers={"Content-Type": "application/json"}),
             422, "JSON"),
            (alice.post("/v1/models/clf/predict", json={"features": [[0.1, 0.2]]}), 422, "10 numbers"),
            (alice.post("/v1/models/clf/predict", json={"features": []}), 422, "at least 1"),
            (alice.post("/v1/models/clf/predict", content=b'{"features": [[NaN,0,0,0,0,0,0,0,0,0]]}',
                        headers={"Content-Type": "application/json"}), 422, "finite"),
            (alice.post("/v1/models/other/predict", json={"features": [[0.0] * 10]}), 404, "Unknown model"),
            (alice.get("/v1/deletions/does-not-exist"), 404, "Unknown request"),
            (alice.get("/v1/certificates/does-not-exist"), 404, "Unknown certificate"),
            (admin.get("/v1/models/other/budget"), 404, "Unknown model"),
        ]
        for resp, code, text in cases:
            assert resp.status_code == code, (resp.request.url, resp.text)
            assert text in resp.text, (resp.request.url, resp.text)
            if code == 401:
                assert resp.headers.get("www-authenticate") == "Bearer"
        assert snapshot(c) == before
        # a requester sees only its own requests
        mine = alice.post("/v1/deletions", json={**ok, "request_id": "x"})
        assert mine.status_code == 202
        rid = mine.json()["id"]
        assert bob.get(f"/v1/deletions/{rid}").status_code == 404
        assert bob.get(f"/v1/deletions/{rid}/certificates").status_code == 404
        assert admin.get(f"/v1/deletions/{rid}").status_code == 200
        # repeated: the same key again (by anyone), or the same request id for another key
        assert bob.post("/v1/deletions", json=ok).status_code == 409
        reuse = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0002", "request_id": "x"})
        assert reuse.status_code == 409 and "different deletion" in reuse.text
        wait_done(alice, rid)
        gone = alice.post("/v1/deletions", json=ok)
        assert gone.status_code == 409 and "already deleted" in gone.text
    c.close()


def test_revoked_token_is_refused(server: Server) -> None:
    c = Curator(server.data_dir)
    c.revoke_token("bob")
    c.close()
    with client(server, server.bob) as bob:
        r = bob.post("/v1/deletions", json={"dataset": "people", "key": "user-0001"})
    assert r.status_code == 401 and "revoked" in r.text
