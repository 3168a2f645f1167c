"""The service follows the threat model (issue 26, part 3): scopes, and published models through releases."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from lethe.curator import Curator
from lethe.curator.api import create_app

SCOPED = {"alice": "requester", "bob": "requester", "viewer": "model-reader", "ops": "admin"}


@pytest.fixture
def api(curator: Curator) -> Any:
    tokens = {who: curator.create_token(who, scope) for who, scope in SCOPED.items()}
    with TestClient(create_app(curator, run_worker=False)) as client:
        def call(who: str, method: str, url: str, **kw: Any) -> Any:
            return client.request(method, url, headers={"Authorization": f"Bearer {tokens[who]}"}, **kw)
        yield call


def test_scopes(curator: Curator, api: Any) -> None:
    """Weights and predictions are the model-reader scope's (admin keeps everything); a requester reads only its
    own requests; a model-reader reads no request at all."""
    x = {"features": [[0.1] * 10]}
    a = api("alice", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0001"}).json()
    b = api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0002"}).json()
    curator.process_pending(force=True)
    expect = {  # (who, method, url, body) -> status
        ("viewer", "GET", "/v1/models/clf", None): 200,
        ("viewer", "POST", "/v1/models/clf/predict", "x"): 200,
        ("ops", "GET", "/v1/models/clf", None): 200,
        ("ops", "POST", "/v1/models/clf/predict", "x"): 200,
        ("alice", "GET", "/v1/models/clf", None): 403,
        ("alice", "POST", "/v1/models/clf/predict", "x"): 403,
        ("viewer", "GET", "/v1/deletions", None): 403,
        ("viewer", "POST", "/v1/deletions", "d"): 403,
        ("viewer", "GET", f"/v1/deletions/{a['id']}", None): 403,
        ("viewer", "GET", "/v1/models/clf/versions", None): 403,
        ("viewer", "GET", "/metrics", None): 403,
        ("alice", "GET", f"/v1/deletions/{a['id']}", None): 200,
        ("alice", "GET", f"/v1/deletions/{b['id']}", None): 404,
        ("alice", "GET", f"/v1/deletions/{b['id']}/certificates", None): 404,
        ("ops", "GET", f"/v1/deletions/{b['id']}", None): 200,
    }
    for (who, method, url, body), code in expect.items():
        kw = {"json": x} if body == "x" else {"json": {"dataset": "people", "key": "user-0003"}} if body else {}
        r = api(who, method, url, **kw)
        assert r.status_code == code, (who, method, url, r.status_code, r.text)
        if code == 403:
            assert "scope" in r.json()["detail"]
    listed = {who: [r["id"] for r in api(who, "GET", "/v1/deletions").json()["items"]] for who in ("alice", "bob")}
    assert listed == {"alice": [a["id"]], "bob": [b["id"]]}
    bob_cert = api("bob", "GET", f"/v1/deletions/{b['id']}").json()["certificates"][0]
    assert api("alice", "GET", f"/v1/certificates/{bob_cert}").status_code == 404
    # asking for bob's requests by name changes nothing for alice
    assert [r["id"] for r in api("alice", "GET", "/v1/deletions?requester=bob").json()["items"]] == [a["id"]]


def test_token_scope_is_checked(curator: Curator) -> None:
    with pytest.raises(ValueError, match="scope must be one of"):
        curator.create_token("eve", "reader")
    curator.create_token("viewer", "model-reader")
    assert [t["scope"] for t in curator.list_tokens() if t["name"] == "viewer"] == ["model-reader"]
    assert curator.authenticate("lethe_not-a-token") is None
