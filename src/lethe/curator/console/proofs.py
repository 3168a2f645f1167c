"""The console's audit pages (issue 38): signed certificate downloads (JSON), the certificate verify page, and the
exports of requests, certificates and the ledger. Registered by :func:`lethe.curator.console.routes.console_router`
through :func:`register`, with the router's own helpers (sign-in, rendering, errors)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from lethe.curator import certdoc, exports
from lethe.curator.console import auth
from lethe.curator.signing import parse_public_key

MAX_VERIFY_BYTES = 262_144  # a pasted certificate (urlencoded): a document of dozens of models fits


@dataclass(frozen=True)
class Helpers:
    """What :func:`register` borrows from the console's router."""

    render: Any
    error: Any
    session: Any
    get: Any
    post: Any
    stop: Any  # the exception class that answers at once


def register(router: APIRouter, curator: Any, h: Helpers) -> None:
    """Add the audit routes to the console's ``router``."""

    @h.get("/requests/{rid}/certificate.json")
    def certificate_json(request: Request, rid: str) -> Response:
        sess = h.session(request)
        with curator.store.read() as s:
            from lethe.curator.console import queries as Q

            req = Q.get_request(s, rid) if len(rid) <= 64 else None
        if req is None or not (sess.principal.is_admin or req["requester"] == sess.principal.name):
            return h.error(request, 404, f"Unknown request {rid[:64]!r}.", sess)  # type: ignore[no-any-return]
        doc = certdoc.build_document(curator, rid)
        if doc is None:
            return h.error(request, 404, "This request has no certificate yet.", sess)  # type: ignore[no-any-return]
        body = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        resp = Response(body, media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="lethe-certificate-{rid}.json"'})
        return auth.security_headers(resp)

    def verify_page(request: Request, sess: Any, status: int = 200, text: str = "", key: str = "",
                    verdict: Any = None, doc: Any = None) -> Response:
        published = certdoc.published_keys(curator)
        return h.render(request, "certverify.html", status=status, sess=sess, text=text, key=key,  # type: ignore
                        verdict=verdict, doc=doc, published=published, title="Verify a certificate")

    @h.get("/verify")
    def verify_get(request: Request) -> Response:
        return verify_page(request, h.session(request))

    @h.post("/verify")
    async def verify_post(request: Request) -> Response:
        sess = h.session(request)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            return h.error(request, 415, "Send the form as application/x-www-form-urlencoded.", sess)  # type: ignore
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_VERIFY_BYTES:
                return h.error(request, 413, f"A certificate to check may hold at most {MAX_VERIFY_BYTES} bytes.",
                               sess)  # type: ignore[no-any-return]
        try:
            fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), keep_blank_values=True,
                                                   max_num_fields=10).items()}
        except (UnicodeDecodeError, ValueError):
            return h.error(request, 400, "The form could not be read.", sess)  # type: ignore[no-any-return]
        if not auth.same_origin(request) or not auth.csrf_ok(sess, fields.get("csrf")):
            return h.error(request, 403, "Refused: the form's security token is missing or wrong. Reload the page "
                                         "and try again.", sess)  # type: ignore[no-any-return]
        text, key_text = fields.get("certificate", ""), fields.get("public_key", "").strip()
        try:
            key = parse_public_key(key_text) if key_text else certdoc.service_key(curator.data_dir).public_raw
        except ValueError as exc:
            return verify_page(request, sess, 422, text, key_text, verdict=certdoc.Verdict(False, str(exc)))
        try:
            doc = certdoc.load_document(text)
        except ValueError as exc:
            return verify_page(request, sess, 422, text, key_text, verdict=certdoc.Verdict(False, str(exc)))
        verdict = certdoc.verify_certificate(doc, public_key=key)
        return verify_page(request, sess, 200 if verdict.valid else 422, text, key_text, verdict=verdict,
                           doc=doc if verdict.valid else None)

    # -- exports -------------------------------------------------------------------------------------------------------
    @h.get("/exports")
    def exports_page(request: Request) -> Response:
        sess = h.session(request)
        return h.render(request, "exports.html", sess=sess, statuses=exports.REQUEST_STATUSES,  # type: ignore
                        title="Exports")

    @h.get("/exports/{kind}.{fmt}")
    def export_file(request: Request, kind: str, fmt: str) -> Response:
        sess = h.session(request)
        p = request.query_params
        if kind not in exports.KINDS or fmt not in exports.FORMATS:
            return h.error(request, 404, f"Unknown export {kind[:20]!r}.{fmt[:8]}.", sess)  # type: ignore
        admin = sess.principal.is_admin
        if kind == "ledger" and not admin:
            return h.error(request, 403, "The ledger export is for administrators.", sess)  # type: ignore
        try:
            flt = exports.ExportFilter(since=exports.parse_time(p.get("since"), "since"),
                                       until=exports.parse_time(p.get("until"), "until"),
                                       status=p.get("status") or None,
                                       requester=(p.get("requester") or None) if admin else sess.principal.name)
            if kind == "requests" and flt.status is not None and flt.status not in exports.REQUEST_STATUSES:
                raise ValueError(f"status must be one of {exports.REQUEST_STATUSES}. Found {flt.status!r}.")
        except ValueError as exc:
            return h.error(request, 422, str(exc), sess)  # type: ignore[no-any-return]

        def chunks() -> Any:
            with curator.store.read() as s:
                yield from exports.render(kind, exports.rows(s, kind, flt), fmt)

        media = "text/csv; charset=utf-8" if fmt == "csv" else "application/json"
        resp = StreamingResponse(chunks(), media_type=media, headers={
            "Content-Disposition": f'attachment; filename="lethe-{kind}.{fmt}"'})
        return auth.security_headers(resp)


__all__ = ["Helpers", "register"]
