"""The curator: deletion requests end to end (Chourasia & Shah 2023, Alg. 1 as a durable process).

Flow: register a dataset (records with stable keys) → train a model with a mechanism → submit deletion requests by
key → process them (immediately or in batches) → publish a new model version with one certificate per request and
model → delete the raw records, destroy the superseded versions' artifacts (and with them their secret state) and
purge the database files (SQLite: ``secure_delete``, ``VACUUM``, WAL checkpoint with truncation).

Reliability:

* a request is acknowledged only after its transaction committed (``synchronous=FULL`` on SQLite);
* processing computes new artifacts first (new files nobody refers to), then publishes everything — new versions,
  certificates, ledger events, record deletions, request states — in ONE transaction; a crash before the commit
  leaves the old version published and the requests pending, a crash after it leaves the new one;
* every entry point that changes models holds an exclusive file lock and first runs :meth:`Curator.recover`:
  unreferenced artifacts (from a crashed batch) and superseded ones are destroyed, and an unfinished purge redone.

:class:`Curator` is a facade: each method delegates to the component that does the job (see docs/architecture.md):

========================================  ==========================================================================
:mod:`lethe.curator.datadir`              the data directory and its secrets (the key pepper)
:mod:`lethe.curator.tokens`               bearer tokens and their cache
:mod:`lethe.curator.datasets`             datasets: register, describe, row spaces, drop
:mod:`lethe.curator.training`             models: train, retrain, drop
:mod:`lethe.curator.intake`               deletion intake: one decision, used set-wise (group commit) and serially
:mod:`lethe.curator.publisher`            the one place a version is published and certificates written
:mod:`lethe.curator.batches`              batch processing and warm solver state
:mod:`lethe.curator.retention`            destroy, erase, purge, recover
:mod:`lethe.curator.serving`              predict, public parameters, budget, artifact verification
:mod:`lethe.curator.views`                read views shared by the API, the CLI and the console
:mod:`lethe.curator.metrics`              Prometheus instruments (``/metrics``), updated from the ledger's new events
========================================  ==========================================================================

The curator holds no math: the mechanism is reached through :mod:`lethe.curator.adapters`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.exc import OperationalError

from lethe._rng import RandomState
from lethe.curator import certdoc, lifetime
from lethe.curator.adapters import Adapters
from lethe.curator.artifacts import ArtifactStore
from lethe.curator.batches import BatchProcessor, BatchResult
from lethe.curator.datadir import DataDirectory
from lethe.curator.dataplane import MatrixStore
from lethe.curator.datasets import DatasetCatalog
from lethe.curator.errors import InvalidInputError, StorageError, storage_message
from lethe.curator.faults import service_faults
from lethe.curator.intake import DeletionIntake
from lethe.curator.locking import ProcessingLock
from lethe.curator.metrics import CuratorMetrics
from lethe.curator.publisher import VersionPublisher
from lethe.curator.retention import Retention
from lethe.curator.serving import Serving
from lethe.curator.settings import CLI_PRINCIPAL, LOCK_FILE, Principal, Settings
from lethe.curator.store import Store, sqlite_url
from lethe.curator.tables import resolve_schema
from lethe.curator.tokens import TokenRegistry
from lethe.curator.training import ModelTrainer
from lethe.curator.views import ReadViews
from lethe.curator.wakeup import WakeSender
from lethe.families import DEFAULT_MECHANISM


class Curator:
    """The curator service over one data directory (and optionally an external database URL).

    Parameters
    ----------
    data_dir : directory holding the SQLite database (default store), the artifacts, the secrets and the logs.
        Created with mode 0700.
    database_url : SQLAlchemy URL; default ``sqlite:///<data_dir>/lethe.db``.
    settings : :class:`Settings`.
    clock : seconds since the epoch (default :func:`time.time`), for mechanisms that publish on a schedule
        (families with :attr:`~lethe.families.Capability.RELEASE_SCHEDULE`); tests pass a fake clock.

    Components (collaborators injected, each with its own public API): ``directory`` (:class:`DataDirectory`),
    ``adapters`` (:class:`~lethe.curator.adapters.Adapters`, on ``clock``), ``tokens``, ``datasets``, ``models``
    (:class:`ModelTrainer`), ``intake``, ``publisher``, ``batches``, ``retention``, ``serving``, ``views``.
    """

    def __init__(self, data_dir: str | Path, database_url: str | None = None, settings: Settings | None = None,
                 *, clock: Callable[[], float] | None = None) -> None:
        self.directory = DataDirectory(data_dir, own_database=database_url is None)
        self.data_dir = self.directory.path
        self._settings = settings or Settings()
        self.store = Store(database_url or sqlite_url(self.data_dir))
        try:
            self.store.create()
        except OperationalError as exc:
            self.store.dispose()
            raise StorageError(storage_message(exc, self.data_dir)) from None
        self.artifacts = ArtifactStore(self.data_dir)
        _ = self.artifacts.key  # created (0600) with the data directory, so that backups of secrets/ include it
        self.matrices = MatrixStore(self.data_dir)
        self.lock = ProcessingLock(self.data_dir / LOCK_FILE)
        self.work_available = threading.Event()  # set when a request is committed: wakes an embedded worker
        self._wake = WakeSender(self.data_dir)  # ... and a worker process, through <data_dir>/worker.sock
        self.tokens = TokenRegistry(self.store, self.directory)
        self.serving = Serving(self.store, self.artifacts, self.data_dir)
        self.retention = Retention(self.store, self.artifacts, self.matrices, self.data_dir, self.lock, self.serving)
        self.publisher = VersionPublisher(self.store, self.artifacts,
                                          # resolved once, at the first batch (the key file is created then)
                                          signer=functools.cache(lambda: certdoc.service_key(self.data_dir)))
        self.datasets = DatasetCatalog(self.store, self.matrices, self.directory, self.lock, self.retention,
                                       self.publisher)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds. Found {type(clock).__name__}.")
        self.adapters = Adapters() if clock is None else Adapters(clock)
        self.models = ModelTrainer(self.store, self.adapters, self.artifacts, self.lock, self.datasets,
                                   self.publisher, self.retention, self.serving)
        self.batches = BatchProcessor(self.store, self.adapters, self._settings, self.artifacts, self.matrices,
                                      self.lock, self.datasets, self.publisher, self.retention, self.serving)
        self.views = ReadViews(self.store, self._settings, self.data_dir, self.serving, self.retention,
                               lambda: len(self.batches.warm))
        self.prometheus = CuratorMetrics(self.store, self._metric_probes)  # GET /metrics: a registry per curator
        self.intake = DeletionIntake(self.store, self.directory, self.views, self._notify_work)

    @property
    def settings(self) -> Settings:
        """The processing settings (replacing them applies to the next batch)."""
        return self._settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        if not isinstance(value, Settings):
            raise TypeError(f"settings must be a Settings. Found {type(value).__name__}.")
        self._settings = self.batches.settings = self.views.settings = value

    def close(self) -> None:
        """Release database connections."""
        self._wake.close()
        self.store.dispose()

    def _metric_probes(self) -> tuple[int, bool, bool]:
        """What ``/metrics`` reads at each scrape: artifact and dataset faults (cached per file stamp), whether the
        storage cannot be written, whether a purge is pending."""
        faults = len(service_faults(self.serving, self.store, self.retention))
        return faults, self.retention.storage.probe() is not None, self.retention.purge_pending()

    def _notify_work(self) -> None:
        """A request was committed: wake a worker thread of this process and a worker process on this data
        directory (:mod:`lethe.curator.wakeup`)."""
        self.work_available.set()
        self._wake.send()

    def key_digest(self, dataset_id: int, key: str) -> str:
        """HMAC-SHA256 of (dataset, key) under the secret pepper: how a request refers to its key."""
        return self.directory.key_digest(dataset_id, key)

    # -- tokens -----------------------------------------------------------------------------------------------------
    def create_token(self, name: str, scope: str) -> str:
        """Create a bearer token; returns it (shown once; only its SHA-256 is stored)."""
        return self.tokens.create(name, scope)

    def revoke_token(self, name: str) -> None:
        """Revoke a token by name."""
        self.tokens.revoke(name)

    def list_tokens(self) -> list[dict[str, Any]]:
        """Names, scopes and states of the tokens (never the tokens)."""
        return self.tokens.describe()

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token, else None (:meth:`TokenRegistry.authenticate`)."""
        return self.tokens.authenticate(token)

    def cached_principal(self, token: str) -> Principal | None:
        """The principal of a token verified recently, else None — without a database read
        (:meth:`TokenRegistry.cached_principal`)."""
        return self.tokens.cached_principal(token)

    # -- datasets and models ------------------------------------------------------------------------------------------
    def register_dataset(self, name: str, path: str | Path, *, key: str | None = None, label: str | None = None,
                         features: list[str] | None = None, normalize: str = "none",
                         progress: bool = False, header: bool = True, categorical: list[str] | None = None,
                         file_format: str | None = None, store: str = "files",
                         schema: Any = None, text_column: str | None = None,
                         embedder: str = "minilm", label_classes: Any = None) -> dict[str, Any]:
        """Register a dataset from CSV, Parquet or ``.npz``; all records are inserted in one transaction.

        ``store``: ``"files"`` (fixed-width files) or ``"zarr"`` (a Zarr store computed on a Dask cluster,
        :mod:`lethe.curator.dask_plane`).

        ``header``, ``categorical`` (one-hot encoded columns), ``file_format``: see
        :func:`lethe.curator.tables.read_table`. String labels are mapped to 0, 1, ... (sorted); the classes and
        categories are kept with the dataset (``dataset_info``).

        ``schema`` (a path to a YAML/JSON schema, a mapping or a :class:`lethe.schema.Schema`; recommended for
        tables): the rows are encoded by :class:`lethe.preprocessing.SchemaEncoder` — nothing of the encoding is
        learned from the rows — and the schema is kept with the dataset (public). The key and label columns are the
        schema's (``key`` may name the key column when the schema's is null; a ``label`` other than the schema's is
        refused).

        ``text_column`` (with ``embedder``, default ``"minilm"``): a column of raw text, embedded by the declared
        public embedder (:mod:`lethe.curator.text`); the embeddings are the features, the texts are not kept.

        ``label_classes`` (``--label-classes``; a list or ``"A,B"``): the label classes, declared from public
        knowledge (without a schema; a schema declares its own). A model served to model-readers needs them
        (:mod:`lethe.curator.declared`); every row's label must be one of them."""
        from lethe.curator.declared import parse_label_classes

        classes = parse_label_classes(label_classes)
        if classes is not None and schema is not None:
            raise InvalidInputError("A schema declares the label classes (label: {name, classes}): --label-classes "
                                    f"does not apply with --schema. Found {label_classes!r}.")
        declared = resolve_schema(schema, key=key, label=label) if schema is not None else None
        if declared is None and (key is None or label is None):
            missing = [n for n, v in (("key", key), ("label", label)) if v is None]
            raise InvalidInputError(f"key and label (--key, --label) are required without a schema (--schema). "
                                    f"Missing: {', '.join(missing)}.")
        assert declared is not None or (key is not None and label is not None)
        return self.datasets.register(name, path, key=key or "", label=label or "", features=features,
                                      normalize=normalize, progress=progress, header=header,
                                      categorical=categorical, file_format=file_format, store=store,
                                      declared=declared, text_column=text_column, embedder=embedder,
                                      label_classes=classes)

    def dataset_info(self, name: str) -> dict[str, Any]:
        """A dataset's description: size, columns, normalisation, label classes and categories."""
        return self.datasets.info(name)

    def drop_dataset(self, dataset: str) -> dict[str, Any]:
        """Remove a dataset: every record is deleted (``secure_delete``) and the database purged. Refused while a
        model is trained on it (drop those first: ``lethe model drop``). Its pending requests are done by this
        (their records are gone) and get a raw-deletion receipt. The dataset's row stays, renamed to a tombstone,
        because requests and certificates refer to it; its name can be registered again."""
        return self.datasets.drop(dataset)

    def train(self, dataset: str, model: str, *, mechanism: str = DEFAULT_MECHANISM,
              params: dict[str, Any] | None = None, random_state: RandomState = None,
              progress: bool = False, heldout: str | None = None, serve_unreleased: bool = False) -> dict[str, Any]:
        """Train model ``model`` on the current records of ``dataset`` and publish its version 1.

        ``random_state`` seeds the secret perturbation: use it in tests only (a known seed reveals b).
        ``heldout``: another registered dataset with the same features (a test file registered with the same
        schema); the result reports version 1's accuracy on it (``heldout``), and the console records and plots
        every later version's. A dataset registered with a schema gets the tabular defaults
        (the adapter's ``tabular_defaults``, e.g. an intercept) where ``params`` do not say otherwise.

        ``serve_unreleased``: the operator's explicit opt-in to serve model-readers the predictions and weights of a
        model whose certificates cover ONE published version (every family without
        :attr:`~lethe.families.Capability.PRIVATE_RELEASES`): an
        observer of consecutive versions can identify deleted records (docs/release_privacy.md). Stored with the
        model, recorded in the ledger's ``train`` event, shown in the console. Refused for a mechanism whose
        releases are served anyway.
        """
        return self.models.train(dataset, model, mechanism=mechanism, params=params, random_state=random_state,
                                 progress=progress, heldout=heldout, serve_unreleased=serve_unreleased)

    def retrain(self, model: str, *, random_state: RandomState = None,
                serve_unreleased: bool | None = None) -> dict[str, Any]:
        """Repair or refresh a model: train it again on the dataset's current records with its mechanism and
        parameters and a fresh secret perturbation, and publish the result as the next version (the old version's
        artifact is destroyed; its file is never read, so this works when it is missing or fails verification).

        Certificate: kind ``train`` for the new version (Guo et al. 2020, Alg. 2: retraining from scratch resets
        the residual bound). Pending requests stay pending and are processed against the new version.

        ``serve_unreleased``: None keeps the model's stored choice; True or False sets it (see :meth:`train`), and
        the ledger's ``retrain`` event records it.
        """
        return self.models.retrain(model, random_state=random_state, serve_unreleased=serve_unreleased)

    def drop_model(self, model: str) -> dict[str, Any]:
        """Remove a model: its versions' rows go in one transaction, then every artifact of it (with the secret
        perturbation) is destroyed — overwritten, flushed, unlinked; a crash in between leaves files no row refers
        to, which the next recovery destroys. Certificates already issued stay (their ``model`` then reads null) and
        the ledger records ``model_dropped``. Pending requests of the dataset are then processed without it."""
        return self.models.drop(model)

    # -- deletion requests ------------------------------------------------------------------------------------------
    def submit_deletion(self, dataset: str, key: str, *, principal: Principal = CLI_PRINCIPAL,
                        client_request_id: str | None = None) -> tuple[dict[str, Any], bool]:
        """Record a deletion request; returns (request view, created). Acknowledged only once committed.

        Idempotent under ``client_request_id``: the same id with the same dataset and key returns the existing
        request (created=False); the same id with another deletion is a :class:`ConflictError`.
        A repeat by the same requester returns its own request (created=False). A key the dataset does not hold —
        never held, or already deleted by anyone — gets a new request, done at once with outcome "no record held"
        and no certificate: the same answer for both, so nobody but the owner of an earlier request learns whether
        a key was deleted (issue 26's key-status oracle). A key pending under another requester's request gets a
        new pending request that completes (or fails) with that request's batch (:func:`lethe.curator.intake.decide`).

        Uniqueness is enforced by the database (``uq_client_request``, ``uq_live_request_key``), so concurrent
        submissions on PostgreSQL cannot both be accepted: the loser's insert fails and it is answered as if it had
        come second (the existing request, or a new request that follows it).

        Group commit: concurrent submissions of this process are queued and written by one transaction (one
        fsync) per group, each in a savepoint of its own, in arrival order — so each gets the answer it would have
        got had the group's submissions been made one after the other, and one refused submission does not touch
        the others. A submission returns only after its group's commit. If the group's transaction fails as a
        whole (e.g. the disk is full), every member is retried in a transaction of its own and gets its own answer.
        """
        return self.intake.submit_deletion(dataset, key, principal, client_request_id)

    def submit_deletions(self, submissions: list[tuple[str, str, Principal, str | None]]
                         ) -> list[tuple[dict[str, Any], bool] | Exception]:
        """Several submissions (dataset, key, principal, client request id) written as one group: each gets
        the answer :meth:`submit_deletion` would give it — its (view, created), or the exception it would raise —
        as if they had been made one after the other in this order. For a server's intake thread, which collects
        the submissions that arrive while the previous group commits: the group is committed at once, not queued
        again behind :meth:`submit_deletion`'s group commit (each submission is batched once)."""
        return self.intake.submit_deletions(submissions)

    # -- processing -------------------------------------------------------------------------------------------------
    def process_pending(self, *, force: bool = False, max_batches: int | None = None, progress: bool = False,
                        lock_timeout: float | None = 60.0,
                        keep_going: Callable[[], bool] | None = None) -> list[BatchResult]:
        """Process the pending requests whose batch is due (all of them with ``force``).

        A dataset's batch is due when it has ``batch_size`` pending requests or its oldest one has waited
        ``max_delay`` seconds. Returns one :class:`BatchResult` per batch published or failed (a batch the mechanism
        fails on is split, and each part has its own result; ``max_batches`` counts the batches taken from the
        queue, not their parts). ``keep_going()`` is asked after each batch: False ends the run there (the worker:
        its server is gone, or another process waits for the processing lock).
        """
        return self.batches.process_pending(force=force, max_batches=max_batches, progress=progress,
                                            lock_timeout=lock_timeout, keep_going=keep_going)

    def warm_up(self) -> int:
        """Build the warm state of every model that keeps one (after a start: once, before the first batch, so that
        no request waits for it). Returns the number of models made warm. The signing key the batches sign
        certificates with is loaded (created on first use) here too, outside any batch."""
        if self.publisher.signer is not None:
            self.publisher.signer()
        return self.batches.warm_up()

    def warm_state(self) -> tuple[tuple[int, Any], ...]:
        """(model id, version id) of every model whose solver state this process keeps."""
        return self.batches.warm.state()

    # -- retention ----------------------------------------------------------------------------------------------------
    def purge(self, attempts: int = 20, *, erase: dict[int, np.ndarray | None] | None = None,
              destroyed: list[tuple[int, int, str]] | None = None) -> bool:
        """Make deleted records unrecoverable from the files under the data directory (:meth:`Retention.purge`)."""
        return self.retention.purge(attempts, erase=erase, destroyed=destroyed)

    def purge_pending(self) -> bool:
        """True if records were deleted after the last completed purge."""
        return self.retention.purge_pending()

    def recover(self) -> dict[str, int]:
        """Finish what a crash interrupted (takes the processing lock; :meth:`Retention.recover_locked`)."""
        return self.retention.recover()

    # -- serving and integrity ----------------------------------------------------------------------------------------
    def predict(self, model: str, features: Any = None, *, records: Any = None, texts: Any = None,
                principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """Predictions of the published version of ``model`` for rows ``features`` (n × d numbers) or, for a model
        of a dataset registered with a schema, raw ``records`` (objects with the schema's columns), or for a text
        dataset raw ``texts`` (embedded by its recorded embedder).

        Served to a non-admin ``principal`` (a model-reader) only from a model whose guarantee covers an observer of
        every published release (:attr:`~lethe.families.Capability.PRIVATE_RELEASES`), or one an operator opted in at
        training
        (``serve_unreleased``); otherwise :class:`~lethe.curator.errors.UnreleasedModelError`
        (:meth:`Serving.check_served`)."""
        return self.serving.predict(model, features, records=records, texts=texts, operator=principal.is_admin)

    def public_model(self, model: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """The published version's public parameters (the weights; never a secret array such as Guo et al.'s
        perturbation b), with what a user needs to apply them: feature names, normalisation, label classes.
        Refused to a non-admin ``principal`` as :meth:`predict` is."""
        return self.serving.public_model(model, operator=principal.is_admin)

    def budget(self, model: str) -> dict[str, Any]:
        """Budget status of a model's published version (public numbers only)."""
        return self.serving.budget(model)

    def privacy_ledger(self, dataset: str) -> dict[str, Any]:
        """The dataset's privacy ledger: the lifetime ε of a record held throughout, over every release of every
        model trained on it, its budget and its streams (:mod:`lethe.curator.lifetime`)."""
        return lifetime.ledger_of(self.store, self.datasets, dataset)

    def declare_label_classes(self, dataset: str, label_classes: Any) -> dict[str, Any]:
        """Declare the label classes of a dataset registered without them (``lethe dataset declare D
        --label-classes A,B``; :func:`lethe.curator.declared.declare_label_classes`)."""
        from lethe.curator.declared import declare_label_classes

        return declare_label_classes(self.store, self.lock, self.datasets, dataset, label_classes)

    def record_exposure(self, dataset: str, key: str) -> dict[str, Any]:
        """What the record with ``key`` was exposed to (operators only: ``lethe budget --dataset D --key K``): per
        stream of the dataset, the releases that held it, and their ε (:mod:`lethe.curator.exposure`)."""
        from lethe.curator.exposure import exposure_of_key

        return exposure_of_key(self.store, self.datasets, self.key_digest, dataset, key)

    def set_lifetime_budget(self, dataset: str, epsilon: float, delta: float | None = None) -> dict[str, Any]:
        """Set the dataset's lifetime budget (:func:`lethe.curator.lifetime.set_dataset_budget`)."""
        return lifetime.set_dataset_budget(self.store, self.lock, self.datasets, dataset, epsilon, delta)

    def verify_models(self) -> list[dict[str, Any]]:
        """Check every published version's artifact; return the faults for operators (:meth:`Serving.verify_models`)."""
        return self.serving.verify_models()

    # -- read views ---------------------------------------------------------------------------------------------------
    def request_status(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """A request's state; a requester sees only its own requests (others are reported as unknown)."""
        return self.views.request_status(request_id, principal=principal)

    def list_requests(self, principal: Principal = CLI_PRINCIPAL, *, status: str | None = None,
                      dataset: str | None = None, request_id: str | None = None, requester: str | None = None,
                      limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """Deletion requests, newest first, one page at a time (:meth:`ReadViews.list_requests`)."""
        return self.views.list_requests(principal, status=status, dataset=dataset, request_id=request_id,
                                        requester=requester, limit=limit, cursor=cursor)

    def certificate(self, certificate_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """One certificate by id (a requester: only those of its own requests)."""
        return self.views.certificate(certificate_id, principal=principal)

    def request_certificates(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> list[dict[str, Any]]:
        """The certificates of one request (one per model of its dataset, or a deletion receipt)."""
        return self.views.request_certificates(request_id, principal=principal)

    def model_versions(self, model: str) -> list[dict[str, Any]]:
        """A model's version history, oldest first (:meth:`ReadViews.model_versions`)."""
        return self.views.model_versions(model)

    def mechanisms_in_use(self) -> tuple[str, ...]:
        """The mechanisms of the store's models, sorted (:meth:`ReadViews.mechanisms_in_use`)."""
        return self.views.mechanisms_in_use()

    def status(self) -> dict[str, Any]:
        """Datasets, models and request counts."""
        return self.views.status()

    def metrics(self) -> dict[str, Any]:
        """Numbers for monitoring (:meth:`ReadViews.metrics`): counts, delays and budgets only."""
        return self.views.metrics()

    def ledger(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent ledger events (newest last)."""
        return self.views.ledger(limit)

    def pending_count(self) -> int:
        """The number of pending requests."""
        return self.views.pending_count()


__all__ = ["CLI_PRINCIPAL", "BatchResult", "Curator", "Principal", "Settings"]
