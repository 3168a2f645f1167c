"""Retention: what a deletion leaves behind is made unrecoverable, and what a crash interrupted is finished.

Superseded versions' artifacts (with their secret state) are destroyed, removed rows of the data plane erased, the
database purged (SQLite: ``wal_checkpoint(TRUNCATE)``; PostgreSQL: ``VACUUM FULL``) where it ever held plain keys or
values, and :meth:`Retention.recover` destroys the files a crashed operation left and redoes an unfinished purge.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select

from lethe.curator import rowcheck
from lethe.curator.artifacts import ArtifactStore, destroy_file
from lethe.curator.dataplane import DataPlane, MatrixStore
from lethe.curator.followers import Followers
from lethe.curator.locking import ProcessingLock
from lethe.curator.serving import Serving
from lethe.curator.settings import DROPPED_PREFIX, KEYS_HASHED
from lethe.curator.storage import StorageHealth
from lethe.curator.store import Dataset, LedgerEvent, ModelVersion, Record, Store, add_event, utcnow

log = logging.getLogger("lethe.curator")


@dataclass(eq=False)
class Retention:
    """Destruction, erasure, purge and recovery over one data directory.

    Parameters
    ----------
    store, artifacts, matrices : the store, the artifact files and the data plane's files.
    data_dir : the data directory.
    lock : the processing lock (:meth:`recover` takes it; so does a registration while it writes its files and
        commits, so recovery never sees the files of a registration in flight).
    serving : its cache of public arrays forgets destroyed versions.

    Attributes
    ----------
    storage : :class:`lethe.curator.storage.StorageHealth` of the data directory (faults operators see).
    """

    store: Store
    artifacts: ArtifactStore
    matrices: MatrixStore
    data_dir: Path
    lock: ProcessingLock
    serving: Serving
    storage: StorageHealth = field(init=False)
    followers: Followers = field(init=False)
    _row_checks: dict[int, tuple[Any, int | None]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.storage = StorageHealth(self.data_dir)
        self.followers = Followers(self.store)

    def verify_datasets(self) -> list[dict[str, Any]]:
        """Check that every live dataset's data-plane files exist and have the size its rows need (N × d and N
        float64); return the faults for operators: ``[{dataset, error, repair}]`` (empty when all is well)."""
        with self.store.read() as s:
            rows = s.execute(select(Dataset.name, DataPlane.features_path, DataPlane.labels_path, DataPlane.n_rows,
                                    DataPlane.n_features, Dataset.id)
                             .join(DataPlane, DataPlane.dataset_id == Dataset.id)
                             .where(Dataset.name.not_like(f"{DROPPED_PREFIX}%")).order_by(Dataset.id)).all()
        faults = []
        for name, fpath, lpath, n, d, ds_id in rows:
            problems = []
            for relpath, width in ((fpath, int(d)), (lpath, 1)):
                try:
                    path = self.matrices.resolve(relpath)
                    if str(relpath).endswith(".zarr"):
                        if not path.is_dir():
                            problems.append(f"{relpath} is missing")
                        continue
                    size = path.stat().st_size
                except (OSError, ValueError) as exc:
                    problems.append(f"{relpath} cannot be read ({type(exc).__name__})")
                    continue
                if size != 8 * int(n) * width:
                    problems.append(f"{relpath} has {size} bytes; {int(n)} rows need {8 * int(n) * width}")
            if not problems:
                altered = self._altered_rows(ds_id, fpath, lpath, int(n), int(d))
                if altered:
                    problems.append(f"{altered} kept row(s) of {fpath} differ from what was registered (the file "
                                    "was altered): every deletion from this dataset may fail or certify the wrong "
                                    "data")
            if problems:
                faults.append({"dataset": name, "error": "; ".join(problems),
                               "repair": f"drop its models and the dataset (lethe dataset drop {name} --yes), then "
                                         "register it again from its source and retrain: the erasure log survives "
                                         "the drop, so records erased on request are not re-ingested (the "
                                         "registration says how many)"})
        return faults

    def _altered_rows(self, ds_id: int, fpath: str, lpath: str, n: int, d: int) -> int | None:
        """The present rows of a dataset's files whose check values changed (:mod:`lethe.curator.rowcheck`), or
        None if not checked; O(N d) when the files changed since the last check, else cached."""
        if str(fpath).endswith(".zarr"):
            return None
        paths = [self.matrices.resolve(p) for p in (fpath, lpath, *MatrixStore.companions(fpath))]
        try:
            key = (ds_id, *((st.st_mtime_ns, st.st_size, st.st_ino) for st in map(os.stat, paths)))
        except OSError:
            return None  # no check values (registered before them), or a file the size check reports
        if self._row_checks.get(ds_id, (None,))[0] == key:
            return self._row_checks[ds_id][1]
        with self.store.read() as s:
            present = np.fromiter(s.scalars(select(Record.id).where(Record.dataset_id == ds_id)), dtype=np.int64)
            base = s.scalar(select(DataPlane.row_base).where(DataPlane.dataset_id == ds_id))
        active = np.zeros(n, dtype=bool)
        active[present - int(base or 0)] = True
        altered = rowcheck.altered_rows(paths[0], paths[1], n, d, active)
        self._row_checks[ds_id] = (key, altered)
        return altered

    def verify_requests(self) -> list[dict[str, Any]]:
        """Requests that would never reach an end on their own: follower requests no pending request leads
        (:meth:`lethe.curator.followers.Followers.stuck`). ``[{requests, error, repair}]`` (empty when none)."""
        n = self.followers.stuck()
        if not n:
            return []
        return [{"requests": n, "error": f"{n} follower request(s) wait for a request that is no longer pending",
                 "repair": "run `lethe process` (or let the worker run): recovery completes them"}]

    def destroy_superseded(self, *, record: bool = True) -> list[tuple[int, int, str]]:
        """Destroy the artifacts of superseded versions; with ``record``, mark them destroyed (one transaction).
        Returns (version id, model id, artifact) of each."""
        with self.store.read() as s:
            olds = [(v.id, v.model_id, v.artifact) for v in
                    s.scalars(select(ModelVersion).where(ModelVersion.status == "superseded"))]
        for vid, _model_id, relpath in olds:
            self.artifacts.destroy(relpath)
            self.serving.forget(vid)
        if record and olds:
            with self.store.write() as s, s.begin():
                self.mark_destroyed(s, olds)
        return olds

    @staticmethod
    def mark_destroyed(s: Any, olds: list[tuple[int, int, str]]) -> None:
        for vid, model_id, relpath in olds:
            v = s.get(ModelVersion, vid)
            if v is not None and v.status == "superseded":
                v.status = "destroyed"
                v.destroyed_at = utcnow()
                add_event(s, "version_destroyed", {"artifact": relpath}, model_id=model_id, version_id=vid)

    def _last_event_ids(self, *kinds: str) -> list[int | None]:
        with self.store.read() as s:
            return [s.scalar(select(func.max(LedgerEvent.id)).where(LedgerEvent.kind == k)) for k in kinds]

    def purge_pending(self) -> bool:
        """True if records were deleted after the last completed purge."""
        last_del, last_purge = self._last_event_ids("records_deleted", "purge")
        return last_del is not None and (last_purge is None or last_purge < last_del)

    def erase_pending(self) -> bool:
        """True if records were deleted after the last erasure of their values (a crash between the batch's commit
        and its erasure): then every removed row of every data plane is erased again."""
        last_del, last_purge, last_erased = self._last_event_ids("records_deleted", "purge", "erased")
        done = max(last_purge or 0, last_erased or 0)
        return last_del is not None and done < last_del

    def _erase_all_removed(self) -> int:
        """Zero every row of every data plane whose record is gone (O(N) per dataset; recovery only)."""
        erased = 0
        with self.store.read() as s:
            planes = s.scalars(select(DataPlane)).all()
            for plane in planes:
                present = np.fromiter(s.scalars(select(Record.id).where(Record.dataset_id == plane.dataset_id)),
                                      dtype=np.int64)
                active = np.zeros(plane.n_rows, dtype=bool)
                active[present - plane.row_base] = True
                erased += self.matrices.erase_rows(plane, np.flatnonzero(~active))
        return erased

    def purge(self, attempts: int = 20, *, erase: dict[int, np.ndarray | None] | None = None,
              destroyed: list[tuple[int, int, str]] | None = None) -> bool:
        """Make deleted records unrecoverable from the files under the data directory.

        1. Data plane: the removed rows are overwritten with zeros in place and fsynced
           (:meth:`lethe.curator.dataplane.MatrixStore.erase_rows`): ``erase`` maps dataset ids to the rows a batch
           removed (O(d) per row); without it (recovery) every removed row of every dataset is erased again.
        2. Database: nothing, for datasets with a data plane and hashed keys — the database never received a plain
           key or value of theirs (the records table holds the keys' HMAC digests, which the requests keep anyway;
           SQLite zeroes deleted rows in its pages, ``secure_delete=ON``). Datasets of older stores (plain keys or
           values in the records table): SQLite ``wal_checkpoint(TRUNCATE)`` copies the changed pages back and
           truncates the WAL, whose old frames still held the records — work proportional to the pages changed
           since the last checkpoint; PostgreSQL ``VACUUM FULL`` of the records table (old WAL segments are the
           server's; see the operating guide). Returns False (purge stays pending, retried later) if readers kept
           the WAL busy; the erasure of step 1 is recorded either way.

        ``destroyed``: superseded versions whose artifacts were destroyed, marked so in the same transaction.
        """
        if erase is None:
            self._erase_all_removed()
        else:
            with self.store.read() as s:
                for ds_id, rows in erase.items():
                    plane = s.get(DataPlane, ds_id)
                    if plane is not None and rows is not None:
                        self.matrices.erase_rows(plane, rows)
        done = False
        # datasets registered with hashed keys and a data plane never wrote a plain key or value to the database:
        # nothing of theirs is left in its pages or WAL to purge; only older datasets need the database purged
        plain = self.plain_in_database(None if erase is None else list(erase))
        if self.store.is_sqlite and not plain:
            done = True  # no checkpoint: it would block the submissions' writes for nothing (WAL auto-checkpoints)
        elif self.store.is_sqlite:
            raw = self.store.raw_sqlite()
            try:
                con = raw.driver_connection
                for i in range(attempts):
                    busy, _log, _ckpt = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if busy == 0:
                        done = True
                        break
                    time.sleep(0.02 * (i + 1))
            finally:
                raw.close()
        else:
            if plain:  # O(table)
                with self.store.write_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                    c.exec_driver_sql("VACUUM FULL records")
            done = True
        if done or erase != {} or destroyed:
            with self.store.write() as s, s.begin():
                if destroyed:
                    self.mark_destroyed(s, destroyed)
                if done or erase != {}:
                    add_event(s, "purge" if done else "erased",
                              {"database": "sqlite" if self.store.is_sqlite else "other"})
        if done and self.store.is_sqlite and plain:  # the event just written sits in the WAL; no deleted data
            raw = self.store.raw_sqlite()
            try:
                raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                raw.close()
        if not done:
            log.warning("purge incomplete: readers kept the WAL busy; will retry")
        return done

    def plain_in_database(self, dataset_ids: list[int] | None) -> bool:
        """True if one of these datasets (None: any) keeps plain keys or values in the records table (a store from
        before the data plane or the hashed keys)."""
        with self.store.read() as s:
            q = select(Dataset.id, Dataset.feature_names)
            if dataset_ids is not None:
                q = q.where(Dataset.id.in_(dataset_ids))
            rows = s.execute(q).all()
            planes = set(s.scalars(select(DataPlane.dataset_id)))
        return any(ds_id not in planes or (names or {}).get("keys") != KEYS_HASHED for ds_id, names in rows)

    def recover(self) -> dict[str, int]:
        """Finish what a crash interrupted (takes the processing lock). See :meth:`recover_locked`."""
        with self.lock.hold():
            return self.recover_locked()

    def recover_locked(self) -> dict[str, int]:
        """Destroy unreferenced artifacts (a crashed batch's) and superseded ones, and data-plane files no dataset
        refers to (a crashed registration's); redo an unfinished erasure or purge."""
        with self.store.read() as s:
            referenced = set(s.scalars(select(ModelVersion.artifact)
                                       .where(ModelVersion.status.in_(("published", "superseded")))))
            planes = {p for pl in s.scalars(select(DataPlane))
                      for p in (pl.features_path, pl.labels_path, *MatrixStore.companions(pl.features_path))}
        orphans = [p for p in self.artifacts.all_files() if p not in referenced]
        orphans += [p for p in self.matrices.all_files() if p not in planes]
        for p in orphans:
            destroy_file(self.data_dir / p)
        destroyed = len(self.destroy_superseded())
        self.followers.settle_orphans()  # followers whose leader's batch ended without them (a crash, a race)
        purged = 0
        if self.purge_pending():
            purged = int(self.purge(attempts=3, erase=None if self.erase_pending() else {}))
        if orphans or destroyed or purged:
            with self.store.write() as s, s.begin():
                add_event(s, "recovered", {"orphans_destroyed": len(orphans), "superseded_destroyed": destroyed,
                                           "purged": purged})
            log.info("recovery: %d orphan file(s), %d superseded version(s) destroyed, purge %s", len(orphans),
                     destroyed, bool(purged))
        return {"orphans_destroyed": len(orphans), "superseded_destroyed": destroyed, "purged": purged}



__all__ = ["Retention"]
