"""Prometheus instruments of one curator (issue 25, item 4): a :class:`~prometheus_client.CollectorRegistry` per
:class:`~lethe.curator.service.Curator`, whose gauges and histograms are updated when a version is published or a
request changes state — not recomputed from every request at each scrape.

Where the updates come from. The state changes happen in two processes (the API server takes submissions, the worker
process publishes batches), so an in-process hook would miss half of them. Every change is recorded in the ledger
(append-only, in the same transaction as the change): ``request_submitted``, ``request_done``, ``request_failed``,
``records_deleted``, ``train``, ``retrain``, ``remove``, ``release``, ``version_published``, ``model_dropped``. At each
scrape :meth:`CuratorMetrics.sync` reads the ledger events **after** the last one it has seen (a primary-key range:
O(new events)) and updates the instruments from them:

* ``request_done`` → the request's publication delay is observed (one row read per newly done request), and so is
  that of a request done at its submission (``request_submitted`` of a key the dataset does not hold);
* ``records_deleted`` → the batch size is observed;
* a request event → the gauge of requests by status is set from one ``GROUP BY`` count (an aggregate, no row read);
* a model event → the per-model gauges are set from the models' published versions (one row per model).

The first sync of a process reads the whole ledger once (the histograms' history). Ledger ids are assigned before
commit: on PostgreSQL a transaction may commit after a later id was seen, so ids skipped by a sync are looked up again
by the next ones (for :data:`GAP_SYNCS` syncs; a rolled-back transaction leaves a gap forever). Faults, the storage
probe and the pending purge are read at each scrape (each is cached or a stat).

Names, documentation strings, buckets and values are those of the earlier per-scrape computation
(:func:`lethe.curator.api.render_metrics` of :meth:`lethe.curator.views.ReadViews.metrics`; tests compare them), plus,
per model of a family with private releases (:attr:`lethe.families.Capability.PRIVATE_RELEASES`):
``lethe_model_stream_epsilon_spent``, ``lethe_model_stream_epsilon``,
``lethe_model_pending_removals`` and ``lethe_model_last_release_timestamp_seconds``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from sqlalchemy import func, or_, select

from lethe.curator import lifetime
from lethe.curator import store as db
from lethe.curator.public import SHOWN_STATUS
from lethe.curator.settings import REQUEST_STATUSES
from lethe.curator.store import Store, as_utc
from lethe.families import Capability, family_of_mechanism

PUBLICATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 24 * 3600.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

#: per-model gauges: name → (documentation, key of the published version's summary)
PER_MODEL: dict[str, tuple[str, str]] = {
    "lethe_model_version": ("Published version number", "version"),
    "lethe_model_records": ("Records the published version is for", "n"),
    "lethe_model_residual_bound": ("Accumulated residual bound beta (Guo et al. 2020)", "residual_bound"),
    "lethe_model_budget": ("Removal budget epsilon' (Guo et al. 2020, Alg. 2)", "budget"),
    "lethe_model_budget_left": ("Budget left before retraining", "budget_left"),
    "lethe_model_epsilon_spent": ("Epsilon spent by the accumulated residual", "epsilon_spent"),
    "lethe_model_retrainings": ("Retrainings forced by the budget", "retrainings"),
    "lethe_model_releases": ("Releases published of the stream (released models)", "releases"),
    "lethe_model_release_horizon": ("Releases the stream's (epsilon, delta) covers", "horizon"),
    "lethe_model_releases_left": ("Releases left before the horizon", "releases_left"),
}

#: per released model (its guarantee covers an observer of every release): the stream's privacy, durable in the
#: model's artifact and copied into each version's summary
PER_RELEASED_MODEL: dict[str, tuple[str, str]] = {
    "lethe_model_stream_epsilon_spent": ("Epsilon of the whole published sequence spent so far, at the stream's "
                                         "delta (released models)", "epsilon_spent"),
    "lethe_model_stream_epsilon": ("Epsilon the whole published sequence may spend (released models)", "epsilon"),
    "lethe_model_pending_removals": ("Removal steps awaiting the next release (released models)",
                                     "pending_removals"),
    "lethe_model_last_release_timestamp_seconds": ("Time of the last release, seconds since the epoch (released "
                                                   "models)", "released_at"),
    # the model's dataset's privacy ledger (issue 36; lethe.curator.lifetime)
    "lethe_model_lifetime_epsilon": ("Lifetime epsilon of a record held throughout the model's dataset: every "
                                     "release of every model trained on it, composed (released models)",
                                     "lifetime_epsilon"),
    "lethe_model_lifetime_budget": ("Lifetime epsilon budget of the model's dataset (released models)",
                                    "lifetime_budget"),
}

REQUEST_EVENTS = ("request_submitted", "request_done", "request_failed")
MODEL_EVENTS = ("train", "retrain", "remove", "release", "version_published", "model_dropped", "version_destroyed")
#: syncs during which an id skipped by the ledger range (a transaction not yet committed) is looked up again
GAP_SYNCS = 100


def _private_releases(mechanism: str) -> bool:
    """Whether ``mechanism``'s family declares private releases (its stream gauges apply)."""
    try:
        return family_of_mechanism(mechanism).has(Capability.PRIVATE_RELEASES)
    except ValueError:  # a mechanism no registered family runs any more: no stream gauges
        return False


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class _WithoutCreated:
    """The instruments' samples without the ``*_created`` series prometheus_client adds to histograms (the earlier
    exposition had none; dashboards compare like with like)."""

    def __init__(self, inner: CollectorRegistry) -> None:
        self.inner = inner

    def collect(self) -> Iterator[Any]:
        for fam in self.inner.collect():
            fam.samples = [s for s in fam.samples if not s.name.endswith("_created")]
            yield fam


class CuratorMetrics:
    """The Prometheus instruments of one curator, updated from the ledger's new events (see the module docstring).

    Parameters
    ----------
    store : the curator's store.
    probes : called at each scrape; returns ``(faults, storage_fault, purge_pending)``.
    """

    def __init__(self, store: Store, probes: Callable[[], tuple[int, bool, bool]]) -> None:
        self.store = store
        self.probes = probes
        self.instruments = CollectorRegistry(auto_describe=True)
        self.registry = CollectorRegistry(auto_describe=False)  # what is exposed: the instruments without *_created
        self.registry.register(_WithoutCreated(self.instruments))  # type: ignore[arg-type]
        r = self.instruments
        self.requests = Gauge("lethe_requests", "Deletion requests by status", ["status"], registry=r)
        self.publication = Histogram("lethe_request_publication_seconds", "Time from submission to publication "
                                     "(done requests)", buckets=PUBLICATION_BUCKETS, registry=r)
        self.batch_size = Histogram("lethe_batch_size", "Requests removed per batch",
                                    buckets=tuple(float(b) for b in BATCH_BUCKETS), registry=r)
        self.per_model = {name: Gauge(name, doc, ["model"], registry=r) for name, (doc, _k) in PER_MODEL.items()}
        self.per_released = {name: Gauge(name, doc, ["model"], registry=r)
                             for name, (doc, _k) in PER_RELEASED_MODEL.items()}
        self.used = Gauge("lethe_model_budget_used_ratio", "residual_bound / budget", ["model"], registry=r)
        self.faults = Gauge("lethe_artifact_faults", "Models whose published artifact fails verification", registry=r)
        self.storage_fault = Gauge("lethe_storage_fault", "1 if the data directory cannot be written (full disk, "
                                   "read-only)", registry=r)
        self.purge_pending = Gauge("lethe_purge_pending", "1 if deleted records await a purge", registry=r)
        self._mutex = threading.Lock()
        self._last = 0  # the highest ledger id seen
        self._gaps: dict[int, int] = {}  # ledger id skipped by a sync -> syncs left to look for it
        self._synced = False
        self.events_read = 0  # ledger events read by all syncs (tests: a scrape reads O(new events))

    # -- updates -------------------------------------------------------------------------------------------------------
    def sync(self) -> None:
        """Update the instruments from the ledger events recorded since the last sync."""
        with self._mutex, self.store.read() as s:
            cond = db.LedgerEvent.id > self._last
            if self._gaps:
                cond = or_(cond, db.LedgerEvent.id.in_(list(self._gaps)))
            events = s.execute(select(db.LedgerEvent.id, db.LedgerEvent.kind, db.LedgerEvent.request_id,
                                      db.LedgerEvent.payload).where(cond).order_by(db.LedgerEvent.id)).all()
            self.events_read += len(events)
            self._track_gaps([e.id for e in events])
            done = [e.request_id for e in events if e.kind == "request_done" and e.request_id is not None]
            done += self._done_at_submission(s, [e.request_id for e in events if e.kind == "request_submitted"
                                                 and e.request_id is not None])
            for i in range(0, len(done), 500):
                for sub, fin in s.execute(select(db.DeletionRequest.submitted_at, db.DeletionRequest.processed_at)
                                          .where(db.DeletionRequest.id.in_(done[i:i + 500]),
                                                 db.DeletionRequest.status == "done")):
                    a, b = as_utc(sub), as_utc(fin)
                    if a is not None and b is not None:
                        self.publication.observe(max((b - a).total_seconds(), 0.0))
            for e in events:
                if e.kind == "records_deleted" and isinstance((e.payload or {}).get("count"), int):
                    self.batch_size.observe(float(e.payload["count"]))
            kinds = {e.kind for e in events}
            if not self._synced or kinds & set(REQUEST_EVENTS):
                self._set_requests(s)
            if not self._synced or kinds & set(MODEL_EVENTS):
                self._set_models(s)
            self._synced = True

    @staticmethod
    def _done_at_submission(s: Any, submitted: list[str]) -> list[str]:
        """Of newly submitted requests, those done at once (a key the dataset does not hold: no ``request_done``
        event follows). A request done by a batch has its ``request_done`` event, committed with its state, and is
        observed through it (so never twice, whatever the isolation level between these reads)."""
        out: list[str] = []
        for i in range(0, len(submitted), 500):
            chunk = submitted[i:i + 500]
            done = set(s.scalars(select(db.DeletionRequest.id).where(db.DeletionRequest.id.in_(chunk),
                                                                     db.DeletionRequest.status == "done")))
            if done:
                done -= set(s.scalars(select(db.LedgerEvent.request_id).where(
                    db.LedgerEvent.kind == "request_done", db.LedgerEvent.request_id.in_(list(done)))))
            out += [r for r in chunk if r in done]
        return out

    def _track_gaps(self, ids: list[int]) -> None:
        for i in ids:
            self._gaps.pop(i, None)
        if ids and ids[-1] > self._last:
            new = [i for i in ids if i > self._last]
            prev = self._last
            for i in new:  # ids between the last seen and this one that were not (yet) visible
                for missing in range(prev + 1, i):
                    self._gaps[missing] = GAP_SYNCS
                prev = i
            self._last = ids[-1]
        for i in list(self._gaps):
            self._gaps[i] -= 1
            if self._gaps[i] <= 0:
                del self._gaps[i]

    def _set_requests(self, s: Any) -> None:
        counts = dict(s.execute(select(db.DeletionRequest.status, func.count())
                                .group_by(db.DeletionRequest.status)).all())
        for stored, shown in SHOWN_STATUS.items():
            counts[shown] = counts.get(shown, 0) + counts.pop(stored, 0)
        for status in REQUEST_STATUSES:
            self.requests.labels(status).set(int(counts.get(status, 0)))

    def _set_models(self, s: Any) -> None:
        for g in (*self.per_model.values(), *self.per_released.values(), self.used):
            g.clear()  # dropped models disappear
        for m in s.scalars(select(db.Model).order_by(db.Model.id)):
            v = s.get(db.ModelVersion, m.current_version_id)
            if v is None:
                continue
            summary = {"model": m.name, "version": v.number, **dict(v.summary or {})}
            for name, (_doc, key) in PER_MODEL.items():
                if _number(summary.get(key)):
                    self.per_model[name].labels(m.name).set(float(summary[key]))
            b, r = summary.get("budget"), summary.get("residual_bound")
            if isinstance(b, int | float) and isinstance(r, int | float) and b > 0 and math.isfinite(b):
                self.used.labels(m.name).set(float(r) / float(b))
            if _private_releases(m.mechanism):  # the family declares it, no summary key is sniffed
                summary.update(lifetime.summary_fields(s, m.dataset_id))
                for name, (_doc, key) in PER_RELEASED_MODEL.items():
                    if _number(summary.get(key)):
                        self.per_released[name].labels(m.name).set(float(summary[key]))

    # -- exposition ----------------------------------------------------------------------------------------------------
    def render(self) -> str:
        """The Prometheus text exposition, after a :meth:`sync` and the per-scrape probes."""
        self.sync()
        faults, storage_fault, purge_pending = self.probes()
        self.faults.set(faults)
        self.storage_fault.set(1.0 if storage_fault else 0.0)
        self.purge_pending.set(1.0 if purge_pending else 0.0)
        return generate_latest(self.registry).decode()


__all__ = ["BATCH_BUCKETS", "PER_MODEL", "PER_RELEASED_MODEL", "PUBLICATION_BUCKETS", "CuratorMetrics"]
