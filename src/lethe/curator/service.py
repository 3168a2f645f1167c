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

The curator holds no math: the mechanism is reached through :mod:`lethe.curator.adapters`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import logging
import math
import os
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from lethe._rng import RandomState, check_random_state
from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import Artifact, ArtifactError, ArtifactStore, destroy_file
from lethe.curator.dask_plane import active_rows
from lethe.curator.dataplane import STORES, DataPlane, DataView, MatrixStore
from lethe.curator.public import check_payload, public_certificate, public_error, requester_error
from lethe.curator.store import (
    DB_FILENAME,
    CertificateRow,
    Dataset,
    DeletionRequest,
    LedgerEvent,
    Model,
    ModelVersion,
    Record,
    Store,
    Token,
    add_event,
    as_utc,
    iso,
    sqlite_url,
    utcnow,
)
from lethe.curator.tables import MAX_KEY_LENGTH, normalize_rows, read_table
from lethe.curator.wakeup import WakeSender, read_state
from lethe.exceptions import LetheError
from lethe.io import write_bytes_atomic

log = logging.getLogger("lethe.curator")

SCOPES = ("admin", "requester")
REQUEST_STATUSES = ("pending", "done", "failed")
KEYS_HASHED = "hmac-sha256"  # Dataset.feature_names["keys"]: the records table holds key digests, not keys
DROPPED_PREFIX = "~dropped~"  # a dropped dataset's row keeps this name (requests and certificates refer to it)
NORMALIZE = ("none", "rows")
LOCK_FILE = "processing.lock"
SECRETS_DIR = "secrets"
LOG_DIR = "logs"
TOKEN_STAMP = "tokens.stamp"
TOKEN_CACHE_SECONDS = 5.0  # longest a verified token stays cached without a look at the database


# -- errors (the HTTP API maps them to status codes) ----------------------------------------------------------------


def _log_group_failure(size: int, exc: BaseException) -> None:
    """Log that a group of submissions failed as a whole, naming only the exception's type: its message or
    traceback (a database error's SQL parameters) can carry the group's record positions and key digests, which no
    log line may (``lethe.curator.public``)."""
    log.warning("a group of %d deletion submissions failed as a whole (%s); each is retried alone", size,
                type(exc).__name__)

class _NoBar:
    """The stand-in for a progress bar where none is shown."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None


def _progress_bar(progress: bool, **kwargs: Any) -> Any:
    """A tqdm bar if ``progress``, else a no-op one.

    tqdm's constructor takes ``tqdm.get_lock()`` even when the bar is disabled, and that lock is a
    ``multiprocessing`` RLock shared with every process forked after it was made. A worker killed (SIGKILL, OOM)
    while holding it would leave every other process of the service hanging at its next bar, so the unattended
    paths (the worker, the server) never construct one.
    """
    if not progress:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(**kwargs)


class CuratorError(LetheError, ValueError):
    """A request the curator refuses; nothing was changed."""

    status_code = 400


class NotFoundError(CuratorError):
    """Unknown dataset, model, key, request or certificate."""

    status_code = 404


class ConflictError(CuratorError):
    """A repeated request, a name already in use, or a request id reused for a different deletion."""

    status_code = 409


class PermissionDeniedError(CuratorError):
    """The caller's scope does not allow this."""

    status_code = 403


class InvalidInputError(CuratorError):
    """A malformed value (wrong feature dimension, bad parameter)."""

    status_code = 422


class BusyError(CuratorError):
    """Another process holds the processing lock."""

    status_code = 503


class StorageError(CuratorError):
    """The data directory or the database cannot be written (full disk, read-only file system, permissions)."""

    status_code = 507


def storage_message(exc: BaseException, data_dir: Path) -> str:
    """A clear message for a storage failure (for operators: it names the directory, never data)."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or "disk is full" in text or "no space" in text:
        return f"The storage under {data_dir} is full: free space, then retry. Nothing was changed."
    if code == errno.EROFS or "readonly" in text or "read-only" in text:
        return f"The storage under {data_dir} is read-only: lethe needs to write there. Nothing was changed."
    if code in (errno.EACCES, errno.EPERM) or "permission" in text or "not writable" in text:
        return (f"The data directory {data_dir} is not writable by this user: lethe needs to own it (mode 0700). "
                "Nothing was changed.")
    if "unable to open database" in text:
        return f"The database under {data_dir} cannot be opened (missing directory or permissions)."
    return f"The storage under {data_dir} failed ({type(exc).__name__}); see the server log."


class ServiceFaultError(CuratorError):
    """The service cannot answer because of a fault an operator must fix (e.g. an artifact failed verification).
    The message is generic: no paths, no checksums; operators see the fault in ``lethe status``."""

    status_code = 503


# -- settings and views -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Processing settings.

    batch_size : at most this many requests of one dataset are removed as one batch (one new model version); the
        budget may cap a batch lower (see ``budget_share``).
    max_delay : seconds a pending request may wait for others to fill a batch; 0 processes at once.
    poll_interval : seconds between the worker's looks at the queue.
    max_attempts : a request the mechanism fails on this many times, alone, is marked ``failed`` (a failed batch of
        several requests is split first; see :meth:`Curator._process_batch`).
    budget_share : a batch is kept small enough that its extrapolated remainder spends at most this share of the
        budget left (:meth:`Curator._budget_cap`); 1 disables the cap.
    """

    batch_size: int = 256
    max_delay: float = 0.0
    poll_interval: float = 0.5
    max_attempts: int = 3
    budget_share: float = 0.02

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1. Found {self.batch_size!r}.")
        for name in ("max_delay", "poll_interval"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0. Found {v!r}.")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1. Found {self.max_attempts!r}.")
        if not isinstance(self.budget_share, int | float) or not 0 < self.budget_share <= 1:
            raise ValueError(f"budget_share must be a number in (0, 1]. Found {self.budget_share!r}.")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and scope (the CLI acts as ``Principal("cli", "admin")``)."""

    name: str
    scope: str

    @property
    def is_admin(self) -> bool:
        return self.scope == "admin"


CLI_PRINCIPAL = Principal("cli", "admin")


@dataclass(frozen=True)
class BatchResult:
    """What one processed batch did."""

    batch_id: str
    dataset: str
    request_ids: tuple[str, ...]
    status: str  # "done" | "retry" | "failed"
    new_versions: dict[str, int] = field(default_factory=dict)  # model name -> version number
    error: str | None = None


def _encode_cursor(at: Any, rid: str) -> str:
    """An opaque page cursor: the (submitted_at, id) of the last item shown."""
    import base64
    import json

    u = as_utc(at)
    raw = json.dumps([u.isoformat() if u is not None else None, rid]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: Any) -> tuple[Any, str]:
    import base64
    import datetime as dt
    import json

    try:
        if not isinstance(cursor, str) or len(cursor) > 200:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, rid = json.loads(raw)
        at = dt.datetime.fromisoformat(at_text)
        if not isinstance(rid, str):
            raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise InvalidInputError("cursor must be the next_cursor of a previous page.") from None
    # stored naive UTC on SQLite, aware on PostgreSQL: compare like with like
    return (at.replace(tzinfo=None) if at.tzinfo is not None else at), rid


# -- the processing lock ----------------------------------------------------------------------------------------------
class ProcessingLock:
    """An exclusive ``flock`` on ``<data_dir>/processing.lock`` (released by the OS if the holder dies), plus a
    re-entrant thread lock so threads of one process (the API server and its embedded worker) take turns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0

    @contextlib.contextmanager
    def hold(self, timeout: float | None = 60.0) -> Iterator[None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._thread_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise BusyError(f"Another thread is processing {self.path.parent}; gave up after {timeout} s.")
        try:
            if self._depth == 0:
                self._fd = self._acquire_file(deadline, timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None
        finally:
            self._thread_lock.release()

    def _acquire_file(self, deadline: float | None, timeout: float | None) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    raise BusyError(f"Another process is processing {self.path.parent}; "
                                    f"gave up after {timeout} s.") from None
                time.sleep(0.05)


def _cli_hint(message: str) -> str:
    """Name the curator's option, not the estimator's, in a mechanism's refusal."""
    return re.sub(r"ask for row normalisation \([^)]*\)",
                  "register the dataset with row normalisation (`lethe dataset add ... --normalize rows`; "
                  "Python: Curator.register_dataset(..., normalize='rows'))", message)


def _check_unicode(kind: str, value: str) -> None:
    """Refuse text that is not valid Unicode (lone surrogates such as ``\\ud800`` cannot be encoded as UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{kind} must be valid Unicode text; it contains a lone surrogate code point.") \
            from None
def _seconds_between(start: Any, end: Any) -> float | None:
    """Seconds from ``start`` to ``end`` (stored timestamps), or None if either is missing."""
    a, b = as_utc(start), as_utc(end)
    return None if a is None or b is None else max((b - a).total_seconds(), 0.0)


def _check_name(kind: str, value: Any, max_len: int = 200) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{kind} must be a string. Found {type(value).__name__}.")
    _check_unicode(kind, value)
    if not value or value.strip() != value or len(value) > max_len or any(ord(c) < 32 for c in value):
        raise InvalidInputError(f"{kind} must be 1 to {max_len} printable characters without surrounding spaces. "
                                f"Found {value[:60]!r}{'...' if len(value) > 60 else ''}.")
    return value


# what a batch reads of its requests (rows, not ORM objects: a batch of hundreds costs no object loading)
_REQ_COLUMNS = (DeletionRequest.id, DeletionRequest.record_id, DeletionRequest.status, DeletionRequest.submitted_at)
_PENDING = InvalidInputError("not answered yet")  # a placeholder in Curator.submit_deletions


@dataclass(eq=False, slots=True)
class _NewRequest:
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
class _Submission:
    """One deletion submission waiting in a group commit (:meth:`Curator._join_group`)."""

    dataset: str
    key: str
    principal: Principal
    client_request_id: str | None
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead the next group
    alone: bool = False  # its group failed as a whole: the caller submits it in a transaction of its own
    result: tuple[dict[str, Any], bool] | None = None
    error: CuratorError | None = None


class Curator:
    """The curator service over one data directory (and optionally an external database URL).

    Parameters
    ----------
    data_dir : directory holding the SQLite database (default store), the artifacts, the secrets and the logs.
        Created with mode 0700.
    database_url : SQLAlchemy URL; default ``sqlite:///<data_dir>/lethe.db``.
    settings : :class:`Settings`.
    """

    def __init__(self, data_dir: str | Path, database_url: str | None = None, settings: Settings | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.settings = settings or Settings()
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            # owner-only even if the directory existed before (mkdir's mode applies only to new directories)
            os.chmod(self.data_dir, 0o700)
            for sub in (SECRETS_DIR, LOG_DIR):
                (self.data_dir / sub).mkdir(mode=0o700, exist_ok=True)
                os.chmod(self.data_dir / sub, 0o700)
            if not os.access(self.data_dir, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable", str(self.data_dir))
            if database_url is None:  # the database holds raw records: owner-only from the start (WAL/SHM inherit)
                db = self.data_dir / DB_FILENAME
                os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            raise StorageError(storage_message(exc, self.data_dir)) from None
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
        self._warm: dict[int, Any] = {}  # model id -> WarmModel (solver state kept between batches)
        self._batch_caps: dict[int, int] = {}  # dataset id -> batch size the budget allows (see _budget_cap)
        self.work_available = threading.Event()  # set when a request is committed: wakes an embedded worker
        self._wake = WakeSender(self.data_dir)  # ... and a worker process, through <data_dir>/worker.sock
        self._group_mutex = threading.Lock()  # group commit of submissions (see _join_group)
        self._group_queue: list[_Submission] = []
        self._group_busy = False
        self._pepper = self._load_pepper()
        self._token_mutex = threading.Lock()
        self._token_cache: dict[str, Principal] = {}  # sha256 of a verified token -> its principal
        self._token_cache_stamp: tuple[int, int, int] | None = None
        self._token_cache_at = -math.inf
        self._public_cache: dict[int, Artifact] = {}
        # model id -> (version id, checksum, file stamp) of its published artifact's last successful verification:
        # one entry per model, replaced when a new version is published (keyed by version, it grew by one entry per
        # batch for the life of the process)
        self._verified: dict[int, tuple[Any, ...]] = {}
        self._logged_faults: tuple[Any, ...] = ()

    def close(self) -> None:
        """Release database connections."""
        self._wake.close()
        self.store.dispose()

    def _notify_work(self) -> None:
        """A request was committed: wake a worker thread of this process and a worker process on this data
        directory (:mod:`lethe.curator.wakeup`)."""
        self.work_available.set()
        self._wake.send()

    # -- secrets ----------------------------------------------------------------------------------------------------
    def _load_pepper(self) -> bytes:
        path = self.data_dir / SECRETS_DIR / "key_pepper"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            data = path.read_bytes()
            if len(data) < 32:
                raise RuntimeError(f"{path} is damaged: expected 32 secret bytes, found {len(data)}.") from None
            return data
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
        return path.read_bytes()

    def key_digest(self, dataset_id: int, key: str) -> str:
        """HMAC-SHA256 of (dataset, key) under the secret pepper: how a request refers to its key."""
        return hmac.digest(self._pepper, f"{dataset_id}\x00{key}".encode(), "sha256").hex()

    # -- tokens -----------------------------------------------------------------------------------------------------
    def create_token(self, name: str, scope: str) -> str:
        """Create a bearer token; returns it (shown once; only its SHA-256 is stored)."""
        _check_name("token name", name)
        if scope not in SCOPES:
            raise InvalidInputError(f"scope must be one of {SCOPES}. Found {scope!r}.")
        token = f"lethe_{secrets.token_urlsafe(32)}"
        with self.store.write() as s, s.begin():
            if s.scalar(select(Token).where(Token.name == name)) is not None:
                raise ConflictError(f"A token named {name!r} already exists.")
            s.add(Token(name=name, digest=hashlib.sha256(token.encode()).hexdigest(), scope=scope, created_at=utcnow()))
            add_event(s, "token_created", {"name": name, "scope": scope})
        self._touch_token_stamp()
        return token

    def revoke_token(self, name: str) -> None:
        """Revoke a token by name."""
        with self.store.write() as s, s.begin():
            tok = s.scalar(select(Token).where(Token.name == name))
            if tok is None:
                raise NotFoundError(f"No token named {name!r}.")
            tok.revoked = True
            add_event(s, "token_revoked", {"name": name})
        self._touch_token_stamp()

    def list_tokens(self) -> list[dict[str, Any]]:
        """Names, scopes and states of the tokens (never the tokens)."""
        with self.store.read() as s:
            return [{"name": t.name, "scope": t.scope, "revoked": t.revoked, "created_at": iso(t.created_at)}
                    for t in s.scalars(select(Token).order_by(Token.id))]

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token, else None (constant-time comparison of digests).

        Verified tokens are cached in memory (digest → principal), so a request costs no database read. The cache
        is dropped whenever the token stamp (``secrets/tokens.stamp``, replaced by every token creation and
        revocation of any process on this data directory, after its commit) changes, and at the latest after
        ``TOKEN_CACHE_SECONDS`` (a revocation made behind lethe's back, in SQL, takes effect within that time).
        Unknown tokens are not cached (the cache cannot be grown by guessing)."""
        if not isinstance(token, str) or not token or len(token) > 200:
            return None
        hit, digest, stamp = self._cached(token)
        if hit is not None:
            return hit
        with self.store.read() as s:
            tok = s.scalar(select(Token).where(Token.digest == digest))
            if tok is None or tok.revoked or not hmac.compare_digest(tok.digest, digest):
                return None
            principal = Principal(tok.name, tok.scope)
        with self._token_mutex:
            if self._token_cache_stamp == stamp:  # not if a revocation happened meanwhile
                self._token_cache[digest] = principal
        return principal

    def cached_principal(self, token: str) -> Principal | None:
        """The principal of a token verified recently (see :meth:`authenticate`), else None — without a database
        read: None means "ask :meth:`authenticate`", not "refused"."""
        if not isinstance(token, str) or not token or len(token) > 200:
            return None
        return self._cached(token)[0]

    def _cached(self, token: str) -> tuple[Principal | None, str, tuple[int, int, int] | None]:
        digest = hashlib.sha256(token.encode()).hexdigest()
        stamp = self._token_stamp()
        now = time.monotonic()
        with self._token_mutex:
            if stamp != self._token_cache_stamp or now - self._token_cache_at > TOKEN_CACHE_SECONDS:
                self._token_cache.clear()
                self._token_cache_stamp, self._token_cache_at = stamp, now
            return self._token_cache.get(digest), digest, stamp

    def _token_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.data_dir / SECRETS_DIR / TOKEN_STAMP)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _touch_token_stamp(self) -> None:
        """Replace the token stamp (a new inode each time): every process's token cache is dropped."""
        write_bytes_atomic(self.data_dir / SECRETS_DIR / TOKEN_STAMP, uuid.uuid4().bytes, mode=0o600, fsync=False)
        with self._token_mutex:
            self._token_cache.clear()
            self._token_cache_stamp = (-1, -1, -1)  # matches no stamp: a check in flight caches nothing

    # -- datasets ---------------------------------------------------------------------------------------------------
    def register_dataset(self, name: str, path: str | Path, *, key: str, label: str,
                         features: list[str] | None = None, normalize: str = "none",
                         progress: bool = False, header: bool = True, categorical: list[str] | None = None,
                         file_format: str | None = None, store: str = "files") -> dict[str, Any]:
        """Register a dataset from CSV, Parquet or ``.npz``; all records are inserted in one transaction.

        ``store``: ``"files"`` (fixed-width files) or ``"zarr"`` (a Zarr store computed on a Dask cluster,
        :mod:`lethe.curator.dask_plane`).

        ``header``, ``categorical`` (one-hot encoded columns), ``file_format``: see
        :func:`lethe.curator.tables.read_table`. String labels are mapped to 0, 1, ... (sorted); the classes and
        categories are kept with the dataset (``dataset_info``)."""
        _check_name("dataset name", name)
        if name.startswith(DROPPED_PREFIX):
            raise InvalidInputError(f"dataset name must not start with {DROPPED_PREFIX!r}. Found {name!r}.")
        if normalize not in NORMALIZE:
            raise InvalidInputError(f"normalize must be one of {NORMALIZE}. Found {normalize!r}.")
        if store not in STORES:
            raise InvalidInputError(f"store must be one of {STORES}. Found {store!r}.")
        table = read_table(path, key=key, label=label, features=features, header=header, categorical=categorical,
                           file_format=file_format)
        X = normalize_rows(table.X) if normalize == "rows" else table.X
        n, d = X.shape
        with self.store.read() as s:
            if s.scalar(select(Dataset).where(Dataset.name == name)) is not None:
                raise ConflictError(f"A dataset named {name!r} already exists.")
        # the values go to the data plane (fixed-width files, one row per record); the database keeps the keys
        schema: dict[str, Any] = {"names": table.feature_names, "keys": KEYS_HASHED}
        if table.label_classes is not None:
            schema["label_classes"] = table.label_classes
        if table.categories is not None:
            schema["categories"] = table.categories
        classes: list[str] | None = None
        y_stored = np.asarray(table.y, dtype=np.float64) if table.y.dtype.kind != "U" else table.y
        if table.label_classes is not None:  # text labels: the table holds codes into the sorted class list
            classes = [str(c) for c in table.label_classes]
        elif y_stored.dtype.kind != "f":
            values, codes = np.unique(y_stored, return_inverse=True)
            classes, y_stored = [str(v) for v in values], codes.astype(np.float64)
        fpath, lpath = self.matrices.write(X, y_stored, store=store)
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
                ds_id, digest = ds.id, self.key_digest
                with _progress_bar(progress, total=n, desc=f"import {name}", unit="rec") as bar:
                    rows = ((base + i, ds_id, digest(ds_id, k)) for i, k in enumerate(table.keys))
                    self.store.insert_records(s, rows, on_chunk=bar.update)
                s.add(DataPlane(dataset_id=ds.id, features_path=fpath, labels_path=lpath, row_base=base, n_rows=n,
                                n_features=d, label_classes=None if classes is None else {"classes": classes}))
                add_event(s, "dataset_registered", {"dataset": name, "n": n, "d": d, "normalize": normalize})
                ds_id = ds.id
        except BaseException:
            for rel in (fpath, lpath):
                destroy_file(self.matrices.resolve(rel))
            raise
        log.info("registered dataset %s (id %d): %d records, %d features", name, ds_id, n, d)
        return self.dataset_info(name)

    def dataset_info(self, name: str) -> dict[str, Any]:
        with self.store.read() as s:
            ds = self._dataset(s, name)
            n = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id))
            return {"name": ds.name, "id": ds.id, "n_records": int(n or 0), "n_features": ds.n_features,
                    "normalize": ds.normalize, "key_column": ds.key_column, "label_column": ds.label_column,
                    "source": ds.source, "created_at": iso(ds.created_at),
                    "feature_names": list(ds.feature_names.get("names", [])),
                    "label_classes": ds.feature_names.get("label_classes"),
                    "categories": ds.feature_names.get("categories")}

    @staticmethod
    def _dataset(s: Any, name: str) -> Dataset:
        ds = s.scalar(select(Dataset).where(Dataset.name == name)) if isinstance(name, str) else None
        if ds is None or ds.name.startswith(DROPPED_PREFIX):
            raise NotFoundError(f"Unknown dataset {name!r}.")
        return ds

    def _data_view(self, s: Any, dataset_id: int, n_features: int) -> tuple[DataView, DataPlane | None, np.ndarray]:
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

    def _current_data(self, s: Any, dataset_id: int, n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record ids, X, y) of the records present, ordered by id: the data every model of the dataset is for."""
        view, _plane, ids = self._data_view(s, dataset_id, n_features)
        if bool(np.all(view.active)):
            return ids, view.X, view.y
        return ids[view.active], active_rows(view.X, view.active), view.y[view.active]

    # -- training ---------------------------------------------------------------------------------------------------
    def train(self, dataset: str, model: str, *, mechanism: str = "certified-removal",
              params: dict[str, Any] | None = None, random_state: RandomState = None,
              progress: bool = False) -> dict[str, Any]:
        """Train model ``model`` on the current records of ``dataset`` and publish its version 1.

        ``random_state`` seeds the secret perturbation: use it in tests only (a known seed reveals b).
        """
        _check_name("model name", model)
        try:
            adapter = get_adapter(mechanism, params)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(str(exc)) from exc
        rng = check_random_state(random_state)
        with self.lock.hold(), _progress_bar(progress, total=3, desc=f"train {model}") as bar:
            self._recover_locked()
            with self.store.read() as s:
                ds = self._dataset(s, dataset)
                if s.scalar(select(Model).where(Model.name == model)) is not None:
                    raise ConflictError(f"A model named {model!r} already exists.")
                ds_id, ds_name = ds.id, ds.name
                ids, X, y = self._current_data(s, ds.id, ds.n_features)
            adapter.check_features(X.shape[1])
            bar.update(1)
            try:
                artifact, cert = adapter.train(X, y, rng)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"Training {model!r} on {dataset!r} failed: {_cli_hint(str(exc))}") from exc
            bar.update(1)
            summary = adapter.summary(artifact)
            binding = self._binding(model, mechanism, adapter.params, X.shape[1])
            with self._new_artifact(artifact, binding) as (relpath, sha):
                with self.store.write() as s, s.begin():
                    n_now = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds_id))
                    if n_now != ids.size:
                        raise ConflictError(f"Dataset {dataset!r} changed during training; try again.")
                    if s.scalar(select(Model).where(Model.name == model)) is not None:
                        raise ConflictError(f"A model named {model!r} already exists.")
                    m = Model(name=model, dataset_id=ds_id, mechanism=mechanism, params=adapter.params,
                              created_at=utcnow())
                    s.add(m)
                    s.flush()
                    v = ModelVersion(model_id=m.id, number=1, parent_id=None, status="published", artifact=relpath,
                                     sha256=sha, n_records=int(ids.size), summary=summary, created_at=utcnow())
                    s.add(v)
                    s.flush()
                    m.current_version_id = v.id
                    add_event(s, "train", {"dataset": ds_name, "mechanism": mechanism, "params": adapter.params,
                                           **summary}, model_id=m.id, version_id=v.id)
                    s.add(CertificateRow(id=str(uuid.uuid4()), kind="train", model_id=m.id, new_version_id=v.id,
                                         mechanism=mechanism, certificate=cert, created_at=utcnow()))
            bar.update(1)
        log.info("trained model %s (mechanism %s) on dataset %s: version 1, n=%d", model, mechanism, ds_name,
                 ids.size)
        return self.budget(model)

    @contextlib.contextmanager
    def _new_artifact(self, artifact: Artifact, binding: dict[str, Any]) -> Iterator[tuple[str, str]]:
        """Save an artifact; destroy it again if the block that should publish it fails."""
        relpath, sha = self.artifacts.save(artifact, binding)
        try:
            yield relpath, sha
        except BaseException:
            self.artifacts.destroy(relpath)
            raise

    # -- deletion requests ------------------------------------------------------------------------------------------
    def submit_deletion(self, dataset: str, key: str, *, principal: Principal = CLI_PRINCIPAL,
                        client_request_id: str | None = None) -> tuple[dict[str, Any], bool]:
        """Record a deletion request; returns (request view, created). Acknowledged only once committed.

        Idempotent under ``client_request_id``: the same id with the same dataset and key returns the existing
        request (created=False); the same id with another deletion is a :class:`ConflictError`.
        Unknown key → :class:`NotFoundError`; a key already requested or deleted → :class:`ConflictError` (naming
        the earlier request only to its own requester or an admin).

        Uniqueness is enforced by the database (``uq_client_request``, ``uq_live_request_key``), so concurrent
        submissions on PostgreSQL cannot both be accepted: the loser's insert fails and it is answered as if it had
        come second (the existing request, or a conflict).

        Group commit: concurrent submissions of this process are queued and written by one transaction (one
        fsync) per group, each in a savepoint of its own, in arrival order — so each gets the answer it would have
        got had the group's submissions been made one after the other, and one refused submission does not touch
        the others. A submission returns only after its group's commit. If the group's transaction fails as a
        whole (e.g. the disk is full), every member is retried in a transaction of its own and gets its own answer.
        """
        sub = self._submission(dataset, key, principal, client_request_id)
        self._join_group(sub)
        return self._answer(sub)

    def submit_deletions(self, submissions: list[tuple[str, str, Principal, str | None]]
                         ) -> list[tuple[dict[str, Any], bool] | Exception]:
        """Several submissions (dataset, key, principal, client request id) written as one group: each gets
        the answer :meth:`submit_deletion` would give it — its (view, created), or the exception it would raise —
        as if they had been made one after the other in this order. For a server's intake thread, which collects
        the submissions that arrive while the previous group commits."""
        out: list[tuple[dict[str, Any], bool] | Exception] = []
        group: list[_Submission] = []
        for dataset, key, principal, crid in submissions:
            try:
                group.append(self._submission(dataset, key, principal, crid))
            except CuratorError as exc:
                out.append(exc)
                continue
            out.append(_PENDING)
        if group:
            with self._group_mutex:  # take the lead as a group of its own (queued behind any threads' group)
                self._group_queue.extend(group)
                lead = not self._group_busy
                self._group_busy = True
            if lead:
                self._lead_group(group[0])
            else:
                for sub in group:
                    sub.done.wait()
                    if sub.lead:
                        self._lead_group(sub)
        answers = iter(group)
        for i, o in enumerate(out):
            if o is _PENDING:
                try:
                    out[i] = self._answer(next(answers))
                except Exception as exc:  # noqa: BLE001 - the caller answers each submission with its own error
                    out[i] = exc
        return out

    @staticmethod
    def _submission(dataset: str, key: str, principal: Principal, client_request_id: str | None) -> _Submission:
        _check_name("dataset", dataset)
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
            raise InvalidInputError(f"key must be a non-empty string of at most {MAX_KEY_LENGTH} characters.")
        _check_unicode("key", key)
        if client_request_id is not None:
            _check_name("request_id", client_request_id)
        return _Submission(dataset, key, principal, client_request_id)

    def _answer(self, sub: _Submission) -> tuple[dict[str, Any], bool]:
        """A submission's answer once its group is done (submitted alone if the group failed as a whole)."""
        if sub.alone:
            view, created = self._submit_alone(sub.dataset, sub.key, sub.principal, sub.client_request_id)
        elif sub.error is not None:
            raise sub.error
        else:
            assert sub.result is not None
            view, created = sub.result
        if created:
            log.info("request %s submitted (dataset %s)", view["id"], sub.dataset)
        return view, created

    def _join_group(self, sub: _Submission) -> None:
        """Queue ``sub`` and return once its group has committed (or failed as a whole: ``sub.alone``).

        Leader/follower group commit, no background thread: the submission that finds no group in progress leads;
        it takes everything queued (itself included), writes it in one transaction and hands the lead to the first
        submission queued meanwhile, which does the same. Every other submission waits for its outcome."""
        with self._group_mutex:
            self._group_queue.append(sub)
            lead = not self._group_busy
            self._group_busy = True
        if not lead:
            sub.done.wait()
            if not sub.lead:
                return
        self._lead_group(sub)

    def _lead_group(self, sub: _Submission) -> None:
        """As the leader ``sub``: commit everything queued, then hand the lead on (see :meth:`_join_group`)."""
        with self._group_mutex:
            group, self._group_queue = self._group_queue, []
        try:
            self._commit_group(group)
        finally:
            for member in group:  # released whatever happened (a BaseException in the leader included)
                if member.result is None and member.error is None:
                    member.alone = True
                if member is not sub:
                    member.done.set()
            with self._group_mutex:
                if self._group_queue:
                    nxt = self._group_queue[0]
                    nxt.lead = True
                    nxt.done.set()
                else:
                    self._group_busy = False

    def _commit_group(self, group: list[_Submission]) -> None:
        """Write a group of submissions in one transaction; set each member's outcome only after the commit.

        The group is answered set-wise (:meth:`_submit_group_in`: a few queries and one multi-row insert per group,
        not per submission). If a unique constraint refuses the insert — a submission of another process won a race
        between our reads and our insert — the transaction is rolled back and the group is written again one
        savepoint per submission (:meth:`_commit_group_serially`), each answered from the winner's committed state.
        Any error other than a submission's own answer (a :class:`CuratorError`) aborts the group: its members are
        then retried alone by their callers (``alone``)."""
        outcomes: list[tuple[tuple[dict[str, Any], bool] | None, CuratorError | None]] | None
        try:
            with self.store.write() as s, s.begin():
                outcomes = self._submit_group_in(s, group)
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
            self._notify_work()

    def _submit_group_in(self, s: Any, group: list[_Submission]
                         ) -> list[tuple[tuple[dict[str, Any], bool] | None, CuratorError | None]]:
        """The answers to a group of submissions within the write transaction ``s``, each the answer
        :meth:`_submit_in` gives when the group's submissions are made one after the other in arrival order.

        Set-wise: one query each for the datasets, the requests reusing a client request id, the live requests of
        the keys and the records; then the decisions in arrival order (a submission sees the requests created by the
        earlier ones of its group); then one multi-row insert of the new requests and one of their ledger events."""
        names = {sub.dataset for sub in group}
        datasets = {ds.name: ds for ds in s.scalars(select(Dataset).where(Dataset.name.in_(names)))
                    if not ds.name.startswith(DROPPED_PREFIX)}
        digests = [self.key_digest(datasets[sub.dataset].id, sub.key) if sub.dataset in datasets else ""
                   for sub in group]
        by_crid: dict[tuple[str, str], DeletionRequest | _NewRequest] = {}
        crids = [(sub.principal.name, sub.client_request_id) for sub in group if sub.client_request_id is not None]
        if crids:
            for r in s.scalars(select(DeletionRequest).where(
                    DeletionRequest.requester.in_({p for p, _ in crids}),
                    DeletionRequest.client_request_id.in_({c for _, c in crids}))):
                by_crid[(r.requester, str(r.client_request_id))] = r
        ds_ids = {ds.id for ds in datasets.values()}
        live: dict[tuple[int, str], DeletionRequest | _NewRequest] = {}
        records: dict[tuple[int, str], int] = {}
        if ds_ids:
            for r in s.scalars(select(DeletionRequest).where(
                    DeletionRequest.dataset_id.in_(ds_ids), DeletionRequest.key_digest.in_(set(digests)),
                    DeletionRequest.status != "failed")):
                live[(r.dataset_id, r.key_digest)] = r
            lookup = {self._record_key(datasets[sub.dataset], sub.key, dg)
                      for sub, dg in zip(group, digests, strict=True) if sub.dataset in datasets}
            for rid, ds_id, k in s.execute(select(Record.id, Record.dataset_id, Record.key).where(
                    Record.dataset_id.in_(ds_ids), Record.key.in_(lookup))):
                records[(ds_id, k)] = rid
        outcomes: list[tuple[tuple[dict[str, Any], bool] | None, CuratorError | None]] = []
        rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        in_group: set[str] = set()  # ids of the requests this group creates (no certificate can name them yet)
        for sub, digest in zip(group, digests, strict=True):
            p, crid = sub.principal, sub.client_request_id
            try:
                ds = datasets.get(sub.dataset)
                if ds is None:
                    raise NotFoundError(f"Unknown dataset {sub.dataset!r}.")
                if crid is not None:
                    prev = by_crid.get((p.name, crid))
                    if prev is not None:
                        if prev.dataset_id == ds.id and hmac.compare_digest(prev.key_digest, digest):
                            outcomes.append(((self._request_view(s, prev, p, new=prev.id in in_group), False), None))
                            continue
                        raise ConflictError(f"request_id {crid!r} was already used for a different deletion "
                                            "request.")
                earlier = live.get((ds.id, digest))
                if earlier is not None:
                    if crid is not None and earlier.requester == p.name and earlier.client_request_id == crid:
                        # the same submission committed concurrently between our two reads (READ COMMITTED)
                        outcomes.append(((self._request_view(s, earlier, p, new=earlier.id in in_group), False),
                                         None))
                        continue
                    self._refuse_repeat(earlier, p, sub.dataset)
                record_id = records.get((ds.id, self._record_key(ds, sub.key, digest)))
                if record_id is None:
                    raise NotFoundError(f"Unknown key {sub.key!r} in dataset {sub.dataset!r}.")
                row = {"id": str(uuid.uuid4()), "requester": p.name, "client_request_id": crid,
                       "dataset_id": ds.id, "record_id": record_id, "key_digest": digest, "status": "pending",
                       "attempts": 0, "submitted_at": utcnow()}
                rows.append(row)
                req = _NewRequest(**row)  # not an ORM instance: the group is inserted in bulk below
                payload = check_payload({"dataset": sub.dataset, "requester": p.name})
                events.append({"at": req.submitted_at, "kind": "request_submitted", "payload": payload,
                               "model_id": None, "version_id": None, "request_id": req.id})
                in_group.add(req.id)
                live[(ds.id, digest)] = req
                if crid is not None:
                    by_crid[(p.name, crid)] = req
                outcomes.append(((self._request_view(s, req, p, new=True), True), None))
            except CuratorError as exc:
                outcomes.append((None, exc))
        if rows:
            # Core executemany (the ORM's bulk path costs more Python than the statements; the GIL is the event
            # loop's): the unique constraints fire here (IntegrityError: see _commit_group)
            request_table: Any = DeletionRequest.__table__
            ledger_table: Any = LedgerEvent.__table__
            s.execute(insert(request_table), rows)
            s.execute(insert(ledger_table), events)
        return outcomes

    def _commit_group_serially(self, group: list[_Submission]
                               ) -> list[tuple[tuple[dict[str, Any], bool] | None, CuratorError | None]] | None:
        """A group in one transaction, one savepoint per submission (after a race with another process); None if
        the transaction failed as a whole."""
        outcomes: list[tuple[tuple[dict[str, Any], bool] | None, CuratorError | None]] = []
        try:
            with self.store.write() as s, s.begin():
                for sub in group:
                    outcome: tuple[tuple[dict[str, Any], bool] | None, CuratorError | None] = (
                        None, BusyError("Concurrent submissions of this deletion kept conflicting; retry."))
                    for _attempt in range(3):
                        try:
                            with s.begin_nested():
                                outcome = (self._submit_in(s, sub.dataset, sub.key, sub.principal,
                                                           sub.client_request_id), None)
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

    @staticmethod
    def _record_key(ds: Dataset, key: str, digest: str) -> str:
        """What the records table holds for ``key``: its keyed digest (datasets registered with hashed keys: no
        plain key is ever written to the database) or the key itself (older stores)."""
        return digest if ds.feature_names.get("keys") == KEYS_HASHED else key

    @staticmethod
    def _refuse_repeat(earlier: DeletionRequest | _NewRequest, principal: Principal, dataset: str) -> None:
        """Refuse a submission whose key has a live request ``earlier`` (naming it only to its requester or an
        admin; another requester learns only that the key is taken care of, not whether pending or done)."""
        if principal.is_admin or earlier.requester == principal.name:
            ref = f" (request {earlier.id})"
            if earlier.status == "pending":
                raise ConflictError(f"A deletion of this key from dataset {dataset!r} is already pending{ref}.")
            raise ConflictError(f"This key was already deleted from dataset {dataset!r}{ref}.")
        raise ConflictError(f"A deletion of this key from dataset {dataset!r} is already pending or done.")

    def _submit_alone(self, dataset: str, key: str, principal: Principal,
                      client_request_id: str | None) -> tuple[dict[str, Any], bool]:
        """One submission in a transaction of its own (the fallback when its group failed as a whole)."""
        for attempt in range(3):
            try:
                with self.store.write() as s, s.begin():
                    view, created = self._submit_in(s, dataset, key, principal, client_request_id)
                if created:
                    self._notify_work()
                return view, created
            except IntegrityError:
                # a concurrent submission won the race (a unique constraint refused ours; nothing was written):
                # answer from the winner's committed state
                if attempt == 2:
                    raise BusyError("Concurrent submissions of this deletion kept conflicting; retry.") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _submit_in(self, s: Any, dataset: str, key: str, principal: Principal,
                   client_request_id: str | None) -> tuple[dict[str, Any], bool]:
        """The submission's answer within the write transaction (or savepoint) ``s``."""
        ds = self._dataset(s, dataset)
        digest = self.key_digest(ds.id, key)
        if client_request_id is not None:
            prev = s.scalar(select(DeletionRequest).where(DeletionRequest.requester == principal.name,
                                                          DeletionRequest.client_request_id == client_request_id))
            if prev is not None:
                if prev.dataset_id == ds.id and hmac.compare_digest(prev.key_digest, digest):
                    return self._request_view(s, prev, principal), False
                raise ConflictError(f"request_id {client_request_id!r} was already used for a different "
                                    "deletion request.")
        earlier = s.scalars(select(DeletionRequest).where(DeletionRequest.dataset_id == ds.id,
                                                          DeletionRequest.key_digest == digest,
                                                          DeletionRequest.status != "failed")).first()
        if earlier is not None:
            if (client_request_id is not None and earlier.requester == principal.name
                    and earlier.client_request_id == client_request_id):
                # the same submission committed concurrently between our two reads (READ COMMITTED)
                return self._request_view(s, earlier, principal), False
            self._refuse_repeat(earlier, principal, dataset)
        record_id = s.scalar(select(Record.id).where(Record.dataset_id == ds.id,
                                                     Record.key == self._record_key(ds, key, digest)))
        if record_id is None:
            raise NotFoundError(f"Unknown key {key!r} in dataset {dataset!r}.")
        req = DeletionRequest(id=str(uuid.uuid4()), requester=principal.name, client_request_id=client_request_id,
                              dataset_id=ds.id, record_id=record_id, key_digest=digest, status="pending",
                              attempts=0, submitted_at=utcnow())
        s.add(req)
        s.flush()  # the unique constraints fire here (IntegrityError → the caller answers from the winner)
        add_event(s, "request_submitted", {"dataset": dataset, "requester": principal.name},
                  request_id=req.id)
        return self._request_view(s, req, principal, new=True), True

    def _request_view(self, s: Any, req: DeletionRequest | _NewRequest, principal: Principal = CLI_PRINCIPAL, *,
                      new: bool = False) -> dict[str, Any]:
        """A request as its requester or an admin sees it: never the key, nor anything of the other requests of its
        batch; errors reduced to what may be shown (:mod:`lethe.curator.public`). ``new``: created in this
        transaction under a fresh id, so no certificate can name it yet (one query fewer per submission)."""
        ds = s.get(Dataset, req.dataset_id)
        certs = [] if new else s.scalars(select(CertificateRow.id).where(CertificateRow.request_id == req.id)
                                         .order_by(CertificateRow.created_at, CertificateRow.id)).all()
        error = public_error(req.error) if principal.is_admin else requester_error(req.error)
        ds_name = ds.name if ds is not None and not ds.name.startswith(DROPPED_PREFIX) else None
        return {"id": req.id, "request_id": req.client_request_id, "dataset": ds_name,
                "requester": req.requester, "status": req.status, "attempts": req.attempts, "error": error,
                "submitted_at": iso(req.submitted_at), "processed_at": iso(req.processed_at),
                "seconds_to_publication": _seconds_between(req.submitted_at, req.processed_at),
                "certificates": list(certs)}

    @staticmethod
    def _lookup_id(value: Any) -> str | None:
        """A usable id for a primary-key lookup, or None (not a string, too long, or not encodable)."""
        if not isinstance(value, str) or not value or len(value) > 64:
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return value

    def request_status(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """A request's state; a requester sees only its own requests (others are reported as unknown)."""
        rid = self._lookup_id(request_id)
        with self.store.read() as s:
            req = s.get(DeletionRequest, rid) if rid is not None else None
            if req is None or not (principal.is_admin or req.requester == principal.name):
                raise NotFoundError("Unknown request id.")
            return self._request_view(s, req, principal)

    def list_requests(self, principal: Principal = CLI_PRINCIPAL, *, status: str | None = None,
                      dataset: str | None = None, request_id: str | None = None, requester: str | None = None,
                      limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """Deletion requests, newest first, one page at a time.

        A requester sees only its own requests (``requester`` is then ignored unless it names the caller); an admin
        sees all and may filter by ``requester``. Filters: ``status`` (pending, done, failed), ``dataset`` (name),
        ``request_id`` (the client-chosen id). ``limit``: 1 to 500. ``cursor``: the ``next_cursor`` of the previous
        page (opaque). Returns ``{"items": [request views], "next_cursor": str | None}``.
        """
        if status is not None and status not in REQUEST_STATUSES:
            raise InvalidInputError(f"status must be one of {REQUEST_STATUSES}. Found {status!r}.")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
            raise InvalidInputError(f"limit must be an integer from 1 to 500. Found {limit!r}.")
        if request_id is not None:
            _check_name("request_id", request_id)
        after = _decode_cursor(cursor) if cursor is not None else None
        with self.store.read() as s:
            q = select(DeletionRequest)
            if not principal.is_admin:
                q = q.where(DeletionRequest.requester == principal.name)
            elif requester is not None:
                _check_name("requester", requester)
                q = q.where(DeletionRequest.requester == requester)
            if status is not None:
                q = q.where(DeletionRequest.status == status)
            if dataset is not None:
                _check_name("dataset", dataset)
                q = q.where(DeletionRequest.dataset_id == self._dataset(s, dataset).id)
            if request_id is not None:
                q = q.where(DeletionRequest.client_request_id == request_id)
            if after is not None:
                at, rid = after
                q = q.where(or_(DeletionRequest.submitted_at < at,
                                and_(DeletionRequest.submitted_at == at, DeletionRequest.id < rid)))
            rows = s.scalars(q.order_by(DeletionRequest.submitted_at.desc(), DeletionRequest.id.desc())
                             .limit(limit + 1)).all()
            items = [self._request_view(s, r, principal) for r in rows[:limit]]
            nxt = _encode_cursor(rows[limit - 1].submitted_at, rows[limit - 1].id) if len(rows) > limit else None
        return {"items": items, "next_cursor": nxt}

    def certificate(self, certificate_id: str, *, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """One certificate by id (a requester: only those of its own requests)."""
        cid = self._lookup_id(certificate_id)
        with self.store.read() as s:
            row = s.get(CertificateRow, cid) if cid is not None else None
            if row is None:
                raise NotFoundError("Unknown certificate id.")
            if not principal.is_admin:
                req = s.get(DeletionRequest, row.request_id) if row.request_id else None
                if req is None or req.requester != principal.name:
                    raise NotFoundError("Unknown certificate id.")
            return self._certificate_view(s, row, principal)

    def request_certificates(self, request_id: str, *, principal: Principal = CLI_PRINCIPAL) -> list[dict[str, Any]]:
        """The certificates of one request (one per model of its dataset, or a deletion receipt)."""
        view = self.request_status(request_id, principal=principal)
        with self.store.read() as s:
            rows = s.scalars(select(CertificateRow).where(CertificateRow.request_id == view["id"])
                             .order_by(CertificateRow.created_at, CertificateRow.id)).all()
            return [self._certificate_view(s, r, principal) for r in rows]

    @staticmethod
    def _certificate_view(s: Any, row: CertificateRow, principal: Principal = CLI_PRINCIPAL) -> dict[str, Any]:
        """A certificate as shown: the allow-listed fields (:func:`lethe.curator.public.public_certificate`); a
        requester gets neither the batch id nor the batch's data-dependent numbers."""
        model = s.get(Model, row.model_id) if row.model_id is not None else None
        old = s.get(ModelVersion, row.old_version_id) if row.old_version_id is not None else None
        new = s.get(ModelVersion, row.new_version_id) if row.new_version_id is not None else None
        requester = not principal.is_admin
        return {"id": row.id, "kind": row.kind, "request_id": row.request_id,
                "batch_id": None if requester else row.batch_id,
                "model": model.name if model else None, "mechanism": row.mechanism,
                "old_version": old.number if old else None, "new_version": new.number if new else None,
                "old_version_id": row.old_version_id, "new_version_id": row.new_version_id,
                "submitted_at": iso(row.submitted_at), "issued_at": iso(row.created_at),
                "certificate": public_certificate(row.certificate, requester=requester)}

    def model_versions(self, model: str) -> list[dict[str, Any]]:
        """A model's version history, oldest first (operators): number, status, records, timestamps, the public
        budget facts of the version and the certificate it was published with (training or the removal batch, with
        the number of requests the batch served)."""
        with self.store.read() as s:
            m = self._model(s, model)
            versions = s.scalars(select(ModelVersion).where(ModelVersion.model_id == m.id)
                                 .order_by(ModelVersion.number)).all()
            out = []
            for v in versions:
                cert = s.scalars(select(CertificateRow).where(CertificateRow.new_version_id == v.id)
                                 .order_by(CertificateRow.created_at, CertificateRow.id)).first()
                n_req = s.scalar(select(func.count()).select_from(CertificateRow)
                                 .where(CertificateRow.new_version_id == v.id, CertificateRow.request_id.is_not(None)))
                parent = s.get(ModelVersion, v.parent_id) if v.parent_id is not None else None
                out.append({"model": m.name, "version": v.number, "version_id": v.id, "status": v.status,
                            "parent_version": parent.number if parent else None, "n_records": v.n_records,
                            "published_at": iso(v.created_at), "superseded_at": iso(v.superseded_at),
                            "destroyed_at": iso(v.destroyed_at), "budget": dict(v.summary),
                            "kind": cert.kind if cert else None, "batch_id": cert.batch_id if cert else None,
                            "n_requests": int(n_req or 0),
                            "certificate": public_certificate(cert.certificate) if cert else None})
        return out

    def public_model(self, model: str) -> dict[str, Any]:
        """The published version's public parameters (the weights; never a secret array such as Guo et al.'s
        perturbation b), with what a user needs to apply them: feature names, normalisation, label classes."""
        art, info = self._load_published(model)
        return {"model": info["model"], "version": info["version"], "mechanism": info["mechanism"],
                "feature_names": info["feature_names"], "normalize": info["normalize"],
                "classes": art.meta.get("classes"),
                "arrays": {k: np.asarray(a).tolist() for k, a in art.arrays.items()}}

    def retrain(self, model: str, *, random_state: RandomState = None) -> dict[str, Any]:
        """Repair or refresh a model: train it again on the dataset's current records with its mechanism and
        parameters and a fresh secret perturbation, and publish the result as the next version (the old version's
        artifact is destroyed; its file is never read, so this works when it is missing or fails verification).

        Certificate: kind ``train`` for the new version (Guo et al. 2020, Alg. 2: retraining from scratch resets
        the residual bound). Pending requests stay pending and are processed against the new version.
        """
        rng = check_random_state(random_state)
        with self.lock.hold():
            self._recover_locked()
            with self.store.read() as s:
                m = self._model(s, model)
                ds = s.get(Dataset, m.dataset_id)
                assert ds is not None
                model_id, mech, params, ds_id = m.id, m.mechanism, dict(m.params), ds.id
                old_vid = m.current_version_id
                ids, X, y = self._current_data(s, ds.id, ds.n_features)
            adapter = get_adapter(mech, params)
            try:
                artifact, cert = adapter.train(X, y, rng)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"Retraining {model!r} failed: {exc}") from exc
            summary = adapter.summary(artifact)
            with self._new_artifact(artifact, self._binding(model, mech, adapter.params, X.shape[1])) as (rel, sha):
                with self.store.write() as s, s.begin():
                    m2 = s.get(Model, model_id)
                    old = s.get(ModelVersion, old_vid) if old_vid is not None else None
                    n_now = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds_id))
                    if m2 is None or m2.current_version_id != old_vid or n_now != ids.size:
                        raise ConflictError(f"Model {model!r} or its dataset changed during retraining; try again.")
                    now = utcnow()
                    number = (old.number + 1) if old is not None else 1
                    add_event(s, "retrain", {"reason": "operator", "n": int(ids.size), **summary},
                              model_id=model_id, version_id=old_vid)
                    v = ModelVersion(model_id=model_id, number=number, parent_id=old_vid, status="published",
                                     artifact=rel, sha256=sha, n_records=int(ids.size), summary=summary,
                                     created_at=now)
                    s.add(v)
                    if old is not None:
                        old.status = "superseded"
                        old.superseded_at = now
                    s.flush()
                    m2.current_version_id = v.id
                    add_event(s, "version_published", {"number": number, "parent": old_vid}, model_id=model_id,
                              version_id=v.id)
                    s.add(CertificateRow(id=str(uuid.uuid4()), kind="train", model_id=model_id, old_version_id=old_vid,
                                         new_version_id=v.id, mechanism=mech, certificate=cert, created_at=now))
            self._destroy_superseded()
        log.info("retrained model %s: version %d, n=%d", model, number, ids.size)
        return self.budget(model)

    def drop_model(self, model: str) -> dict[str, Any]:
        """Remove a model: its versions' rows go in one transaction, then every artifact of it (with the secret
        perturbation) is destroyed — overwritten, flushed, unlinked; a crash in between leaves files no row refers
        to, which the next recovery destroys. Certificates already issued stay (their ``model`` then reads null) and
        the ledger records ``model_dropped``. Pending requests of the dataset are then processed without it."""
        with self.lock.hold():
            self._recover_locked()
            with self.store.write() as s, s.begin():
                m = self._model(s, model)
                versions = s.scalars(select(ModelVersion).where(ModelVersion.model_id == m.id)).all()
                files = [v.artifact for v in versions if v.status != "destroyed"]
                model_id = m.id
                m.current_version_id = None
                s.flush()
                for v in versions:
                    s.delete(v)
                s.flush()
                s.delete(m)
                add_event(s, "model_dropped", {"model": model, "versions": len(versions)}, model_id=model_id)
            for rel in files:
                self.artifacts.destroy(rel)
            self._public_cache.clear()
            self._verified.clear()
        log.info("dropped model %s (%d version(s))", model, len(versions))
        return {"model": model, "dropped": True, "versions": len(versions), "artifacts_destroyed": len(files)}

    def drop_dataset(self, dataset: str) -> dict[str, Any]:
        """Remove a dataset: every record is deleted (``secure_delete``) and the database purged. Refused while a
        model is trained on it (drop those first: ``lethe model drop``). Its pending requests are done by this
        (their records are gone) and get a raw-deletion receipt. The dataset's row stays, renamed to a tombstone,
        because requests and certificates refer to it; its name can be registered again."""
        _check_name("dataset", dataset)
        with self.lock.hold():
            self._recover_locked()
            with self.store.write() as s, s.begin():
                ds = self._dataset(s, dataset)
                models = s.scalars(select(Model.name).where(Model.dataset_id == ds.id)).all()
                if models:
                    raise ConflictError(f"Dataset {dataset!r} has models {sorted(models)}; drop them first "
                                        f"(lethe model drop MODEL --yes).")
                now = utcnow()
                batch_id = str(uuid.uuid4())
                pending = s.scalars(select(DeletionRequest).where(DeletionRequest.dataset_id == ds.id,
                                                                  DeletionRequest.status == "pending")).all()
                for req in pending:
                    s.add(CertificateRow(id=str(uuid.uuid4()), kind="deletion", request_id=req.id, batch_id=batch_id,
                                         certificate={"operation": "delete", "guarantee": "raw record deleted with its "
                                                      "dataset; no model had been trained on it",
                                                      "epsilon": 0.0, "delta": 0.0},
                                         submitted_at=req.submitted_at, created_at=now))
                    req.record_id = None
                    req.status = "done"
                    req.processed_at = now
                    add_event(s, "request_done", {"batch_id": batch_id}, request_id=req.id)
                n = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id)) or 0
                s.execute(Record.__table__.delete().where(Record.dataset_id == ds.id))  # type: ignore[attr-defined]
                ds.name = f"{DROPPED_PREFIX}{ds.id}"
                add_event(s, "records_deleted", {"batch_id": batch_id, "dataset": dataset, "count": int(n)})
                add_event(s, "dataset_dropped", {"dataset": dataset, "records": int(n), "requests_done": len(pending)})
            self.purge()
        log.info("dropped dataset %s (%d records)", dataset, n)
        return {"dataset": dataset, "dropped": True, "records_deleted": int(n), "requests_done": len(pending)}

    # -- processing -------------------------------------------------------------------------------------------------
    def process_pending(self, *, force: bool = False, max_batches: int | None = None, progress: bool = False,
                        lock_timeout: float | None = 60.0) -> list[BatchResult]:
        """Process the pending requests whose batch is due (all of them with ``force``).

        A dataset's batch is due when it has ``batch_size`` pending requests or its oldest one has waited
        ``max_delay`` seconds. Returns one :class:`BatchResult` per batch published or failed (a batch the mechanism
        fails on is split, and each part has its own result; ``max_batches`` counts the batches taken from the
        queue, not their parts).
        """
        results: list[BatchResult] = []
        taken = 0
        with self.lock.hold(lock_timeout):
            self._recover_locked()
            with _progress_bar(progress, desc="forget", unit="req") as bar:
                while max_batches is None or taken < max_batches:
                    batch = self._next_batch(force)
                    if batch is None:
                        break
                    taken += 1
                    parts = self._process_batch(*batch)
                    results.extend(parts)
                    bar.update(sum(len(res.request_ids) for res in parts))
                    if any(res.status == "retry" for res in parts):
                        break  # back off; the worker tries again on its next poll
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
                if force or count >= size or waited >= self.settings.max_delay:
                    # everything that arrived together goes in one batch (Eq. 6), up to the size the budget allows
                    return ds_id, list(s.scalars(select(DeletionRequest.id).where(
                        DeletionRequest.status == "pending", DeletionRequest.dataset_id == ds_id)
                        .order_by(DeletionRequest.submitted_at, DeletionRequest.id).limit(size)))
        return None

    def _faulty_datasets(self) -> set[int]:
        """Datasets with a model whose published artifact fails verification (see :meth:`verify_models`)."""
        faults = self.verify_models()
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

    def _budget_cap(self, dataset_id: int, m: int, certs: list[dict[str, Any]]) -> None:
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
            if rem > 0.0 and math.isfinite(rem):
                per = rem / (m * m)
                cap = min(cap, max(1, int(math.sqrt(self.settings.budget_share * left / per))))
        self._batch_caps[dataset_id] = cap

    def warm_up(self) -> int:
        """Build the warm state of every model that keeps one (after a start: once, before the first batch, so that
        no request waits for it). Returns the number of models made warm."""
        with self.lock.hold(), self.store.read() as s:
            todo = []
            for m in s.scalars(select(Model).order_by(Model.id)):
                adapter = get_adapter(m.mechanism, dict(m.params))
                plane = s.get(DataPlane, m.dataset_id)
                v = s.get(ModelVersion, m.current_version_id)
                if adapter.supports_warm and plane is not None and v is not None and \
                        getattr(self._warm.get(m.id), "version_id", None) != v.id:
                    todo.append((m.id, m.name, m.dataset_id, adapter, plane, v,
                                 self._binding(m.name, m.mechanism, dict(m.params), plane.n_features)))
            views: dict[int, DataView] = {}
            for model_id, name, ds_id, adapter, plane, v, binding in todo:
                if ds_id not in views:
                    views[ds_id] = self._data_view(s, ds_id, plane.n_features)[0]
                X = self.matrices.open(plane)[0]
                warm = adapter.restore(self.artifacts.load(v.artifact, v.sha256, binding), X, views[ds_id].y,
                                       views[ds_id].active)
                warm.version_id = v.id
                self._warm[model_id] = warm
                log.info("model %s: solver state built from version %d", name, v.number)
        return len(todo)

    def mechanisms_in_use(self) -> tuple[str, ...]:
        """The mechanisms of the store's models, sorted: what a server or a worker imports before it serves (a
        mechanism nobody uses — e.g. ``noisy-finetune``, which needs torch, ≈ 180 MB — is imported when a model of
        it is first used)."""
        with self.store.read() as s:
            return tuple(s.scalars(select(Model.mechanism).distinct().order_by(Model.mechanism)))

    def warm_state(self) -> tuple[tuple[int, Any], ...]:
        """(model id, version id) of every model whose solver state this process keeps."""
        return tuple(sorted((mid, getattr(w, "version_id", None)) for mid, w in self._warm.items()))

    def _drop_warm(self, model_ids: Any) -> None:
        for mid in model_ids:
            self._warm.pop(mid, None)

    def _process_batch(self, dataset_id: int, request_ids: list[str]) -> list[BatchResult]:
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
        batch_id, ids, error, split = res
        if len(ids) == 1 or not split:
            return [self._fail_batch(batch_id, self._dataset_name(dataset_id), ids, error, final=False)]
        half = len(ids) // 2
        log.info("dataset %s: a batch of %d request(s) failed; processing it in two parts", dataset_id, len(ids))
        return self._process_batch(dataset_id, ids[:half]) + self._process_batch(dataset_id, ids[half:])

    def _dataset_name(self, dataset_id: int) -> str:
        with self.store.read() as s:
            ds = s.get(Dataset, dataset_id)
            return ds.name if ds is not None else str(dataset_id)

    def _attempt_batch(self, dataset_id: int,
                       request_ids: list[str]) -> BatchResult | tuple[str, list[str], str, bool]:
        """One attempt at a batch: its result, or — when the mechanism failed — its id, the request ids it was run on,
        the error and whether a request may be its cause (nothing published, nothing counted; :meth:`_process_batch`
        decides)."""
        batch_id = str(uuid.uuid4())
        rng = check_random_state(None)  # fresh entropy for any retraining: b must be unpredictable
        # 1. read one consistent snapshot: requests, models, the data plane (O(batch) unless a model must be rebuilt)
        with self.store.read() as s:
            ds = s.get(Dataset, dataset_id)
            assert ds is not None
            ds_name, d = ds.name, ds.n_features
            plane = s.get(DataPlane, dataset_id)
            by_id = {r.id: r for r in s.execute(select(*_REQ_COLUMNS).where(DeletionRequest.id.in_(request_ids)))}
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
            adapters = {mid: get_adapter(mech, params) for mid, _n, mech, params in model_info}
            cold: tuple[DataView, np.ndarray] | None = None
            needs_view = [mid for mid in adapters if plane is None or not adapters[mid].supports_warm
                          or getattr(self._warm.get(mid), "version_id", None) != current[mid].id]  # type: ignore
            if needs_view:
                view, _p, row_ids = self._data_view(s, dataset_id, d)
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
        new: list[tuple[int, str, str, ModelVersion, dict[str, Any], str, str, dict[str, Any]]] = []
        try:
            for model_id, name, mech, params in model_info:
                old = current[model_id]
                assert old is not None
                adapter = adapters[model_id]
                binding = self._binding(name, mech, params, d)
                if adapter.supports_warm and plane is not None and rows is not None:
                    warm = self._warm.get(model_id)
                    if warm is None or warm.version_id != old.id:  # after a restart or another process's batch
                        self._warm.pop(model_id, None)
                        assert cold is not None
                        view = cold[0]
                        X = self.matrices.open(plane)[0]  # this model's own copy-on-write map
                        art_old = self.artifacts.load(old.artifact, old.sha256, binding)
                        warm = adapter.restore(art_old, X, view.y, view.active)
                        warm.version_id = old.id
                        log.info("model %s: solver state rebuilt from version %d", name, old.number)
                    self._warm[model_id] = warm
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
                new.append((model_id, name, mech, old, cert, relpath, sha, adapter.summary(new_art)))
        except Exception as exc:  # the mechanism refused or failed: nothing is published
            self._drop_warm(adapters)
            for item in new:
                self.artifacts.destroy(item[5])
            log.warning("batch %s of %d request(s) failed: %s", batch_id, len(request_ids), type(exc).__name__)
            split = not isinstance(exc, OSError | MemoryError | ArtifactError)
            return batch_id, list(request_ids), f"{type(exc).__name__}: {exc}", split
        # 3. publish everything in one transaction
        new_ids: dict[int, int] = {}
        try:
            versions = self._publish(batch_id, dataset_id, ds_name, request_ids, new, new_ids)
        except BaseException:
            self._drop_warm(adapters)
            for item in new:
                self.artifacts.destroy(item[5])
            raise
        for model_id, vid in new_ids.items():
            if model_id in self._warm:
                self._warm[model_id].version_id = vid
        self._seed_verified(new, new_ids)
        self._budget_cap(dataset_id, len(request_ids), [item[4] for item in new])
        log.info("batch %s: %d request(s) of dataset %s processed; new versions %s", batch_id, len(request_ids),
                 ds_name, versions)
        # 4. destroy superseded versions (their secret state), erase the records' values and purge the database;
        #    one transaction records all of it (each write waits its turn behind the submissions)
        olds = self._destroy_superseded(record=False)
        self.purge(erase={dataset_id: rows}, attempts=3, destroyed=olds)
        try:  # the WAL's pages into the database file here, not in a submission's commit (Store.defer_checkpoints)
            self.store.checkpoint()
        except OperationalError:  # busy or locked: the next batch checkpoints
            pass
        return BatchResult(batch_id=batch_id, dataset=ds_name, request_ids=tuple(request_ids), status="done",
                           new_versions=versions)

    def _seed_verified(self, new: list[tuple[int, str, str, ModelVersion, dict[str, Any], str, str, dict[str, Any]]],
                       new_ids: dict[int, int]) -> None:
        """Record the artifacts this process has just written and published as verified (:meth:`verify_models`).

        The next batch then does not read, hash and authenticate again a file whose bytes this process wrote and
        hashed itself (its checksum is the one recorded in the version row). The record is the file's stamp
        (version, checksum, mtime, size, inode): a file changed afterwards — edited, replaced, truncated — no
        longer matches it and is verified in full before the next batch, as before.
        """
        for model_id, _name, _mech, _old, _cert, relpath, sha, _summary in new:
            vid = new_ids.get(model_id)
            if vid is None:
                continue
            try:
                st = os.stat(self.data_dir / relpath)
            except OSError:
                self._verified.pop(model_id, None)
                continue
            self._verified[model_id] = (vid, sha, st.st_mtime_ns, st.st_size, st.st_ino)

    def _publish(self, batch_id: str, dataset_id: int, ds_name: str, request_ids: list[str],
                 new: list[tuple[int, str, str, ModelVersion, dict[str, Any], str, str, dict[str, Any]]],
                 new_ids: dict[int, int] | None = None) -> dict[str, int]:
        now = utcnow()
        versions: dict[str, int] = {}
        with self.store.write() as s, s.begin():
            # validate: nothing moved since the snapshot (the lock makes this a safety net)
            rows = {r.id: r for r in s.execute(select(*_REQ_COLUMNS).where(DeletionRequest.id.in_(request_ids)))}
            reqs = [rows.get(rid) for rid in request_ids]
            if any(r is None or r.status != "pending" for r in reqs):
                raise RuntimeError(f"batch {batch_id}: a request is no longer pending")
            n_models = s.scalar(select(func.count()).select_from(Model).where(Model.dataset_id == dataset_id))
            if n_models != len(new):
                raise RuntimeError(f"batch {batch_id}: the models of the dataset changed")
            published: list[tuple[int, ModelVersion, ModelVersion, str, dict[str, Any]]] = []
            for model_id, name, mech, old_snap, cert, relpath, sha, summary in new:
                m = s.get(Model, model_id)
                old = s.get(ModelVersion, old_snap.id)
                if m is None or old is None or m.current_version_id != old.id or old.status != "published":
                    raise RuntimeError(f"batch {batch_id}: model {name} changed")
                # record first (ledger), then update state
                add_event(s, "retrain" if cert.get("retrained") else "remove",
                          {"batch_id": batch_id, "n_removed": len(request_ids), **summary,
                           "step_bound": cert.get("step_bound")}, model_id=model_id, version_id=old.id)
                v = ModelVersion(model_id=model_id, number=old.number + 1, parent_id=old.id, status="published",
                                 artifact=relpath, sha256=sha, n_records=old.n_records - len(request_ids),
                                 summary=summary, created_at=now)
                s.add(v)
                old.status = "superseded"
                old.superseded_at = now
                s.flush()
                m.current_version_id = v.id
                add_event(s, "version_published", {"batch_id": batch_id, "number": v.number, "parent": old.id},
                          model_id=model_id, version_id=v.id)
                # stored reduced to the allow-listed fields (no timings or solver diagnostics): the bulk insert
                # below does not run the ORM's validator on CertificateRow.certificate
                published.append((model_id, old, v, mech, public_certificate(cert)))
                versions[name] = v.number
                if new_ids is not None:
                    new_ids[model_id] = v.id
            # per request: its certificates, its record deleted, its state, a ledger event — as bulk statements
            # (one statement per table, not one ORM round trip per request)
            certs: list[dict[str, Any]] = []
            events: list[dict[str, Any]] = []
            record_ids: list[int] = []
            done_payload = check_payload({"batch_id": batch_id})
            for req in reqs:
                assert req is not None
                if req.record_id is None:
                    raise RuntimeError(f"batch {batch_id}: a record vanished")
                record_ids.append(int(req.record_id))
                if published:
                    for model_id, old, v, mech, cert in published:
                        certs.append({"id": str(uuid.uuid4()), "kind": "removal", "request_id": req.id,
                                      "model_id": model_id, "old_version_id": old.id, "new_version_id": v.id,
                                      "batch_id": batch_id, "mechanism": mech, "certificate": cert,
                                      "submitted_at": req.submitted_at, "created_at": now})
                else:
                    certs.append({"id": str(uuid.uuid4()), "kind": "deletion", "request_id": req.id,
                                  "model_id": None, "old_version_id": None, "new_version_id": None,
                                  "batch_id": batch_id, "mechanism": None,
                                  "certificate": public_certificate(
                                      {"operation": "delete", "guarantee": "raw record deleted; no model had been "
                                       "trained on this dataset", "epsilon": 0.0, "delta": 0.0,
                                       "n_removed": len(reqs)}),
                                  "submitted_at": req.submitted_at, "created_at": now})
                events.append({"kind": "request_done", "payload": done_payload, "model_id": None,
                               "version_id": None, "request_id": req.id, "at": now})
            gone: Any = s.execute(delete(Record).where(Record.id.in_(record_ids)))
            if gone.rowcount != len(record_ids):
                raise RuntimeError(f"batch {batch_id}: a record vanished")
            s.execute(update(DeletionRequest).where(DeletionRequest.id.in_(request_ids))
                      .values(record_id=None, status="done", processed_at=now)
                      .execution_options(synchronize_session=False))
            # Core executemany: no ORM work while this transaction holds the write lock the submissions wait for
            cert_table: Any = CertificateRow.__table__
            ledger_table: Any = LedgerEvent.__table__
            s.execute(insert(cert_table), certs)
            s.execute(insert(ledger_table), events)
            add_event(s, "records_deleted", {"batch_id": batch_id, "dataset": ds_name, "count": len(reqs)})
        return versions

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
        log.warning("batch %s of dataset %s not processed (%s)", batch_id, ds_name, status)
        return BatchResult(batch_id=batch_id, dataset=ds_name, request_ids=tuple(request_ids), status=status,
                           error=error)

    # -- destruction, purge and recovery ----------------------------------------------------------------------------
    def _destroy_superseded(self, *, record: bool = True) -> list[tuple[int, int, str]]:
        """Destroy the artifacts of superseded versions; with ``record``, mark them destroyed (one transaction).
        Returns (version id, model id, artifact) of each."""
        with self.store.read() as s:
            olds = [(v.id, v.model_id, v.artifact) for v in
                    s.scalars(select(ModelVersion).where(ModelVersion.status == "superseded"))]
        for vid, _model_id, relpath in olds:
            self.artifacts.destroy(relpath)
            self._public_cache.pop(vid, None)
        if record and olds:
            with self.store.write() as s, s.begin():
                self._mark_destroyed(s, olds)
        return olds

    @staticmethod
    def _mark_destroyed(s: Any, olds: list[tuple[int, int, str]]) -> None:
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

    def _erase_pending(self) -> bool:
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
        plain = self._plain_in_database(None if erase is None else list(erase))
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
                    self._mark_destroyed(s, destroyed)
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

    def _plain_in_database(self, dataset_ids: list[int] | None) -> bool:
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
        """Finish what a crash interrupted (takes the processing lock). See :meth:`_recover_locked`."""
        with self.lock.hold():
            return self._recover_locked()

    def _recover_locked(self) -> dict[str, int]:
        """Destroy unreferenced artifacts (a crashed batch's) and superseded ones, and data-plane files no dataset
        refers to (a crashed registration's); redo an unfinished erasure or purge."""
        with self.store.read() as s:
            referenced = set(s.scalars(select(ModelVersion.artifact)
                                       .where(ModelVersion.status.in_(("published", "superseded")))))
            planes = {p for pl in s.scalars(select(DataPlane)) for p in (pl.features_path, pl.labels_path)}
        orphans = [p for p in self.artifacts.all_files() if p not in referenced]
        orphans += [p for p in self.matrices.all_files() if p not in planes]
        for p in orphans:
            destroy_file(self.data_dir / p)
        destroyed = len(self._destroy_superseded())
        purged = 0
        if self.purge_pending():
            purged = int(self.purge(attempts=3, erase=None if self._erase_pending() else {}))
        if orphans or destroyed or purged:
            with self.store.write() as s, s.begin():
                add_event(s, "recovered", {"orphans_destroyed": len(orphans), "superseded_destroyed": destroyed,
                                           "purged": purged})
            log.info("recovery: %d orphan file(s), %d superseded version(s) destroyed, purge %s", len(orphans),
                     destroyed, bool(purged))
        return {"orphans_destroyed": len(orphans), "superseded_destroyed": destroyed, "purged": purged}

    # -- models: prediction, budget, status ---------------------------------------------------------------------------
    def _model(self, s: Any, name: str) -> Model:
        m = s.scalar(select(Model).where(Model.name == name)) if isinstance(name, str) else None
        if m is None:
            raise NotFoundError(f"Unknown model {name!r}.")
        return m

    @staticmethod
    def _binding(model: str, mechanism: str, params: dict[str, Any], n_features: int) -> dict[str, Any]:
        """What an artifact is for, covered by its HMAC (:mod:`lethe.curator.artifacts`)."""
        return {"model": model, "mechanism": mechanism, "params": dict(params), "n_features": int(n_features)}

    def _load_published(self, model: str) -> tuple[Artifact, dict[str, Any]]:
        """The published version's public arrays (secret arrays dropped), authenticated, with facts about it.

        A version may be superseded (and its file destroyed) between reading its id and its file: then read again.
        A file that fails verification while its version is still the published one is a fault: logged for the
        operator, answered with a generic :class:`ServiceFaultError` (no path, no checksum).
        """
        for _ in range(5):
            with self.store.read() as s:
                m = self._model(s, model)
                ds = s.get(Dataset, m.dataset_id)
                v = s.get(ModelVersion, m.current_version_id)
                assert ds is not None and v is not None
                info: dict[str, Any] = {"model": m.name, "mechanism": m.mechanism, "params": dict(m.params),
                                        "version": v.number,
                        "version_id": v.id, "n_features": ds.n_features, "normalize": ds.normalize,
                        "feature_names": list(ds.feature_names.get("names", [])), "n_records": v.n_records}
                relpath, sha = v.artifact, v.sha256
            art = self._public_cache.get(info["version_id"])
            if art is not None:
                return art, info
            adapter = get_adapter(info["mechanism"], info["params"])
            try:
                full = self.artifacts.load(relpath, sha, self._binding(info["model"], info["mechanism"],
                                                                      info["params"], info["n_features"]))
            except ArtifactError as exc:
                with self.store.read() as s:
                    still = s.scalar(select(Model.current_version_id).where(Model.name == model))
                if still != info["version_id"]:
                    continue  # republished meanwhile: read the new version
                log.error("model %s version %d: artifact fault: %s", model, info["version"], exc)
                raise ServiceFaultError(f"Model {model!r} is unavailable: its stored state failed verification. "
                                        "The operator has been notified.") from None
            art = Artifact(arrays={k: a for k, a in full.arrays.items() if k not in adapter.secret_arrays},
                           meta=full.meta)
            if len(self._public_cache) > 32:
                self._public_cache.clear()
            self._public_cache[info["version_id"]] = art
            return art, info
        raise BusyError(f"Model {model!r} is being republished; try again.")

    def predict(self, model: str, features: Any) -> dict[str, Any]:
        """Predictions of the published version of ``model`` for rows ``features`` (n × d numbers)."""
        try:
            X = np.asarray(features, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"features must be a list of rows of numbers: {exc}") from exc
        with self.store.read() as s:
            m = self._model(s, model)
            ds = s.get(Dataset, m.dataset_id)
            assert ds is not None
            d = ds.n_features
        if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
            raise InvalidInputError(f"features must be a non-empty list of rows with {d} numbers each. "
                                    f"Found shape {X.shape}.")
        if not np.all(np.isfinite(X)):
            raise InvalidInputError("features must be finite numbers.")
        art, info = self._load_published(model)
        adapter = get_adapter(info["mechanism"], info["params"])
        Xp = normalize_rows(X) if info["normalize"] == "rows" else X
        pred = adapter.predict(art, Xp)
        return {"model": model, "version": info["version"],
                "predictions": [p if isinstance(p, str) else float(p) for p in pred.tolist()]}

    def verify_models(self) -> list[dict[str, Any]]:
        """Check every published version's artifact (checksum, HMAC, binding, invariants, record count); return
        the faults for operators: ``[{model, version, dataset, error}]`` (empty when all is well). Results for an
        unchanged file are cached."""
        with self.store.read() as s:
            rows = [(m.id, m.name, m.mechanism, dict(m.params), v.number, v.id, v.artifact, v.sha256, v.n_records,
                     ds.name, ds.n_features)
                    for m in s.scalars(select(Model).order_by(Model.id))
                    for v in [s.get(ModelVersion, m.current_version_id)]
                    for ds in [s.get(Dataset, m.dataset_id)] if v is not None and ds is not None]
        faults = []
        for model_id, name, mech, params, number, vid, relpath, sha, n_records, ds_name, d in rows:
            path = self.data_dir / relpath
            try:
                st = os.stat(path)
                stamp: Any = (vid, sha, st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                stamp = None
            if stamp is not None and self._verified.get(model_id) == stamp:
                continue
            try:
                art = self.artifacts.load(relpath, sha, self._binding(name, mech, params, d))
                n_meta = art.meta.get("n")
                if mech == "certified-removal" and n_meta != n_records:
                    raise ArtifactError(f"Artifact {relpath} is for {n_meta!r} records; the version has "
                                        f"{n_records}.")
            except ArtifactError as exc:
                self._verified.pop(model_id, None)
                faults.append({"model": name, "version": number, "dataset": ds_name, "error": str(exc),
                               "repair": f"lethe model retrain {name}"})
                continue
            if stamp is not None:
                self._verified[model_id] = stamp
        return faults

    def budget(self, model: str) -> dict[str, Any]:
        """Budget status of a model's published version (public numbers only)."""
        with self.store.read() as s:
            m = self._model(s, model)
            v = s.get(ModelVersion, m.current_version_id)
            ds = s.get(Dataset, m.dataset_id)
            assert v is not None and ds is not None
            n_versions = s.scalar(select(func.count()).select_from(ModelVersion)
                                  .where(ModelVersion.model_id == m.id))
            return {"model": m.name, "dataset": ds.name, "mechanism": m.mechanism, "params": m.params,
                    "version": v.number, "version_id": v.id, "published_at": iso(v.created_at),
                    "n_records": v.n_records, "versions_total": int(n_versions or 0), **v.summary}

    def status(self) -> dict[str, Any]:
        """Datasets, models and request counts."""
        with self.store.read() as s:
            datasets = []
            for ds in s.scalars(select(Dataset).where(Dataset.name.not_like(f"{DROPPED_PREFIX}%"))
                                .order_by(Dataset.id)):
                n = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id))
                datasets.append({"name": ds.name, "n_records": int(n or 0), "n_features": ds.n_features})
            models = []
            for m in s.scalars(select(Model).order_by(Model.id)):
                v = s.get(ModelVersion, m.current_version_id)
                models.append({"name": m.name, "mechanism": m.mechanism, "version": v.number if v else None,
                               "n_records": v.n_records if v else None,
                               "budget_left": v.summary.get("budget_left") if v else None})
            counts = dict(s.execute(select(DeletionRequest.status, func.count())
                                    .group_by(DeletionRequest.status)).all())
            oldest = s.scalar(select(func.min(DeletionRequest.submitted_at))
                              .where(DeletionRequest.status == "pending"))
        faults = self.verify_models()
        worker = read_state(self.data_dir)  # a worker process's own report (lethe.curator.wakeup)
        warm = len(self._warm) or (int(worker.get("warm_models", 0)) if worker is not None else 0)
        return {"data_dir": str(self.data_dir), "database": self._safe_url(), "healthy": not faults,
                "faults": faults, "datasets": datasets, "models": models,
                "requests": {k: int(counts.get(k, 0)) for k in ("pending", "done", "failed")},
                "oldest_pending": iso(oldest), "purge_pending": self.purge_pending(), "warm_models": warm,
                "worker_process": None if worker is None else
                {k: worker.get(k) for k in ("pid", "started_at", "ready", "warm_models")},
                "settings": {"batch_size": self.settings.batch_size, "max_delay": self.settings.max_delay}}

    def metrics(self) -> dict[str, Any]:
        """Numbers for monitoring (``GET /metrics`` renders them in Prometheus' format): request counts by status,
        the delays from submission to publication of done requests, batch sizes, and per model the version, the
        budget used and left, the ε spent and the retrainings; artifact faults and whether a purge is pending.
        Counts, delays and budgets only — nothing about any record."""
        with self.store.read() as s:
            counts = dict(s.execute(select(DeletionRequest.status, func.count())
                                    .group_by(DeletionRequest.status)).all())
            times = s.execute(select(DeletionRequest.submitted_at, DeletionRequest.processed_at)
                              .where(DeletionRequest.status == "done")).all()
            batches = [e.payload.get("count") for e in
                       s.scalars(select(LedgerEvent).where(LedgerEvent.kind == "records_deleted"))]
            models = []
            for m in s.scalars(select(Model).order_by(Model.id)):
                v = s.get(ModelVersion, m.current_version_id)
                if v is not None:
                    models.append({"model": m.name, "version": v.number, **dict(v.summary)})
        delays = []
        for sub, done in times:
            a, b = as_utc(sub), as_utc(done)
            if a is not None and b is not None:
                delays.append(max((b - a).total_seconds(), 0.0))
        return {"requests": {k: int(counts.get(k, 0)) for k in REQUEST_STATUSES}, "publication_seconds": delays,
                "batch_sizes": [int(b) for b in batches if isinstance(b, int)], "models": models,
                "faults": len(self.verify_models()), "purge_pending": self.purge_pending()}

    def _safe_url(self) -> str:
        return self.store.write_engine.url.render_as_string(hide_password=True)

    def ledger(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent ledger events (newest last)."""
        with self.store.read() as s:
            rows = s.scalars(select(LedgerEvent).order_by(LedgerEvent.id.desc()).limit(limit)).all()
            return [{"id": e.id, "at": iso(e.at), "kind": e.kind, "model_id": e.model_id, "version_id": e.version_id,
                     "request_id": e.request_id, "payload": _public_payload(e.payload)} for e in reversed(rows)]

    def pending_count(self) -> int:
        with self.store.read() as s:
            return int(s.scalar(select(func.count()).select_from(DeletionRequest)
                                .where(DeletionRequest.status == "pending")) or 0)


def _public_payload(payload: Any) -> Any:
    """A stored ledger payload as shown: events written by older versions may hold fields the rule now refuses."""
    try:
        return check_payload(dict(payload or {}))
    except ValueError:
        from lethe.curator.public import FORBIDDEN_PAYLOAD_KEYS

        return {k: v for k, v in dict(payload or {}).items() if k not in FORBIDDEN_PAYLOAD_KEYS}


class _ScrubbingFormatter(logging.Formatter):
    """Tracebacks keep their frames but not the exception's message, which a mechanism may have written with row
    positions ("indices must be distinct. Found 17 ...") — logs follow the publication rule too."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's API
        import traceback

        etype, _value, tb = ei
        frames = "".join(traceback.format_tb(tb)) if tb is not None else ""
        name = etype.__name__ if etype is not None else "Exception"
        return f"Traceback (most recent call last):\n{frames}{name} (message withheld: it may name rows)"


def configure_file_logging(data_dir: str | Path, name: str) -> Callable[[], None]:
    """Log ``lethe.*`` INFO and above to ``<data_dir>/logs/<name>.log`` (mode 0600). Returns a remover.

    The curator never logs keys, features or labels: only ids, counts and error types.
    """
    path = Path(data_dir).resolve() / LOG_DIR / f"{name}.log"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    handler = logging.FileHandler(path)
    handler.setFormatter(_ScrubbingFormatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("lethe")
    logger.addHandler(handler)
    level = logger.level
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)

    def remove() -> None:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(level)  # as it was: a remover undoes what it set up

    return remove


__all__ = [
    "BatchResult", "BusyError", "ConflictError", "Curator", "CuratorError", "InvalidInputError", "NotFoundError",
    "PermissionDeniedError", "Principal", "ProcessingLock", "ServiceFaultError", "Settings", "StorageError",
    "configure_file_logging", "storage_message",
]
