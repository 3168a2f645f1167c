"""Group commit of deletion submissions (:class:`lethe.curator.intake.DeletionIntake`): concurrent submissions of
one process are written by one transaction per group, and each caller gets exactly the answer a serial order of the
same submissions gives.

SQLite always; PostgreSQL too when ``LETHE_TEST_POSTGRES_URL`` names a database this test may wipe.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text

from lethe.curator import Curator, Principal
from lethe.curator.intake import DeletionIntake, Submission
from lethe.curator.service import CLI_PRINCIPAL
from lethe.curator.store import DeletionRequest, LedgerEvent

from .conftest import make_data

PG_URL = os.environ.get("LETHE_TEST_POSTGRES_URL")
ALICE, BOB = Principal("alice", "requester"), Principal("bob", "requester")
Job = tuple[Principal, str, str, "str | None"]  # principal, dataset, key, client_request_id


def _jobs() -> list[Job]:
    """65 submissions: job 0 is the 'plug' that holds the first group open; then fresh keys, one key from two
    requesters, one request_id sent twice, unknown keys and dataset, one request_id reused for another key, and one
    key from an admin and a requester."""
    jobs: list[Job] = [(ALICE, "people", "user-0199", None)]
    jobs += [(ALICE, "people", f"user-{i:04d}", None) for i in range(23)]
    for i in range(23, 31):
        jobs += [(ALICE, "people", f"user-{i:04d}", None), (BOB, "people", f"user-{i:04d}", None)]
    for i in range(31, 39):
        jobs += [(ALICE, "people", f"user-{i:04d}", f"t-{i}")] * 2
    jobs += [(ALICE, "people", f"nobody-{i}", None) for i in range(4)]
    jobs += [(BOB, "nowhere", "user-0001", None)]
    jobs += [(BOB, "people", "user-0040", "dup-rid"), (BOB, "people", "user-0041", "dup-rid")]
    jobs += [(CLI_PRINCIPAL, "people", "user-0042", None), (ALICE, "people", "user-0042", None)]
    assert len(jobs) == 65
    return jobs


def _curator(root: Path, csv: Path, url: str | None) -> Curator:
    if url is not None:
        wipe = Curator(root / "wipe", database_url=url)
        with wipe.store.write_engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public;"))
        wipe.close()
    c = Curator(root / "lethe-data", database_url=url)
    c.register_dataset("people", csv, key="user_id", label="label")
    return c


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str | None:
    if request.param == "postgresql":
        if not PG_URL:
            pytest.skip("LETHE_TEST_POSTGRES_URL not set (.ci/run sets it)")
        return PG_URL
    return None


def _outcome(c: Curator, job: Job) -> tuple[str, Any]:
    """The answer to one submission; a created request is read back at once (it must be committed)."""
    principal, dataset, key, rid = job
    try:
        view, created = c.submit_deletion(dataset, key, principal=principal, client_request_id=rid)
    except Exception as exc:  # noqa: BLE001 - the exact answer is what is compared
        return "error", exc
    assert c.request_status(view["id"], principal=principal)["id"] == view["id"]  # durable before the answer
    return "ok", (view, created)


def _normalise(outcomes: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """Answers with request ids replaced by the index of the job that created the request."""
    creator = {o[1][0]["id"]: i for i, o in enumerate(outcomes) if o[0] == "ok" and o[1][1]}
    out: list[tuple[Any, ...]] = []
    for kind, value in outcomes:
        if kind == "error":
            msg = re.sub(r"request ([0-9a-f-]{36})", lambda m: f"request #{creator[m.group(1)]}", str(value))
            out.append(("error", type(value).__name__, msg))
        else:
            view, created = value
            shown = {k: v for k, v in view.items() if k not in ("id", "submitted_at", "processed_at")}
            out.append(("ok", created, creator[view["id"]], sorted(shown.items())))
    return out


def _submit_concurrently(c: Curator, jobs: list[Job]) -> tuple[list[tuple[str, Any]], int]:
    """Job 0 leads a group whose transaction waits (bounded) until every other job is queued; the others start
    together. Returns the outcomes and the number of write commits."""
    commits = 0
    held = threading.Event()
    first = [True]

    def on_begin(conn: Any) -> None:
        if first[0]:
            first[0] = False
            held.set()
            deadline = time.monotonic() + 30
            while c.intake.queued() < len(jobs) - 1 and time.monotonic() < deadline:
                time.sleep(0.005)

    def on_commit(conn: Any) -> None:
        nonlocal commits
        commits += 1

    event.listen(c.store.write_engine, "begin", on_begin)
    event.listen(c.store.write_engine, "commit", on_commit)
    outcomes: list[tuple[str, Any] | None] = [None] * len(jobs)

    def run(i: int) -> None:
        outcomes[i] = _outcome(c, jobs[i])

    try:
        plug = threading.Thread(target=run, args=(0,))
        plug.start()
        assert held.wait(30)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(1, len(jobs))]
        for t in threads:
            t.start()
        for t in [plug, *threads]:
            t.join(120)
    finally:
        event.remove(c.store.write_engine, "begin", on_begin)
        event.remove(c.store.write_engine, "commit", on_commit)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None], commits


def test_concurrent_submissions_answer_as_serial(tmp_path: Path, backend: str | None) -> None:
    """64 threads (and the plug): duplicates, request_id replays, unknown keys. One group commit for the 64; each
    answer equals the answer of a serial run (the created requests first, then the others) on a fresh store; the
    database holds exactly one live request per key and one ledger event per created request."""
    data = make_data(tmp_path / "data.csv")
    jobs = _jobs()
    c = _curator(tmp_path / "concurrent", data.csv, backend)
    try:
        outcomes, commits = _submit_concurrently(c, jobs)
        assert commits == 2, commits  # the plug's transaction, then one for the 64 queued meanwhile
        created = [i for i, o in enumerate(outcomes) if o[0] == "ok" and o[1][1]]
        # the plug, fresh keys, both requesters of a key (bob's follows alice's), one per request_id pair, the unknown
        # keys (done at once: no record held, issue 26), dup-rid's first, both of user-0042 (alice's follows)
        assert len(created) == 1 + 23 + 8 + 8 + 8 + 4 + 1 + 2
        with c.store.read() as s:
            live = s.execute(select(DeletionRequest.key_digest, func.count()).where(DeletionRequest.status != "failed")
                             .group_by(DeletionRequest.key_digest)).all()
            n_events = s.scalar(select(func.count()).select_from(LedgerEvent)
                                .where(LedgerEvent.kind == "request_submitted"))
        assert len(live) == len(created) and all(n == 1 for _, n in live)
        assert n_events == len(created)
        requested = {jobs[i][2] for i in created}
        assert requested == {key for _, ds, key, _ in jobs if ds == "people"} - {"user-0041"}
    finally:
        c.close()

    order = created + [i for i in range(len(jobs)) if i not in created]
    serial = _curator(tmp_path / "serial", data.csv, None)
    try:
        replay: list[tuple[str, Any] | None] = [None] * len(jobs)
        for i in order:
            replay[i] = _outcome(serial, jobs[i])
    finally:
        serial.close()
    assert _normalise(outcomes) == _normalise([o for o in replay if o is not None])


def test_one_failing_submission_does_not_fail_its_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error in one submission aborts its group's transaction; every other member is retried alone
    and accepted, the failing one gets its own error, and nothing of it is stored."""
    data = make_data(tmp_path / "data.csv")
    c = _curator(tmp_path / "c", data.csv, None)
    original = DeletionIntake.answer_in

    def flaky(self: DeletionIntake, s: Any, sub: Submission) -> Any:
        if sub.key == "user-0005":
            raise RuntimeError("disk on fire")
        return original(self, s, sub)

    group_original = DeletionIntake.answer_group_in

    def flaky_group(self: DeletionIntake, s: Any, group: list[Submission]) -> Any:
        if any(sub.key == "user-0005" for sub in group):
            raise RuntimeError("disk on fire")
        return group_original(self, s, group)

    monkeypatch.setattr(DeletionIntake, "answer_in", flaky)  # a submission made alone
    monkeypatch.setattr(DeletionIntake, "answer_group_in", flaky_group)  # its group
    jobs: list[Job] = [(ALICE, "people", f"user-{i:04d}", None) for i in range(9)]
    try:
        outcomes, _ = _submit_concurrently(c, jobs)
        for i, (kind, value) in enumerate(outcomes):
            if i == 5:
                assert kind == "error" and isinstance(value, RuntimeError)
            else:
                assert kind == "ok" and value[1], value
        with c.store.read() as s:
            assert s.scalar(select(func.count()).select_from(DeletionRequest)) == 8
    finally:
        c.close()


def test_submit_deletions_answers_as_serial(tmp_path: Path, backend: str | None) -> None:
    """The API server's intake path (``Curator.submit_deletions``: one group, set-wise reads, one multi-row insert)
    answers the 65 submissions exactly as the same submissions made one by one, in the same order, on a fresh store;
    one ledger event per created request."""
    data = make_data(tmp_path / "data.csv")
    jobs = _jobs()
    c = _curator(tmp_path / "grouped", data.csv, backend)
    try:
        raw = c.submit_deletions([(ds, key, p, rid) for p, ds, key, rid in jobs])
        grouped = [("error", o) if isinstance(o, Exception) else ("ok", o) for o in raw]
        with c.store.read() as s:
            n_events = s.scalar(select(func.count()).select_from(LedgerEvent)
                                .where(LedgerEvent.kind == "request_submitted"))
        assert n_events == sum(1 for kind, o in grouped if kind == "ok" and o[1])
    finally:
        c.close()
    serial = _curator(tmp_path / "serial", data.csv, None)
    try:
        replay = [_outcome(serial, job) for job in jobs]
    finally:
        serial.close()
    assert _normalise(grouped) == _normalise(replay)


def test_a_failed_group_logs_no_record_detail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A group that fails as a whole is logged by the exception's type only: its message (here standing for a
    database error's SQL parameters) names the group's records."""
    data = make_data(tmp_path / "data.csv")
    c = _curator(tmp_path / "c", data.csv, None)
    group_original = DeletionIntake.answer_group_in

    def failing_group(self: DeletionIntake, s: Any, group: list[Submission]) -> Any:
        if len(group) > 1:
            raise RuntimeError("row 17, key user-0003")
        return group_original(self, s, group)

    monkeypatch.setattr(DeletionIntake, "answer_group_in", failing_group)
    try:
        with caplog.at_level("DEBUG", logger="lethe"):
            _submit_concurrently(c, [(ALICE, "people", f"user-{i:04d}", None) for i in range(9)])
        assert "failed as a whole (RuntimeError)" in caplog.text
        assert "user-0003" not in caplog.text and "row 17" not in caplog.text
    finally:
        c.close()


def test_database_errors_carry_no_statement_parameters(tmp_path: Path) -> None:
    data = make_data(tmp_path / "data.csv")
    c = _curator(tmp_path / "c", data.csv, None)
    try:
        with pytest.raises(Exception) as info, c.store.write_engine.begin() as conn:
            conn.execute(text("INSERT INTO no_such_table (x) VALUES (:v)"), {"v": "secret-key-0042"})
        assert "secret-key-0042" not in str(info.value)
    finally:
        c.close()


def test_a_gathered_group_is_committed_once_without_a_second_queue(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's intake gathers a group; ``Curator.submit_deletions`` commits it at once, in one write transaction,
    without going through the leader/follower queue of threads (each submission is batched once: issue 25)."""
    data = make_data(tmp_path / "data.csv")
    c = _curator(tmp_path / "c", data.csv, None)

    def no_queue(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a gathered group went through the leader/follower queue")

    monkeypatch.setattr(DeletionIntake, "_join_group", no_queue)
    monkeypatch.setattr(DeletionIntake, "_lead_group", no_queue)
    commits = [0]

    def on_commit(conn: Any) -> None:
        commits[0] += 1

    try:
        event.listen(c.store.write_engine, "commit", on_commit)
        out = c.submit_deletions([("people", f"user-{i:04d}", ALICE, None) for i in range(12)]
                                 + [("nowhere", "user-0001", ALICE, None)])
        assert commits[0] == 1
        assert all(not isinstance(o, Exception) and o[1] for o in out[:12]) and isinstance(out[12], Exception)
    finally:
        event.remove(c.store.write_engine, "commit", on_commit)
        c.close()


def test_gathered_groups_and_threads_racing_answer_as_a_serial_order(tmp_path: Path) -> None:
    """Groups committed at once (the API's intake) while threads submit through the leader/follower queue, on
    overlapping keys: every key has exactly one live request, every created request is answered to exactly one
    caller, and a repeat of a key by the same requester gets the same request back."""
    data = make_data(tmp_path / "data.csv")
    c = _curator(tmp_path / "c", data.csv, None)
    keys = [f"user-{i:04d}" for i in range(40)]
    results: list[Any] = []
    lock = threading.Lock()

    def group_caller(offset: int) -> None:
        out = c.submit_deletions([("people", k, ALICE, None) for k in keys[offset:offset + 20]])
        with lock:
            results.extend(("group", k, o) for k, o in zip(keys[offset:offset + 20], out, strict=True))

    def thread_caller(k: str) -> None:
        try:
            o: Any = c.submit_deletion("people", k, principal=ALICE)
        except Exception as exc:  # noqa: BLE001 - compared below
            o = exc
        with lock:
            results.append(("thread", k, o))

    try:
        workers = [threading.Thread(target=group_caller, args=(off,)) for off in (0, 10, 20)]
        workers += [threading.Thread(target=thread_caller, args=(k,)) for k in keys[5:35:3]]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert not any(isinstance(o, Exception) for _, _, o in results), results
        by_key: dict[str, set[str]] = {}
        created: dict[str, int] = {}
        for _, k, (view, was_created) in results:
            by_key.setdefault(k, set()).add(view["id"])
            created[view["id"]] = created.get(view["id"], 0) + int(was_created)
        assert all(len(ids) == 1 for ids in by_key.values())  # one request per key, whoever answered
        assert all(n == 1 for n in created.values())  # created once, answered "created" to one caller
        with c.store.read() as s:
            assert s.scalar(select(func.count()).select_from(DeletionRequest)) == len(by_key)
    finally:
        c.close()
