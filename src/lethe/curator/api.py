"""The curator's HTTP API (FastAPI). Thin: every endpoint calls one :class:`~lethe.curator.service.Curator` method.

Authentication: ``Authorization: Bearer <token>``. Scopes: ``admin`` (everything), ``requester`` (submit
deletions, read its own requests and their certificates) and ``model-reader`` (the published models: weights and
predictions; issue 26 — reading the published sequence is what a version-diff attack needs, so a deletion requester
does not get it). Tokens are created with ``lethe token create``.
The OpenAPI schema is served at ``/openapi.json`` (no ``/docs``: Swagger UI would load from a CDN; see docs/curator.md).

Status codes: 200/202 success; 401 missing or unknown token; 403 wrong scope; 404 unknown dataset, model,
request or certificate (never a key: see ``lethe.curator.intake.decide``); 409 a request id reused for another
deletion; 413 body too large
(checked before parsing and before authentication); 422 malformed body or wrong feature dimension (the answer names
the field and the rule, never echoes the input); 503 busy (the processing lock or the database was held too long;
retry), or a fault the operator must repair.
"""


import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool

import lethe
from lethe.curator import errors
from lethe.curator.adapters import get_adapter
from lethe.curator.errors import BusyError, CuratorError, PermissionDeniedError, storage_message
from lethe.curator.faults import service_faults
from lethe.curator.metrics import BATCH_BUCKETS, PER_MODEL, PUBLICATION_BUCKETS
from lethe.curator.service import Curator
from lethe.curator.settings import Principal
from lethe.curator.views import json_safe
from lethe.curator.worker import BackgroundWorker, WorkerProcess

log = logging.getLogger("lethe.curator.api")

#: the HTTP status code answering each kind of refusal (the most specific class listed wins; the curator's
#: exceptions carry no transport)
STATUS_CODES: dict[type[CuratorError], int] = {
    errors.NotFoundError: 404, errors.ConflictError: 409, errors.PermissionDeniedError: 403,
    errors.InvalidInputError: 422, errors.BusyError: 503, errors.StorageError: 507, errors.ServiceFaultError: 503,
}


def http_status(exc: CuratorError) -> int:
    """The status code of a refusal: that of its nearest class in :data:`STATUS_CODES`, else 400."""
    for cls in type(exc).__mro__:
        code = STATUS_CODES.get(cls)  # type: ignore[call-overload]
        if code is not None:
            return code
    return 400

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Name = Annotated[str, Path(min_length=1, max_length=200)]
Id = Annotated[str, Path(min_length=1, max_length=64)]


class Error(BaseModel):
    """An error: ``detail`` says what was wrong (name, rule, value)."""

    detail: Any


class DeletionIn(BaseModel):
    """A deletion request: the record with key ``key`` in dataset ``dataset``.

    ``request_id`` (optional, client-chosen) makes the submission idempotent: resubmitting the same id with the same
    dataset and key returns the original request (200) instead of a new one (202).
    """

    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(min_length=1, max_length=200)
    key: str = Field(min_length=1, max_length=512)
    request_id: str | None = Field(default=None, min_length=1, max_length=200)


class RequestOut(BaseModel):
    """The state of a deletion request (its key is never stored in plain text, hence never returned)."""

    id: str
    request_id: str | None
    dataset: str | None
    requester: str
    status: str = Field(description="pending | done | failed")
    outcome: str | None = Field(default=None, description=(
        "once done: 'removed' (certificates name the versions without the record) or 'no record held' (the key was "
        "never held or was already deleted: one answer for both, so no answer tells anyone but the owner of an "
        "earlier request whether a key was deleted)"))
    attempts: int
    error: str | None
    submitted_at: str | None
    processed_at: str | None
    seconds_to_publication: float | None = Field(
        default=None, description="seconds from submission to the publication of the version without the record")
    certificates: list[str]


class RequestPage(BaseModel):
    """One page of requests, newest first; pass ``next_cursor`` as ``cursor`` for the next page (null: no more)."""

    items: list[RequestOut]
    next_cursor: str | None


class CertificateOut(BaseModel):
    """A certificate: the mechanism's certificate verbatim plus request, model, versions and timestamps."""

    id: str
    kind: str = Field(description="removal | deletion | train")
    request_id: str | None
    batch_id: str | None
    model: str | None
    mechanism: str | None
    old_version: int | None
    new_version: int | None
    old_version_id: int | None
    new_version_id: int | None
    submitted_at: str | None
    issued_at: str | None
    certificate: dict[str, Any]
    exposure: dict[str, Any] | None = Field(default=None, description=(
        "what the request's own record was exposed to: per stream of its dataset, the releases that held it, and "
        "their epsilon (issue 36; docs/release_privacy.md §8)"))


class PredictIn(BaseModel):
    """Rows to predict: ``features`` (each with the dataset's number of features) or, for a dataset registered with
    a schema, ``records`` (JSON objects with the schema's columns, encoded by it), or for a text dataset ``texts``
    (raw texts, embedded by its recorded embedder); exactly one of them."""

    model_config = ConfigDict(extra="forbid")
    features: list[list[FiniteFloat]] | None = Field(default=None, min_length=1, max_length=10_000)
    records: list[dict[str, str | float | bool | None]] | None = Field(default=None, min_length=1,
                                                                       max_length=10_000)
    texts: list[str] | None = Field(default=None, min_length=1, max_length=1_000)  # a text dataset's raw texts


class PredictOut(BaseModel):
    model: str
    version: int
    predictions: list[float | str]


class BudgetOut(BaseModel):
    """Budget status of the published version (public numbers; never the secret perturbation)."""

    model_config = ConfigDict(extra="allow")
    model: str
    dataset: str
    mechanism: str
    version: int
    n_records: int


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Error, "description": "Missing or unknown bearer token"},
    403: {"model": Error, "description": "The token's scope does not allow this"},
    404: {"model": Error, "description": "Unknown dataset, model, key, request or certificate"},
    409: {"model": Error, "description": "Repeated request or reused request id"},
    422: {"model": Error, "description": "Malformed input"},
    503: {"model": Error, "description": "Busy; retry"},
}


DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413 before the application parses them or authenticates.

    A pure ASGI middleware, outermost: a declared ``Content-Length`` over the limit is refused without reading the
    body; otherwise the body is read as it streams (chunked or not), counting bytes, and refused as soon as the count
    passes the limit — so at most ``max_bytes`` (plus one chunk) is ever held. The body read is then replayed to the
    application.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an integer >= 1. Found {max_bytes!r}.")
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = [v for k, v in scope.get("headers", []) if k.lower() == b"content-length"]
        if declared:
            try:
                n = int(declared[0])
                if n < 0:
                    raise ValueError
            except ValueError:
                await self._refuse(send, 400, "Content-Length must be a non-negative integer.")
                return
            if n > self.max_bytes:
                await self._refuse(send, 413, f"The request body may have at most {self.max_bytes} bytes.")
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, 413, f"The request body may have at most {self.max_bytes} bytes.")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class NoSniffMiddleware:
    """Every response says ``X-Content-Type-Options: nosniff`` (a browser must not reinterpret a JSON answer, or
    any other, as HTML or script). A pure ASGI middleware, outermost: refusals of the body limit get it too."""

    HEADER = (b"x-content-type-options", b"nosniff")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == self.HEADER[0] for k, _v in headers):
                    headers.append(self.HEADER)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_header)


def _safe_errors(errors: Any) -> list[dict[str, Any]]:
    """Validation errors without the input: location (each part cut to 64 characters), message and type only."""
    out = []
    for e in errors:
        loc = [p if isinstance(p, int) else _cut(str(p)) for p in e.get("loc", ())]
        out.append({"loc": loc, "msg": _cut(str(e.get("msg", "")), 200), "type": str(e.get("type", ""))})
    return out


def _cut(text: str, n: int = 64) -> str:
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be sent as JSON
    return text if len(text) <= n else text[:n] + "..."


class _Unauthorized(Exception):
    """Raised by the auth dependency; answered with 401 and ``WWW-Authenticate: Bearer``."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class SubmissionIntake:
    """Deletion submissions from the event loop to one intake thread, which writes them in groups.

    The endpoint awaits a future instead of holding a thread-pool thread: the intake thread takes every submission
    queued while its previous group committed and writes them as one group (:meth:`Curator.submit_deletions`: one
    transaction, one fsync), then settles each future on the loop. The answers are those of the submissions made one
    after the other in arrival order; an answer is sent only after its group committed.
    """

    def __init__(self, curator: Curator, max_group: int = 512) -> None:
        self.curator = curator
        self.max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="lethe-intake", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    async def submit(self, dataset: str, key: str, principal: Principal,
                     request_id: str | None) -> tuple[dict[str, Any], bool]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[dict[str, Any], bool]] = loop.create_future()
        self._queue.put(((dataset, key, principal, request_id), loop, fut))
        return await fut

    @staticmethod
    def _settle(fut: asyncio.Future[Any], outcome: Any) -> None:
        if fut.done():  # the client went away
            return
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            items = [item]
            while len(items) < self.max_group:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                items.append(nxt)
            try:
                outcomes: list[Any] = self.curator.submit_deletions([it[0] for it in items])
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error (the handlers map it)
                outcomes = [exc] * len(items)
            for (_sub, loop, fut), outcome in zip(items, outcomes, strict=True):
                with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
                    loop.call_soon_threadsafe(self._settle, fut, outcome)


WORKER_MODES = ("process", "thread", "none")


def create_app(curator: Curator, *, run_worker: bool | str = True, max_body_bytes: int | None = None) -> FastAPI:
    """The FastAPI application over ``curator``.

    ``run_worker``: who processes the requests while the application runs — ``"process"`` (or ``True``, the
    default): a supervised ``lethe worker`` child process on the same data directory, database and settings
    (:class:`~lethe.curator.worker.WorkerProcess`); ``"thread"``: a thread of this process
    (:class:`~lethe.curator.worker.BackgroundWorker`); ``"none"`` (or ``False``): nobody here (run ``lethe worker``).

    ``max_body_bytes``: the largest request body accepted (default ``$LETHE_MAX_BODY_BYTES`` or 4 MiB); larger
    bodies get 413 before they are parsed or the token is checked.
    """
    if max_body_bytes is None:
        max_body_bytes = int(os.environ.get("LETHE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))
    mode = ("process" if run_worker else "none") if isinstance(run_worker, bool) else run_worker
    if mode not in WORKER_MODES:
        raise ValueError(f"run_worker must be True, False or one of {WORKER_MODES}. Found {run_worker!r}.")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # recovery runs before anything is served: a crash right after a publish commit leaves superseded artifacts
        # (with their secret b) and unpurged database pages, which must be gone before the first answer
        try:
            curator.recover()
        except BusyError:  # another process holds the lock: it recovers (every processing entry point does) first
            log.warning("recovery skipped at start: another process is processing %s", curator.data_dir)
        if mode != "thread":  # the worker (a process) checkpoints SQLite's WAL; submissions' commits do not
            curator.store.defer_checkpoints()
        worker: BackgroundWorker | WorkerProcess | None = (
            WorkerProcess(curator) if mode == "process" else BackgroundWorker(curator) if mode == "thread" else None)
        if worker is not None:
            worker.start()
        intake.start()
        # the interpreter's objects so far (imports, the application) move to the permanent generation: a full
        # collection no longer traverses them — with SciPy, SQLAlchemy and FastAPI loaded that took 0.1-0.2 s, during
        # which the event loop answered nobody (the submissions' p99). What the first requests would import lazily
        # (the modules of the mechanisms the store's models use, through a model check) is imported first; not those
        # of mechanisms no model uses (a network family's torch alone is ≈ 180 MB of the server's memory)
        with contextlib.suppress(Exception):
            for name in curator.mechanisms_in_use():
                get_adapter(name)
            curator.verify_models()
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            intake.stop()
            if worker is not None:
                worker.stop()

    intake = SubmissionIntake(curator)
    # no /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN, outside the console's CSP; the
    # schema stays at /openapi.json for any OpenAPI viewer the operator trusts
    app = FastAPI(title="lethe curator", version=lethe.__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Deletion requests end to end: durable requests, certified removal, certificates, "
                              "purge. See docs/curator.md.")
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(NoSniffMiddleware)  # type: ignore[arg-type]  # added last: outermost
    bearer = HTTPBearer(auto_error=False, description="A token from `lethe token create`.")

    @app.exception_handler(CuratorError)
    async def _curator_error(request: Request, exc: CuratorError) -> JSONResponse:
        if isinstance(exc, errors.StorageError):
            curator.retention.storage.report_failure(exc)  # /healthz degraded until a write succeeds again
        return JSONResponse({"detail": str(exc)}, status_code=http_status(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the default handler echoes the input (a 300 MB body came back whole), and fails (500) on NaN, infinity or
        # lone surrogates in it: answer with the location, message and type only
        return JSONResponse({"detail": _safe_errors(exc.errors())}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _db_error(request: Request, exc: OperationalError) -> JSONResponse:
        text = str(exc.orig).lower()
        if "locked" in text or "busy" in text or "timeout" in text:
            return JSONResponse({"detail": "The database is busy; retry."}, status_code=503)
        message = storage_message(exc, curator.data_dir)
        if "is full" not in message and "read-only" not in message:
            # SQLite names a read-only or full file system in several ways ("disk I/O error", "unable to open
            # database file"): the storage probe says which, so the answer is the documented one (507)
            fault = curator.retention.storage.probe()
            if fault is not None:
                message = str(fault["error"])
        log.error("storage failure: %s", message)  # the operator's view names the directory; the answer does not
        if "is full" in message or "read-only" in message:
            curator.retention.storage.report_failure(exc)  # /healthz degraded until a write succeeds again
        if "is full" in message:
            return JSONResponse({"detail": "The server's storage is full; nothing was changed. The operator has "
                                           "been notified."}, status_code=507)
        if "read-only" in message:
            return JSONResponse({"detail": "The server's storage is read-only; nothing was changed. The operator "
                                           "has been notified."}, status_code=507)
        return JSONResponse({"detail": "The server's storage is unavailable; nothing was changed."}, status_code=503)

    async def principal(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:  # noqa: B008
        # async: a cached token is checked on the loop (a stat and a dict look-up); a database read goes to a thread
        if creds is None or creds.scheme.lower() != "bearer":
            raise _Unauthorized("Missing bearer token: send 'Authorization: Bearer <token>'.")
        p = curator.cached_principal(creds.credentials)
        if p is None:
            p = await run_in_threadpool(curator.authenticate, creds.credentials)
        if p is None:
            raise _Unauthorized("Unknown or revoked token.")
        return p

    async def admin(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
        if not p.is_admin:
            raise PermissionDeniedError(f"This needs the admin scope. Found scope {p.scope!r}.")
        return p

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    async def deletion_caller(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
        if not p.can_request:
            raise PermissionDeniedError(f"This needs the requester or admin scope. Found scope {p.scope!r}.")
        return p

    async def model_reader(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
        if not p.can_read_models:
            raise PermissionDeniedError(f"This needs the model-reader or admin scope. Found scope {p.scope!r}.")
        return p

    Caller = Annotated[Principal, Depends(deletion_caller)]  # deletions: requesters (their own) and admins
    Reader = Annotated[Principal, Depends(model_reader)]  # published models: model-readers and admins
    Admin = Annotated[Principal, Depends(admin)]

    @app.get("/healthz", tags=["service"])
    def healthz(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> dict[str, Any]:  # noqa: B008
        """Liveness (200 whenever the server answers) and health: ``status`` is ``degraded`` when a model's stored
        state fails verification, a dataset's files are missing or damaged, or the storage cannot be written (full
        disk, read-only: ``storage`` is then ``"faulty"``; it clears once a write succeeds again). Healthy:
        ``{"status": "ok"}``; degraded: ``{"status": "degraded", "faults": n, "storage": "ok" | "faulty"}``. Anyone
        sees the counts; an admin token adds ``detail`` (each fault and its repair, as ``lethe status`` shows them)."""
        storage = curator.retention.storage.probe()
        out: dict[str, Any] = {"status": "ok", "faults": 0, "storage": "ok" if storage is None else "faulty"}
        try:
            faults = service_faults(curator.serving, curator.store, curator.retention)
        except Exception:  # the database itself is unavailable: still alive, not healthy
            return {**out, "status": "degraded", "faults": None}
        out["faults"] = len(faults)
        if faults or storage is not None:
            out["status"] = "degraded"
        else:
            out = {"status": "ok"}  # the healthy answer as it always was
        if creds is not None and creds.scheme.lower() == "bearer":
            p = curator.cached_principal(creds.credentials) or curator.authenticate(creds.credentials)
            if p is not None and p.is_admin:
                out["detail"] = {"faults": json_safe(faults), "storage": json_safe(storage)}
        return out

    @app.post("/v1/deletions", response_model=RequestOut, status_code=202, responses={200: {"model": RequestOut},
              **ERRORS}, tags=["deletions"])
    async def submit_deletion(body: DeletionIn, p: Caller) -> Any:
        """Submit a deletion request. 202 once it is durably recorded; 200 for an idempotent repeat."""
        view, created = await intake.submit(body.dataset, body.key, p, body.request_id)
        return JSONResponse(RequestOut(**view).model_dump(), status_code=202 if created else 200)

    @app.get("/v1/deletions", response_model=RequestPage, responses=ERRORS, tags=["deletions"])
    def list_requests(p: Caller, status: Annotated[str | None, Query(pattern="^(pending|done|failed)$")] = None,
                      dataset: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                      request_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                      requester: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                      limit: Annotated[int, Query(ge=1, le=500)] = 50,
                      cursor: Annotated[str | None, Query(max_length=200)] = None) -> Any:
        """Deletion requests, newest first (a requester: its own; an admin: all, optionally of one requester)."""
        return curator.list_requests(p, status=status, dataset=dataset, request_id=request_id,
                                     requester=requester if p.is_admin else None, limit=limit, cursor=cursor)

    @app.get("/v1/deletions/{request_id}", response_model=RequestOut, responses=ERRORS, tags=["deletions"])
    def request_status(request_id: Id, p: Caller) -> Any:
        """The state of a request (a requester sees only its own)."""
        return json_safe(curator.request_status(request_id, principal=p))

    @app.get("/v1/deletions/{request_id}/certificates", response_model=list[CertificateOut], responses=ERRORS,
             tags=["deletions"])
    def request_certificates(request_id: Id, p: Caller) -> Any:
        """The certificates of a processed request: one per model of the dataset."""
        return json_safe(curator.request_certificates(request_id, principal=p))

    @app.get("/v1/deletions/{request_id}/certificate.json", responses=ERRORS, tags=["deletions"])
    def signed_certificate(request_id: Id, p: Caller) -> Any:
        """The request's certificate document signed by the service (Ed25519; as the console's download): check it
        offline with ``lethe certificate verify FILE``. 404 until the request is done with a certificate."""
        from lethe.curator.certdoc import build_document
        from lethe.curator.errors import NotFoundError

        curator.request_status(request_id, principal=p)  # a requester: its own requests only (else 404)
        doc = build_document(curator, request_id)
        if doc is None:
            raise NotFoundError(f"Request {request_id!r} has no certificate yet.")
        return JSONResponse(doc)

    @app.get("/v1/certificates/{certificate_id}", response_model=CertificateOut, responses=ERRORS,
             tags=["deletions"])
    def certificate(certificate_id: Id, p: Caller) -> Any:
        """One certificate."""
        return json_safe(curator.certificate(certificate_id, principal=p))

    @app.post("/v1/models/{model}/predict", response_model=PredictOut, responses=ERRORS, tags=["models"])
    def predict(model: Name, body: PredictIn, p: Reader) -> Any:
        """Predictions of the model's published version: served from models with private releases only,
        or from a model an operator opted in at training (``--serve-unreleased``); else 403 naming the ways out."""
        return json_safe(curator.predict(model, body.features, records=body.records, texts=body.texts, principal=p))

    @app.get("/v1/models/{model}/budget", response_model=BudgetOut, responses=ERRORS, tags=["models"])
    def budget(model: Name, p: Admin) -> Any:
        """Budget status of the model's published version (admin)."""
        return json_safe(curator.budget(model))

    @app.get("/v1/models/{model}/versions", responses=ERRORS, tags=["models"])
    def versions(model: Name, p: Admin) -> Any:
        """The model's version history with each version's certificate and budget (admin)."""
        return json_safe(curator.model_versions(model))

    @app.get("/v1/models/{model}", responses=ERRORS, tags=["models"])
    def public_model(model: Name, p: Reader) -> Any:
        """The published version's public weights (never the secret perturbation), feature names and classes; served
        as predictions are (released models, or an operator's opt-in; an admin token reads every model)."""
        return json_safe(curator.public_model(model, principal=p))

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse, responses=ERRORS)
    def metrics(p: Admin) -> PlainTextResponse:
        """Prometheus metrics (admin token; scrape with ``authorization: {credentials: <token>}``)."""
        from lethe.curator.deadlines import render_metrics as deadline_metrics
        return PlainTextResponse(curator.prometheus.render() + deadline_metrics(curator),
                                 media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/status", responses=ERRORS, tags=["service"])
    def status(p: Admin) -> dict[str, Any]:
        """Datasets, models, request counts (admin); the signing key and the ledger's chain head."""
        from lethe.curator.certdoc import published_keys
        return json_safe({**curator.status(), "signing": published_keys(curator, detail=True)})

    @app.get("/v1/keys", tags=["service"])
    def keys() -> dict[str, Any]:
        """The service's public signing key(s) (Ed25519) and the ledger's chain head: what a downloaded certificate
        and an exported ledger are checked against (``lethe certificate verify``, ``lethe ledger verify``). Public."""
        from lethe.curator.certdoc import published_keys
        return json_safe(published_keys(curator))

    from lethe.curator.console import mount_console  # the web console at /console (issue 18)
    mount_console(app, curator, http_status=http_status)
    return app


def render_metrics(m: dict[str, Any]) -> str:
    """The Prometheus text exposition of :meth:`Curator.metrics` — every number recomputed from the store (every
    done request read). ``GET /metrics`` serves :class:`lethe.curator.metrics.CuratorMetrics` instead (instruments
    updated from the ledger's new events); this full recomputation is kept as its reference (tests compare them)."""
    from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, HistogramMetricFamily

    def histogram(name: str, doc: str, values: list[float], buckets: tuple[float, ...]) -> HistogramMetricFamily:
        arr = sorted(values)
        cum = [(str(float(b)), sum(1 for v in arr if v <= b)) for b in buckets] + [("+Inf", len(arr))]
        return HistogramMetricFamily(name, doc, buckets=cum, sum_value=float(sum(arr)))

    class _Collector:
        def collect(self) -> Any:
            g = GaugeMetricFamily("lethe_requests", "Deletion requests by status", labels=["status"])
            for status, n in m["requests"].items():
                g.add_metric([status], n)
            yield g
            yield histogram("lethe_request_publication_seconds", "Time from submission to publication (done "
                            "requests)", m["publication_seconds"], PUBLICATION_BUCKETS)
            yield histogram("lethe_batch_size", "Requests removed per batch", [float(b) for b in m["batch_sizes"]],
                            tuple(float(b) for b in BATCH_BUCKETS))
            per_model = PER_MODEL
            for name, (doc, key) in per_model.items():
                fam = GaugeMetricFamily(name, doc, labels=["model"])
                for mm in m["models"]:
                    v = mm.get(key)
                    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                        fam.add_metric([mm["model"]], float(v))
                yield fam
            used = GaugeMetricFamily("lethe_model_budget_used_ratio", "residual_bound / budget", labels=["model"])
            for mm in m["models"]:
                b, r = mm.get("budget"), mm.get("residual_bound")
                if isinstance(b, int | float) and isinstance(r, int | float) and b > 0 and math.isfinite(b):
                    used.add_metric([mm["model"]], float(r) / float(b))
            yield used
            yield GaugeMetricFamily("lethe_artifact_faults", "Models whose published artifact fails verification",
                                    value=m["faults"])
            yield GaugeMetricFamily("lethe_storage_fault", "1 if the data directory cannot be written (full disk, "
                                    "read-only)", value=1.0 if m.get("storage_fault") else 0.0)
            yield GaugeMetricFamily("lethe_purge_pending", "1 if deleted records await a purge",
                                    value=1.0 if m["purge_pending"] else 0.0)

    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    registry.register(_Collector())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


__all__ = ["DEFAULT_MAX_BODY_BYTES", "WORKER_MODES", "BodyLimitMiddleware", "SubmissionIntake", "create_app",
           "render_metrics"]
