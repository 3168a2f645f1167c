"""Datasets: registered from a file (keys digested, values to the data plane, one transaction), described, read as
row spaces for training and removal, and dropped."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import func, select

from lethe.curator.artifacts import destroy_file
from lethe.curator.dask_plane import active_rows
from lethe.curator.datadir import DataDirectory
from lethe.curator.dataplane import STORES, DataPlane, DataView, MatrixStore
from lethe.curator.declared import check_labels, declared_classes
from lethe.curator.erasures import erased_keys, log_dataset
from lethe.curator.errors import ConflictError, InvalidInputError, NotFoundError
from lethe.curator.locking import ProcessingLock
from lethe.curator.logs import progress_bar
from lethe.curator.publisher import VersionPublisher
from lethe.curator.retention import Retention
from lethe.curator.settings import DROPPED_PREFIX, KEYS_HASHED, NORMALIZE
from lethe.curator.store import Dataset, DeletionRequest, Model, Record, Store, add_event, iso, utcnow
from lethe.curator.tables import encode_with_schema, normalize_rows, read_schema_frame, read_table
from lethe.curator.validation import check_name, check_new_name

if TYPE_CHECKING:
    from lethe.schema import Schema

log = logging.getLogger("lethe.curator")

#: how long a registration waits for the processing lock (a batch in progress) before it gives up (BusyError)
REGISTER_LOCK_TIMEOUT = 600.0


@dataclass(eq=False)
class DatasetCatalog:
    """The datasets of one store and their row spaces.

    Parameters
    ----------
    store, matrices : the store and the data plane's files.
    data_dir : the data directory (its pepper digests the keys).
    lock, retention, publisher : dropping a dataset takes the processing lock, recovers first, writes the pending
        requests' receipts and purges.
    """

    store: Store
    matrices: MatrixStore
    data_dir: DataDirectory
    lock: ProcessingLock
    retention: Retention
    publisher: VersionPublisher

    @staticmethod
    def find(s: Any, name: str) -> Dataset:
        """The live dataset named ``name`` (:class:`NotFoundError` if none, or dropped)."""
        ds = s.scalar(select(Dataset).where(Dataset.name == name)) if isinstance(name, str) else None
        if ds is None or ds.name.startswith(DROPPED_PREFIX):
            raise NotFoundError(f"Unknown dataset {name!r}.")
        return ds

    @staticmethod
    def record_key(ds: Dataset, key: str, digest: str) -> str:
        """What the records table holds for ``key``: its keyed digest (datasets registered with hashed keys: no
        plain key is ever written to the database) or the key itself (older stores)."""
        return digest if ds.feature_names.get("keys") == KEYS_HASHED else key

    def register(self, name: str, path: str | Path, *, key: str, label: str,
                         features: list[str] | None = None, normalize: str = "none",
                         progress: bool = False, header: bool = True, categorical: list[str] | None = None,
                         file_format: str | None = None, store: str = "files",
                         declared: Schema | None = None, text_column: str | None = None,
                         embedder: str = "minilm", label_classes: list[Any] | None = None) -> dict[str, Any]:
        """Ingest a table (see :meth:`lethe.curator.service.Curator.register_dataset`): its values to the data plane,
        its keys' digests to the records table, in one transaction; nothing of it is left if that fails.

        With ``declared`` (a validated :class:`lethe.schema.Schema` whose key and label are set): the rows are encoded
        by :func:`lethe.curator.tables.encode_with_schema` and the schema is kept with the dataset (it is public:
        held-out sets and raw records to predict are encoded by it).

        With ``text_column``: the column's texts are embedded by the public ``embedder``
        (:func:`lethe.curator.text.read_text_table`; the texts are not kept), the rows registered with
        ``normalize="rows"`` (they have unit norm) and the embedder's identity kept with the dataset (predictions on
        raw text verify it)."""
        check_name("dataset name", name)
        if name.startswith(DROPPED_PREFIX):
            raise InvalidInputError(f"dataset name must not start with {DROPPED_PREFIX!r}. Found {name!r}.")
        check_new_name("dataset name", name)
        if normalize not in NORMALIZE:
            raise InvalidInputError(f"normalize must be one of {NORMALIZE}. Found {normalize!r}.")
        if store not in STORES:
            raise InvalidInputError(f"store must be one of {STORES}. Found {store!r}.")
        text_meta: dict[str, Any] | None = None
        if text_column is not None:
            if declared is not None or categorical or features or normalize != "none" or store != "files":
                raise InvalidInputError("A text dataset's features are its embeddings: --schema, --categorical, "
                                        "--features, --normalize and --store do not apply with --text-column. Found "
                                        f"schema={declared is not None}, categorical={categorical!r}, "
                                        f"features={features!r}, normalize={normalize!r}, store={store!r}.")
            from lethe.curator.text import read_text_table

            with self.store.read() as s:  # embedding takes time: refuse a taken name first
                if s.scalar(select(Dataset).where(Dataset.name == name)) is not None:
                    raise ConflictError(f"A dataset named {name!r} already exists.")
            table, identity = read_text_table(path, key=key, label=label, text_column=text_column,
                                              embedder=embedder, header=header, file_format=file_format)
            text_meta = {"column": text_column, "embedder": identity}
            normalize = "rows"  # a no-op on unit rows (up to rounding); applied again at predict
        elif declared is not None:
            if categorical or features or normalize != "none":
                raise InvalidInputError("A schema declares the columns and their encoding: --categorical, "
                                        "--features and --normalize do not apply with --schema. Found "
                                        f"categorical={categorical!r}, features={features!r}, normalize={normalize!r}.")
            table = encode_with_schema(read_schema_frame(path, declared, file_format=file_format, header=header),
                                       declared, source=Path(path).name)
            key, label = str(declared.key), str(declared.label.name if declared.label is not None else "")
        else:
            table = read_table(path, key=key, label=label, features=features, header=header,
                               categorical=categorical, file_format=file_format)
        if label_classes is not None:  # declared label classes (issue 36; lethe.curator.declared)
            if declared is not None:
                raise InvalidInputError("A schema declares the label classes (label: {name, classes}): "
                                        f"--label-classes does not apply with --schema. Found {label_classes!r}.")
            check_labels(label_classes, table.y, table.label_classes)
        X = normalize_rows(table.X) if normalize == "rows" else table.X
        # the erasure log: a record erased on request never comes back with a registration of its source, under
        # this name or another (lethe.curator.erasures)
        with self.store.read() as s:
            erased, logs = erased_keys(s, self.data_dir.key_digest, name, Path(path).name, table.keys)
        keys, y_in, n_erased = table.keys, table.y, int(erased.sum())
        if n_erased:
            X, y_in = X[~erased], np.asarray(y_in)[~erased]
            keys = [k for k, gone in zip(keys, erased, strict=True) if not gone]
            log.warning("dataset %s: %d record(s) erased on request were not re-ingested (erasure log of %s)",
                        name, n_erased, ", ".join(logs))
        n, d = X.shape
        if n == 0:
            raise InvalidInputError(f"Every record of {Path(path).name!r} was erased on request "
                                    f"({n_erased} records): nothing to register.")
        with self.store.read() as s:
            if s.scalar(select(Dataset).where(Dataset.name == name)) is not None:
                raise ConflictError(f"A dataset named {name!r} already exists.")
        # the values go to the data plane (fixed-width files, one row per record); the database keeps the keys
        schema: dict[str, Any] = {"names": table.feature_names, "keys": KEYS_HASHED}
        if table.label_classes is not None:
            schema["label_classes"] = table.label_classes
        if table.categories is not None:
            schema["categories"] = table.categories
        if declared is not None:
            schema["schema"] = declared.to_dict()
        if label_classes is not None:
            schema["declared_classes"] = list(label_classes)
        if text_meta is not None:
            schema["text"] = text_meta
        classes: list[str] | None = None
        y_stored = np.asarray(y_in, dtype=np.float64) if y_in.dtype.kind != "U" else y_in
        if table.label_classes is not None:  # text labels: the table holds codes into the sorted class list
            classes = [str(c) for c in table.label_classes]
        elif y_stored.dtype.kind != "f":
            values, codes = np.unique(y_stored, return_inverse=True)
            classes, y_stored = [str(v) for v in values], codes.astype(np.float64)
        # the files are written and the registration committed under the processing lock: recovery (which destroys
        # data-plane files no dataset refers to) runs under it too, so it never sees the files of a registration in
        # flight; a crash in between leaves files nobody refers to, which the next recovery destroys
        release = self.lock.acquire(REGISTER_LOCK_TIMEOUT)
        try:
            fpath, lpath = self.matrices.write(X, y_stored, store=store)
        except BaseException:
            release()
            raise
        try:
            with self.store.write() as s, s.begin():
                if s.scalar(select(Dataset).where(Dataset.name == name)) is not None:
                    raise ConflictError(f"A dataset named {name!r} already exists.")
                ds = Dataset(name=name, n_features=d, feature_names=schema, key_column=key,
                             label_column=label, normalize=normalize, source=Path(path).name, created_at=utcnow())
                s.add(ds)
                s.flush()
                base = int(s.scalar(select(func.max(Record.id))) or 0) + 1  # record id of row 0 (row = id - base)
                # the records table holds each key's keyed digest (the one its deletion request will hold), never
                # the key: no plain key or value of this dataset reaches the database, its WAL or a dead tuple
                ds_id, digest = ds.id, self.data_dir.key_digest
                with progress_bar(progress, total=n, desc=f"import {name}", unit="rec") as bar:
                    rows = ((base + i, ds_id, digest(ds_id, k)) for i, k in enumerate(keys))
                    self.store.insert_records(s, rows, on_chunk=bar.update)
                s.add(DataPlane(dataset_id=ds.id, features_path=fpath, labels_path=lpath, row_base=base, n_rows=n,
                                n_features=d, label_classes=None if classes is None else {"classes": classes}))
                add_event(s, "dataset_registered", {"dataset": name, "n": n, "d": d, "normalize": normalize,
                                                    **({"not_reingested": n_erased} if n_erased else {})})
                ds_id = ds.id
        except BaseException:
            for rel in (fpath, lpath, *MatrixStore.companions(fpath)):
                destroy_file(self.matrices.resolve(rel))
            raise
        finally:
            release()
        log.info("registered dataset %s (id %d): %d records, %d features", name, ds_id, n, d)
        out = self.info(name)
        if n_erased:
            out["not_reingested"] = n_erased
            out["erasure_logs"] = logs
        return out

    def info(self, name: str) -> dict[str, Any]:
        """A dataset's description: size, columns, normalisation, label classes and categories."""
        with self.store.read() as s:
            ds = self.find(s, name)
            n = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id))
            return {"name": ds.name, "id": ds.id, "n_records": int(n or 0), "n_features": ds.n_features,
                    "normalize": ds.normalize, "key_column": ds.key_column, "label_column": ds.label_column,
                    "source": ds.source, "created_at": iso(ds.created_at),
                    "feature_names": list(ds.feature_names.get("names", [])),
                    "label_classes": ds.feature_names.get("label_classes"),
                    "declared_classes": declared_classes(ds.feature_names),
                    "categories": ds.feature_names.get("categories"), "schema": ds.feature_names.get("schema"),
                    "text": ds.feature_names.get("text")}

    def data_view(self, s: Any, dataset_id: int, n_features: int) -> tuple[DataView, DataPlane | None, np.ndarray]:
        """A dataset's row space: (view, its data plane or None, record id of each row).

        Datasets registered by this version live in the data plane (rows = every record ever registered; the active
        mask, read from the database in O(N), marks those present). Datasets of older stores keep their values in
        the records table: their row space is the present records, ordered by id.
        """
        plane = s.get(DataPlane, dataset_id)
        if plane is None:
            rows = s.execute(select(Record.id, Record.features, Record.label).where(Record.dataset_id == dataset_id)
                             .order_by(Record.id)).all()
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            X = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f8").reshape(len(rows), n_features)
            y = np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows))
            return DataView(X.astype(np.float64), y, np.ones(len(rows), dtype=bool)), None, ids
        X, y = self.matrices.open(plane)
        if plane.label_classes is not None:
            y = np.asarray(plane.label_classes["classes"])[y.astype(np.int64)]
        present = np.fromiter(s.scalars(select(Record.id).where(Record.dataset_id == dataset_id)), dtype=np.int64)
        active = np.zeros(plane.n_rows, dtype=bool)
        active[present - plane.row_base] = True
        return DataView(X, y, active), plane, np.arange(plane.n_rows, dtype=np.int64) + plane.row_base

    def current_data(self, s: Any, dataset_id: int, n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record ids, X, y) of the records present, ordered by id: the data every model of the dataset is for.

        Training and retraining read it: it is refused (:class:`ConflictError`) if a present record's key was
        erased on request (its done request holds the same keyed digest) — a store put back from a copy older than
        its requests — so no model is trained on a person who asked to be forgotten."""
        erased = s.scalar(select(func.count()).select_from(Record).where(
            Record.dataset_id == dataset_id, Record.key.in_(select(DeletionRequest.key_digest).where(
                DeletionRequest.dataset_id == dataset_id, DeletionRequest.status == "done"))))
        if erased:
            raise ConflictError(f"{int(erased)} present record(s) of this dataset were erased on request (their "
                                "requests are done): the store was put back from an older copy. Drop the dataset's "
                                "models and the dataset, then register it again from its source (records erased on "
                                "request are not re-ingested).")
        view, _plane, ids = self.data_view(s, dataset_id, n_features)
        if bool(np.all(view.active)):
            return ids, view.X, view.y
        return ids[view.active], active_rows(view.X, view.active), view.y[view.active]

    def drop(self, dataset: str) -> dict[str, Any]:
        """Remove a dataset: every record is deleted (``secure_delete``) and the database purged. Refused while a
        model is trained on it (drop those first: ``lethe model drop``). Its pending requests are done by this
        (their records are gone) and get a raw-deletion receipt. The dataset's row stays, renamed to a tombstone,
        because requests and certificates refer to it; its name can be registered again."""
        check_name("dataset", dataset)
        with self.lock.hold():
            self.retention.recover_locked()
            with self.store.write() as s, s.begin():
                ds = self.find(s, dataset)
                models = s.scalars(select(Model.name).where(Model.dataset_id == ds.id)).all()
                if models:
                    raise ConflictError(f"Dataset {dataset!r} has models {sorted(models)}; drop them first "
                                        f"(lethe model drop MODEL --yes).")
                now = utcnow()
                batch_id = str(uuid.uuid4())
                pending = s.scalars(select(DeletionRequest).where(
                    DeletionRequest.dataset_id == ds.id, DeletionRequest.status.in_(("pending", "waiting")))).all()
                self.publisher.dropped_dataset_receipts(s, list(pending), batch_id, now)
                n = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id)) or 0
                s.execute(Record.__table__.delete().where(Record.dataset_id == ds.id))  # type: ignore[attr-defined]
                logged = log_dataset(s, ds, dataset)  # the erasure log outlives the dataset (lethe.curator.erasures)
                ds.name = f"{DROPPED_PREFIX}{ds.id}"
                add_event(s, "records_deleted", {"batch_id": batch_id, "dataset": dataset, "count": int(n)})
                add_event(s, "dataset_dropped", {"dataset": dataset, "records": int(n), "requests_done": len(pending)})
            self.retention.purge()
        log.info("dropped dataset %s (%d records)", dataset, n)
        return {"dataset": dataset, "dropped": True, "records_deleted": int(n), "requests_done": len(pending),
                "erasures_kept": logged}


__all__ = ["DatasetCatalog"]
