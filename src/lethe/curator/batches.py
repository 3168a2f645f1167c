"""Batch processing: due batches of pending requests taken from the queue, every model of the dataset updated by
its mechanism (warm solver state kept between batches where the mechanism keeps one), the result published by
:class:`~lethe.curator.publisher.VersionPublisher`, then the superseded versions destroyed and the records purged.

Failures are isolated: a batch the mechanism fails on is split (:meth:`BatchProcessor.process_batch`).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from lethe._rng import check_random_state
from lethe.certified.one_vs_all import next_batch_cap
from lethe.curator.adapters import Adapters
from lethe.curator.artifacts import ArtifactError, ArtifactStore
from lethe.curator.dask_plane import active_rows
from lethe.curator.dataplane import DataPlane, DataView, MatrixStore
from lethe.curator.datasets import DatasetCatalog
from lethe.curator.faults import model_faults
from lethe.curator.locking import ProcessingLock
from lethe.curator.logs import progress_bar
from lethe.curator.publisher import REQUEST_COLUMNS, NewVersion, VersionPublisher
from lethe.curator.retention import Retention
from lethe.curator.serving import Serving
from lethe.curator.settings import Settings
from lethe.curator.store import Dataset, DeletionRequest, Model, ModelVersion, Record, Store, add_event, as_utc, utcnow

log = logging.getLogger("lethe.curator")


@dataclass(frozen=True)
class BatchResult:
    """What one processed batch did."""

    batch_id: str
    dataset: str
    request_ids: tuple[str, ...]
    status: str  # "done" | "retry" | "failed"
    new_versions: dict[str, int] = field(default_factory=dict)  # model name -> version number
    error: str | None = None


@dataclass(frozen=True)
class BatchFailure:
    """A batch attempt the mechanism failed on: nothing was published and no attempt counted
    (:meth:`BatchProcessor.process_batch` decides what follows).

    batch_id, request_ids : the attempt and the requests it ran on.
    error : what failed (type and message; shown to admins only through :mod:`lethe.curator.public`).
    split : whether a request may be its cause (the batch is then split), rather than storage, memory or the stored
        model.
    """

    batch_id: str
    request_ids: list[str]
    error: str
    split: bool


class WarmModels:
    """The solver state kept between batches, one per model (mechanisms with ``supports_warm``), each tagged with the
    version it is the state of."""

    def __init__(self) -> None:
        self._states: dict[int, Any] = {}  # model id -> WarmModel

    def get(self, model_id: int) -> Any:
        return self._states.get(model_id)

    def version_of(self, model_id: int) -> Any:
        """The version id whose state is kept for ``model_id`` (None if none)."""
        return getattr(self._states.get(model_id), "version_id", None)

    def put(self, model_id: int, warm: Any) -> None:
        self._states[model_id] = warm

    def drop(self, model_ids: Any) -> None:
        for mid in model_ids:
            self._states.pop(mid, None)

    def advance(self, new_ids: dict[int, int]) -> None:
        """The kept states now are those of these newly published versions (model id → version id)."""
        for model_id, vid in new_ids.items():
            if model_id in self._states:
                self._states[model_id].version_id = vid

    def state(self) -> tuple[tuple[int, Any], ...]:
        """(model id, version id) of every model whose solver state is kept, sorted."""
        return tuple(sorted((mid, getattr(w, "version_id", None)) for mid, w in self._states.items()))

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._states


@dataclass(eq=False)
class BatchProcessor:
    """Takes due batches from the queue and processes them.

    Parameters
    ----------
    store, settings, artifacts, matrices, lock : the store, the processing settings, the artifact and data-plane
        files, the processing lock.
    adapters : builds the mechanisms' adapters; its clock says when a scheduled release is due.
    datasets : the row spaces removed from.
    publisher : publishes each batch.
    retention : recovery first; after a batch, destruction of the superseded versions and the purge.
    serving : verification (a dataset with a faulty model waits) and its cache of verified files.
    """

    store: Store
    adapters: Adapters
    settings: Settings
    artifacts: ArtifactStore
    matrices: MatrixStore
    lock: ProcessingLock
    datasets: DatasetCatalog
    publisher: VersionPublisher
    retention: Retention
    serving: Serving
    warm: WarmModels = field(default_factory=WarmModels, init=False)
    # dataset id -> batch size the budget allows (see budget_cap)
    _batch_caps: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _logged_faults: tuple[Any, ...] = field(default=(), init=False, repr=False)

    def batch_cap(self, dataset_id: int) -> int:
        """The batch size the budget allows for a dataset (``batch_size`` until a batch of it set a cap)."""
        return self._batch_caps.get(dataset_id, self.settings.batch_size)

    def process_pending(self, *, force: bool = False, max_batches: int | None = None, progress: bool = False,
                        lock_timeout: float | None = 60.0,
                        keep_going: Callable[[], bool] | None = None) -> list[BatchResult]:
        """Under the processing lock, after recovery: take due batches (:meth:`_next_batch`) and process each
        (:meth:`process_batch`) until none is due, ``max_batches`` were taken, or a batch must be retried later (see
        :meth:`lethe.curator.service.Curator.process_pending`)."""
        results: list[BatchResult] = []
        taken = 0
        with self.lock.hold(lock_timeout):
            self.retention.recover_locked()
            with progress_bar(progress, desc="forget", unit="req") as bar:
                while max_batches is None or taken < max_batches:
                    batch = self._next_batch(force)
                    if batch is None:
                        break
                    taken += 1
                    parts = self.process_batch(*batch)
                    results.extend(parts)
                    bar.update(sum(len(res.request_ids) for res in parts))
                    if any(res.status == "retry" for res in parts):
                        break  # back off; the worker tries again on its next poll
                    if keep_going is not None and not keep_going():
                        break  # the caller stops after this batch (its server died, or someone waits for the lock)
            if not any(res.status == "retry" for res in results):
                results.extend(self.publish_due_releases())  # the time rule: releases due without a new batch
        return results

    def publish_due_releases(self) -> list[BatchResult]:
        """Publish the releases a mechanism's schedule makes due without a new batch (a
        scheduled family's time rule, e.g. a number of seconds since the last release with a removal step pending), one
        version each (:meth:`VersionPublisher.publish_release`). Called under the processing lock, after the due
        batches, on every tick of the worker. Reads each model's published summary (public numbers); opens an
        artifact only for a model whose release is due. A failure is logged and leaves the model as it was; the
        next tick tries again."""
        now = float(self.adapters.clock())
        with self.store.read() as s:
            due = []
            for m in s.scalars(select(Model).order_by(Model.id)):
                v = s.get(ModelVersion, m.current_version_id)
                ds = s.get(Dataset, m.dataset_id)
                if v is None or ds is None or (v.summary or {}).get("cadence_seconds") is None:
                    continue  # no schedule of its own (only a time rule makes a release due without a batch)
                adapter = self.adapters.get(m.mechanism, dict(m.params))
                if adapter.release_due(dict(v.summary or {}), now):
                    due.append((m.id, m.name, m.mechanism, dict(m.params), v, ds.name, ds.n_features, adapter))
        results: list[BatchResult] = []
        for model_id, name, mech, params, old, ds_name, d, adapter in due:
            batch_id = str(uuid.uuid4())
            binding = Serving.binding(name, mech, params, d)
            try:
                art = self.artifacts.load(old.artifact, old.sha256, binding)
                new_art, cert = adapter.release(art, check_random_state(None))  # fresh entropy: the noise is secret
                with self.publisher.new_artifact(new_art, binding) as (relpath, sha):
                    item = NewVersion(model_id=model_id, name=name, mechanism=mech, old=old, certificate=cert,
                                      artifact=relpath, sha256=sha, summary=adapter.summary(new_art))
                    number, vid = self.publisher.publish_release(item, batch_id)
            except Exception as exc:  # not fatal: the model keeps its version; the next tick tries again
                log.warning("model %s: scheduled release failed: %s", name, type(exc).__name__)
                continue
            self.serving.seed_verified([item], {model_id: vid})
            log.info("model %s: scheduled release published as version %d", name, number)
            results.append(BatchResult(batch_id=batch_id, dataset=ds_name, request_ids=(), status="done",
                                       new_versions={name: number}))
        if results:
            self.retention.destroy_superseded()
        return results

    def _next_batch(self, force: bool) -> tuple[int, list[str]] | None:
        """The next due batch: (dataset id, request ids, oldest first), or None. Reads per dataset the count and the
        oldest submission of its pending requests, then the ids of one batch (O(batch), not O(pending))."""
        now = utcnow()
        with self.store.read() as s:
            queues = s.execute(select(DeletionRequest.dataset_id, func.count(), func.min(DeletionRequest.submitted_at))
                               .where(DeletionRequest.status == "pending").group_by(DeletionRequest.dataset_id)
                               .order_by(func.min(DeletionRequest.submitted_at))).all()
            faulty = self._faulty_datasets() if queues else set()
            for ds_id, count, first in queues:
                if ds_id in faulty:  # an artifact fault: requests wait (pending) until an operator repairs the model
                    continue
                oldest = as_utc(first)
                waited = (now - oldest).total_seconds() if oldest is not None else math.inf
                size = min(self.settings.batch_size, self._batch_caps.get(ds_id, self.settings.batch_size))
                if waited >= self.settings.publish_within / 2:  # the latency target first (Settings.publish_within)
                    size = self.settings.batch_size
                if force or count >= size or waited >= self.settings.max_delay:
                    # everything that arrived together goes in one batch (Eq. 6), up to the size the budget allows
                    return ds_id, list(s.scalars(select(DeletionRequest.id).where(
                        DeletionRequest.status == "pending", DeletionRequest.dataset_id == ds_id)
                        .order_by(DeletionRequest.submitted_at, DeletionRequest.id).limit(size)))
        return None

    def _faulty_datasets(self) -> set[int]:
        """Datasets with a model whose published artifact fails verification (see :meth:`Serving.verify_models`)."""
        faults = model_faults(self.serving, self.store)
        if not faults:
            return set()
        names = {f["dataset"] for f in faults}
        key = tuple(sorted((f["model"], f["version"], f["error"]) for f in faults))
        if key != self._logged_faults:  # log a fault once, not at every poll
            self._logged_faults = key
            for f in faults:
                log.error("model %s version %s: %s (repair: %s)", f["model"], f["version"], f["error"], f["repair"])
        with self.store.read() as s:
            return set(s.scalars(select(Dataset.id).where(Dataset.name.in_(names))))

    def budget_cap(self, dataset_id: int, m: int, certs: list[dict[str, Any]]) -> None:
        """Adapt the batch size of a dataset to its models' budget.

        A batch of m removals spends a remainder that grows like m² (Guo et al. 2020, Cor. 2: ‖H⁻¹Δ‖² with Δ a sum
        of m gradients), so large batches exhaust the budget ε′ — and force retrainings — sooner than the same
        removals in small batches. After each batch the cap is set so that the next batch's remainder, extrapolated
        quadratically from this one's, spends at most ``budget_share`` of the budget left; between that cap and
        ``batch_size`` the batch holds whatever is pending (it grows with the arrival rate).
        """
        cap = self.settings.batch_size
        if self.settings.budget_share >= 1.0:
            return
        for cert in certs:
            rem, budget = cert.get("remainder_bound"), cert.get("budget")
            left = cert.get("budget_left")
            if cert.get("retrained") or not isinstance(rem, float) or not isinstance(left, float) or not budget:
                continue
            if rem > 0.0 and math.isfinite(rem):  # Cor. 2's m² growth: lethe.certified.one_vs_all.next_batch_cap
                cap = min(cap, next_batch_cap(rem, m, left, self.settings.budget_share))
        self._batch_caps[dataset_id] = cap

    def warm_up(self) -> int:
        """Build the warm state of every model that keeps one (after a start: once, before the first batch, so that
        no request waits for it). Returns the number of models made warm."""
        with self.lock.hold(), self.store.read() as s:
            todo = []
            for m in s.scalars(select(Model).order_by(Model.id)):
                adapter = self.adapters.get(m.mechanism, dict(m.params))
                plane = s.get(DataPlane, m.dataset_id)
                v = s.get(ModelVersion, m.current_version_id)
                if adapter.supports_warm and plane is not None and v is not None and \
                        self.warm.version_of(m.id) != v.id:
                    todo.append((m.id, m.name, m.dataset_id, adapter, plane, v,
                                 Serving.binding(m.name, m.mechanism, dict(m.params), plane.n_features)))
            views: dict[int, DataView] = {}
            for model_id, name, ds_id, adapter, plane, v, binding in todo:
                if ds_id not in views:
                    views[ds_id] = self.datasets.data_view(s, ds_id, plane.n_features)[0]
                X = self.matrices.open(plane)[0]
                warm = adapter.restore(self.artifacts.load(v.artifact, v.sha256, binding), X, views[ds_id].y,
                                       views[ds_id].active)
                warm.version_id = v.id
                self.warm.put(model_id, warm)
                log.info("model %s: solver state built from version %d", name, v.number)
        return len(todo)

    def process_batch(self, dataset_id: int, request_ids: list[str]) -> list[BatchResult]:
        """Process one batch, isolating failures: one bad request never fails the others.

        If the mechanism fails on a batch of several requests, nothing of it is published (its new artifacts are
        destroyed, the warm solver state of its models dropped) and no attempt is counted; the batch is split in two
        halves, each processed as a batch of its own (a fresh snapshot, warm state rebuilt from the published
        version, its own certificates), recursively. Only a request the mechanism fails on *alone* has an attempt
        counted (``failed`` after ``max_attempts``). With k failing requests in a batch of m this takes at most
        about 2k·log2(m/k) + 1 mechanism runs (2m − 1 if all fail). A fault that no request causes — storage
        (``OSError``), memory, or the stored model (``ArtifactError``) — is not split: the whole batch has an
        attempt counted, as before. Returns the result of every part.
        """
        res = self._attempt_batch(dataset_id, request_ids)
        if isinstance(res, BatchResult):
            return [res]
        batch_id, ids, error, split = res.batch_id, res.request_ids, res.error, res.split
        if len(ids) == 1 or not split:
            return [self._fail_batch(batch_id, self._dataset_name(dataset_id), ids, error, final=False)]
        half = len(ids) // 2
        log.info("dataset %s: a batch of %d request(s) failed; processing it in two parts", dataset_id, len(ids))
        return self.process_batch(dataset_id, ids[:half]) + self.process_batch(dataset_id, ids[half:])

    def _dataset_name(self, dataset_id: int) -> str:
        with self.store.read() as s:
            ds = s.get(Dataset, dataset_id)
            return ds.name if ds is not None else str(dataset_id)

    def _attempt_batch(self, dataset_id: int,
                       request_ids: list[str]) -> BatchResult | BatchFailure:
        """One attempt at a batch: its result, or — when the mechanism failed — a :class:`BatchFailure` (nothing
        published, nothing counted; :meth:`process_batch` decides)."""
        batch_id = str(uuid.uuid4())
        rng = check_random_state(None)  # fresh entropy for any retraining: b must be unpredictable
        # 1. read one consistent snapshot: requests, models, the data plane (O(batch) unless a model must be rebuilt)
        with self.store.read() as s:
            ds = s.get(Dataset, dataset_id)
            assert ds is not None
            ds_name, d = ds.name, ds.n_features
            plane = s.get(DataPlane, dataset_id)
            by_id = {r.id: r for r in s.execute(select(*REQUEST_COLUMNS).where(DeletionRequest.id.in_(request_ids)))}
            reqs = [by_id.get(rid) for rid in request_ids]
            rec_ids = [int(r.record_id) for r in reqs if r is not None and r.record_id is not None]
            present = set(s.scalars(select(Record.id).where(Record.id.in_(rec_ids)))) if rec_ids else set()
            models = s.scalars(select(Model).where(Model.dataset_id == ds.id).order_by(Model.id)).all()
            current = {m.id: s.get(ModelVersion, m.current_version_id) for m in models}
            model_info = [(m.id, m.name, m.mechanism, dict(m.params)) for m in models]
            first = next(iter(current.values()), None)
            n_present = (first.n_records if first is not None and plane is not None else
                         int(s.scalar(select(func.count()).select_from(Record)
                                      .where(Record.dataset_id == dataset_id)) or 0))
            adapters = {mid: self.adapters.get(mech, params) for mid, _n, mech, params in model_info}
            cold: tuple[DataView, np.ndarray] | None = None
            needs_view = [mid for mid in adapters if plane is None or not adapters[mid].supports_warm
                          or self.warm.version_of(mid) != current[mid].id]  # type: ignore[union-attr]
            if needs_view:
                view, _p, row_ids = self.datasets.data_view(s, dataset_id, d)
                cold = (view, row_ids)
        missing = [rid for rid, r in zip(request_ids, reqs, strict=True)
                   if r is None or r.record_id is None or r.record_id not in present]
        if missing:  # cannot happen while the invariants hold; refuse only those requests, the rest come next
            return self._fail_batch(batch_id, ds_name, missing, "the record of this request is missing", final=True)
        if model_info and n_present - len(request_ids) < 2:
            allowed = n_present - 2
            if allowed < 1:
                return self._fail_batch(batch_id, ds_name, request_ids,
                                        f"dataset {ds_name!r} has models and {n_present} records; at least 2 must "
                                        "remain", final=True)
            request_ids, reqs = request_ids[:allowed], reqs[:allowed]
        record_ids = np.array([int(r.record_id) for r in reqs if r is not None and r.record_id is not None],
                              dtype=np.int64)
        rows = record_ids - plane.row_base if plane is not None else None
        # 2. compute every model's new version; the new artifacts are files nobody refers to yet
        new: list[NewVersion] = []
        try:
            for model_id, name, mech, params in model_info:
                old = current[model_id]
                assert old is not None
                adapter = adapters[model_id]
                binding = Serving.binding(name, mech, params, d)
                if adapter.supports_warm and plane is not None and rows is not None:
                    warm = self.warm.get(model_id)
                    if warm is None or warm.version_id != old.id:  # after a restart or another process's batch
                        self.warm.drop([model_id])
                        assert cold is not None
                        view = cold[0]
                        X = self.matrices.open(plane)[0]  # this model's own copy-on-write map
                        art_old = self.artifacts.load(old.artifact, old.sha256, binding)
                        warm = adapter.restore(art_old, X, view.y, view.active)
                        warm.version_id = old.id
                        log.info("model %s: solver state rebuilt from version %d", name, old.number)
                    self.warm.put(model_id, warm)
                    new_art, cert = adapter.remove_warm(warm, rows, rng)
                else:
                    assert cold is not None
                    view, row_ids = cold
                    ids = row_ids[view.active]
                    pos = {int(r): i for i, r in enumerate(ids)}
                    indices = np.array([pos[int(r)] for r in record_ids], dtype=np.int64)
                    X = view.X if bool(np.all(view.active)) else active_rows(view.X, view.active)
                    artifact = self.artifacts.load(old.artifact, old.sha256, binding)
                    new_art, cert = adapter.remove(artifact, X, view.y[view.active], indices, rng)
                relpath, sha = self.artifacts.save(new_art, binding)
                new.append(NewVersion(model_id=model_id, name=name, mechanism=mech, old=old, certificate=cert,
                                      artifact=relpath, sha256=sha, summary=adapter.summary(new_art)))
        except Exception as exc:  # the mechanism refused or failed: nothing is published
            self.warm.drop(adapters)
            for item in new:
                self.artifacts.destroy(item.artifact)
            log.warning("batch %s of %d request(s) failed: %s", batch_id, len(request_ids), type(exc).__name__)
            split = not isinstance(exc, OSError | MemoryError | ArtifactError)
            return BatchFailure(batch_id, list(request_ids), f"{type(exc).__name__}: {exc}", split)
        # 3. publish everything in one transaction
        try:
            versions, new_ids = self.publisher.publish_batch(batch_id, dataset_id, ds_name, request_ids, new)
        except BaseException:
            self.warm.drop(adapters)
            for item in new:
                self.artifacts.destroy(item.artifact)
            raise
        self.warm.advance(new_ids)
        self.serving.seed_verified(new, new_ids)
        # followers committed while the batch published (PostgreSQL: after its followers were selected) complete
        # now, with the same certificates (lethe.curator.followers)
        followers = self.retention.followers
        followers.reached("batch-published")
        try:
            followers.settle_pairs((str(r.id), dataset_id, r.record_id) for r in reqs if r is not None)
        except Exception as exc:  # noqa: BLE001 - the batch is published; recovery completes what is left
            log.warning("settling follower requests failed (%s); recovery completes them", type(exc).__name__)
        self.budget_cap(dataset_id, len(request_ids), [item.certificate for item in new])
        log.info("batch %s: %d request(s) of dataset %s processed; new versions %s", batch_id, len(request_ids),
                 ds_name, versions)
        # 4. destroy superseded versions (their secret state), erase the records' values and purge the database;
        #    one transaction records all of it (each write waits its turn behind the submissions)
        olds = self.retention.destroy_superseded(record=False)
        self.retention.purge(erase={dataset_id: rows}, attempts=3, destroyed=olds)
        try:  # the WAL's pages into the database file here, not in a submission's commit (Store.defer_checkpoints)
            self.store.checkpoint()
        except OperationalError:  # busy or locked: the next batch checkpoints
            pass
        return BatchResult(batch_id=batch_id, dataset=ds_name, request_ids=tuple(request_ids), status="done",
                           new_versions=versions)

    def _fail_batch(self, batch_id: str, ds_name: str, request_ids: list[str], error: str, *,
                    final: bool) -> BatchResult:
        status = "failed" if final else "retry"
        with self.store.write() as s, s.begin():
            for rid in request_ids:
                req = s.get(DeletionRequest, rid)
                if req is None or req.status != "pending":
                    continue
                req.attempts += 1
                req.error = error
                if final or req.attempts >= self.settings.max_attempts:
                    req.status = "failed"
                    req.processed_at = utcnow()
                    status = "failed"
                    add_event(s, "request_failed", {"batch_id": batch_id, "error": error}, request_id=rid)
                    # the requests that follow it (lethe.curator.intake) fail with it: nothing was removed
                    for f in s.scalars(select(DeletionRequest).where(
                            DeletionRequest.dataset_id == req.dataset_id, DeletionRequest.status == "waiting",
                            DeletionRequest.record_id == req.record_id)):
                        f.status, f.error, f.processed_at, f.record_id = "failed", error, req.processed_at, None
                        add_event(s, "request_failed", {"batch_id": batch_id, "error": error}, request_id=f.id)
        if status == "failed":  # followers committed concurrently fail with their leader (lethe.curator.followers)
            with self.store.read() as s:
                ended = s.execute(select(DeletionRequest.id, DeletionRequest.dataset_id, DeletionRequest.record_id)
                                  .where(DeletionRequest.id.in_(request_ids),
                                         DeletionRequest.status == "failed")).all()
            self.retention.followers.settle_pairs((r.id, r.dataset_id, r.record_id) for r in ended)
        log.warning("batch %s of dataset %s not processed (%s)", batch_id, ds_name, status)
        return BatchResult(batch_id=batch_id, dataset=ds_name, request_ids=tuple(request_ids), status=status,
                           error=error)



__all__ = ["BatchFailure", "BatchProcessor", "BatchResult", "WarmModels"]
