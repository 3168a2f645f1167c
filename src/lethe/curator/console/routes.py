"""The console's pages (server-rendered Jinja2; see the package docstring)."""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import functools
import hashlib
import inspect
import io
import json
import re
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool

import lethe
from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import ArtifactError
from lethe.curator.console import auth, health, proofs
from lethe.curator.console import queries as Q
from lethe.curator.console.certificate import explain, num, percent
from lethe.curator.console.plots import chart, legend
from lethe.curator.errors import CuratorError, storage_message
from lethe.curator.service import Curator
from lethe.io import META_KEY

PREFIX = "/console"
STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_FORM_BYTES = 16_384
PAGE = 50


class _Stop(Exception):
    """Raised inside a handler to answer with ``response`` at once (redirect to sign-in, 403, 404...)."""

    def __init__(self, response: Response) -> None:
        super().__init__("stop")
        self.response = response


def _env() -> Environment:
    env = Environment(loader=PackageLoader("lethe.curator.console", "templates"),
                      autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.globals.update(num=num, percent=percent, version=lethe.__version__)
    env.filters["when"] = _when
    return env


def _when(value: str | None) -> str:
    """ISO time → 'YYYY-MM-DD HH:MM:SS UTC'."""
    if not value:
        return "—"
    try:
        t = _dt.datetime.fromisoformat(value).astimezone(_dt.UTC)
    except ValueError:
        return value
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def console_router(curator: Curator, *, http_status: Callable[[CuratorError], int]) -> APIRouter:
    """The console's routes over ``curator`` (mount with :func:`mount_console`). ``http_status``: the status code of
    a refusal (:func:`lethe.curator.api.http_status`: the HTTP layer owns the mapping)."""
    env = _env()
    sessions = auth.Sessions()
    login_csrf = auth.LoginCsrf()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        # at the worker's interval, but at most once a second: the queries run in the API's process
        evaluator = health.HoldoutEvaluator(curator, max(curator.settings.poll_interval, 1.0))
        evaluator.start()
        try:
            yield
        finally:
            evaluator.stop()

    router = APIRouter(prefix=PREFIX, include_in_schema=False, lifespan=lifespan)

    # -- helpers -------------------------------------------------------------------------------------------------------
    def render(request: Request, name: str, status: int = 200, sess: auth.Session | None = None,
               **ctx: Any) -> HTMLResponse:
        html = env.get_template(name).render(request=request, user=sess.principal if sess else None,
                                             csrf=sess.csrf if sess else None, prefix=PREFIX, **ctx)
        resp = HTMLResponse(html, status_code=status)
        auth.security_headers(resp)
        return resp

    def error(request: Request, status: int, message: str, sess: auth.Session | None = None) -> HTMLResponse:
        return render(request, "error.html", status=status, sess=sess, status_code=status, message=message)

    def session(request: Request, *, admin: bool = False) -> auth.Session:
        sess = sessions.get(request.cookies.get(auth.COOKIE))
        if sess is not None:
            with curator.store.read() as s:
                if not Q.token_active(s, sess.principal.name):
                    sessions.drop(request.cookies.get(auth.COOKIE))
                    sess = None
        if sess is None:
            nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            resp = RedirectResponse(f"{PREFIX}/login?{urlencode({'next': nxt})}", status_code=303)
            raise _Stop(auth.security_headers(resp))
        if admin and not sess.principal.is_admin:
            raise _Stop(error(request, 403, "This page is for administrators.", sess))
        return sess

    async def form(request: Request, sess: auth.Session | None) -> dict[str, str]:
        """The urlencoded form body (bounded), after the Origin and CSRF checks of a signed-in user."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            raise _Stop(error(request, 415, "Forms must be sent as application/x-www-form-urlencoded.", sess))
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise _Stop(error(request, 413, f"A form may hold at most {MAX_FORM_BYTES} bytes.", sess))
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            raise _Stop(error(request, 400, "The form could not be read.", sess)) from None
        fields = {k: v[0] for k, v in parsed.items()}
        if not auth.same_origin(request):
            raise _Stop(error(request, 403, "Refused: the form was sent from another site.", sess))
        if sess is not None and not auth.csrf_ok(sess, fields.get("csrf")):
            raise _Stop(error(request, 403, "Refused: the form's security token is missing or wrong. "
                                            "Reload the page and try again.", sess))
        return fields

    def stop_wrapper(fn: Any) -> Any:
        is_async = inspect.iscoroutinefunction(fn)

        @functools.wraps(fn)
        async def wrapped(*args: Any, **kwargs: Any) -> Response:
            try:
                if is_async:
                    return await fn(*args, **kwargs)  # type: ignore[no-any-return]
                return await run_in_threadpool(fn, *args, **kwargs)  # database reads off the event loop
            except _Stop as stop:
                return stop.response
        return wrapped

    def get(path: str) -> Any:
        return lambda fn: router.get(path, response_class=HTMLResponse)(stop_wrapper(fn))

    def post(path: str) -> Any:
        return lambda fn: router.post(path, response_class=HTMLResponse)(stop_wrapper(fn))

    # -- sign-in -------------------------------------------------------------------------------------------------------
    @get("")
    def home(request: Request) -> Response:
        return auth.security_headers(RedirectResponse(f"{PREFIX}/requests", status_code=303))

    def login_page(request: Request, status: int = 200, message: str | None = None) -> Response:
        pre = request.cookies.get(auth.PRE_COOKIE)
        if not pre or len(pre) > 100:
            pre = secrets.token_urlsafe(24)
        resp = render(request, "login.html", status=status, login_csrf=login_csrf.token(pre), message=message,
                      next=_safe_next(request.query_params.get("next")))
        auth.set_cookie(resp, request, auth.PRE_COOKIE, pre, max_age=3600)
        return resp

    @get("/login")
    def login_get(request: Request) -> Response:
        return login_page(request)

    @post("/login")
    async def login_post(request: Request) -> Response:
        fields = await form(request, None)
        if not login_csrf.check(request.cookies.get(auth.PRE_COOKIE), fields.get("csrf")):
            return login_page(request, 403, "The sign-in form expired. Please try again.")
        principal = curator.authenticate(fields.get("token", "").strip())
        if principal is None:
            return login_page(request, 401, "Unknown or revoked token.")
        sid, _ = sessions.create(principal)
        resp = RedirectResponse(_safe_next(fields.get("next")) or f"{PREFIX}/requests", status_code=303)
        auth.set_cookie(resp, request, auth.COOKIE, sid)
        auth.clear_cookie(resp, request, auth.PRE_COOKIE)
        return auth.security_headers(resp)

    @post("/logout")
    async def logout(request: Request) -> Response:
        sess = session(request)
        await form(request, sess)
        sessions.drop(request.cookies.get(auth.COOKIE))
        resp = RedirectResponse(f"{PREFIX}/login", status_code=303)
        auth.clear_cookie(resp, request, auth.COOKIE)
        return auth.security_headers(resp)

    # -- requests ------------------------------------------------------------------------------------------------------
    def requests_page(request: Request, sess: auth.Session, status: int = 200, message: str | None = None,
                      submitted: dict[str, str] | None = None) -> Response:
        p = request.query_params
        admin = sess.principal.is_admin
        st = p.get("status") or None
        if st is not None and st not in Q.STATUSES:
            return error(request, 422, f"status must be one of {Q.STATUSES}. Found {st!r}.", sess)
        q = (p.get("q") or "").strip()[:64] or None
        flt = Q.RequestFilter(status=st, dataset=p.get("dataset") or None,
                              requester=(p.get("requester") or None) if admin else sess.principal.name, q=q)
        try:
            with curator.store.read() as s:
                page = Q.list_requests(s, flt, after=p.get("after") or None, before=p.get("before") or None,
                                       limit=PAGE)
                counts = Q.status_counts(s, None if admin else sess.principal.name)
                dsets = Q.datasets(s)
                ages = Q.request_ages(s, None if admin else sess.principal.name)
        except ValueError as exc:
            return error(request, 422, str(exc), sess)
        base = {k: v for k, v in (("status", st), ("dataset", flt.dataset), ("q", q),
                                  ("requester", p.get("requester") if admin else None)) if v}
        nav = {"next": f"?{urlencode({**base, 'after': page.next_cursor})}" if page.next_cursor else None,
               "prev": f"?{urlencode({**base, 'before': page.prev_cursor})}" if page.prev_cursor else None}
        return render(request, "requests.html", status=status, sess=sess, page=page, flt=flt, counts=counts,
                      datasets=dsets, nav=nav, message=message, submitted=submitted or {}, statuses=Q.STATUSES,
                      ages=ages, title="Requests")

    @get("/requests")
    def requests_get(request: Request) -> Response:
        return requests_page(request, session(request))

    @post("/requests")
    async def requests_post(request: Request) -> Response:
        sess = session(request)
        fields = await form(request, sess)
        if not sess.principal.can_request:  # as the API: deletions need the requester or admin scope
            return error(request, 403, "Submitting deletions needs the requester or admin scope. Found scope "
                                       f"{sess.principal.scope!r}.", sess)
        dataset, key = fields.get("dataset", "").strip(), fields.get("key", "")
        client_id = fields.get("request_id", "").strip() or None
        try:
            view, _created = curator.submit_deletion(dataset, key, principal=sess.principal,
                                                     client_request_id=client_id)
        except CuratorError as exc:
            return requests_page(request, sess, status=http_status(exc), message=str(exc),
                                 submitted={"dataset": dataset, "request_id": client_id or ""})
        return auth.security_headers(RedirectResponse(f"{PREFIX}/requests/{view['id']}", status_code=303))

    def load_request(request: Request, sess: auth.Session, rid: str) -> tuple[dict[str, Any], list[Any]]:
        with curator.store.read() as s:
            req = Q.get_request(s, rid) if len(rid) <= 64 else None
            # a requester is told that another's request does not exist (as the API does)
            if req is None or not (sess.principal.is_admin or req["requester"] == sess.principal.name):
                raise _Stop(error(request, 404, f"Unknown request {rid[:64]!r}.", sess))
            certs = Q.certificates_of(s, rid)
        return req, certs

    @get("/requests/{rid}")
    def request_get(request: Request, rid: str) -> Response:
        sess = session(request)
        req, certs = load_request(request, sess, rid)
        shown = [explain(c, operator=sess.principal.is_admin) for c in certs]
        return render(request, "request.html", sess=sess, req=req, certs=shown, title=f"Request {rid[:8]}")

    @get("/requests/{rid}/certificate.html")
    def certificate_download(request: Request, rid: str) -> Response:
        sess = session(request)
        req, raw = load_request(request, sess, rid)
        certs = [explain(c, operator=False) for c in raw]  # for the data subject: the requester's view
        if req["status"] != "done" or not certs:
            return error(request, 404, "This request has no certificate yet.", sess)
        css = (STATIC_DIR / "certificate.css").read_text()
        html = env.get_template("certificate.html").render(req=req, certs=certs, css=css,
                                                           generated=_dt.datetime.now(_dt.UTC).isoformat(),
                                                           doc=proofs.certdoc.build_document(curator, rid))
        digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
        resp = HTMLResponse(html, headers={"Content-Disposition": f'attachment; filename="lethe-certificate-'
                                                                  f'{req["id"]}.html"'})
        # the downloaded file must work offline: its one style block is allowed by hash, nothing else
        return auth.security_headers(resp, csp=f"default-src 'none'; style-src 'sha256-{digest}'; "
                                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")

    # -- models --------------------------------------------------------------------------------------------------------
    @get("/models")
    def models_get(request: Request) -> Response:
        sess = session(request, admin=True)
        with curator.store.read() as s:
            ms = Q.models(s)
            assigned = Q.holdout_assignments(s)
            dsets = Q.datasets(s)
            for m in ms:
                vs = Q.model_versions(s, m["id"])
                m["versions"] = vs
                m["holdout"] = assigned.get(m["id"])
                m["charts"] = _model_charts(m, vs)
        return render(request, "models.html", sess=sess, models=ms, datasets=dsets, title="Models",
                      released=_private_release_mechanisms())

    @post("/models/{name}/holdout")
    async def holdout_post(request: Request, name: str) -> Response:
        sess = session(request, admin=True)
        fields = await form(request, sess)
        ds_name = fields.get("dataset", "")
        with curator.store.read() as s:
            model = next((m for m in Q.models(s) if m["name"] == name), None)
            dsets = {d["name"]: d for d in Q.datasets(s)}
        if model is None:
            return error(request, 404, f"Unknown model {name[:200]!r}.", sess)
        ds = dsets.get(ds_name)
        if ds is None or ds_name == model["dataset"]:
            return error(request, 422, "The held-out set must be another registered dataset than the model's "
                                       f"training data. Found {ds_name[:200]!r}.", sess)
        train_ds = dsets.get(model["dataset"] or "")
        if train_ds is not None and ds["n_features"] != train_ds["n_features"]:
            return error(request, 422, f"The held-out set must have {train_ds['n_features']} features. "
                                       f"Found {ds['n_features']} in {ds_name!r}.", sess)
        Q.append_event(curator.store, Q.HOLDOUT_SET, {"model": name, "dataset": ds_name}, model_id=model["id"])
        health.evaluate_holdout(curator)
        return auth.security_headers(RedirectResponse(f"{PREFIX}/models#model-{model['id']}", status_code=303))

    @get("/models/{name}/public.npz")
    def model_download(request: Request, name: str) -> Response:
        session(request, admin=True)
        with curator.store.read() as s:
            found = Q.version_artifact(s, name)
        if found is None:
            return error(request, 404, f"Unknown model {name[:200]!r}.")
        relpath, sha, number, mech, params = found
        try:
            art = curator.artifacts.load(relpath, sha)
        except ArtifactError:
            return error(request, 503, "The model is being republished or its file is damaged (see Health).")
        secret = set(get_adapter(mech, params).secret_arrays)
        arrays = {k: v for k, v in art.arrays.items() if k not in secret}
        meta = {"format_version": art.meta.get("format_version", 1), "model": name, "version": number,
                "mechanism": mech, "params": params, "public": True,
                **{k: v for k, v in art.meta.items() if k not in ("format_version",)}}
        buf = io.BytesIO()
        payload: dict[str, Any] = {**arrays, META_KEY: np.frombuffer(json.dumps(meta, sort_keys=True).encode(),
                                                                     dtype=np.uint8)}
        np.savez(buf, **payload)
        fname = f"{name}-v{number}-public.npz"
        return auth.security_headers(Response(buf.getvalue(), media_type="application/octet-stream", headers={
            "Content-Disposition": _attachment(fname)}))

    # -- ledger --------------------------------------------------------------------------------------------------------
    @get("/ledger")
    def ledger_get(request: Request) -> Response:
        sess = session(request, admin=True)
        p = request.query_params
        try:
            before = int(p["before"]) if p.get("before") else None
        except ValueError:
            return error(request, 422, f"before must be an event number. Found {p.get('before')!r}.", sess)
        kind = p.get("kind") or None
        with curator.store.read() as s:
            events, older = Q.ledger_page(s, before=before, kind=kind, limit=PAGE)
            n, lo, hi = Q.ledger_bounds(s)
            kinds = Q.ledger_kinds(s)
            triggers = Q.sqlite_triggers(s)
            is_sqlite = s.get_bind().dialect.name == "sqlite"
            last_cp, _ = Q.ledger_page(s, kind=Q.CHECKPOINT, limit=1)
        quick = {"gapless": n == 0 or (lo == 1 and hi is not None and hi - lo + 1 == n), "n": n, "max": hi,
                 "sequence": not is_sqlite,  # unused ids: aborted transactions (see health.verify_chain)
                 "triggers": (None if not is_sqlite else {"ledger_no_update", "ledger_no_delete"} <= triggers),
                 "checkpoint": last_cp[0] if last_cp else None}
        older_q = f"?{urlencode({**({'kind': kind} if kind else {}), 'before': older})}" if older else None
        return render(request, "ledger.html", sess=sess, events=events, older=older_q, kinds=kinds, kind=kind,
                      quick=quick, report=None, title="Ledger", fmt_payload=_fmt_payload)

    @get("/ledger/verify")
    def ledger_verify(request: Request) -> Response:
        sess = session(request, admin=True)
        report = health.verify_chain(curator)
        chain = proofs.certdoc.check_ledger(curator, head=request.query_params.get("head") or None)
        return render(request, "verify.html", sess=sess, report=report, chain=chain, title="Ledger check")

    @post("/ledger/checkpoint")
    async def ledger_checkpoint(request: Request) -> Response:
        sess = session(request, admin=True)
        await form(request, sess)
        health.record_checkpoint(curator)
        return auth.security_headers(RedirectResponse(f"{PREFIX}/ledger", status_code=303))

    # -- health --------------------------------------------------------------------------------------------------------
    @get("/health")
    def health_get(request: Request) -> Response:
        sess = session(request, admin=True)
        try:
            h = health.check(curator)
        except (OSError, OperationalError) as exc:  # the storage itself failed: a fault page, not a 500
            return error(request, 503, storage_message(exc, curator.data_dir) + " The Health page needs to read "
                                       "the data directory and the database; see `lethe status`.", sess)
        return render(request, "health.html", sess=sess, h=h, settings=curator.settings, title="Health")

    proofs.register(router, curator, proofs.Helpers(render, error, session, get, post, _Stop))
    return router


def _attachment(fname: str) -> str:
    """A ``Content-Disposition`` naming ``fname`` safely: an ASCII fallback with every character outside
    ``[A-Za-z0-9._-]`` replaced (no quote, backslash, semicolon or line break can end the header's value early) and
    the exact name percent-encoded (RFC 6266 ``filename*``). Names of older stores may hold such characters."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", fname) or "download"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(fname, safe='')}"


def _safe_next(value: str | None) -> str | None:
    """Only a path inside the console (no scheme, host or '//' — no open redirect)."""
    if not value or not value.startswith(PREFIX + "/") or value.startswith("//") or "\\" in value:
        return None
    if any(ord(c) < 32 for c in value) or len(value) > 500:
        return None
    return value


def _fmt_payload(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return text if len(text) <= 300 else text[:297] + "…"


def _model_charts(m: dict[str, Any], vs: list[dict[str, Any]]) -> dict[str, Any]:
    xs = [v["number"] for v in vs]
    marks = [v["number"] for v in vs if v["retrained"]]
    uid = f"m{m['id']}"
    fields = _budget_fields(m.get("mechanism"))  # the family declares which summary fields are its budget
    used: list[float | None] = []
    for v in vs:
        s = v["summary"]
        r, b = (s.get(fields[0]), s.get(fields[1])) if fields else (None, None)
        if isinstance(b, int | float) and isinstance(r, int | float) and b > 0:
            used.append(100.0 * float(r) / float(b))
        else:
            used.append(None)
    known = [u for u in used if u is not None]
    # a drop of the budget used without a retraining: the residual bound was measured afresh (bound mode "tight")
    remeasured = [vs[i]["number"] for i in range(1, len(vs)) if not vs[i]["retrained"] and used[i] is not None
                  and used[i - 1] is not None and used[i] < used[i - 1] - 1e-9]  # type: ignore[operator]
    acc = [None if v["accuracy"] is None else 100.0 * v["accuracy"] for v in vs]
    acc_known = [a for a in acc if a is not None]
    n_retrain = len(marks)
    return {
        "has_budget": fields is not None,
        "budget": chart(f"{uid}-budget", f"Budget used by model {m['name']}, by version",
                        (f"{len(xs)} versions; budget used from {known[0]:.1f} % to {known[-1]:.1f} %; "
                         f"{n_retrain} retraining(s) (back to 0 %), {len(remeasured)} re-measurement(s)")
                        if known else "no budget figures", xs, used, unit="%", y_min=0.0, y_max=100.0,
                        marks=marks, remeasured=remeasured),
        "budget_legend": legend([
            ("line", f"share of the budget spent ({fields[0]} over {fields[1]} of each version's certificate)"
             if fields else "no budget"),
            ("retrain", f"retraining ({n_retrain}): the budget would have been exceeded; the model was trained "
                        "again and starts at 0 %"),
            ("remeasure", f"re-measured ({len(remeasured)}): the residual was measured afresh and is below the "
                          "accumulated bound, so the share used drops without a retraining")]),
        "accuracy": chart(f"{uid}-acc", f"Held-out accuracy of model {m['name']}, by version",
                          f"{len(acc_known)} of {len(xs)} versions evaluated"
                          + (f"; latest {acc_known[-1]:.1f} %" if acc_known else ""), xs, acc, unit="%",
                          y_min=None, y_max=100.0, marks=marks),
        "removals": chart(f"{uid}-rem", f"Records removed per version of model {m['name']}",
                          f"{sum(v['removed'] for v in vs)} records removed over {len(xs)} versions; "
                          f"{n_retrain} retraining(s)", xs, [float(v["removed"]) for v in vs], bars=True,
                          marks=marks),
    }


def mount_console(app: FastAPI, curator: Curator, *, http_status: Callable[[CuratorError], int]) -> None:
    """Serve the console at ``/console`` on ``app`` (pages and ``/console/static``); ``http_status`` maps a refusal
    to its status code (see :func:`console_router`)."""
    app.include_router(console_router(curator, http_status=http_status))
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="console-static")


__all__ = ["console_router", "mount_console"]


def _budget_fields(mechanism: Any) -> tuple[str, str] | None:
    """The (spent, total) summary fields of ``mechanism``'s family budget (:attr:`lethe.families.Family.budget`),
    or None (no budget, or a mechanism no registered family runs any more)."""
    from lethe.families import family_of_mechanism

    try:
        return family_of_mechanism(mechanism).budget if isinstance(mechanism, str) else None
    except ValueError:
        return None


def _private_release_mechanisms() -> str:
    """The mechanisms whose every release is private (the registry's families with
    :attr:`~lethe.families.Capability.PRIVATE_RELEASES`), for the models page's "train with …" hint."""
    from lethe.families import Capability, families

    names = [m for f in families() if f.has(Capability.PRIVATE_RELEASES) for m in f.mechanisms]
    return " or ".join(f"--mechanism {m}" for m in names) or "a mechanism with private releases"
