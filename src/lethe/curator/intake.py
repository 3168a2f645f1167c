"""Deletion intake: a submission checked, decided and committed — in groups (one transaction per group of
concurrent submissions) or, after a race or a failed group, one at a time.

The decision — answer with an existing request, refuse, or create a new one — is :func:`decide`, a pure function of
what the store holds about the submission (:class:`Known`). The group commit reads that for the whole group with a
few set-wise queries (:meth:`DeletionIntake.answer_group_in`); the serial path reads it for one submission
(:meth:`DeletionIntake.answer_in`); both then ask :func:`decide`.
"""

from __future__ import annotations

import hmac
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from lethe.curator.datadir import DataDirectory
from lethe.curator.datasets import DatasetCatalog
from lethe.curator.errors import (
    BusyError,
    ConflictError,
    CuratorError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from lethe.curator.followers import Followers
from lethe.curator.public import check_payload
from lethe.curator.settings import DROPPED_PREFIX, Principal
from lethe.curator.store import Dataset, DeletionRequest, LedgerEvent, Record, Store, add_event, utcnow
from lethe.curator.tables import MAX_KEY_LENGTH
from lethe.curator.validation import check_name, check_unicode
from lethe.curator.views import ReadViews

log = logging.getLogger("lethe.curator")

Answer = tuple[dict[str, Any], bool]  # (request view, created)
Outcome = tuple[Answer | None, CuratorError | None]
_PENDING = InvalidInputError("not answered yet")  # a placeholder in DeletionIntake.submit_deletions


def _log_group_failure(size: int, exc: BaseException) -> None:
    """Log that a group of submissions failed as a whole, naming only the exception's type: its message or
    traceback (a database error's SQL parameters) can carry the group's record positions and key digests, which no
    log line may (``lethe.curator.public``)."""
    log.warning("a group of %d deletion submissions failed as a whole (%s); each is retried alone", size,
                type(exc).__name__)


@dataclass(eq=False, slots=True)
class NewRequest:
    """A request a submission group creates, as later members of the group and its answer see it (the attributes
    of :class:`DeletionRequest` they read, without the ORM's instrumentation)."""

    id: str
    requester: str
    client_request_id: str | None
    dataset_id: int
    record_id: int
    key_digest: str
    status: str
    attempts: int
    submitted_at: Any
    error: str | None = None
    processed_at: Any = None


@dataclass(eq=False)
class Submission:
    """One deletion submission waiting in a group commit (:meth:`DeletionIntake._join_group`)."""

    dataset: str
    key: str
    principal: Principal
    client_request_id: str | None
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead the next group
    alone: bool = False  # its group failed as a whole: the caller submits it in a transaction of its own
    result: Answer | None = None
    error: CuratorError | None = None
    follows: tuple[str, int, int | None] | None = None  # a new follower's (leader id, dataset id, record id)


@dataclass(frozen=True)
class Known:
    """What the store (and the earlier members of its group) hold about one submission: all :func:`decide` reads.

    dataset : the dataset named (None: unknown or dropped).
    digest : the key's keyed digest in that dataset ("" if the dataset is unknown).
    by_client_id : the caller's request under the same client request id, if any.
    live : the pending or done request that holds the key's record (under ``digest``), if any.
    record_id : the key's record, if present.
    own : the caller's own request of the key that holds no record (under its owner digest,
        :meth:`DataDirectory.owner_digest`), if any.
    """

    dataset: Dataset | None
    digest: str
    by_client_id: DeletionRequest | NewRequest | None
    live: DeletionRequest | NewRequest | None
    record_id: int | None
    own: DeletionRequest | NewRequest | None = None
    owner_digest: str = ""


#: A request that holds no record of its own: its key was never held or was already deleted. It is done at once,
#: with no certificate (the view's ``outcome`` says "no record held"), whoever deleted the key and whenever.
NO_RECORD = "done"
#: A request whose key is pending under another requester's request: shown as ``pending``; it completes (with the
#: same certificates) when that request's batch does, or fails with it (:mod:`lethe.curator.publisher`).
FOLLOWER = "waiting"


@dataclass(frozen=True)
class Plan:
    """A new request :func:`decide` asks for: its stored ``status`` ("pending": it holds ``record_id``; "done": no
    record held; "waiting": it follows the pending request that holds ``record_id``) and whether it is stored under
    the key's digest (the one request that holds the record) or under the owner digest."""

    status: str
    record_id: int | None

    @property
    def holds_record(self) -> bool:
        return self.status == "pending"


def decide(sub: Submission, known: Known) -> DeletionRequest | NewRequest | Plan:
    """The one decision on a submission: the existing request that answers it (``created=False``), or the
    :class:`Plan` of a new request; a refusal raises (:class:`CuratorError`).

    Idempotent under the client request id (the same id with the same dataset and key is the same request; with
    another deletion a conflict) and per requester and key (a repeat returns the caller's own request).

    No answer tells a requester whether a key it does not own a request of was never held or was already deleted
    (the key-status oracle, issue 26): both get a new request, done at once with outcome "no record held" — the same
    code path, the same fields. A key pending under another requester's request is answered like a present key (a
    new pending request, completed with that request's batch). No message names the key."""
    ds, p, crid = known.dataset, sub.principal, sub.client_request_id
    if ds is None:
        raise NotFoundError(f"Unknown dataset {sub.dataset!r}.")
    if crid is not None:
        prev = known.by_client_id
        if prev is not None:
            if prev.dataset_id == ds.id and (hmac.compare_digest(prev.key_digest, known.digest)
                                             or hmac.compare_digest(prev.key_digest, known.owner_digest or "-")):
                return prev
            raise ConflictError(f"request_id {crid!r} was already used for a different deletion request.")
    earlier = known.live
    if earlier is not None and earlier.requester == p.name:
        return earlier  # the caller's own request of this key (a repeat, or committed concurrently)
    if known.own is not None:
        return known.own
    if earlier is not None and earlier.status == "pending":
        return Plan(FOLLOWER, earlier.record_id)
    if known.record_id is None:
        return Plan(NO_RECORD, None)
    if earlier is not None:  # cannot happen while records are never re-added under a deleted key
        raise ConflictError(f"A deletion from dataset {sub.dataset!r} cannot be accepted now; retry later.")
    return Plan("pending", known.record_id)


def submission(dataset: str, key: str, principal: Principal, client_request_id: str | None) -> Submission:
    """A checked submission (malformed input: :class:`InvalidInputError`; a principal without the requester or
    admin scope: :class:`PermissionDeniedError`, whichever front end it came through)."""
    if not principal.can_request:
        raise PermissionDeniedError(f"Submitting deletions needs the requester or admin scope. Found scope "
                                    f"{principal.scope!r}.")
    check_name("dataset", dataset)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInputError(f"key must be a non-empty string of at most {MAX_KEY_LENGTH} characters.")
    check_unicode("key", key)
    if client_request_id is not None:
        check_name("request_id", client_request_id)
    return Submission(dataset, key, principal, client_request_id)


class DeletionIntake:
    """Deletion submissions of one process: checked, decided (:func:`decide`) and committed in groups.

    Parameters
    ----------
    store, data_dir : the store and the data directory (whose pepper digests the keys).
    views : answers are request views (:meth:`ReadViews.request_view`).
    on_created : called after a commit that created a request (wakes the workers).
    """

    def __init__(self, store: Store, data_dir: DataDirectory, views: ReadViews,
                 on_created: Callable[[], None]) -> None:
        self.store = store
        self.data_dir = data_dir
        self.views = views
        self.on_created = on_created
        self.followers = Followers(store)  # a follower committed after its leader's batch is completed here
        self._mutex = threading.Lock()  # group commit of submissions (see _join_group)
        self._queue: list[Submission] = []
        self._busy = False

    def queued(self) -> int:
        """How many submissions wait for the group being written now (they are written together next)."""
        with self._mutex:
            return len(self._queue)

    # -- entry points -----------------------------------------------------------------------------------------------
    def submit_deletion(self, dataset: str, key: str, principal: Principal,
                        client_request_id: str | None) -> Answer:
        """One submission, in the group of the submissions that arrive meanwhile (see
        :meth:`lethe.curator.service.Curator.submit_deletion`)."""
        sub = submission(dataset, key, principal, client_request_id)
        self._join_group(sub)
        return self._answer(sub)

    def submit_deletions(self, submissions: list[tuple[str, str, Principal, str | None]]
                         ) -> list[Answer | Exception]:
        """Several submissions written as one group (see :meth:`lethe.curator.service.Curator.submit_deletions`).

        The caller gathered the group (the HTTP API's intake thread: the submissions that arrived while its previous
        group committed), so it is committed as it is, at once — not queued again behind this process's
        leader/follower group commit (:meth:`_join_group`, for threads that submit one at a time): each submission
        is batched once. A group committing while another one does (a thread's group here, or another process's)
        is ordered by the store, as submissions of two processes are (:meth:`_commit_group`)."""
        out: list[Answer | Exception] = []
        group: list[Submission] = []
        for dataset, key, principal, crid in submissions:
            try:
                group.append(submission(dataset, key, principal, crid))
            except CuratorError as exc:
                out.append(exc)
                continue
            out.append(_PENDING)
        if group:
            try:
                self._commit_group(group)
            finally:
                for member in group:  # a group that failed as a whole: each member is answered alone
                    if member.result is None and member.error is None:
                        member.alone = True
        answers = iter(group)
        for i, o in enumerate(out):
            if o is _PENDING:
                try:
                    out[i] = self._answer(next(answers))
                except Exception as exc:  # noqa: BLE001 - the caller answers each submission with its own error
                    out[i] = exc
        return out

    def submit_alone(self, dataset: str, key: str, principal: Principal,
                     client_request_id: str | None) -> Answer:
        """One submission in a transaction of its own (the fallback when its group failed as a whole)."""
        sub = Submission(dataset, key, principal, client_request_id)
        for attempt in range(3):
            try:
                with self.store.write() as s, s.begin():
                    view, created = self.answer_in(s, sub)
                if created:
                    self._settle_followers([sub.follows])
                    self.on_created()
                return view, created
            except IntegrityError:
                # a concurrent submission won the race (a unique constraint refused ours; nothing was written):
                # answer from the winner's committed state
                if attempt == 2:
                    raise BusyError("Concurrent submissions of this deletion kept conflicting; retry.") from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the group commit -------------------------------------------------------------------------------------------
    def _answer(self, sub: Submission) -> Answer:
        """A submission's answer once its group is done (submitted alone if the group failed as a whole)."""
        if sub.alone:
            view, created = self.submit_alone(sub.dataset, sub.key, sub.principal, sub.client_request_id)
        elif sub.error is not None:
            raise sub.error
        else:
            assert sub.result is not None
            view, created = sub.result
        if created:
            log.info("request %s submitted (dataset %s)", view["id"], sub.dataset)
        return view, created

    def _join_group(self, sub: Submission) -> None:
        """Queue ``sub`` and return once its group has committed (or failed as a whole: ``sub.alone``).

        Leader/follower group commit, no background thread: the submission that finds no group in progress leads;
        it takes everything queued (itself included), writes it in one transaction and hands the lead to the first
        submission queued meanwhile, which does the same. Every other submission waits for its outcome."""
        with self._mutex:
            self._queue.append(sub)
            lead = not self._busy
            self._busy = True
        if not lead:
            sub.done.wait()
            if not sub.lead:
                return
        self._lead_group(sub)

    def _lead_group(self, sub: Submission) -> None:
        """As the leader ``sub``: commit everything queued, then hand the lead on (see :meth:`_join_group`)."""
        with self._mutex:
            group, self._queue = self._queue, []
        try:
            self._commit_group(group)
        finally:
            for member in group:  # released whatever happened (a BaseException in the leader included)
                if member.result is None and member.error is None:
                    member.alone = True
                if member is not sub:
                    member.done.set()
            with self._mutex:
                if self._queue:
                    nxt = self._queue[0]
                    nxt.lead = True
                    nxt.done.set()
                else:
                    self._busy = False

    def _commit_group(self, group: list[Submission]) -> None:
        """Write a group of submissions in one transaction; set each member's outcome only after the commit.

        The group is answered set-wise (:meth:`answer_group_in`: a few queries and one multi-row insert per group,
        not per submission). If a unique constraint refuses the insert — a submission of another process won a race
        between our reads and our insert — the transaction is rolled back and the group is written again one
        savepoint per submission (:meth:`_commit_group_serially`), each answered from the winner's committed state.
        Any error other than a submission's own answer (a :class:`CuratorError`) aborts the group: its members are
        then retried alone by their callers (``alone``)."""
        outcomes: list[Outcome] | None
        try:
            with self.store.write() as s, s.begin():
                outcomes = self.answer_group_in(s, group)
        except IntegrityError:
            outcomes = None
        except Exception as exc:
            _log_group_failure(len(group), exc)
            return
        if outcomes is None:
            outcomes = self._commit_group_serially(group)
            if outcomes is None:
                return
        for sub, (result, error) in zip(group, outcomes, strict=True):
            sub.result, sub.error = result, error
        if any(result is not None and result[1] for result, _ in outcomes):
            self._settle_followers([m.follows for m, (result, _e) in zip(group, outcomes, strict=True)
                                    if result is not None and result[1]])
            self.on_created()

    def _settle_followers(self, follows: list[tuple[str, int, int | None] | None]) -> None:
        """After the commit: the new followers whose leader's batch published (or failed) meanwhile are completed
        now (on PostgreSQL that batch may have selected the leader's followers before ours was committed:
        :mod:`lethe.curator.followers`). Best effort: a failure here is left to recovery, which completes them."""
        pairs = [f for f in follows if f is not None]
        if not pairs:
            return
        self.followers.reached("intake-committed")
        try:
            self.followers.settle_pairs(pairs)
        except Exception as exc:  # noqa: BLE001 - the submission is committed; recovery settles what is left
            log.warning("settling follower requests failed (%s); recovery completes them", type(exc).__name__)

    def _commit_group_serially(self, group: list[Submission]) -> list[Outcome] | None:
        """A group in one transaction, one savepoint per submission (after a race with another process); None if
        the transaction failed as a whole."""
        outcomes: list[Outcome] = []
        try:
            with self.store.write() as s, s.begin():
                for sub in group:
                    outcome: Outcome = (None, BusyError("Concurrent submissions of this deletion kept conflicting; "
                                                        "retry."))
                    for _attempt in range(3):
                        sub.follows = None
                        try:
                            with s.begin_nested():
                                outcome = (self.answer_in(s, sub), None)
                            break
                        except IntegrityError:
                            # a submission of another process won the race (a unique constraint refused ours; the
                            # savepoint undid it): answer from the winner's committed state
                            continue
                        except CuratorError as exc:
                            outcome = (None, exc)
                            break
                    outcomes.append(outcome)
        except Exception as exc:
            _log_group_failure(len(group), exc)
            return None
        return outcomes

    # -- what the decision reads: set-wise for a group, or for one submission ---------------------------------------
    def answer_group_in(self, s: Any, group: list[Submission]) -> list[Outcome]:
        """The answers to a group of submissions within the write transaction ``s``, each the answer
        :meth:`answer_in` gives when the group's submissions are made one after the other in arrival order.

        Set-wise: one query each for the datasets, the requests reusing a client request id, the live requests of
        the keys and the records; then :func:`decide` in arrival order (a submission sees the requests created by
        the earlier ones of its group); then one multi-row insert of the new requests and one of their ledger
        events."""
        names = {sub.dataset for sub in group}
        datasets = {ds.name: ds for ds in s.scalars(select(Dataset).where(Dataset.name.in_(names)))
                    if not ds.name.startswith(DROPPED_PREFIX)}
        digests = [self.data_dir.key_digest(datasets[sub.dataset].id, sub.key) if sub.dataset in datasets else ""
                   for sub in group]
        owners = [self.data_dir.owner_digest(dg, sub.principal.name) if dg else ""
                  for sub, dg in zip(group, digests, strict=True)]
        by_crid: dict[tuple[str, str], DeletionRequest | NewRequest] = {}
        crids = [(sub.principal.name, sub.client_request_id) for sub in group if sub.client_request_id is not None]
        if crids:
            for r in s.scalars(select(DeletionRequest).where(
                    DeletionRequest.requester.in_({p for p, _ in crids}),
                    DeletionRequest.client_request_id.in_({c for _, c in crids}))):
                by_crid[(r.requester, str(r.client_request_id))] = r
        ds_ids = {ds.id for ds in datasets.values()}
        live: dict[tuple[int, str], DeletionRequest | NewRequest] = {}  # by key digest and by owner digest
        records: dict[tuple[int, str], int] = {}
        if ds_ids:
            for r in s.scalars(select(DeletionRequest).where(
                    DeletionRequest.dataset_id.in_(ds_ids),
                    DeletionRequest.key_digest.in_(set(digests) | set(owners)),
                    DeletionRequest.status != "failed")):
                live[(r.dataset_id, r.key_digest)] = r
            lookup = {DatasetCatalog.record_key(datasets[sub.dataset], sub.key, dg)
                      for sub, dg in zip(group, digests, strict=True) if sub.dataset in datasets}
            for rid, ds_id, k in s.execute(select(Record.id, Record.dataset_id, Record.key).where(
                    Record.dataset_id.in_(ds_ids), Record.key.in_(lookup))):
                records[(ds_id, k)] = rid
        outcomes: list[Outcome] = []
        rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        in_group: set[str] = set()  # ids of the requests this group creates (no certificate can name them yet)
        for sub, digest, owner in zip(group, digests, owners, strict=True):
            ds = datasets.get(sub.dataset)
            p, crid = sub.principal, sub.client_request_id
            known = Known(dataset=ds, digest=digest,
                          by_client_id=by_crid.get((p.name, crid)) if crid is not None else None,
                          live=live.get((ds.id, digest)) if ds is not None else None,
                          record_id=records.get((ds.id, DatasetCatalog.record_key(ds, sub.key, digest)))
                          if ds is not None else None,
                          own=live.get((ds.id, owner)) if ds is not None else None, owner_digest=owner)
            try:
                existing = decide(sub, known)
            except CuratorError as exc:
                outcomes.append((None, exc))
                continue
            if not isinstance(existing, Plan):
                outcomes.append(((self.views.request_view(s, existing, p, new=existing.id in in_group), False),
                                 None))
                continue
            assert ds is not None
            row = new_row(sub, ds.id, existing, digest if existing.holds_record else owner)
            if existing.status == FOLLOWER and known.live is not None:
                sub.follows = (known.live.id, ds.id, existing.record_id)
            rows.append(row)
            req = NewRequest(**row)  # not an ORM instance: the group is inserted in bulk below
            payload = check_payload({"dataset": sub.dataset, "requester": p.name})
            events.append({"at": req.submitted_at, "kind": "request_submitted", "payload": payload,
                           "model_id": None, "version_id": None, "request_id": req.id})
            in_group.add(req.id)
            live[(ds.id, req.key_digest)] = req
            if crid is not None:
                by_crid[(p.name, crid)] = req
            outcomes.append(((self.views.request_view(s, req, p, new=True), True), None))
        if rows:
            # Core executemany (the ORM's bulk path costs more Python than the statements; the GIL is the event
            # loop's): the unique constraints fire here (IntegrityError: see _commit_group)
            request_table: Any = DeletionRequest.__table__
            ledger_table: Any = LedgerEvent.__table__
            s.execute(insert(request_table), rows)
            s.execute(insert(ledger_table), events)
        return outcomes

    def _known(self, s: Any, sub: Submission) -> Known:
        """What :func:`decide` reads about one submission, read within ``s``."""
        try:
            ds = DatasetCatalog.find(s, sub.dataset)
        except NotFoundError:
            return Known(None, "", None, None, None)
        digest = self.data_dir.key_digest(ds.id, sub.key)
        owner = self.data_dir.owner_digest(digest, sub.principal.name)
        prev = None
        if sub.client_request_id is not None:
            prev = s.scalar(select(DeletionRequest).where(DeletionRequest.requester == sub.principal.name,
                                                          DeletionRequest.client_request_id == sub.client_request_id))
        live = {r.key_digest: r for r in s.scalars(select(DeletionRequest).where(
            DeletionRequest.dataset_id == ds.id, DeletionRequest.key_digest.in_((digest, owner)),
            DeletionRequest.status != "failed"))}
        record_id = s.scalar(select(Record.id).where(Record.dataset_id == ds.id,
                                                     Record.key == DatasetCatalog.record_key(ds, sub.key, digest)))
        return Known(ds, digest, prev, live.get(digest), record_id, own=live.get(owner), owner_digest=owner)

    def answer_in(self, s: Any, sub: Submission) -> Answer:
        """The submission's answer within the write transaction (or savepoint) ``s``."""
        known = self._known(s, sub)
        existing = decide(sub, known)
        if not isinstance(existing, Plan):
            return self.views.request_view(s, existing, sub.principal), False
        assert known.dataset is not None
        row = new_row(sub, known.dataset.id, existing,
                      known.digest if existing.holds_record else known.owner_digest)
        if existing.status == FOLLOWER and known.live is not None:
            sub.follows = (known.live.id, known.dataset.id, existing.record_id)
        req = DeletionRequest(**row)
        s.add(req)
        s.flush()  # the unique constraints fire here (IntegrityError → the caller answers from the winner)
        add_event(s, "request_submitted", {"dataset": sub.dataset, "requester": sub.principal.name},
                  request_id=req.id)
        return self.views.request_view(s, req, sub.principal, new=True), True


def new_row(sub: Submission, dataset_id: int, plan: Plan, digest: str) -> dict[str, Any]:
    """The stored columns of the new request ``plan`` describes (a request with no record is done at once)."""
    now = utcnow()
    return {"id": str(uuid.uuid4()), "requester": sub.principal.name, "client_request_id": sub.client_request_id,
            "dataset_id": dataset_id, "record_id": plan.record_id, "key_digest": digest, "status": plan.status,
            "attempts": 0, "submitted_at": now, "processed_at": now if plan.status == NO_RECORD else None}


__all__ = ["DeletionIntake", "Known", "NewRequest", "Submission", "Plan", "decide", "new_row", "submission"]
