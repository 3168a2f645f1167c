"""The HTTP API end to end against a real uvicorn server on 127.0.0.1 (started and stopped by the fixture)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from lethe.curator import Curator, Principal
from lethe.curator.public import CERTIFICATE_FIELDS, REQUESTER_CERTIFICATE_FIELDS
from lethe.curator.store import Token

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
    with client(server, server.alice) as alice, client(server, server.admin) as admin, \
            client(server, server.reader) as reader:
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
        # a requester is told no version number or id: they count everyone's removal steps (issue 36)
        assert (cert["old_version"], cert["new_version"], cert["new_version_id"]) == (None, None, None)
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
        assert alice.post("/v1/models/clf/predict", json={"features": data.X[:5].tolist()}).status_code == 403
        pred = reader.post("/v1/models/clf/predict", json={"features": data.X[:5].tolist()})
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
            client(server, server.admin) as admin, client(server, server.reader) as reader:
        cases: list[tuple[httpx.Response, int, str]] = [
            (anon.post("/v1/deletions", json=ok), 401, "Missing bearer token"),
            (wrong.post("/v1/deletions", json=ok), 401, "Unknown or revoked token"),
            (httpx.post(server.url + "/v1/deletions", json=ok, headers={"Authorization": "Basic eDp5"}), 401, ""),
            (alice.get("/v1/models/clf/budget"), 403, "admin scope"),
            (alice.get("/v1/status"), 403, "admin scope"),
            (alice.get("/v1/models/clf"), 403, "model-reader"),
            (alice.post("/v1/models/clf/predict", json={"features": [[0.0] * 10]}), 403, "model-reader"),
            (reader.post("/v1/deletions", json=ok), 403, "requester or admin"),
            (reader.get("/v1/deletions"), 403, "requester or admin"),
            (alice.post("/v1/deletions", json={"dataset": "nope", "key": "user-0001"}), 404, "Unknown dataset"),
            (alice.post("/v1/deletions", json={"dataset": "people"}), 422, "missing"),
            (alice.post("/v1/deletions", json={**ok, "extra": 1}), 422, "extra"),
            (alice.post("/v1/deletions", json={**ok, "key": ""}), 422, "at least 1 character"),
            (alice.post("/v1/deletions", content=b"{not json", headers={"Content-Type": "application/json"}),
             422, "JSON"),
            (reader.post("/v1/models/clf/predict", json={"features": [[0.1, 0.2]]}), 422, "10 numbers"),
            (reader.post("/v1/models/clf/predict", json={"features": []}), 422, "at least 1"),
            (reader.post("/v1/models/clf/predict", content=b'{"features": [[NaN,0,0,0,0,0,0,0,0,0]]}',
                        headers={"Content-Type": "application/json"}), 422, "finite"),
            (reader.post("/v1/models/other/predict", json={"features": [[0.0] * 10]}), 404, "Unknown model"),
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
        # repeated: the same key again by its owner (its own request), or the same request id for another key
        again = alice.post("/v1/deletions", json=ok)
        assert again.status_code == 200 and again.json()["id"] == rid
        reuse = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0002", "request_id": "x"})
        assert reuse.status_code == 409 and "different deletion" in reuse.text
        wait_done(alice, rid)
        gone = alice.post("/v1/deletions", json=ok)
        assert gone.status_code == 200 and gone.json()["id"] == rid and gone.json()["outcome"] == "removed"
    c.close()


def test_revoked_token_is_refused(server: Server) -> None:
    c = Curator(server.data_dir)
    c.revoke_token("bob")
    c.close()
    with client(server, server.bob) as bob:
        r = bob.post("/v1/deletions", json={"dataset": "people", "key": "user-0001"})
    assert r.status_code == 401 and "revoked" in r.text


def _raw_http(server: Server, head: bytes, body_chunks: tuple[bytes, ...] | list[bytes] = (),
              timeout: float = 20.0) -> bytes:
    """Send raw bytes to the server and return whatever it answers (the status line first)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(server.url)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                got = sock.recv(65536)
                if not got:
                    break
                data += got
        except ConnectionResetError:
            pass
    return data


def test_body_limit_before_parsing_and_auth(server: Server) -> None:
    # a declared 300 MB body, none of it sent: refused at once (413, not a 401 after reading it)
    head = (b"POST /v1/deletions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 300000000\r\n\r\n")
    answer = _raw_http(server, head)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # a chunked body (no Content-Length) that streams past the limit: refused while counting
    head = (b"POST /v1/deletions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"a" * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 80 + [b"0\r\n\r\n"]  # 5 MiB > 4 MiB
    answer = _raw_http(server, head, chunks)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # under the limit, the usual answers
    assert httpx.post(server.url + "/v1/deletions", json={"dataset": "people", "key": "k"}).status_code == 401
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}


def test_422_never_echoes_input_and_surrogates_are_4xx(server: Server) -> None:
    marker = "SECRET-MARKER-" + "z" * 5000
    with client(server, server.alice) as alice, client(server, server.reader) as reader:
        r = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0001", "extra": marker})
        assert r.status_code == 422 and "SECRET-MARKER" not in r.text and '"input"' not in r.text
        r = alice.post("/v1/deletions", json={"dataset": "people", "key": 12345678})
        assert r.status_code == 422 and "12345678" not in r.text
        r = reader.post("/v1/models/clf/predict", json={"features": [[987654.321] * 3]})
        assert r.status_code == 422 and "987654" not in r.text
        for field in ("key", "dataset", "request_id"):
            body = {"dataset": "people", "key": "user-0001", field: "ab\\ud800cd"}
            raw = json.dumps(body).replace("\\\\ud800", "\\ud800").encode()
            r = alice.post("/v1/deletions", content=raw, headers={"Content-Type": "application/json"})
            assert 400 <= r.status_code < 500, (field, r.status_code, r.text)
        assert alice.get("/v1/deletions/%ED%A0%80").status_code == 404
        assert alice.get("/v1/certificates/%ED%A0%80").status_code == 404
        r = reader.post("/v1/models/%ED%A0%80/predict", json={"features": [[0.0] * 10]})
        assert r.status_code == 404
        r = reader.post("/v1/models/clf/predict", content=b'{"features": [[1, 2]], "x\\ud800": 1}',
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 422


def test_list_versions_and_public_model_endpoints(server: Server) -> None:
    with client(server, server.alice) as alice, client(server, server.bob) as bob, \
            client(server, server.admin) as admin, client(server, server.reader) as reader:
        rid = alice.post("/v1/deletions", json={"dataset": "people", "key": "user-0009"}).json()["id"]
        wait_done(alice, rid)
        page = alice.get("/v1/deletions", params={"limit": 10}).json()
        assert [r["id"] for r in page["items"]] == [rid] and page["next_cursor"] is None
        assert bob.get("/v1/deletions").json()["items"] == []
        assert bob.get("/v1/deletions", params={"requester": "alice"}).json()["items"] == []
        assert admin.get("/v1/deletions", params={"requester": "alice"}).json()["items"][0]["id"] == rid
        assert alice.get("/v1/deletions", params={"status": "gone"}).status_code == 422
        assert alice.get("/v1/models/clf/versions").status_code == 403
        hist = admin.get("/v1/models/clf/versions").json()
        assert [h["version"] for h in hist] == [1, 2] and hist[1]["certificate"]["n_removed"] == 1
        assert alice.get("/v1/models/clf").status_code == 403  # weights are the model-reader scope's
        assert reader.get("/v1/deletions").status_code == 403
        pub = reader.get("/v1/models/clf").json()
        assert pub["version"] == 2 and set(pub["arrays"]) == {"w"} and "b" not in json.dumps(pub["arrays"])


def test_metrics_endpoint_is_prometheus_for_admins(server: Server) -> None:
    with client(server, server.alice) as alice, client(server, server.admin) as admin:
        assert alice.get("/metrics").status_code == 403
        assert httpx.get(server.url + "/metrics").status_code == 401
        r = admin.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert 'lethe_requests{status="done"}' in r.text and "lethe_model_budget_used_ratio" in r.text


def test_token_cache_follows_revocation_by_another_process(tmp_path: Path) -> None:
    """Verified tokens are cached (no database read per request), and a revocation by another process on the same
    data directory (here: a second Curator) is seen by the next check, through the token stamp. Without the stamp
    the cache would keep accepting the revoked token (the mutation check at the end)."""
    server = Curator(tmp_path / "d")
    other = Curator(tmp_path / "d")
    try:
        token = server.create_token("alice", "requester")
        assert server.authenticate(token) == Principal("alice", "requester")
        assert server.cached_principal(token) == Principal("alice", "requester")  # cached now
        other.revoke_token("alice")
        assert server.cached_principal(token) is None
        assert server.authenticate(token) is None
        assert server.authenticate("lethe_not-a-token") is None and server.cached_principal("lethe_x") is None
        # mutation check: a revocation that does not replace the stamp goes unseen while the entry is cached
        token2 = server.create_token("bob", "requester")
        assert server.authenticate(token2) is not None
        with other.store.write() as s, s.begin():
            s.execute(update(Token).where(Token.name == "bob").values(revoked=True))
        assert server.authenticate(token2) is not None  # stale (at most TOKEN_CACHE_SECONDS)
        assert other.authenticate(token2) is None
    finally:
        server.close()
        other.close()
