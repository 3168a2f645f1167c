"""The feature count above which a backend forms no d × d matrix (``matrix_free``), as a small registry.

:mod:`lethe.certified.data` owns the setting (its ``MATRIX_FREE_MIN_FEATURES``, read at every call so that it can be
changed at run time) and registers a reader here when it is imported; the Dask backend, which
:mod:`lethe.certified.data` imports lazily, reads it here instead of importing :mod:`lethe.certified.data` (no
import cycle). Before the registration the default applies, the same value.
"""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_MATRIX_FREE_MIN_FEATURES = 2048


def _default() -> int:
    return DEFAULT_MATRIX_FREE_MIN_FEATURES


_source: Callable[[], int] = _default


def register_matrix_free_min_features(source: Callable[[], int]) -> None:
    """Make ``source()`` the threshold every backend reads (called by :mod:`lethe.certified.data`)."""
    global _source
    _source = source


def matrix_free_min_features() -> int:
    """The current threshold: data with more features than this is handled matrix-free."""
    return int(_source())
