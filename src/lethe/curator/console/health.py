"""What the Health page checks: the queue, faults that need an operator, the worker, the ledger's hash chain,
and the held-out evaluation of published model versions."""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select

from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import ArtifactError
from lethe.curator.console import queries as Q
from lethe.curator.faults import version_published
from lethe.curator.service import Curator
from lethe.curator.settings import LOCK_FILE
from lethe.curator.store import Dataset, DeletionRequest, LedgerEvent, Model, ModelVersion, Record, as_utc, iso, utcnow

STALL_SECONDS = 120.0  # a purge or a destruction pending longer than this is reported as stalled


@dataclass
class Fault:
    title: str
    detail: str
    action: str


@dataclass
class Health:
    counts: dict[str, int | None]
    oldest_pending: str | None
    oldest_pending_seconds: float | None
    worker: str
    last_processed: str | None
    failed: list[dict[str, Any]]
    faults: list[Fault] = field(default_factory=list)


def lock_state(curator: Curator) -> str:
    """'processing' while some worker holds the processing lock, else 'idle' (probed without blocking); 'unknown'
    when the lock file cannot be opened (a read-only or damaged storage: the storage fault says why). Opened for
    reading only: ``flock`` needs no write access, and a read-only file system must not make the page fail."""
    path = curator.data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return "unknown"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "processing"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "idle"
    finally:
        os.close(fd)


def check(curator: Curator) -> Health:
    now = utcnow()
    settings = curator.settings
    with curator.store.read() as s:
        counts = Q.status_counts(s)  # a follower ("waiting") counts as pending
        oldest = s.scalar(select(func.min(DeletionRequest.submitted_at))
                          .where(DeletionRequest.status.in_(("pending", "waiting"))))
        last = s.scalar(select(func.max(DeletionRequest.processed_at)).where(DeletionRequest.status == "done"))
        failed_rows = s.execute(select(DeletionRequest.id, DeletionRequest.requester, DeletionRequest.error,
                                       DeletionRequest.attempts, DeletionRequest.processed_at)
                                .where(DeletionRequest.status == "failed")
                                .order_by(DeletionRequest.processed_at.desc()).limit(20)).all()
        published = Q.published_versions(s)
        names = dict(s.execute(select(Model.id, Model.name)).all())
        superseded = Q.superseded_versions(s)
        last_del = s.execute(select(LedgerEvent.id, LedgerEvent.at).where(LedgerEvent.kind == "records_deleted")
                             .order_by(LedgerEvent.id.desc()).limit(1)).first()
    oldest_u = as_utc(oldest)
    waited = (now - oldest_u).total_seconds() if oldest_u is not None else None
    worker = lock_state(curator)
    h = Health(counts=counts, oldest_pending=iso(oldest), oldest_pending_seconds=waited, worker=worker,
               last_processed=iso(last),
               failed=[{"id": r.id, "requester": r.requester, "error": r.error, "attempts": r.attempts,
                        "processed_at": iso(r.processed_at)} for r in failed_rows])
    for v in published:
        # the artifact store's own check (checksum, and wherever the store authenticates artifacts, that too)
        problem = None
        try:
            curator.artifacts.load(v["artifact"], v["sha256"])
        except ArtifactError as exc:
            problem = str(exc)
        except (OSError, ValueError) as exc:
            problem = f"Artifact {v['artifact']} cannot be read ({type(exc).__name__})."
        if problem and version_published(curator.store, v["id"]):  # not superseded (and destroyed) meanwhile
            h.faults.append(Fault(
                f"Model “{names.get(v['model_id'], v['model_id'])}” version {v['number']}: {problem}",
                "Every deletion for this model's dataset will fail until the model is repaired; "
                "no certificate can be issued from a corrupt file.",
                "Retrain the model from the current data (see docs/curator.md, operating guide)."))
    for f in curator.retention.verify_datasets():
        h.faults.append(Fault(f"Dataset “{f['dataset']}”: its files are missing or damaged ({f['error']})",
                              "Training and every deletion for this dataset will fail; its records cannot be read.",
                              f"Repair: {f['repair']}."))
    for f in curator.serving.withdrawn_faults():  # a released model past its horizon (issue 36, 38)
        h.faults.append(Fault(f"Model “{f['model']}” version {f['version']}: {f['error']}",
                              "Model-readers are refused this model; deletions go on, but none of them is published.",
                              f"Repair: {f['repair']} (a new stream, counted in the dataset's lifetime budget)."))
    for f in curator.retention.verify_requests():
        h.faults.append(Fault(f"{f['requests']:,} request(s) cannot reach an end on their own", f["error"] + ".",
                              f"Repair: {f['repair']}."))
    storage = curator.retention.storage.probe()
    if storage is not None:
        h.faults.append(Fault("The data directory cannot be written", storage["error"],
                              "Free space (or restore write access); submissions are refused (507) and no batch is "
                              "processed until a write succeeds again."))
    due = max(STALL_SECONDS, 10 * settings.max_delay + 10 * settings.poll_interval)
    if waited is not None and waited > due:
        h.faults.append(Fault(
            f"The oldest pending request has waited {waited:,.0f} s",
            f"Requests are due after {settings.max_delay:g} s; none has been processed since. "
            f"The worker looks {'busy' if worker == 'processing' else 'stopped'}.",
            "Check that a worker runs (`lethe serve` or `lethe worker`) and read <data_dir>/logs/."))
    if curator.purge_pending() and last_del is not None:
        age = (now - as_utc(last_del.at)).total_seconds()  # type: ignore[operator]
        if age > STALL_SECONDS:
            h.faults.append(Fault(
                f"A purge of deleted records has been pending for {age:,.0f} s",
                "Deleted rows may still be recoverable from the database files until the purge completes "
                "(long-running readers keep the WAL busy).",
                "Stop long readers, then run `lethe worker --once` (it redoes the purge)."))
    for v in superseded:
        at = v["superseded_at"]
        if at is not None:
            age = (now - datetime.fromisoformat(at)).total_seconds()
            if age > STALL_SECONDS:
                h.faults.append(Fault(
                    f"Model “{names.get(v['model_id'], v['model_id'])}” version {v['number']} was superseded "
                    f"{age:,.0f} s ago and is not destroyed",
                    "Its artifact still holds the secret perturbation of a model that saw deleted records.",
                    "Run `lethe worker --once`: recovery destroys superseded versions."))
    n_failed = counts["failed"] or 0
    if n_failed:
        h.faults.append(Fault(
            f"{n_failed:,} request(s) failed",
            "A failed request changed nothing: its record is still in the data and in the models.",
            "Read each error below, fix the cause, and ask the requester to submit again."))
    return h


# -- ledger chain -----------------------------------------------------------------------------------------------------
@dataclass
class ChainReport:
    events: int
    head: str
    intact: bool
    problems: list[str]
    checkpoints_ok: int
    triggers: bool | None  # None: not SQLite
    gaps: list[str] = field(default_factory=list)  # unused ids explained (PostgreSQL: aborted transactions)


def verify_chain(curator: Curator) -> ChainReport:
    """Recompute the hash chain over every event; check ids are gapless and every checkpoint's recorded head."""
    problems: list[str] = []
    with curator.store.read() as s:
        cps = [(e.id, dict(e.payload)) for e in s.scalars(select(LedgerEvent).where(LedgerEvent.kind == Q.CHECKPOINT)
                                                           .order_by(LedgerEvent.id))]
        want = {int(p.get("upto", -1)): (cid, str(p.get("head"))) for cid, p in cps}
        trig = Q.sqlite_triggers(s)
        triggers = None if s.get_bind().dialect.name != "sqlite" else {"ledger_no_update",
                                                                        "ledger_no_delete"} <= trig
        # PostgreSQL takes ids from a sequence that a rolled-back insert does not give back (a crash, a refused
        # batch, a unique-constraint race): unused ids are expected there and are no evidence of a deletion — the
        # append-only trigger refuses deletes, and a checkpoint after them stops matching if an event is removed.
        # SQLite reuses no id of an aborted insert (the next id is max + 1): a gap there is a deleted event.
        sequence = s.get_bind().dialect.name != "sqlite"
        gaps: list[str] = []
        expected = 1
        head = Q.GENESIS
        n = 0
        ok = 0
        for e, head in Q.iter_chain(s):
            n += 1
            if e.id > expected and sequence:
                gaps.append(f"ids {expected}–{e.id - 1}: skipped by aborted transactions (PostgreSQL does not "
                            "reuse the id of a rolled-back insert); not a deletion")
            elif e.id != expected:
                problems.append(f"events {expected}–{e.id - 1} are missing (deleted from the ledger)"
                                if e.id > expected else f"event {e.id} is out of order")
            expected = e.id + 1
            if e.id in want:
                cid, recorded = want.pop(e.id)
                if recorded == head:
                    ok += 1
                else:
                    problems.append(f"checkpoint {cid}: events up to {e.id} no longer hash to the recorded head "
                                    "(an event was changed)")
        for upto, (cid, _) in want.items():
            problems.append(f"checkpoint {cid} refers to event {upto}, which does not exist")
    if triggers is False:
        problems.append("the append-only triggers of the ledger table are missing")
    return ChainReport(events=n, head=head, intact=not problems, problems=problems, checkpoints_ok=ok,
                       triggers=triggers, gaps=gaps)


def record_checkpoint(curator: Curator) -> dict[str, Any]:
    """Append a checkpoint event holding the chain head over every event so far."""
    with curator.store.read() as s:
        upto = None
        head = Q.GENESIS
        n = 0
        for e, h in Q.iter_chain(s):
            upto, head = e.id, h
            n += 1
    payload = {"upto": upto if upto is not None else 0, "head": head, "events": n}
    Q.append_event(curator.store, Q.CHECKPOINT, payload)
    return payload


# -- held-out accuracy ------------------------------------------------------------------------------------------------
_cache_lock = threading.Lock()
_holdout_cache: dict[tuple[str, int, int], tuple[np.ndarray, Any]] = {}


def _holdout_arrays(curator: Curator, s: Any, name: str) -> tuple[np.ndarray, Any] | None:
    ds = s.scalar(select(Dataset).where(Dataset.name == name))
    if ds is None:
        return None
    n = int(s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id)) or 0)
    # keyed by the data directory too: dataset ids restart at 1 in every store, and a process may serve several
    # (the cache once returned another store's held-out rows, whose predictions then failed and went unrecorded)
    key = (str(curator.data_dir), ds.id, n)
    with _cache_lock:
        hit = _holdout_cache.get(key)
    if hit is not None:
        return hit
    _ids, X, y = curator.datasets.current_data(s, ds.id, ds.n_features)  # the data plane (or the records table)
    X = np.array(X, dtype=np.float64)
    with _cache_lock:
        _holdout_cache.clear()
        _holdout_cache[key] = (X, y)
    return X, y


_evaluate_lock = threading.Lock()


def evaluate_holdout(curator: Curator) -> int:
    """Record the held-out accuracy of every published version not yet evaluated; returns how many were recorded.

    A version superseded and destroyed before this runs is never evaluated (a gap in the plot)."""
    with _evaluate_lock:  # the evaluator thread and a form submission: each version is recorded once
        return _evaluate_holdout(curator)


def _evaluate_holdout(curator: Curator) -> int:
    done = 0
    with curator.store.read() as s:
        assigned = Q.holdout_assignments(s)
        if not assigned:
            return 0
        todo = []
        for m_id, ds_name in assigned.items():
            m = s.get(Model, m_id)
            if m is None or m.current_version_id is None:
                continue
            v = s.get(ModelVersion, m.current_version_id)
            if v is None or v.number in Q.holdout_accuracies(s, m_id):
                continue
            data = _holdout_arrays(curator, s, ds_name)
            if data is None:
                continue
            todo.append((m, v.id, v.number, v.artifact, v.sha256, ds_name, data))
    for m, vid, number, relpath, sha, ds_name, (X, y) in todo:
        try:
            art = curator.artifacts.load(relpath, sha)
        except ArtifactError:
            continue  # superseded and destroyed meanwhile
        adapter = get_adapter(m.mechanism, m.params)
        if art.meta.get("classes") is None or X.shape[0] == 0:
            continue  # accuracy is defined for classifiers only
        try:
            pred = adapter.predict(art, X)
        except ValueError:
            continue  # a held-out set with another number of features
        acc = float(np.mean(pred == y))
        Q.append_event(curator.store, Q.HOLDOUT_ACCURACY, {"model": m.name, "version": number, "accuracy": acc,
                                                            "n": int(X.shape[0]), "dataset": ds_name},
                       model_id=m.id, version_id=vid)
        done += 1
    return done


class HoldoutEvaluator:
    """A daemon thread evaluating new published versions every ``interval`` seconds."""

    def __init__(self, curator: Curator, interval: float) -> None:
        self.curator = curator
        self.interval = max(interval, 0.05)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lethe-console-holdout", daemon=True)

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            try:
                evaluate_holdout(self.curator)
            except Exception:  # noqa: BLE001 - a busy database must not kill the thread; retried next time
                pass

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)


__all__ = ["ChainReport", "Fault", "Health", "HoldoutEvaluator", "check", "evaluate_holdout", "lock_state",
           "record_checkpoint", "verify_chain"]
