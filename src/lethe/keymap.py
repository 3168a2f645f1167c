"""Record key → training row, in O(1) amortised per key (issue 37).

Every model that removes by record key (``remove(keys=...)``: the certified estimators, the released model, the
Noisy-GD and torch estimators) keeps one key per ORIGINAL row (``keys_``; a removed row's key is blanked) and a mask
of active rows. Building a ``{key: row}`` dict of every key on each call, as the models did before, costs O(n): at
10⁶ rows 0.2 s (integer keys) to 0.7 s (string keys) per removal, against 0.3–0.5 ms by row index.

:func:`key_rows` keeps one map per model instead (in a :class:`weakref.WeakKeyDictionary`, so it is never pickled,
copied or saved with the model, and goes with it): built once, on the first removal by key, from the active rows;
extended, not rebuilt, when rows are appended (``add``: the keys array grows); rebuilt when the model's keys array is
another array of no greater length (a model loaded from a file, or keys replaced). Every hit is checked against the
model's own arrays — the row is active and its key is the one asked for — so a stale entry (a removed row, a blanked
or replaced key) can only answer "not a record", never name a wrong row, and an unknown key and an already removed
one are answered alike.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["KeyMap", "key_rows"]


class KeyMap:
    """The key → row map of one keys array (see the module's text); ``rows`` resolves keys."""

    __slots__ = ("_keys", "_n", "_rows")

    def __init__(self, record_keys: np.ndarray, active: np.ndarray) -> None:
        self._keys = record_keys
        self._n = 0
        self._rows: dict[Any, int] = {}
        self._extend(record_keys, active)

    def _extend(self, record_keys: np.ndarray, active: np.ndarray) -> None:
        """Map the active rows of ``record_keys`` from position ``_n`` on (a later row wins: rows appended after a
        removal may reuse a removed row's key)."""
        start = self._n
        pos = start + np.flatnonzero(active[start: record_keys.shape[0]])
        self._rows.update(zip(record_keys[pos].tolist(), pos.tolist(), strict=True))
        self._keys, self._n = record_keys, int(record_keys.shape[0])

    def current(self, record_keys: np.ndarray, active: np.ndarray) -> KeyMap:
        """This map brought up to ``record_keys`` (the same array: as is; a longer one: extended by its new rows),
        or a new map (another array of no greater length)."""
        if record_keys is self._keys and record_keys.shape[0] == self._n:
            return self
        if record_keys.shape[0] > self._n:
            self._extend(record_keys, active)
            return self
        return KeyMap(record_keys, active)

    def rows(self, keys: list[Any], record_keys: np.ndarray, active: np.ndarray) -> tuple[list[int], Any]:
        """(rows of ``keys``, None), or (rows found so far, the first key that is not an active record)."""
        out: list[int] = []
        get = self._rows.get
        n = active.shape[0]
        for k in keys:
            i = get(k)
            if i is None or i >= n or not active[i] or record_keys[i] != k:
                return out, _Missing(k)
            out.append(i)
        return out, None


class _Missing:
    """A key that is not an active record (``key_rows``' second value when one is missing)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


# one get and one store, each atomic under the GIL (a WeakKeyDictionary's dead-key callback tolerates a concurrent
# store): no process-wide lock, which an exception raised as its ``with`` block ends (a KeyboardInterrupt, a tracer's
# fault on the ``with`` line) could leave held, stalling every later removal by key in the process (issue 35)
_MAPS: weakref.WeakKeyDictionary[Any, KeyMap] = weakref.WeakKeyDictionary()


def key_rows(owner: Any, keys: Any, record_keys: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, Any]:
    """The training rows of record ``keys`` (a sequence, or one key) for the model ``owner``, whose record keys are
    ``record_keys`` (one per original row) and active rows ``active``.

    Returns (int64 rows, None), or (rows found before it, the missing key wrapped: ``missing.key``) when a key is
    not an active record of the model — unknown or already removed, the two are not told apart. Shape and emptiness
    of ``keys`` are the caller's to check. O(1) per key after the first call on a model (see the module's text).
    ``owner`` must be weak-referenceable and hashable by identity (the estimators are); None: a map for this call
    only (O(n))."""
    ks = np.asarray(keys)
    ks = ks.reshape(1) if ks.ndim == 0 else ks
    if owner is None:  # no model to keep the map with: one for this call
        return _resolve(KeyMap(record_keys, active), ks, record_keys, active)
    old = _MAPS.get(owner)
    # built or extended here: calls on one model are serialised by the model's own lock
    km = KeyMap(record_keys, active) if old is None else old.current(record_keys, active)
    if km is not old:
        _MAPS[owner] = km
    return _resolve(km, ks, record_keys, active)


def _resolve(km: KeyMap, ks: np.ndarray, record_keys: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, Any]:
    rows, missing = km.rows(ks.tolist(), record_keys, active)
    return np.asarray(rows, dtype=np.int64), missing
