"""The curator's components through their own public APIs: the refusal → HTTP status mapping of the API layer, the
intake's one decision (a pure function), and the one request cursor shared by the API and the console."""

from __future__ import annotations

import itertools

import pytest

from lethe.curator import Curator
from lethe.curator import errors as E
from lethe.curator.api import STATUS_CODES, http_status
from lethe.curator.console import queries as Q
from lethe.curator.intake import Known, NewRequest, Submission, decide
from lethe.curator.settings import Principal
from lethe.curator.store import Dataset
from lethe.curator.views import decode_cursor, encode_cursor

ALICE, BOB, ADMIN = Principal("alice", "requester"), Principal("bob", "requester"), Principal("ops", "admin")

# the codes the error classes carried as attributes before the API layer took the mapping over
BEFORE = {E.CuratorError: 400, E.NotFoundError: 404, E.ConflictError: 409, E.PermissionDeniedError: 403,
          E.InvalidInputError: 422, E.BusyError: 503, E.StorageError: 507, E.ServiceFaultError: 503}


def test_http_status_answers_as_before() -> None:
    for cls, code in BEFORE.items():
        assert http_status(cls("x")) == code, cls.__name__
        assert not hasattr(cls("x"), "status_code")  # the exceptions carry no transport

    class Narrower(E.ConflictError):
        pass

    assert http_status(Narrower("x")) == 409  # a subclass answers as its nearest listed class


def test_http_status_mutation_is_caught() -> None:
    """A wrong entry in the mapping changes an answer the test above pins."""
    wrong = dict(STATUS_CODES)
    wrong[E.ConflictError] = 400
    assert any(wrong.get(cls, 400) != code for cls, code in BEFORE.items() if cls is not E.CuratorError)


def _request(rid: str, requester: str, crid: str | None, digest: str, status: str = "pending") -> NewRequest:
    return NewRequest(id=rid, requester=requester, client_request_id=crid, dataset_id=1, record_id=7,
                      key_digest=digest, status=status, attempts=0, submitted_at=None)


def test_decide_covers_every_answer() -> None:
    """Every combination of what the store may hold about a submission, against the rules written out here."""
    ds = Dataset(id=1, name="people", n_features=2, feature_names={}, key_column="k", label_column="y")
    sub_plain = Submission("people", "user-1", ALICE, None)
    sub_crid = Submission("people", "user-1", ALICE, "r1")
    mine_same = _request("q1", "alice", "r1", "d1")
    mine_other_key = _request("q2", "alice", "r1", "d2")
    bobs = _request("q3", "bob", None, "d1", status="done")
    mine_other_id = _request("q4", "alice", "r9", "d1")  # the caller's own request of the key, under another id
    for sub, dataset, by_crid, live, record in itertools.product(
            (sub_plain, sub_crid), (None, ds), (None, mine_same, mine_other_key),
            (None, mine_same, bobs, mine_other_id), (None, 7)):
        known = Known(dataset, "d1" if dataset is not None else "", by_crid if sub.client_request_id else None, live,
                      record)
        if dataset is None:
            with pytest.raises(E.NotFoundError, match="Unknown dataset"):
                decide(sub, known)
            continue
        if known.by_client_id is not None:
            if known.by_client_id is mine_same:
                assert decide(sub, known) is mine_same  # idempotent repeat
            else:
                with pytest.raises(E.ConflictError, match="already used"):
                    decide(sub, known)
            continue
        if live is not None:
            if live is mine_same and sub.client_request_id == "r1":
                assert decide(sub, known) is mine_same  # the same submission, committed concurrently
            else:
                with pytest.raises(E.ConflictError) as info:
                    decide(sub, known)
                # the earlier request is named to its own requester only
                assert (live.id in str(info.value)) == (live.requester == "alice")
            continue
        if record is None:
            with pytest.raises(E.NotFoundError, match="Unknown key"):
                decide(sub, known)
        else:
            assert decide(sub, known) is None  # a new request


def test_decide_names_the_earlier_request_to_an_admin() -> None:
    ds = Dataset(id=1, name="people", n_features=2, feature_names={}, key_column="k", label_column="y")
    bobs = _request("q3", "bob", None, "d1")
    with pytest.raises(E.ConflictError, match="q3"):
        decide(Submission("people", "user-1", ADMIN, None), Known(ds, "d1", None, bobs, 7))
    with pytest.raises(E.ConflictError, match="pending or done") as info:
        decide(Submission("people", "user-1", ALICE, None), Known(ds, "d1", None, bobs, 7))
    assert "q3" not in str(info.value)


def test_one_cursor_for_the_api_and_the_console(curator: Curator) -> None:
    """A page cursor of the API's listing continues the console's listing at the same place, and back."""
    for i in range(9):
        curator.submit_deletion("people", f"user-{i:04d}", principal=ALICE)
    first = curator.list_requests(ADMIN, limit=4)
    assert first["next_cursor"] is not None
    with curator.store.read() as s:
        console = Q.list_requests(s, Q.RequestFilter(), after=first["next_cursor"], limit=4)
        api_next = curator.list_requests(ADMIN, limit=4, cursor=first["next_cursor"])
        assert [r["id"] for r in console.rows] == [r["id"] for r in api_next["items"]]
        assert console.next_cursor == api_next["next_cursor"]
        page1 = Q.list_requests(s, Q.RequestFilter(), limit=4)
    assert page1.next_cursor == first["next_cursor"]
    at, rid = decode_cursor(first["next_cursor"])
    assert encode_cursor(at, rid) == first["next_cursor"]
    for bad in ("garbage!", "", 5, "x" * 300, encode_cursor(at, "")):
        with pytest.raises(E.InvalidInputError, match="cursor"):
            decode_cursor(bad)
