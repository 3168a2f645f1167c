"""The key-status oracle (issue 26), tried as an attacker with a requester token.

Before: a requester who submitted a key learned 404 (never in the dataset, the key echoed back) or 409 (already
deleted or pending): "was Alice deleted?" cost one POST. Now every answer to a well-formed submission for a
registered dataset is the same for "never held" and "already deleted" — to anyone but the owner of the earlier
request: status code, body shape, every field but the fresh id and timestamps, and the timing class (done at once,
nothing left for the worker). A key pending under another requester's request is answered like a present key.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lethe.curator import Curator, Settings
from lethe.curator.adapters import get_adapter
from lethe.curator.api import create_app

from .conftest import PARAMS, snapshot

VOLATILE = {"id", "submitted_at", "processed_at"}  # fresh per request, whatever the key


def _answer(r: Any) -> tuple[int, dict[str, Any]]:
    body = r.json()
    return r.status_code, {k: v for k, v in body.items() if k not in VOLATILE}


@pytest.fixture
def api(curator: Curator) -> Any:
    tokens = {who: curator.create_token(who, scope) for who, scope in
              (("alice", "requester"), ("bob", "requester"), ("ops", "admin"))}
    app = create_app(curator, run_worker=False)
    with TestClient(app) as client:
        def call(who: str, method: str, url: str, **kw: Any) -> Any:
            return client.request(method, url, headers={"Authorization": f"Bearer {tokens[who]}"}, **kw)
        yield call


def test_never_held_and_deleted_by_another_are_indistinguishable(curator: Curator, api: Any) -> None:
    # alice deletes user-0001 (processed: the record is gone); bob, the attacker, then probes it and a key that
    # never existed
    first = api("alice", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0001"})
    assert first.status_code == 202
    curator.process_pending(force=True)
    assert api("alice", "GET", f"/v1/deletions/{first.json()['id']}").json()["outcome"] == "removed"
    for attacker in ("bob", "ops"):  # an admin who is not the earlier request's owner is answered the same
        deleted = api(attacker, "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0001"})
        never = api(attacker, "POST", "/v1/deletions", json={"dataset": "people", "key": "user-9999"})
        assert _answer(deleted) == _answer(never), (deleted.text, never.text)
        assert deleted.status_code == 202 and deleted.json().keys() == never.json().keys()
        code, body = _answer(never)
        assert body["status"] == "done" and body["outcome"] == "no record held" and body["certificates"] == []
        assert first.json()["id"] not in deleted.text
        for r in (deleted, never):
            assert "user-0001" not in r.text and "user-9999" not in r.text
        # the timing class: both are final at once; the worker has nothing to do for either
        before = snapshot(curator)
        assert curator.process_pending(force=True) == []
        assert snapshot(curator) == before
        later = [_answer(api(attacker, "GET", f"/v1/deletions/{r.json()['id']}")) for r in (deleted, never)]
        assert later[0] == later[1]
        certs = [api(attacker, "GET", f"/v1/deletions/{r.json()['id']}/certificates") for r in (deleted, never)]
        assert [c.status_code for c in certs] == [200, 200] and certs[0].json() == certs[1].json() == []
        # a repeat by the same requester: its own request, 200, for both alike
        again = [api(attacker, "POST", "/v1/deletions", json={"dataset": "people", "key": k})
                 for k in ("user-0001", "user-9999")]
        assert [a.status_code for a in again] == [200, 200]
        assert [a.json()["id"] for a in again] == [deleted.json()["id"], never.json()["id"]]
    # the owner of the earlier request is answered with it
    mine = api("alice", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0001"})
    assert mine.status_code == 200 and mine.json()["id"] == first.json()["id"]


def test_pending_under_another_owner_is_answered_like_a_present_key(curator: Curator, api: Any) -> None:
    taken = api("alice", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0002"})
    follower = api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0002"})
    present = api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0003"})
    assert _answer(follower) == _answer(present) and follower.status_code == 202
    assert follower.json()["status"] == "pending" and taken.json()["id"] not in follower.text
    listed = api("bob", "GET", "/v1/deletions?status=pending").json()["items"]
    assert {r["id"] for r in listed} == {follower.json()["id"], present.json()["id"]}
    curator.process_pending(force=True)
    done = [api("bob", "GET", f"/v1/deletions/{r.json()['id']}").json() for r in (follower, present)]
    assert [(d["status"], d["outcome"], len(d["certificates"])) for d in done] == [("done", "removed", 1)] * 2
    cert = api("bob", "GET", f"/v1/certificates/{done[0]['certificates'][0]}")
    assert cert.status_code == 200 and cert.json()["request_id"] == follower.json()["id"]
    # alice's own request and certificate stay hers
    assert api("bob", "GET", f"/v1/deletions/{taken.json()['id']}").status_code == 404
    assert curator.status()["requests"]["pending"] == 0


def test_a_follower_fails_with_the_request_it_follows(curator: Curator, api: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    taken = api("alice", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0004"}).json()
    follower = api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0004"}).json()
    adapter_cls = type(get_adapter("certified-removal", PARAMS))

    def boom(self: object, *a: object, **k: object) -> None:
        raise RuntimeError("x")

    monkeypatch.setattr(adapter_cls, "remove", boom)
    monkeypatch.setattr(adapter_cls, "remove_warm", boom)  # the path the worker takes for a warm model
    curator.settings = Settings(batch_size=4, max_attempts=1)  # the mechanism's first failure is final
    assert [r.status for r in curator.process_pending(force=True)] == ["failed"]
    monkeypatch.undo()
    assert api("alice", "GET", f"/v1/deletions/{taken['id']}").json()["status"] == "failed"
    got = api("bob", "GET", f"/v1/deletions/{follower['id']}").json()
    assert got["status"] == "failed" and got["outcome"] is None
    # the key is still held: a new submission (by either) is a fresh pending request
    retry = api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": "user-0004"})
    assert retry.status_code == 202 and retry.json()["status"] == "pending"


def test_no_refusal_echoes_a_key(curator: Curator, api: Any) -> None:
    marker = "secret-key-\u00e9-42"
    answers = [
        api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": marker, "request_id": "r"}),
        api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": marker + "x", "request_id": "r"}),
        api("bob", "POST", "/v1/deletions", json={"dataset": "nope", "key": marker}),
        api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": marker, "extra": 1}),
        api("bob", "POST", "/v1/deletions", json={"dataset": "people", "key": marker * 40}),
    ]
    assert [a.status_code for a in answers] == [202, 409, 404, 422, 422]
    for a in answers:
        assert "secret-key" not in a.text, a.text


SOURCES = [*(Path(__file__).parents[2] / "src/lethe/curator").rglob("*.py"),
           *(Path(__file__).parents[2] / "src/lethe/cli" / name for name in ("curator.py", "curator_common.py",
                                                                             "evidence.py"))]
KEY_NAMES = {"key", "keys"}  # the names a record's key goes by on the request path
COLUMN_NAMES = {"tables.py", "datasets.py"}  # there `key` names the key column of a file, not a record's key


def _echoes_key(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.FormattedValue):
            if isinstance(sub.value, ast.Call) and getattr(sub.value.func, "id", None) == "len":
                continue  # a count of keys names none
            for n in ast.walk(sub.value):
                if (isinstance(n, ast.Name) and n.id in KEY_NAMES) or \
                        (isinstance(n, ast.Attribute) and n.attr in KEY_NAMES):
                    return True
    return False


def test_no_error_message_formats_a_key() -> None:
    """Static: no exception raised on the request path (curator, its API, console and CLI) formats a variable
    named ``key`` into its message. Mutation check: the message the intake used to raise is caught."""
    found = []
    for path in SOURCES:
        if path.name in COLUMN_NAMES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None and _echoes_key(node.exc):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found
    before = ast.parse('raise NotFoundError(f"Unknown key {sub.key!r} in dataset {sub.dataset!r}.")')
    assert _echoes_key(before.body[0].exc)  # type: ignore[attr-defined]
