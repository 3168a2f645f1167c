"""Bearer tokens: created (shown once; only their SHA-256 is stored), revoked, listed, and checked with a cache that
every process on the data directory drops when any of them creates or revokes a token."""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
import threading
import time
import uuid
from typing import Any

from sqlalchemy import select

from lethe.curator.datadir import DataDirectory
from lethe.curator.errors import ConflictError, InvalidInputError, NotFoundError
from lethe.curator.settings import SCOPES, TOKEN_CACHE_SECONDS, TOKEN_STAMP, Principal
from lethe.curator.store import Store, Token, add_event, iso, utcnow
from lethe.curator.validation import check_name
from lethe.io import write_bytes_atomic


class TokenRegistry:
    """The tokens of one store, with the cache of verified ones (see :meth:`authenticate`)."""

    def __init__(self, store: Store, data_dir: DataDirectory) -> None:
        self.store = store
        self._stamp_path = data_dir.secret(TOKEN_STAMP)
        self._mutex = threading.Lock()
        self._cache: dict[str, Principal] = {}  # sha256 of a verified token -> its principal
        self._cache_stamp: tuple[int, int, int] | None = None
        self._cache_at = -math.inf

    def create(self, name: str, scope: str) -> str:
        """Create a bearer token; returns it (shown once; only its SHA-256 is stored)."""
        check_name("token name", name)
        if scope not in SCOPES:
            raise InvalidInputError(f"scope must be one of {SCOPES}. Found {scope!r}.")
        token = f"lethe_{secrets.token_urlsafe(32)}"
        with self.store.write() as s, s.begin():
            if s.scalar(select(Token).where(Token.name == name)) is not None:
                raise ConflictError(f"A token named {name!r} already exists.")
            s.add(Token(name=name, digest=hashlib.sha256(token.encode()).hexdigest(), scope=scope, created_at=utcnow()))
            add_event(s, "token_created", {"name": name, "scope": scope})
        self._touch_stamp()
        return token

    def revoke(self, name: str) -> None:
        """Revoke a token by name."""
        with self.store.write() as s, s.begin():
            tok = s.scalar(select(Token).where(Token.name == name))
            if tok is None:
                raise NotFoundError(f"No token named {name!r}.")
            tok.revoked = True
            add_event(s, "token_revoked", {"name": name})
        self._touch_stamp()

    def describe(self) -> list[dict[str, Any]]:
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
        with self._mutex:
            if self._cache_stamp == stamp:  # not if a revocation happened meanwhile
                self._cache[digest] = principal
        return principal

    def cached_principal(self, token: str) -> Principal | None:
        """The principal of a token verified recently (see :meth:`authenticate`), else None — without a database
        read: None means "ask :meth:`authenticate`", not "refused"."""
        if not isinstance(token, str) or not token or len(token) > 200:
            return None
        return self._cached(token)[0]

    def _cached(self, token: str) -> tuple[Principal | None, str, tuple[int, int, int] | None]:
        digest = hashlib.sha256(token.encode()).hexdigest()
        stamp = self._stamp()
        now = time.monotonic()
        with self._mutex:
            if stamp != self._cache_stamp or now - self._cache_at > TOKEN_CACHE_SECONDS:
                self._cache.clear()
                self._cache_stamp, self._cache_at = stamp, now
            return self._cache.get(digest), digest, stamp

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._stamp_path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _touch_stamp(self) -> None:
        """Replace the token stamp (a new inode each time): every process's token cache is dropped."""
        write_bytes_atomic(self._stamp_path, uuid.uuid4().bytes, mode=0o600, fsync=False)
        with self._mutex:
            self._cache.clear()
            self._cache_stamp = (-1, -1, -1)  # matches no stamp: a check in flight caches nothing



__all__ = ["TokenRegistry"]
