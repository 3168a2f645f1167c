"""The feature count above which a backend forms no d × d matrix (``matrix_free``): one plain setting.

Every backend reads :data:`MATRIX_FREE_MIN_FEATURES` here at each call, so a change at run time applies to all of
them: :mod:`lethe.certified.data` (whose ``MATRIX_FREE_MIN_FEATURES`` reads and sets this same value) and the Dask
backend, which :mod:`lethe.certified.data` imports lazily and which therefore cannot import it back (no import
cycle).
"""

from __future__ import annotations

DEFAULT_MATRIX_FREE_MIN_FEATURES = 2048

#: Above this many features, non-dense backends use matrix-free solvers (no d × d matrix is formed).
MATRIX_FREE_MIN_FEATURES = DEFAULT_MATRIX_FREE_MIN_FEATURES
