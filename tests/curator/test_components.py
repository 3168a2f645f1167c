"""The curator's components through their own public APIs: the refusal → HTTP status mapping of the API layer, the
intake's one decision (a pure function), and the one request cursor shared by the API and the console."""

from __future__ import annotations

import itertools

import pytest

from lethe.curator import Curator
from lethe.curator import errors as E
from lethe.curator.api import STATUS_CODES, http_status
from lethe.curator.console import queries as Q
from lethe.curator.intake import Known, NewRequest, Plan, Submission, decide
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
    """Every combination of what the store may hold about a submission, against the rules written out here (issue
    26: no answer tells a non-owner "never held" from "already deleted"; a repeat by the owner is its own request)."""
    ds = Dataset(id=1, name="people", n_features=2, feature_names={}, key_column="k", label_column="y")
    sub_plain = Submission("people", "user-1", ALICE, None)
    sub_crid = Submission("people", "user-1", ALICE, "r1")
    mine_same = _request("q1", "alice", "r1", "d1")
    mine_other_key = _request("q2", "alice", "r1", "d2")
    bobs = _request("q3", "bob", None, "d1", status="done")
    bobs_pending = _request("q5", "bob", None, "d1", status="pending")
    mine_other_id = _request("q4", "alice", "r9", "d1")  # the caller's own request of the key, under another id
    mine_no_record = _request("q6", "alice", None, "o1", status="done")  # held under the owner digest
    for sub, dataset, by_crid, live, record, own in itertools.product(
            (sub_plain, sub_crid), (None, ds), (None, mine_same, mine_other_key),
            (None, mine_same, bobs, bobs_pending, mine_other_id), (None, 7), (None, mine_no_record)):
        if live is not None and live.requester == "alice" and own is not None:
            continue  # one live request per requester and key
        known = Known(dataset, "d1" if dataset is not None else "", by_crid if sub.client_request_id else None, live,
                      record, own=own, owner_digest="o1")
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
        if live is bobs and record is not None and own is None:
            # bob's done request and a record: a key held again after its deletion (cannot happen today)
            with pytest.raises(E.ConflictError) as info:
                decide(sub, known)
            assert "user-1" not in str(info.value)
            continue
        out = decide(sub, known)
        if live is not None and live.requester == "alice":
            assert out is live  # the caller's own request of the key (idempotent per requester and key)
        elif own is not None:
            assert out is own
        elif live is bobs_pending:
            assert out == Plan("waiting", bobs_pending.record_id)  # follows bob's request, shown as pending
        elif record is None:
            assert out == Plan("done", None)  # never held, or deleted (by bob): the same plan
        else:
            assert live is None and out == Plan("pending", 7)


def test_decide_never_tells_never_held_from_deleted() -> None:
    """The key-status oracle (issue 26), at the decision: for anyone but the earlier request's owner (an admin
    included), a key deleted by bob and a key never held get the same plan."""
    ds = Dataset(id=1, name="people", n_features=2, feature_names={}, key_column="k", label_column="y")
    bobs = _request("q3", "bob", None, "d1", status="done")
    for who in (ALICE, ADMIN):
        sub = Submission("people", "user-1", who, None)
        deleted = decide(sub, Known(ds, "d1", None, bobs, None, owner_digest="o1"))
        never = decide(sub, Known(ds, "d1", None, None, None, owner_digest="o1"))
        assert deleted == never == Plan("done", None)
    assert decide(Submission("people", "user-1", BOB, None), Known(ds, "d1", None, bobs, None)) is bobs


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
