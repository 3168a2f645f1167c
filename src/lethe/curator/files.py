"""Durable files of the data directory: fsync of a file or directory, secrets created once, owner-only, and files
overwritten with zeros."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory: so that the names created in it survive a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_or_create_secret(path: Path, size: int = 32) -> bytes:
    """The bytes of the secret file ``path``: ``size`` random bytes, created 0600 and fsynced on first use
    (exclusive create: two processes starting at once cannot both create it). An existing file is returned as it is:
    the caller checks its length (a damaged secret is the caller's error to name)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(size))
        f.flush()
        os.fsync(f.fileno())
    return path.read_bytes()


def write_zeros(path: Path, size: int | None = None) -> None:
    """Write zeros over the file ``path`` and fsync it: over its whole length in place (``size`` None; the file must
    exist, else ``FileNotFoundError``), or ``size`` zero bytes into it, created 0600 or truncated."""
    if size is None:
        fd = os.open(path, os.O_WRONLY)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = os.fstat(fd).st_size if size is None else size
        zeros = b"\0" * min(left, 1 << 20)
        while left > 0:
            left -= os.write(fd, zeros[: min(left, len(zeros))])
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_path", "load_or_create_secret", "write_zeros"]
