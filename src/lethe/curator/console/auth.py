"""Console sign-in: an API token exchanged for a server-side session, CSRF tokens, security headers.

* Sign-in: the user pastes an admin or requester token (``lethe token create``); the console checks it with
  :meth:`~lethe.curator.service.Curator.authenticate` and answers with a session cookie ``lethe_console``: 256 random
  bits, ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, ``Secure`` when the request came over TLS. The token
  itself is never stored in the cookie or in the session.
* Sessions live in the server's memory (a restart signs everyone out), expire after 30 minutes idle or 8 hours,
  and end when their token is revoked (checked on every request) or on sign-out.
* CSRF: every form that changes state carries the session's CSRF token (compared in constant time), and a request
  whose ``Origin`` header names another site is refused. The sign-in form is protected the same way by a
  short-lived pre-session cookie.
* Headers on every console answer: a Content-Security-Policy without ``unsafe-inline`` (scripts and styles only
  from ``/console/static``), ``X-Frame-Options: DENY``, ``nosniff``, ``Referrer-Policy: same-origin``,
  ``Cache-Control: no-store``.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from lethe.curator.settings import Principal

COOKIE = "lethe_console"
PRE_COOKIE = "lethe_console_login"
COOKIE_PATH = "/console"
IDLE_SECONDS = 30 * 60
MAX_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def security_headers(response: Response, csp: str = CSP) -> Response:
    """Set the console's security headers on ``response`` (returned for chaining)."""
    response.headers["Content-Security-Policy"] = csp
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"  # no-referrer makes browsers send "Origin: null"
    response.headers["Cache-Control"] = "no-store"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    return response


@dataclass
class Session:
    principal: Principal
    csrf: str
    created: float
    seen: float = field(default=0.0)


class Sessions:
    """The server-side session table (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def create(self, principal: Principal) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        sess = Session(principal=principal, csrf=secrets.token_urlsafe(32), created=now, seen=now)
        with self._lock:
            self._expire(now)
            if len(self._by_id) >= MAX_SESSIONS:  # drop the oldest
                oldest = min(self._by_id, key=lambda k: self._by_id[k].seen)
                del self._by_id[oldest]
            self._by_id[sid] = sess
        return sid, sess

    def get(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        now = time.monotonic()
        with self._lock:
            sess = self._by_id.get(sid)
            if sess is None:
                return None
            if now - sess.seen > IDLE_SECONDS or now - sess.created > MAX_SECONDS:
                del self._by_id[sid]
                return None
            sess.seen = now
            return sess

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)

    def _expire(self, now: float) -> None:
        dead = [k for k, s in self._by_id.items() if now - s.seen > IDLE_SECONDS or now - s.created > MAX_SECONDS]
        for k in dead:
            del self._by_id[k]


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int | None = None) -> None:
    response.set_cookie(name, value, max_age=max_age, path=COOKIE_PATH, httponly=True, secure=is_tls(request),
                        samesite="strict")


def clear_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, httponly=True, secure=is_tls(request), samesite="strict")


class LoginCsrf:
    """CSRF for the sign-in form: token = HMAC(server key, pre-session cookie)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def token(self, pre: str) -> str:
        return hmac.new(self._key, pre.encode(), "sha256").hexdigest()

    def check(self, pre: str | None, token: str | None) -> bool:
        if not pre or not token:
            return False
        return hmac.compare_digest(self.token(pre).encode(), token.encode())


def same_origin(request: Request) -> bool:
    """False if the request's Origin (or, without it, Referer) names another scheme/host/port than the request."""
    origin = request.headers.get("origin")
    if origin is None:
        ref = request.headers.get("referer")
        if ref is None:
            return True  # no header (privacy settings): the CSRF token alone decides
        parts = urlsplit(ref)
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin == "null":
        return False
    host = request.headers.get("host", "")
    return origin in (f"{request.url.scheme}://{host}",)


def csrf_ok(sess: Session, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(sess.csrf.encode(), str(token).encode())


__all__ = ["COOKIE", "CSP", "LoginCsrf", "PRE_COOKIE", "Session", "Sessions", "clear_cookie", "csrf_ok",
           "is_tls", "same_origin", "security_headers", "set_cookie"]
