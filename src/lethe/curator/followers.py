"""Follower requests reach an end: a request that follows another requester's pending request of the same key
(status ``waiting``, :data:`lethe.curator.intake.FOLLOWER`) is completed — done with the leader's certificates, or
failed with its error — even when it was committed concurrently with the leader's batch.

The race (PostgreSQL, READ COMMITTED): the intake reads the leader as pending and inserts the follower; the batch
that publishes the leader selects the leader's followers before that insert is committed and marks only those done.
The follower would then wait forever. Two checks close it, each run after its own transaction committed:

* the intake, after committing a follower, settles it if its leader is no longer pending
  (:meth:`Followers.settle_pairs`);
* the batch processor, after publishing (or failing) a batch, settles every follower of the batch's leaders.

Whichever transaction committed last sees the other's effect, so one of the two checks completes the follower.
Settling is idempotent (``UPDATE ... WHERE status = 'waiting'``: a second settler updates nothing and writes
nothing). :meth:`Followers.settle_orphans` (recovery) completes a follower whose leader is unknown (a crash between
the two commits): its record is gone, so it is done with a receipt naming that an earlier request's batch removed
the record; or, the record present and no request pending for it, it fails (nothing was removed: submit again).
:meth:`Followers.stuck` counts what is left for operators (``lethe status``, ``/v1/status``, ``/healthz``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update

from lethe.curator.store import CertificateRow, DeletionRequest, Record, Store, add_event, utcnow

log = logging.getLogger("lethe.curator")

WAITING = "waiting"
#: the receipt of a follower whose leader is unknown (recovery): its record was removed by an earlier batch
_ORPHAN_RECEIPT = {"operation": "delete", "guarantee": "record removed by the batch of an earlier request for the "
                   "same key; that request's certificates cover this one", "epsilon": 0.0, "delta": 0.0}
_ORPHAN_FAILED = "the request it followed failed or was withdrawn; nothing was removed: submit again"


@dataclass(eq=False)
class Followers:
    """Completes follower requests (see the module's description).

    Parameters
    ----------
    store : the store.
    hook : tests only: called with a label between a transaction's commit and the check that follows it.
    """

    store: Store
    hook: Callable[[str], None] | None = None

    def reached(self, label: str) -> None:
        """A commit this check follows was made (``hook``, if set, sees it)."""
        if self.hook is not None:
            self.hook(label)

    def settle_pairs(self, pairs: Iterable[tuple[str, int, int | None]]) -> int:
        """Settle the followers of these leaders: ``(leader request id, dataset id, record id)``. A leader that is
        done gives its followers (waiting on the same dataset and record) its certificates, copied, and marks them
        done; a failed leader fails them with its error; a pending one leaves them waiting. Returns the number of
        followers settled."""
        pairs = [(lid, ds, rec) for lid, ds, rec in pairs if rec is not None]
        if not pairs:
            return 0
        with self.store.read() as s:  # the common case (the leader still pending) writes nothing
            ended = set(s.scalars(select(DeletionRequest.id).where(
                DeletionRequest.id.in_([p[0] for p in pairs]), DeletionRequest.status.in_(("done", "failed")))))
        pairs = [p for p in pairs if p[0] in ended]
        if not pairs:
            return 0
        settled = 0
        with self.store.write() as s, s.begin():
            leaders = {r.id: r for r in s.execute(select(
                DeletionRequest.id, DeletionRequest.status, DeletionRequest.error, DeletionRequest.processed_at)
                .where(DeletionRequest.id.in_([p[0] for p in pairs])))}
            for leader_id, ds_id, record_id in pairs:
                leader = leaders.get(leader_id)
                if leader is None or leader.status not in ("done", "failed"):
                    continue
                followers = list(s.scalars(select(DeletionRequest.id).where(
                    DeletionRequest.dataset_id == ds_id, DeletionRequest.status == WAITING,
                    DeletionRequest.record_id == record_id)))
                for fid in followers:
                    settled += self._settle_one(s, fid, leader)
        if settled:
            log.warning("%d follower request(s) completed after their leader's batch (a concurrent submission)",
                        settled)
        return settled

    @staticmethod
    def _settle_one(s: Any, follower_id: str, leader: Any) -> int:
        now = leader.processed_at or utcnow()
        done = leader.status == "done"
        values: dict[str, Any] = {"status": "done" if done else "failed", "processed_at": now, "record_id": None}
        if not done:
            values["error"] = leader.error
        res: Any = s.execute(update(DeletionRequest).where(DeletionRequest.id == follower_id,
                                                           DeletionRequest.status == WAITING)
                             .values(**values).execution_options(synchronize_session=False))
        if res.rowcount != 1:
            return 0  # settled meanwhile by the other check
        if done:
            certs = s.scalars(select(CertificateRow).where(CertificateRow.request_id == leader.id)).all()
            rows = [{"id": str(uuid.uuid4()), "kind": c.kind, "request_id": follower_id, "model_id": c.model_id,
                     "old_version_id": c.old_version_id, "new_version_id": c.new_version_id,
                     "batch_id": c.batch_id, "mechanism": c.mechanism, "certificate": c.certificate,
                     "submitted_at": c.submitted_at, "created_at": now} for c in certs]
            if rows:
                cert_table: Any = CertificateRow.__table__
                s.execute(insert(cert_table), rows)
            batch = next((c.batch_id for c in certs if c.batch_id), None)
            add_event(s, "request_done", {"batch_id": batch} if batch else {}, request_id=follower_id)
        else:
            add_event(s, "request_failed", {"error": leader.error or ""}, request_id=follower_id)
        return 1

    def orphans(self, s: Any) -> list[tuple[str, int, int | None, bool]]:
        """Followers no pending request leads: (id, dataset id, record id, record present)."""
        waiting = s.execute(select(DeletionRequest.id, DeletionRequest.dataset_id, DeletionRequest.record_id)
                            .where(DeletionRequest.status == WAITING)).all()
        if not waiting:
            return []
        recs = {int(r.record_id) for r in waiting if r.record_id is not None}
        led = set(s.scalars(select(DeletionRequest.record_id).where(
            DeletionRequest.status == "pending", DeletionRequest.record_id.in_(recs)))) if recs else set()
        present = set(s.scalars(select(Record.id).where(Record.id.in_(recs)))) if recs else set()
        return [(r.id, r.dataset_id, r.record_id, r.record_id in present) for r in waiting
                if r.record_id is None or r.record_id not in led]

    def stuck(self) -> int:
        """The number of follower requests no pending request leads (they would wait forever)."""
        with self.store.read() as s:
            if not s.scalar(select(func.count()).select_from(DeletionRequest)
                            .where(DeletionRequest.status == WAITING)):
                return 0
            return len(self.orphans(s))

    def settle_orphans(self) -> int:
        """Recovery: complete every follower no pending request leads (see the module's description). Returns the
        number completed."""
        with self.store.read() as s:
            todo = self.orphans(s)
        if not todo:
            return 0
        now = utcnow()
        n = 0
        with self.store.write() as s, s.begin():
            for fid, _ds, _rec, present in todo:
                if present:
                    values: dict[str, Any] = {"status": "failed", "error": _ORPHAN_FAILED}
                else:
                    values = {"status": "done"}
                res: Any = s.execute(update(DeletionRequest).where(DeletionRequest.id == fid,
                                                                   DeletionRequest.status == WAITING)
                                     .values(processed_at=now, record_id=None, **values)
                                     .execution_options(synchronize_session=False))
                if res.rowcount != 1:
                    continue
                n += 1
                if present:
                    add_event(s, "request_failed", {"error": _ORPHAN_FAILED}, request_id=fid)
                else:
                    sub = s.scalar(select(DeletionRequest.submitted_at).where(DeletionRequest.id == fid))
                    s.add(CertificateRow(id=str(uuid.uuid4()), kind="deletion", request_id=fid,
                                         certificate=dict(_ORPHAN_RECEIPT), submitted_at=sub, created_at=now))
                    add_event(s, "request_done", {}, request_id=fid)
        if n:
            log.warning("recovery: %d follower request(s) without a pending leader completed", n)
        return n


__all__ = ["WAITING", "Followers"]
