"""Nothing the curator publishes re-identifies a deleted record (docs/curator.md, "What is published").

A whole flow — three requesters and an admin, several batches, purge — through the HTTP API (in-process), then an
attacker who knows the source file (its keys, in order, and its values) reads every field of every answer,
certificate (as served and as stored), ledger event and log line, and tries to recover a deleted key: as text, as a
row position (in the file's order, or shifted by the deletions before it, or as a 1-based row id), or as a feature
value. It must fail. Then: requester B's answers carry nothing of requester A's requests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.store import CertificateRow, LedgerEvent

from .conftest import PARAMS, make_data

N_ROWS = 400
LOW, HIGH = 150, 350  # deleted rows are drawn from these file positions: no count or id of the flow comes near them


def walk(obj: Any) -> tuple[list[str], list[int], list[float]]:
    """Every string, integer and float in a JSON-like object (keys included)."""
    strs: list[str] = []
    ints: list[int] = []
    floats: list[float] = []

    def go(o: Any) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                strs.append(str(k))
                go(v)
        elif isinstance(o, list | tuple):
            for v in o:
                go(v)
        elif isinstance(o, bool) or o is None:
            pass
        elif isinstance(o, int):
            ints.append(o)
        elif isinstance(o, float):
            floats.append(o)
        elif isinstance(o, str):
            strs.append(o)
            # numbers inside text (error messages, log lines)
            ints.extend(int(t) for t in re.findall(r"(?<![\w.-])\d{1,6}(?![\w.])", o))

    go(obj)
    return strs, ints, floats


def attack(corpus: Any, keys: list[str], X: np.ndarray, deleted: set[str]) -> list[str]:
    """What the attacker recovers: deleted keys found as text, as a row position, or through a feature value."""
    strs, ints, floats = walk(corpus)
    found: list[str] = []
    text = "\n".join(strs)
    for k in deleted:
        if k in text:
            found.append(f"key {k} as text")
    pos = {k: i for i, k in enumerate(keys)}
    n_del = len(deleted)
    for v in ints:
        for shift in range(-1, n_del + 1):  # 1-based row ids; positions among the records left after deletions
            j = v + shift
            if 0 <= j < len(keys) and keys[j] in deleted:
                found.append(f"key {keys[j]} from the integer {v} (shift {shift})")
    deleted_values = np.concatenate([X[pos[k]] for k in deleted])
    arr = np.asarray(floats, dtype=np.float64)
    for val in deleted_values:
        if arr.size and np.any(np.isclose(arr, val, rtol=1e-9, atol=0.0)):
            found.append(f"a feature value {val!r} of a deleted record as a number")
        if repr(float(val))[:12] in text:
            found.append(f"a feature value {val!r} of a deleted record as text")
    return found


@pytest.fixture
def flow(tmp_path: Path) -> dict[str, Any]:
    data = make_data(tmp_path / "people.csv", n=N_ROWS, seed=3)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    # opted in (issue 26): the model-reader's answers (weights, predictions) are part of what is scanned
    c.train("people", "clf", params=PARAMS, random_state=0, serve_unreleased=True)
    tokens = {name: c.create_token(name, "requester") for name in ("alice", "bob", "carol")}
    tokens["ops"] = c.create_token("ops", "admin")
    tokens["viewer"] = c.create_token("viewer", "model-reader")  # the published models (issue 26: a scope of its own)
    rng = np.random.default_rng(7)
    picks = rng.choice(np.arange(LOW, HIGH), size=13, replace=False)
    owners = ["alice", "bob", "carol", "alice", "bob", "alice", "carol", "bob", "alice", "ops", "carol", "alice",
              "bob"]
    answers: dict[str, list[Any]] = {name: [] for name in tokens}
    mine: dict[str, list[dict[str, Any]]] = {name: [] for name in tokens}
    app = create_app(c, run_worker=False)
    with TestClient(app) as client:
        def call(who: str, method: str, url: str, **kw: Any) -> Any:
            r = client.request(method, url, headers={"Authorization": f"Bearer {tokens[who]}"}, **kw)
            body = r.json() if r.content else None
            answers[who].append({"url": url, "body": body})  # (the HTTP status, e.g. 202, is not the server's data)
            return r

        for lo, hi in ((0, 5), (5, 9), (9, 13)):  # three rounds of submissions, processed as batches of <= 4
            for i in range(lo, hi):
                who, key = owners[i], data.keys[int(picks[i])]
                r = call(who, "POST", "/v1/deletions",
                         json={"dataset": "people", "key": key, "request_id": f"{who}-{i}"})
                assert r.status_code == 202, r.text
                mine[who].append(r.json())
                # another requester asks for the same key: a request of its own, pending like any present key's
                # (issue 26: it completes with the first request's batch), told nothing of the first request
                other = "bob" if who != "bob" else "carol"
                r2 = call(other, "POST", "/v1/deletions", json={"dataset": "people", "key": key})
                assert r2.status_code == 202 and r2.json()["status"] == "pending", r2.text
                assert r2.json()["id"] != r.json()["id"] and r.json()["id"] not in r2.text
            c.process_pending(force=True)
        assert c.pending_count() == 0
        for who in tokens:
            for req in mine[who]:
                call(who, "GET", f"/v1/deletions/{req['id']}")
                for cert in call(who, "GET", f"/v1/deletions/{req['id']}/certificates").json():
                    call(who, "GET", f"/v1/certificates/{cert['id']}")
            call(who, "GET", "/v1/deletions?limit=3")
            call(who, "POST", "/v1/models/clf/predict", json={"features": data.X[:3].tolist()})
            call(who, "GET", "/v1/models/clf")
        for url in ("/v1/status", "/v1/models/clf/budget", "/v1/models/clf/versions", "/v1/deletions?limit=500"):
            call("ops", "GET", url)
        for req in mine["alice"]:  # the admin reads alice's requests and certificates too
            call("ops", "GET", f"/v1/deletions/{req['id']}/certificates")
    deleted = {data.keys[int(p)] for p in picks}
    with c.store.read() as s:
        stored_certs = [r.certificate for r in s.scalars(select(CertificateRow))]
        events = [{"kind": e.kind, "payload": e.payload, "request_id": e.request_id, "model_id": e.model_id,
                   "version_id": e.version_id} for e in s.scalars(select(LedgerEvent))]
    logs = [p.read_text(errors="replace") for p in (c.data_dir / "logs").glob("*.log")]
    out = {"data": data, "deleted": deleted, "answers": answers, "mine": mine, "stored_certs": stored_certs,
           "events": events, "ledger_view": c.ledger(limit=10_000), "logs": logs, "curator": c}
    yield out
    c.close()


def test_no_field_recovers_a_deleted_key(flow: dict[str, Any]) -> None:
    data, deleted = flow["data"], flow["deleted"]
    corpus = {"answers": flow["answers"], "stored_certificates": flow["stored_certs"], "ledger": flow["events"],
              "ledger_view": flow["ledger_view"], "logs": flow["logs"]}
    # the corpus is not empty and holds what the attacker would use if it leaked: counts, bounds, versions
    blob = json.dumps(corpus, default=str)
    assert len(flow["stored_certs"]) >= 13 and len(flow["events"]) > 30 and '"residual_bound"' in blob
    found = attack(corpus, data.keys, data.X, deleted)
    assert not found, found[:10]


def test_the_attack_works_on_a_leak(flow: dict[str, Any]) -> None:
    """Mutation check: the same attacker recovers keys from a certificate carrying row positions (what version 1 of
    the curator stored), from a feature value, and from a key in an error message."""
    data, deleted = flow["data"], flow["deleted"]
    key = sorted(deleted)[0]
    i = data.keys.index(key)
    assert attack({"removed_indices": [i]}, data.keys, data.X, deleted)
    assert attack({"x": float(data.X[i, 3])}, data.keys, data.X, deleted)
    assert attack({"error": f"Unknown key {key!r}"}, data.keys, data.X, deleted)
    assert attack({"error": f"IndexError: row {i} out of range"}, data.keys, data.X, deleted)


def test_requester_sees_nothing_of_another_request(flow: dict[str, Any]) -> None:
    answers, mine = flow["answers"], flow["mine"]
    for a in ("alice", "bob", "carol", "ops"):
        theirs: set[str] = set()
        for req in mine[a]:
            theirs |= {req["id"], req["request_id"], *req["certificates"]}
        full = flow["curator"]
        for req in mine[a]:  # the certificate ids and batch ids of a's requests, as the admin knows them
            for cert in full.request_certificates(req["id"]):
                theirs |= {cert["id"], cert["batch_id"]}
        theirs.discard(None)
        for b in ("alice", "bob", "carol"):
            if a == b:
                continue
            text = json.dumps(answers[b])
            leaked = sorted(t for t in theirs if t in text)
            assert not leaked, (a, b, leaked)
            assert f'"{a}"' not in text and f"{a}-" not in text, (a, b)
    # every certificate a requester got holds only the requester fields
    from lethe.curator.public import REQUESTER_CERTIFICATE_FIELDS

    for b in ("alice", "bob", "carol"):
        for ans in answers[b]:
            if ans["url"].startswith("/v1/certificates/"):
                assert set(ans["body"]["certificate"]) <= REQUESTER_CERTIFICATE_FIELDS
                assert ans["body"]["batch_id"] is None


def test_log_tracebacks_withhold_exception_messages(tmp_path: Path) -> None:
    import logging

    from lethe.curator.logs import configure_file_logging

    remove = configure_file_logging(tmp_path, "t")
    try:
        try:
            row = 170 + 3
            raise ValueError(f"indices must be distinct. Found {row} more than once.")
        except ValueError:
            logging.getLogger("lethe.curator.worker").exception("worker: processing failed; will retry")
    finally:
        remove()
    text = (tmp_path / "logs" / "t.log").read_text()
    assert "ValueError (message withheld" in text and "173" not in text


def test_worker_failures_reach_every_log_handler_without_their_message(curator: Curator,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker logs a failed warm-up or batch by the exception's type and frames only, for every handler — an
    application's own logging set-up included, not only the curator's scrubbing log file: a mechanism's message can
    name row positions and a key."""
    import logging

    from lethe.curator import run_worker

    secret = "indices must be distinct. Found 17 more than once (key user-0003)"

    def fail(*_a: Any, **_k: Any) -> Any:
        raise ValueError(secret)

    monkeypatch.setattr(Curator, "warm_up", fail)
    monkeypatch.setattr(Curator, "process_pending", fail)
    seen: list[str] = []

    class Keep(logging.Handler):  # a plain handler, with logging's default formatter (tracebacks and all)
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(logging.Formatter().format(record))

    handler = Keep(level=logging.DEBUG)
    logger = logging.getLogger("lethe")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with pytest.raises(ValueError):
            run_worker(curator, once=True, drain=True)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = "\n".join(seen)
    assert "Found 17" not in text and "user-0003" not in text
    assert "warm-up failed (ValueError" in text and "processing failed; will retry (ValueError" in text
    assert "in fail" in text  # the frames are kept for the operator


@pytest.mark.parametrize("models", [1, 0])
def test_stored_certificates_hold_only_allow_listed_fields(tmp_path: Path, models: int) -> None:
    """The certificates table, read with plain SQL (not through the ORM or a view), holds only the allow-listed
    fields: batches are published with bulk inserts, which do not run the ORM's validator — the curator reduces
    the certificate itself. (The mechanism's certificate carries timings and solver diagnostics: ``seconds``,
    ``solve_error``, ``remainder_bound``, ``iterations``, ...; they were stored before this test existed.)"""
    from sqlalchemy import text

    from lethe.curator.public import CERTIFICATE_FIELDS

    data = make_data(tmp_path / "data.csv")
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    if models:
        c.train("people", "clf", params=PARAMS, random_state=0)
    for k in data.keys[:6]:
        c.submit_deletion("people", k)
    c.process_pending(force=True)
    with c.store.read() as s:
        stored = [json.loads(row[0]) if isinstance(row[0], str) else row[0]
                  for row in s.execute(text("SELECT certificate FROM certificates WHERE kind != 'train'"))]
    c.close()
    assert len(stored) == 6
    for cert in stored:
        assert cert and set(cert) <= set(CERTIFICATE_FIELDS), sorted(set(cert) - set(CERTIFICATE_FIELDS))
