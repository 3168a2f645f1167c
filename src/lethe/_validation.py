"""Parameter checks whose errors say name, rule and value."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def check_real(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise ``TypeError``/``ValueError`` if it is not a finite real."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number. Found {value!r} of type {type(value).__name__}.")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite. Found {value}.")
    return v


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    v = check_real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0. Found {value}.")
    return v


def check_nonnegative(name: str, value: Any) -> float:
    """A finite real number >= 0."""
    v = check_real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0. Found {value}.")
    return v


def check_open_unit(name: str, value: Any) -> float:
    """A real number in the open interval (0, 1) (e.g. δ)."""
    v = check_real(name, value)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1). Found {value}.")
    return v


def check_positive_int(name: str, value: Any) -> int:
    """An integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer. Found {value!r} of type {type(value).__name__}.")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1. Found {value}.")
    return int(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}. Found {value!r}.")
    return str(value)


def check_finite_matrix(name: str, X: Any, *, ndim: int = 2) -> np.ndarray:
    """A float64 array of the given rank with only finite values."""
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric array-like. Could not convert: {exc}") from exc
    if A.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array. Found shape {A.shape}.")
    # one pass without an n × d temporary: NaN and ±inf propagate to the sum; only if it is not finite (which huge
    # finite values can also cause) are the entries examined one by one
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(A))
    if not math.isfinite(total) and not np.all(np.isfinite(A)):
        bad = np.argwhere(~np.isfinite(A))[0]
        where = tuple(int(i) for i in bad)
        raise ValueError(f"{name} must contain only finite values. Found {A[where]} at index {where}.")
    return A


def check_renyi_order(name: str, q: Any) -> float:
    """A Rényi order q > 1 (finite)."""
    q = check_positive(name, q)
    if q <= 1.0:
        raise ValueError(f"{name} (Rényi order) must be > 1. Found {q}.")
    return q
