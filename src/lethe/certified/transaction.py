"""Removal and addition as transactions (issue 35): a failed call — an error, ``KeyboardInterrupt``, a signal
handler's exception, a full disk — leaves the model as it was.

A model's operation prepares everything aside and commits it in one step, a single statement of plain attribute
assignments (no call, so neither a signal handler nor a tracer can interrupt it half-way). What it cannot prepare
aside, because the cost would be O(n) per removal on the hot path, it changes in place with an undo record
(:class:`Undo`) opened before the first change:

* the estimator's row mask ``active_`` (the removed rows cleared in place, set again on rollback);
* the solver caches (:meth:`lethe.certified.cache.NewtonCache.begin`: a snapshot restored bit for bit, so the next
  removal after a rolled-back one gets the certificate it would have got had the failed call never run);
* the random generator of a retraining (its state saved and restored);
* the erasure of the removed rows — the model's copy of the features, targets and record keys, and a Dask model's
  Zarr store — which runs BEFORE the commit: a failed erase fails the removal, and the rows are written back.

The record stays pending while the call runs (:func:`pending`, keyed by the model object, outside the model's
``__dict__``). A rollback is idempotent: if it was itself interrupted (a second interrupt during the first one's
cleanup), the model's next call completes it first (:func:`resume`) — until then no cache shortcut is trusted,
since the undo record is consulted before anything else. If the rows of a Dask store cannot be written back (the
storage still fails), every later call raises :class:`ResyncRequiredError` naming the store; the next call retries
the write-back, so the model resyncs itself once the storage works again (``model.resync()`` does it explicitly).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import scipy.sparse as sp

from lethe.certified.cache import CacheTransaction, NewtonCache
from lethe.certified.data import backend_of
from lethe.certified.rows import set_rows
from lethe.exceptions import LetheError


class ResyncRequiredError(LetheError, RuntimeError):
    """The model's data store could not be put back after a failed operation: the model refuses every call until
    the write-back succeeds (retried by each call, or by ``model.resync()``)."""


#: The open (or unfinished) undo record of each model, by ``id`` of the model object (the record holds the model by
#: weak reference: a record whose model is gone, or another object at a reused address, is not that model's).
_PENDING: dict[int, Undo] = {}


def _get(model: Any) -> Undo | None:
    undo = _PENDING.get(id(model))
    if undo is None:
        return None
    if undo.model is not model or getattr(model, undo.owner[0], None) is not undo.owner[1]:
        # a dead model's record, or one of a model fitted again since (its data array replaced): not this model's
        # state any more; only a store it could not write back is still written back (it may be the caller's store)
        if undo.model is model and undo.store_failed is not None:
            try:
                undo._restore_store()
            except Exception as exc:
                raise ResyncRequiredError(_resync_message(undo, exc)) from exc
        _PENDING.pop(id(model), None)
        return None
    return undo


def _drop(model: Any, undo: Undo) -> None:
    if model is not None and _PENDING.get(id(model)) is undo:
        del _PENDING[id(model)]


class Undo:
    """The undo record of one operation on ``model`` (module docstring). Fields are filled as the operation goes;
    ``done`` is set by the commit statement itself."""

    # filled as the operation goes (class defaults: nothing to undo yet)
    mask: np.ndarray | None = None  # the mask whose rows idx are cleared in place
    x_rows: Any = None  # the removed rows' features (dense rows, CSR values, or the store's rows)
    X: Any = None
    y_rows: tuple[np.ndarray, np.ndarray] | None = None  # (targets array, its saved columns/entries)
    key_rows: tuple[np.ndarray, np.ndarray] | None = None  # (keys array, the saved keys)
    store_failed: BaseException | None = None
    prune: Any = None  # a CSR matrix whose explicit zeros are dropped after the commit
    rng_state: Any = None
    attrs: dict[str, Any] = {}  # noqa: RUF012  (replaced, never written: :meth:`save_attrs`)
    lists: tuple[tuple[list[Any], int], ...] = ()

    def __init__(self, model: Any, idx: np.ndarray | None, rng: np.random.Generator | None,
                 caches: list[NewtonCache] | tuple[()] = (), *, lazy_rng: bool = False,
                 owner: str = "X_") -> None:
        """``lazy_rng``: the generator's state is saved by the mechanism if (and when) it retrains
        (:meth:`lethe.certified.mechanism.CertifiedRemoval.remove` records it in the cache's transaction), not here:
        for the binary removal's hot path, which seldom retrains. ``owner``: the model's attribute holding its data
        array, which only ``fit`` replaces: a record left pending is dropped once the model is fitted again."""
        self._model = weakref.ref(model)  # (the pending record, keyed by the model, must not keep it alive)
        self.owner = (owner, getattr(model, owner, None))
        self.idx = idx
        self.done = False
        self.rng = rng
        if not lazy_rng and isinstance(rng, np.random.Generator):
            self.rng_state = rng.bit_generator.state
        self.txns: list[CacheTransaction] = [c.begin(idx) for c in caches] if idx is not None else []

    @property
    def model(self) -> Any:
        return self._model()

    # -- erasure before the commit --------------------------------------------------------------------------------
    def erase(self, X: Any, Y: np.ndarray, keys: np.ndarray | None, idx: np.ndarray) -> None:
        """Erase rows ``idx`` of the model's data (features, targets, record keys), saving them first so that
        :meth:`rollback` can write them back. Dense: in place; CSR: the stored values (the pattern is dropped by
        :meth:`finish`, after the commit); Dask: the Zarr store (:meth:`DaskBackend.zero_rows`; a failure raises and
        fails the removal)."""
        one = idx.shape[0] == 1  # one row (the hot path): basic slicing, several times faster than an index array
        i = int(idx[0]) if one else 0
        if type(X) is np.ndarray:
            if one:
                self.x_rows, self.X = X[i:i + 1].copy(), X
                X[i] = 0.0
            else:
                self.x_rows, self.X = X[idx], X  # (fancy indexing copies)
                X[idx] = 0.0
        elif sp.issparse(X):
            spans = [(int(X.indptr[i]), int(X.indptr[i + 1])) for i in idx]
            self.x_rows, self.X = [(a, b, np.array(X.data[a:b], copy=True)) for a, b in spans], X
            for a, b in spans:
                X.data[a:b] = 0.0
            self.prune = X
        else:  # Dask: the rows are read from the store before it is written (retry-safe write-back)
            B = backend_of(X)
            self.x_rows, self.X = B.take(X, idx), X
            B.zero_rows(X, idx)
        if Y.ndim == 2 and one:  # (K, n) targets
            self.y_rows = (Y, Y[:, i:i + 1].copy())
            Y[:, i] = 0.0
        elif Y.ndim == 2:
            self.y_rows = (Y, Y[:, idx])
            Y[:, idx] = 0.0
        else:
            self.y_rows = (Y, Y[idx])
            Y[idx] = 0.0
        if keys is not None:
            self.key_rows = (keys, keys[idx])
            keys[idx] = "" if keys.dtype.kind == "U" else 0

    def save_attrs(self, *names: str) -> None:
        """Record the model's attributes ``names`` (restored by :meth:`rollback`): for an operation that must
        reassign them before its commit point (the release family publishes from the new centre)."""
        attrs = dict(self.attrs)
        for name in names:
            attrs.setdefault(name, getattr(self.model, name))
        self.attrs = attrs

    def save_list(self, items: list[Any]) -> None:
        """Record the length of a list the operation appends to (truncated back by :meth:`rollback`)."""
        self.lists = (*self.lists, (items, len(items)))

    def _restore_memory(self) -> None:
        X, rows = self.X, self.x_rows
        if rows is not None and X is not None:
            if type(X) is np.ndarray:
                X[self.idx] = rows
            elif sp.issparse(X):
                for a, b, vals in rows:
                    X.data[a:b] = vals
        if self.y_rows is not None:
            Y, vals = self.y_rows
            if Y.ndim == 2:
                Y[:, self.idx] = vals
            else:
                Y[self.idx] = vals
        if self.key_rows is not None:
            self.key_rows[0][self.idx] = self.key_rows[1]

    def _restore_store(self) -> None:
        X, rows = self.X, self.x_rows
        if (rows is not None and X is not None and self.idx is not None and type(X) is not np.ndarray
                and not sp.issparse(X)):
            _restore_store(X, self.idx, rows)

    # -- the two ends ---------------------------------------------------------------------------------------------
    def rollback(self) -> None:
        """Undo what the operation changed (idempotent; a commit that happened is never undone). Raises
        :class:`ResyncRequiredError` if a Dask store cannot be written back (the record stays pending)."""
        if self.done:
            self.finish()
            return
        self._restore_memory()
        if self.mask is not None and self.idx is not None:
            set_rows(self.mask, self.idx, True)
        if self.rng_state is not None and self.rng is not None:
            self.rng.bit_generator.state = self.rng_state
        for txn in self.txns:  # a generator whose state the mechanism saved before retraining (lazy_rng)
            if txn.rng is not None:
                txn.rng[0].bit_generator.state = txn.rng[1]
        for name, value in self.attrs.items():
            setattr(self.model, name, value)
        for items, length in self.lists:
            del items[length:]
        for txn in self.txns:
            txn.rollback()
        try:
            self._restore_store()  # last: the in-memory model is as before even if the storage still fails
        except Exception as exc:  # the model refuses every call until the rows are written back
            self.store_failed = exc
            if self.model is not None:
                _PENDING[id(self.model)] = self
            raise ResyncRequiredError(_resync_message(self, exc)) from exc
        self.store_failed = None
        _drop(self.model, self)

    def finish(self) -> None:
        """After the commit: drop a CSR matrix's explicit zeros (the erased rows' column pattern), close the cache
        transactions, forget the record (idempotent)."""
        if self.prune is not None:
            self.prune.eliminate_zeros()  # same matrix object, values unchanged: caches keyed to it stay valid
            self.prune = None
        for txn in self.txns:
            txn.close()
        _drop(self.model, self)


def _restore_store(X: Any, idx: np.ndarray, rows: np.ndarray) -> None:
    from lethe.certified.dask_backend import forget_cached_passes, zarr_source

    store = zarr_source(X)
    if store is None or bool(getattr(store, "read_only", False)):
        return
    order = np.argsort(idx, kind="stable")
    forget_cached_passes()
    store.set_orthogonal_selection((idx[order], slice(None)), rows[order])


def _resync_message(undo: Undo, exc: BaseException) -> str:
    return (f"The model's data store could not be restored after a failed operation ({type(exc).__name__}: {exc}): "
            f"rows {undo.idx.tolist() if undo.idx is not None else []} of the store may hold zeros the model "
            "does not know of. The model refuses every call until the rows are written back: fix the storage (e.g. "
            "free disk space) and call model.resync() (or call the operation again: it retries the write-back "
            "first). Nothing was removed.")


def begin(model: Any, idx: np.ndarray | None, rng: np.random.Generator | None,
          caches: list[NewtonCache] | tuple[()] = (), *, lazy_rng: bool = False, owner: str = "X_") -> Undo:
    """Complete any unfinished record of ``model`` (:func:`resume`), then open one for this operation."""
    resume(model)
    undo = Undo(model, idx, rng, caches, lazy_rng=lazy_rng, owner=owner)
    _PENDING[id(model)] = undo
    return undo


def resume(model: Any) -> None:
    """Complete the unfinished record of ``model``, if any: roll back an operation that did not commit (raises
    :class:`ResyncRequiredError` while a store cannot be written back), finish one that did."""
    undo = _get(model)
    if undo is not None:
        undo.rollback()


def pending(model: Any) -> Undo | None:
    """The unfinished undo record of ``model`` (None if its last operation completed or was rolled back)."""
    return _get(model)


__all__ = ["ResyncRequiredError", "Undo", "begin", "pending", "resume"]
