"""Checks of the names, keys and ids a caller passes, shared by the curator's components."""

from __future__ import annotations

import re
from typing import Any

from lethe.curator.errors import InvalidInputError
from lethe.curator.store import as_utc


def cli_hint(message: str) -> str:
    """Name the curator's option, not the estimator's, in a mechanism's refusal."""
    return re.sub(r"ask for row normalisation \([^)]*\)",
                  "register the dataset with row normalisation (`lethe dataset add ... --normalize rows`; "
                  "Python: Curator.register_dataset(..., normalize='rows'))", message)


def check_unicode(kind: str, value: str) -> None:
    """Refuse text that is not valid Unicode (lone surrogates such as ``\\ud800`` cannot be encoded as UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{kind} must be valid Unicode text; it contains a lone surrogate code point.") \
            from None


def seconds_between(start: Any, end: Any) -> float | None:
    """Seconds from ``start`` to ``end`` (stored timestamps), or None if either is missing."""
    a, b = as_utc(start), as_utc(end)
    return None if a is None or b is None else max((b - a).total_seconds(), 0.0)


def check_name(kind: str, value: Any, max_len: int = 200) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{kind} must be a string. Found {type(value).__name__}.")
    check_unicode(kind, value)
    if not value or value.strip() != value or len(value) > max_len or any(ord(c) < 32 for c in value):
        raise InvalidInputError(f"{kind} must be 1 to {max_len} printable characters without surrounding spaces. "
                                f"Found {value[:60]!r}{'...' if len(value) > 60 else ''}.")
    return value


#: a new dataset's or model's name: it becomes part of file names, URLs and download headers
NEW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_new_name(kind: str, value: Any) -> str:
    """A name for something new (a dataset, a model): 1 to 200 ASCII letters, digits, ``.``, ``_`` or ``-``,
    starting with a letter or digit — no ``/``, ``..`` path, quote, space or control character. Names of older
    stores are still looked up by :func:`check_name`."""
    check_name(kind, value)
    if not NEW_NAME.fullmatch(value):
        raise InvalidInputError(f"{kind} must start with a letter or digit and hold only letters, digits, '.', '_' "
                                f"and '-' (at most 200 characters; no '/', quotes or spaces). Found {value[:60]!r}.")
    return value


def lookup_id(value: Any) -> str | None:
    """A usable id for a primary-key lookup, or None (not a string, too long, or not encodable)."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


__all__ = ["NEW_NAME", "check_name", "check_new_name", "check_unicode", "cli_hint", "lookup_id", "seconds_between"]
