"""The curator's refusals: one exception type per kind of refusal, with no transport in them.

Each class says what went wrong; the HTTP layer (:data:`lethe.curator.api.STATUS_CODES`) decides which status code
answers it. A refusal means nothing was changed.
"""

from __future__ import annotations

import errno
from pathlib import Path

from lethe.exceptions import LetheError


class CuratorError(LetheError, ValueError):
    """A request the curator refuses; nothing was changed."""


class NotFoundError(CuratorError):
    """Unknown dataset, model, key, request or certificate."""


class ConflictError(CuratorError):
    """A repeated request, a name already in use, or a request id reused for a different deletion."""


class PermissionDeniedError(CuratorError):
    """The caller's scope does not allow this."""


class UnreleasedModelError(PermissionDeniedError):
    """A model whose certificates cover one published version is not served (predictions, weights) to a
    model-reader unless an operator opted in at training (issue 26: an observer of consecutive versions can identify
    deleted records). Answered like a scope refusal: the caller is not allowed to read this model."""


class InvalidInputError(CuratorError):
    """A malformed value (wrong feature dimension, bad parameter)."""


class BusyError(CuratorError):
    """Another process holds the processing lock."""


class StorageError(CuratorError):
    """The data directory or the database cannot be written (full disk, read-only file system, permissions)."""


class ServiceFaultError(CuratorError):
    """The service cannot answer because of a fault an operator must fix (e.g. an artifact failed verification).
    The message is generic: no paths, no checksums; operators see the fault in ``lethe status``."""


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


__all__ = [
    "BusyError", "ConflictError", "CuratorError", "InvalidInputError", "NotFoundError", "PermissionDeniedError",
    "ServiceFaultError", "StorageError", "UnreleasedModelError", "storage_message",
]
