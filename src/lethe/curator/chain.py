"""The ledger's hash chain: every event carries ``hash = SHA-256(previous hash ‖ canonical JSON of the event)``.

The chain, not the event ids, is the evidence: PostgreSQL's ids may skip numbers (a sequence value taken by a
transaction that rolled back is never reused), but every committed event names — through its hash — the one before
it. An event removed, inserted or edited breaks the link at that place (:func:`verify_events` names it); a rewrite of
the whole chain from some event on is caught against a head published earlier (``GET /v1/keys``, the console's
ledger check, a checkpoint event, an exported ledger, a downloaded certificate).

The canonical JSON of an event (:func:`canonical_event`) is the JSON of ``{"at", "kind", "model_id", "version_id",
"request_id", "payload"}`` with sorted keys and no whitespace; ``at`` is naive UTC with microseconds
(``2026-11-28T16:32:26.123456``), the form the database returns. The id is not part of it (it is assigned by the
database after the hash is computed). This module imports nothing of the store, so that an exported ledger can be
checked offline (``lethe ledger verify --file``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The "previous hash" of the first event.
GENESIS = "0" * 64


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, NaN kept as ``NaN`` (as the store's JSON column writes it)."""
    return _ENCODER.encode(obj).encode()


def canonical_time(at: _dt.datetime | str | None) -> str | None:
    """A stored time as the chain hashes it: naive UTC, ISO 8601 with microseconds."""
    if at is None:
        return None
    if isinstance(at, str):
        at = _dt.datetime.fromisoformat(at)
    if at.tzinfo is not None:
        at = at.astimezone(_dt.UTC).replace(tzinfo=None)
    return at.isoformat(timespec="microseconds")


def event_fields(at: Any, kind: str, model_id: int | None, version_id: int | None, request_id: str | None,
                 payload: Any) -> dict[str, Any]:
    """The hashed fields of one event. The payload is taken as it is: its canonical JSON is the same before and after
    the JSON column's round trip (tuples print as lists, floats by ``repr``, keys as strings)."""
    return {"at": canonical_time(at), "kind": kind, "model_id": model_id, "version_id": version_id,
            "request_id": request_id, "payload": payload if payload is not None else {}}


def canonical_event(e: Any) -> bytes:
    """The canonical bytes of an event (an ORM row, a result row or a mapping with the event's fields)."""
    get: Any = e.get if isinstance(e, dict | Mapping) else (lambda k: getattr(e, k))
    return canonical_json(event_fields(get("at"), get("kind"), get("model_id"), get("version_id"),
                                       get("request_id"), get("payload")))


def link(previous: str, e: Any) -> str:
    """The hash of event ``e`` after the event whose hash is ``previous``."""
    return hashlib.sha256(previous.encode() + canonical_event(e)).hexdigest()


@dataclass
class ChainCheck:
    """The result of :func:`verify_events`: ``problems`` name each break by event id; ``head`` is the last stored
    hash; ``first_bad`` the id of the first event where the chain breaks (None: intact)."""

    events: int = 0
    head: str = GENESIS
    problems: list[str] = field(default_factory=list)
    first_bad: int | None = None
    unchained: int = 0

    @property
    def intact(self) -> bool:
        return not self.problems


def verify_events(events: Iterable[Any], *, head: str | None = None, max_problems: int = 20) -> ChainCheck:
    """Walk ``events`` in id order and check every link: ``hash == SHA-256(previous hash ‖ canonical(event))``.

    ``head``: a chain head published earlier; if given, the walk must pass through it (else the chain was rewritten
    after it was published, or it was cut short). Each event needs ``id``, ``hash`` and the hashed fields.

    A break at event *n* means: event *n* was edited, or an event between the previous one and *n* was removed
    (where the ids also skip numbers, removal is named), or one was inserted.
    """
    out = ChainCheck()
    prev, prev_id = GENESIS, None
    seen_head = head is None or head == GENESIS
    for e in events:
        get = e.get if isinstance(e, Mapping) else (lambda k, e=e: getattr(e, k))
        eid, stored = get("id"), get("hash")
        out.events += 1
        if stored is None:
            out.unchained += 1
            if len(out.problems) < max_problems:
                out.problems.append(f"event {eid} carries no hash (written outside the chain)")
            out.first_bad = out.first_bad if out.first_bad is not None else eid
            prev_id = eid
            continue
        if link(prev, e) != stored:
            if out.first_bad is None:
                out.first_bad = eid
            if len(out.problems) < max_problems:
                where = (f"between event {prev_id} and event {eid}" if prev_id is not None
                         else f"before event {eid}")
                if isinstance(prev_id, int) and isinstance(eid, int) and eid > prev_id + 1:
                    out.problems.append(f"the chain breaks at event {eid}: an event {where} was removed "
                                        f"(ids {prev_id + 1}–{eid - 1} are missing), or event {eid} was edited")
                else:
                    out.problems.append(f"the chain breaks at event {eid}: event {eid} was edited, or an event "
                                        f"{where} was removed or inserted")
        prev, prev_id = stored, eid
        if stored == head:
            seen_head = True
    out.head = prev
    if not seen_head:
        out.problems.append(f"the published chain head {head} is not in the ledger: the ledger was rewritten or "
                            "cut short after it was published")
    return out


__all__ = ["GENESIS", "ChainCheck", "canonical_event", "canonical_json", "canonical_time", "event_fields", "link",
           "verify_events"]
