"""The data directory and its secrets: created owner-only (0700), the database file owner-only from the start
(0600), and the key pepper under which every key is digested (a request refers to its key by this digest)."""

from __future__ import annotations

import errno
import hmac
import os
from pathlib import Path

from lethe.curator.errors import StorageError, storage_message
from lethe.curator.files import load_or_create_secret
from lethe.curator.settings import LOG_DIR, SECRETS_DIR
from lethe.curator.store import DB_FILENAME


class DataDirectory:
    """``<data_dir>`` with ``secrets/`` and ``logs/`` (mode 0700) and the secret key pepper.

    Parameters
    ----------
    path : the directory (created if missing).
    own_database : create the SQLite database file owner-only (the default store; not for an external URL).
    """

    def __init__(self, path: str | Path, *, own_database: bool = True) -> None:
        self.path = Path(path).resolve()
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            # owner-only even if the directory existed before (mkdir's mode applies only to new directories)
            os.chmod(self.path, 0o700)
            for sub in (SECRETS_DIR, LOG_DIR):
                (self.path / sub).mkdir(mode=0o700, exist_ok=True)
                os.chmod(self.path / sub, 0o700)
            if not os.access(self.path, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable", str(self.path))
            if own_database:  # the database holds raw records: owner-only from the start (WAL/SHM inherit)
                db = self.path / DB_FILENAME
                os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            raise StorageError(storage_message(exc, self.path)) from None
        self._pepper = self._load_pepper()

    def secret(self, name: str) -> Path:
        """The path of a file under ``secrets/``."""
        return self.path / SECRETS_DIR / name

    def _load_pepper(self) -> bytes:
        path = self.secret("key_pepper")
        data = load_or_create_secret(path, 32)
        if len(data) < 32:
            raise RuntimeError(f"{path} is damaged: expected 32 secret bytes, found {len(data)}.")
        return data

    def key_digest(self, dataset_id: int, key: str) -> str:
        """HMAC-SHA256 of (dataset, key) under the secret pepper: how a request refers to its key."""
        return hmac.digest(self._pepper, f"{dataset_id}\x00{key}".encode(), "sha256").hex()

    def owner_digest(self, key_digest: str, requester: str) -> str:
        """HMAC-SHA256 of (a key's digest, a requester) under the pepper: how a request that holds no record of its
        own (the key was never held, was already deleted, or is pending under another requester's request) refers to
        its key — one per requester and key, never equal to a :meth:`key_digest` (whose message starts with a
        digit, this one with ``o``)."""
        return hmac.digest(self._pepper, f"owner\x00{key_digest}\x00{requester}".encode(), "sha256").hex()


__all__ = ["DataDirectory"]
