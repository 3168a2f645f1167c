"""The curator's HTTP API (FastAPI). Thin: every endpoint calls one :class:`~lethe.curator.service.Curator` method.

Authentication: ``Authorization: Bearer <token>``. Scopes: ``admin`` (everything) and ``requester`` (submit
deletions, read its own requests and their certificates, predict). Tokens are created with ``lethe token create``.
The OpenAPI schema is served at ``/openapi.json`` (interactive docs at ``/docs``).

Status codes: 200/202 success; 401 missing or unknown token; 403 wrong scope; 404 unknown dataset, model, key,
request or certificate; 409 repeated request, or a request id reused for another deletion; 422 malformed body or
wrong feature dimension; 503 busy (the processing lock or the database was held too long; retry).
"""


import contextlib
import math
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import OperationalError

import lethe
from lethe.curator.service import Curator, CuratorError, PermissionDeniedError, Principal
from lethe.curator.worker import BackgroundWorker

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
    attempts: int
    error: str | None
    submitted_at: str | None
    processed_at: str | None
    certificates: list[str]


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


class PredictIn(BaseModel):
    """Rows to predict, each with the dataset's number of features."""

    model_config = ConfigDict(extra="forbid")
    features: list[list[FiniteFloat]] = Field(min_length=1, max_length=10_000)


class PredictOut(BaseModel):
    model: str
    version: int
    predictions: list[float]


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


class _Unauthorized(Exception):
    """Raised by the auth dependency; answered with 401 and ``WWW-Authenticate: Bearer``."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def create_app(curator: Curator, *, run_worker: bool = True) -> FastAPI:
    """The FastAPI application over ``curator``; with ``run_worker`` a background worker thread processes requests."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = BackgroundWorker(curator) if run_worker else None
        if worker is not None:
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()

    app = FastAPI(title="lethe curator", version=lethe.__version__, lifespan=lifespan,
                  description="Deletion requests end to end: durable requests, certified removal, certificates, "
                              "purge. See docs/curator.md.")
    bearer = HTTPBearer(auto_error=False, description="A token from `lethe token create`.")

    @app.exception_handler(CuratorError)
    async def _curator_error(request: Request, exc: CuratorError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the default handler echoes the input, and fails (500) on NaN or infinity in it
        return JSONResponse({"detail": _json_safe(jsonable_encoder(exc.errors()))}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _db_busy(request: Request, exc: OperationalError) -> JSONResponse:
        return JSONResponse({"detail": "The database is busy; retry."}, status_code=503)

    def principal(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:  # noqa: B008
        if creds is None or creds.scheme.lower() != "bearer":
            raise _Unauthorized("Missing bearer token: send 'Authorization: Bearer <token>'.")
        p = curator.authenticate(creds.credentials)
        if p is None:
            raise _Unauthorized("Unknown or revoked token.")
        return p

    def admin(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
        if not p.is_admin:
            raise PermissionDeniedError(f"This needs the admin scope. Found scope {p.scope!r}.")
        return p

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    Caller = Annotated[Principal, Depends(principal)]
    Admin = Annotated[Principal, Depends(admin)]

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        """Liveness: 200 when the server answers."""
        return {"status": "ok"}

    @app.post("/v1/deletions", response_model=RequestOut, status_code=202, responses={200: {"model": RequestOut},
              **ERRORS}, tags=["deletions"])
    def submit_deletion(body: DeletionIn, p: Caller) -> Any:
        """Submit a deletion request. 202 once it is durably recorded; 200 for an idempotent repeat."""
        view, created = curator.submit_deletion(body.dataset, body.key, principal=p,
                                                client_request_id=body.request_id)
        return JSONResponse(RequestOut(**view).model_dump(), status_code=202 if created else 200)

    @app.get("/v1/deletions/{request_id}", response_model=RequestOut, responses=ERRORS, tags=["deletions"])
    def request_status(request_id: Id, p: Caller) -> Any:
        """The state of a request (a requester sees only its own)."""
        return _json_safe(curator.request_status(request_id, principal=p))

    @app.get("/v1/deletions/{request_id}/certificates", response_model=list[CertificateOut], responses=ERRORS,
             tags=["deletions"])
    def request_certificates(request_id: Id, p: Caller) -> Any:
        """The certificates of a processed request: one per model of the dataset."""
        return _json_safe(curator.request_certificates(request_id, principal=p))

    @app.get("/v1/certificates/{certificate_id}", response_model=CertificateOut, responses=ERRORS,
             tags=["deletions"])
    def certificate(certificate_id: Id, p: Caller) -> Any:
        """One certificate."""
        return _json_safe(curator.certificate(certificate_id, principal=p))

    @app.post("/v1/models/{model}/predict", response_model=PredictOut, responses=ERRORS, tags=["models"])
    def predict(model: Name, body: PredictIn, p: Caller) -> Any:
        """Predictions of the model's published version."""
        return _json_safe(curator.predict(model, body.features))

    @app.get("/v1/models/{model}/budget", response_model=BudgetOut, responses=ERRORS, tags=["models"])
    def budget(model: Name, p: Admin) -> Any:
        """Budget status of the model's published version (admin)."""
        return _json_safe(curator.budget(model))

    @app.get("/v1/status", responses=ERRORS, tags=["service"])
    def status(p: Admin) -> dict[str, Any]:
        """Datasets, models, request counts (admin)."""
        return _json_safe(curator.status())

    from lethe.curator.console import mount_console  # the web console at /console (issue 18)
    mount_console(app, curator)
    return app


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


__all__ = ["create_app"]
