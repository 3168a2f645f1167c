"""The sharded meta-estimator's shared machinery (:class:`ShardedBase`): fit, remove by retraining the shards that held
the records, persistence (see :mod:`lethe.sharded` for the guarantee and the partition)."""

from __future__ import annotations

import copy
import hashlib
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d

from lethe._locking import LOCK_ATTR, instance_lock
from lethe._rng import RandomState, check_random_state
from lethe._validation import store_init_args
from lethe.estimator_data import check_keys as _check_keys
from lethe.estimator_data import removal_rows
from lethe.io import open_model_file, save_model_file
from lethe.model_origin import reports_model_origin, set_origin
from lethe.sharded.certificate import ExactCertificate
from lethe.sharded.partition import check_count as _check_count
from lethe.sharded.partition import check_secret as _check_secret
from lethe.sharded.partition import shard_assignment
from lethe.sharded.storage import SKOPS_TRUSTED, skops_io
from lethe.sharded.torch import TorchShardClassifier

__all__ = ["ConstantShard", "ShardedBase"]


# -- the sharded meta-estimator ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConstantShard:
    """A shard whose rows all carry one label (a scikit-learn classifier refuses one class): predicts it."""

    label_index: int


_MODES = ("fit", "partial_fit")


@dataclass(frozen=True, eq=False)
class _Serialized:
    """A fitted shard (or checkpoint) kept as its skops bytes, not rebuilt (``from_state(..., lazy=True)``): a
    removal that does not retrain the shard carries it over unchanged, and saving writes the same bytes."""

    data: bytes


@reports_model_origin
class ShardedBase(MetaEstimatorMixin, BaseEstimator):
    """Shared machinery of :class:`ShardedClassifier` and :class:`ShardedRegressor`."""

    #: The values ``aggregation`` may take; the first is the default.
    aggregations: ClassVar[tuple[str, ...]] = ()
    #: lethe.protocols.Unlearner: records cannot be added to a fitted sharded model (see :meth:`add`).
    supports_add: ClassVar[bool] = False

    def __init__(self, estimator: Any = None, *, n_shards: int = 8, n_slices: int = 1, aggregation: str | None = None,
                 key: bytes | None = None, random_state: RandomState = None) -> None:
        store_init_args(self, locals())

    # -- secrets: no pickle, no key in repr --------------------------------------------------------------------------
    def _holds_secret(self) -> bool:
        return "key_" in self.__dict__ or self.__dict__.get("key") is not None

    def __getstate__(self) -> Any:
        if self._holds_secret():
            raise TypeError(
                f"A {type(self).__name__} holding a hash key cannot be pickled: the key is SECRET (with it, anyone "
                "computes the shard of every record key and links a changed shard to a person), and a fitted model "
                "also holds the training rows. Use model.save(path) and load(path) (no pickle, owner-only file).")
        state = super().__getstate__()
        state.pop(LOCK_ATTR, None)
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """In-memory deep copy (no file is written), also of a fitted model; the copy gets its own lock."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k != LOCK_ATTR:
                new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    def _masked(self) -> Any:
        """A shallow copy whose ``key`` parameter reads ``"<secret>"`` (for the text and HTML representations)."""
        if self.__dict__.get("key") is None:
            return self
        masked = type(self).__new__(type(self))
        masked.__dict__.update({k: v for k, v in self.__dict__.items() if k != LOCK_ATTR})
        masked.key = "<secret>"  # type: ignore[assignment]
        return masked

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        return BaseEstimator.__repr__(self._masked(), N_CHAR_MAX)

    def _repr_html_inner(self) -> str:
        return BaseEstimator._repr_html_inner(self._masked())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, str]:
        return BaseEstimator._repr_mimebundle_(self._masked(), **kwargs)

    @property
    def _mutex(self) -> threading.RLock:
        """The model's re-entrant lock: the one every lethe model uses (:func:`lethe._locking.instance_lock`)."""
        return instance_lock(self)

    # -- parameters ----------------------------------------------------------------------------------------------
    def _prototype(self) -> Any:
        est = self.estimator
        if est is None:
            raise ValueError("estimator must be given (a scikit-learn estimator or a torch module factory).")
        if not hasattr(est, "fit") and callable(est):
            if not is_classifier(self):
                raise ValueError("A torch module factory is supported by ShardedClassifier only.")
            return TorchShardClassifier(est)
        if not hasattr(est, "fit") or not hasattr(est, "get_params"):
            raise TypeError(f"estimator must be a scikit-learn estimator or a callable. Found {type(est).__name__}.")
        return est

    def _mode(self, proto: Any, n_slices: int) -> str:
        if n_slices == 1:
            return "fit"
        if hasattr(proto, "partial_fit"):
            return "partial_fit"
        raise ValueError(f"n_slices > 1 needs an estimator that trains incrementally (partial_fit; a torch module). "
                         f"Found {type(proto).__name__} with n_slices={n_slices}.")

    def _check_aggregation(self) -> str:
        agg = self.aggregation if self.aggregation is not None else self.aggregations[0]
        if agg not in self.aggregations:
            raise ValueError(f"aggregation must be one of {list(self.aggregations)}. Found {agg!r}.")
        return agg

    def _shard_estimator(self, s: int) -> Any:
        est = clone(self.prototype_)
        if "random_state" in est.get_params(deep=False):
            est.set_params(random_state=int(self.seeds_[s]))
        return est

    # -- fit -------------------------------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        """Partition the rows by the keyed hash of their keys and train every shard.

        Parameters
        ----------
        X : array-like of shape (n, d)
            Numeric features (NaN allowed when the estimator accepts it).
        y : array-like of shape (n,)
        sample_ids : array-like of shape (n,), optional
            Distinct integer or string record keys, for ``remove(keys=...)`` and for the partition. Default: the row
            positions 0..n-1 — then a record's shard depends on its position, and a model refitted from scratch on
            the remaining rows equals this one only if it is given the same keys (``sample_ids=`` the kept
            positions). Give stable keys (a user id) when records may be removed.
        """
        with self._mutex:
            n_shards = _check_count("n_shards", self.n_shards)
            n_slices = _check_count("n_slices", self.n_slices)
            agg = self._check_aggregation()
            proto = self._prototype()
            mode = self._mode(proto, n_slices)
            secret = secrets.token_bytes(32) if self.key is None else _check_secret(self.key)
            # the model's own copy: a removal erases the removed rows in place, never in the caller's array
            X = check_array(X, dtype="numeric", ensure_all_finite="allow-nan", copy=True)
            y = self._check_y(y, X.shape[0])
            keys = np.arange(X.shape[0], dtype=np.int64) if sample_ids is None else _check_keys(sample_ids, X.shape[0])
            entropy = int(check_random_state(self.random_state).integers(0, 2**63 - 1))
            seeds = np.array([int(ss.generate_state(1)[0]) for ss in np.random.SeedSequence(entropy).spawn(n_shards)],
                             dtype=np.int64)
            shard, slc = shard_assignment(keys, secret, n_shards, n_slices)
            # commit only once every shard trained (a failed fit leaves a fitted model as it was)
            new = {"key_": secret, "keys_": keys, "X_": X, "y_": y, "active_": np.ones(X.shape[0], dtype=bool),
                   "shard_of_": shard, "slice_of_": slc, "seeds_": seeds, "prototype_": proto, "mode_": mode,
                   "aggregation_": agg, "n_features_in_": X.shape[1], "n_shards_": n_shards, "n_slices_": n_slices,
                   "n_shard_fits_": 0, "n_removed_": 0}
            if is_classifier(self):
                new["classes_"] = np.unique(y)
            staged = type(self).__new__(type(self))
            staged.__dict__.update({k: v for k, v in self.__dict__.items() if k != LOCK_ATTR})
            staged.__dict__.update(new)
            estimators, checkpoints = [], []
            for s in range(n_shards):
                est, cps, _ = staged._train_shard(s, staged.active_, 0, None)
                estimators.append(est)
                checkpoints.append(cps)
            new["estimators_"], new["checkpoints_"] = estimators, checkpoints
            new["n_shard_fits_"] = staged.n_shard_fits_
            self.__dict__.update(new)
            return self

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        y = np.array(y)  # a copy: the model's own (a removal blanks a removed label in place)
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must be 1-D with one value per row of X ({n}). Found shape {y.shape}.")
        return y

    def _shard_rows(self, s: int, active: np.ndarray) -> np.ndarray:
        return np.flatnonzero(active & (self.shard_of_ == s))

    def _train_shard(self, s: int, active: np.ndarray, start: int, previous: Any) -> tuple[Any, list[Any], int]:
        """Train shard s on its active rows from stage ``start`` (``previous``: the checkpoint after stage
        start-1, None for start = 0). Returns (estimator, checkpoints after stages 0..R-2, rows processed)."""
        rows = self._shard_rows(s, active)
        R = self.n_slices_
        if rows.size == 0:
            return None, [None] * (R - 1), 0
        X, y = self.X_, self.y_
        if self.mode_ == "fit":
            self.n_shard_fits_ += 1
            ys = y[rows]
            if is_classifier(self) and np.unique(ys).size == 1:
                return ConstantShard(int(np.searchsorted(self.classes_, ys[0]))), [], int(rows.size)
            return self._shard_estimator(s).fit(X[rows], ys), [], int(rows.size)
        est = self._shard_estimator(s) if previous is None else copy.deepcopy(previous)
        checkpoints = list(self.checkpoints_[s][:start]) if start > 0 else []
        processed = 0
        for r in range(start, R):
            cum = rows[self.slice_of_[rows] <= r]
            if cum.size:
                self.n_shard_fits_ += 1
                processed += int(cum.size)
                if is_classifier(self):
                    est.partial_fit(X[cum], y[cum], classes=self.classes_)
                else:
                    est.partial_fit(X[cum], y[cum])
            if r < R - 1:
                checkpoints.append(copy.deepcopy(est) if cum.size else None)
        return est, checkpoints, processed

    # -- removal ---------------------------------------------------------------------------------------------------
    def _key_rows(self, keys: Any) -> np.ndarray:
        """The original row positions of the record ``keys`` among the rows still held (a sorted search; a removed
        record's key is erased, so an unknown and an already removed key get the same answer, as in every family)."""
        ks = np.asarray(keys)
        if ks.ndim == 0:
            ks = ks.reshape(1)
        if ks.ndim != 1 or ks.size == 0:
            raise ValueError(f"keys must be a non-empty 1-D sequence of record keys. Found shape {ks.shape}.")
        held = np.flatnonzero(self.active_)
        order = held[np.argsort(self.keys_[held], kind="stable")]
        sorted_keys = self.keys_[order]
        if (ks.dtype.kind == "U") != (sorted_keys.dtype.kind == "U") or ks.dtype.kind not in "iuU":
            found = np.zeros(ks.size, dtype=bool)  # another type of key names no record
        else:
            at = np.minimum(np.searchsorted(sorted_keys, ks), len(sorted_keys) - 1)
            found = sorted_keys[at] == ks
        if not np.all(found):
            k = ks.tolist()[int(np.flatnonzero(~found)[0])]
            raise ValueError(f"Key {k!r} is not a record of this model (unknown, or already removed).")
        return order[at]

    def _positions(self, indices: Any, keys: Any) -> np.ndarray:
        """The rows a removal names: ORIGINAL positions of ``fit``'s X (the one meaning of indices of every family,
        :func:`lethe.estimator_data.removal_rows`, whose checks and messages these are), still held."""
        if indices is None and keys is not None:
            indices, keys = self._key_rows(keys), None
        return removal_rows(indices, keys, active=self.active_, record_keys=None)

    def remove(self, indices: Any = None, *, keys: Any = None) -> ExactCertificate:
        """Remove records (by row position of ``fit`` or by record key) and retrain only the shards that held them,
        each from the checkpoint before the earliest slice holding one of its removed records.

        A batch is grouped by shard: each affected shard is retrained once. If the removal takes the last record of a
        class away, the classes change and every shard is retrained from scratch (a model fitted without the records
        would not know the class).

        The removed records are erased: their features and labels are blanked in ``X_`` and ``y_``, their keys in
        ``keys_`` (an unknown and an already removed key then get the same answer), their shard and slice set to
        -1; :meth:`save` writes the erased arrays. Rows keep their positions (``indices`` are positions in ``fit``'s
        X, as in every family), so ``active_`` says which positions are still held.

        Atomic: the new shards, mask and certificate are prepared aside and committed in one step, with the
        erasure; an exception before the commit (a bad argument, a failed retraining, an interrupt) leaves the
        model, ``certificate_`` included, as it was. One raised after it (on leaving the lock) finds the removal
        complete, erased and certified by ``certificate_``.

        Returns
        -------
        ExactCertificate
        """
        with self._mutex:
            self._check_full("remove")
            t0 = time.perf_counter()
            pos = self._positions(indices, keys)
            active = self.active_.copy()
            active[pos] = False
            if not np.any(active):
                raise ValueError("remove would leave no training record; refit instead.")
            staged = type(self).__new__(type(self))
            staged.__dict__.update({k: v for k, v in self.__dict__.items() if k != LOCK_ATTR})
            restart: dict[int, int] = {}
            classes: np.ndarray | None = getattr(self, "classes_", None)
            if classes is not None and not np.array_equal(np.unique(self.y_[active]), classes):
                classes = np.unique(self.y_[active])
                staged.__dict__["classes_"] = classes
                restart = dict.fromkeys(range(self.n_shards_), 0)
            else:
                for s in np.unique(self.shard_of_[pos]):
                    in_s = pos[self.shard_of_[pos] == s]
                    restart[int(s)] = int(self.slice_of_[in_s].min()) if self.mode_ != "fit" else 0
            estimators = list(self.estimators_)
            checkpoints = list(self.checkpoints_)
            replayed = 0
            for s, start in sorted(restart.items()):
                # None when no row came before this slice: a fresh clone is then the same state
                previous = self.checkpoints_[s][start - 1] if start > 0 else None
                est, cps, rows = staged._train_shard(s, active, start, previous)
                estimators[s], checkpoints[s] = est, cps
                replayed += rows
            shards = tuple(sorted(restart))
            cert = ExactCertificate(guarantee="exact", epsilon=0.0, delta=0.0, n_removed=int(len(pos)),
                                    n_remaining=int(np.count_nonzero(active)), n_shards=self.n_shards_,
                                    n_shards_retrained=len(shards), retrained_shards=shards,
                                    restart_slices=tuple(restart[s] for s in shards), rows_replayed=int(replayed),
                                    seconds=time.perf_counter() - t0)
            new = {"active_": active, "estimators_": estimators, "checkpoints_": checkpoints,
                   "n_shard_fits_": staged.n_shard_fits_, "n_removed_": self.n_removed_ + len(pos),
                   "last_certificate_": cert}
            if classes is not None:
                new["classes_"] = classes
            self._commit_erasing(new, pos)
            return cert

    #: The per-row arrays a removal erases, with the value a removed row gets (None: zero of the array's dtype).
    _ERASED: ClassVar[tuple[tuple[str, int | None], ...]] = (
        ("X_", None), ("y_", None), ("keys_", None), ("shard_of_", -1), ("slice_of_", -1))

    def _commit_erasing(self, new: dict[str, Any], pos: np.ndarray) -> None:
        """Erase rows ``pos`` of the per-row arrays in place (the model owns them) and adopt ``new`` in one step; on
        any exception before the adoption the erased values are written back, so nothing has changed."""
        arrays = [(getattr(self, name), fill) for name, fill in self._ERASED]
        saved = [a[pos].copy() for a, _ in arrays]  # a local undo copy, dropped when the call ends
        try:
            for a, fill in arrays:
                a[pos] = np.zeros((), dtype=a.dtype) if fill is None else fill
            self.__dict__.update(new)  # the commit: one C call (no line of Python, no signal, in between)
        except BaseException:
            for (a, _), old in zip(arrays, saved, strict=True):
                a[pos] = old
            raise

    def _check_full(self, what: str) -> None:
        check_is_fitted(self, "estimators_")
        if "active_" not in self.__dict__:
            raise ValueError(f"{what}: this model was loaded for prediction only (from_state(predict_only=True)); "
                             "it holds no rows. Load the full state to remove records or save.")

    @property
    def certificate_(self) -> ExactCertificate | None:
        """The certificate of the last removal (None before one; :class:`lethe.protocols.Unlearner`)."""
        return self.__dict__.get("last_certificate_")

    def add(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        """Not supported (``supports_add = False``); raises ``NotImplementedError`` and changes nothing."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot add records (supports_add = False): a record's shard and slice come from "
            "its keyed hash, and an added record would need its slice's checkpoints rebuilt; fit again on the "
            "enlarged data.")

    # -- prediction ------------------------------------------------------------------------------------------------
    def _members(self) -> list[tuple[int, Any]]:
        check_is_fitted(self, "estimators_")
        return [(s, e) for s, e in enumerate(self.estimators_) if e is not None]

    def _check_X(self, X: Any) -> np.ndarray:
        X = check_array(X, dtype="numeric", ensure_all_finite="allow-nan")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        return X

    @property
    def shard_sizes_(self) -> np.ndarray:
        """Active rows per shard (operator-only information: it changes when a record leaves its shard)."""
        check_is_fitted(self, "estimators_")
        return np.bincount(self.shard_of_[self.active_], minlength=self.n_shards_)

    # -- persistence -------------------------------------------------------------------------------------------------
    def _row_digest(self, rows: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(rows, dtype=np.int64).tobytes()).hexdigest()

    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save without pickle: one owner-only (0600) ``.npz`` written atomically (:func:`lethe.io.save_model_file`).

        It holds the SECRET hash key and the training rows (retraining needs them); fitted scikit-learn estimators
        and checkpoints as skops bytes, torch modules as float64 parameter arrays, the partition, seeds and per-shard
        row digests as JSON.

        The file carries an HMAC-SHA256 tag of all its arrays and metadata, which :meth:`load` checks before
        anything read from the file is used, under the model key — ``key`` (bytes or hexadecimal str), else
        ``$LETHE_MODEL_KEY`` (hexadecimal), else the key file (``$LETHE_MODEL_KEY_FILE``, else
        ``~/.config/lethe/model.key``), created on the first save where none exists
        (:func:`lethe.io.save_model_file`; the same policy as the certified estimators). The model key
        authenticates the file; it is not the hash key of the partition (that one is inside the file).
        """
        with self._mutex:
            check_is_fitted(self, "estimators_")
            arrays, meta = self.state()
            return save_model_file(path, arrays, meta, key=key, model=self)

    def compacted(self) -> Any:
        """A copy holding only the remaining rows, in their order (the estimators are shared, not copied): the same
        model, whose row positions are now 0..n_remaining-1 (``indices`` of its removals count these rows). Its later
        removals and a fresh fit partition and order the remaining records as this model does (shards and slices
        depend on the record keys only, and the relative order of the remaining rows is kept)."""
        self._check_full("compacted")
        new = type(self).__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != LOCK_ATTR})
        act = self.active_
        for name, _ in self._ERASED:
            new.__dict__[name] = getattr(self, name)[act]
        new.__dict__["active_"] = np.ones(int(np.count_nonzero(act)), dtype=bool)
        return new

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The fitted state as (arrays, JSON metadata): what :meth:`save` writes and :meth:`from_state` reads —
        the removed rows erased, the last certificate (``certificate_``) included. SECRET (the hash key, the rows)."""
        sio = skops_io()
        with self._mutex:
            self._check_full("state")
            arrays: dict[str, np.ndarray] = {"X": self.X_, "y": self.y_, "keys": self.keys_, "active": self.active_,
                                             "shard_of": self.shard_of_, "slice_of": self.slice_of_,
                                             "seeds": self.seeds_}
            torch_proto = isinstance(self.prototype_, TorchShardClassifier)
            if torch_proto:
                proto_meta: dict[str, Any] = {"kind": "torch", "params": {
                    k: v for k, v in self.prototype_.get_params(deep=False).items() if k != "module"},
                    "module": self.prototype_.module if isinstance(self.prototype_.module, dict | None) else None}
            else:
                arrays["prototype"] = np.frombuffer(sio.dumps(self.prototype_), dtype=np.uint8)
                proto_meta = {"kind": "skops"}
            shards = []
            for s in range(self.n_shards_):
                items = [*self.checkpoints_[s], self.estimators_[s]] if self.mode_ != "fit" else [self.estimators_[s]]
                kinds: list[dict[str, Any]] = []
                for r, item in enumerate(items):
                    name = f"shard{s}_stage{r}"
                    if item is None:
                        kinds.append({"kind": "empty"})
                    elif isinstance(item, ConstantShard):
                        kinds.append({"kind": "constant", "label_index": item.label_index})
                    elif isinstance(item, TorchShardClassifier):
                        t_arrays, t_meta = item._state()
                        for k, v in t_arrays.items():
                            arrays[f"{name}__{k}"] = v
                        kinds.append({"kind": "torch", "params": sorted(t_arrays), **t_meta})
                    elif isinstance(item, _Serialized):
                        arrays[name] = np.frombuffer(item.data, dtype=np.uint8)
                        kinds.append({"kind": "skops"})
                    else:
                        arrays[name] = np.frombuffer(sio.dumps(item), dtype=np.uint8)
                        kinds.append({"kind": "skops"})
                shards.append({"stages": kinds, "rows": int(self._shard_rows(s, self.active_).size),
                               "row_digest": self._row_digest(self._shard_rows(s, self.active_))})
            meta = {"class": type(self).__name__, "key_hex": self.key_.hex(), "n_shards": self.n_shards_,
                    "n_slices": self.n_slices_, "mode": self.mode_, "aggregation": self.aggregation_,
                    "n_features_in": int(self.n_features_in_), "n_removed": int(self.n_removed_),
                    "n_shard_fits": int(self.n_shard_fits_), "prototype": proto_meta, "shards": shards,
                    "certificate": None if self.__dict__.get("last_certificate_") is None
                    else self.__dict__["last_certificate_"].to_dict()}  # the raw one, not an origin-marked view
            if is_classifier(self):
                meta["classes"] = self.classes_.tolist()
            return arrays, meta

    @classmethod
    def load(cls, path: str | Path, *, estimator: Any = None, trusted: Sequence[str] = (),
             key: bytes | str | None = None, trust_unauthenticated: bool = False) -> Any:
        """Load a model written by :meth:`save` (never unpickles) and check its invariants.

        Authentication first (:func:`lethe.io.open_model_file` with the model key of :func:`lethe.io.model_key`:
        ``key``, else ``$LETHE_MODEL_KEY``, else the key file): the file needs a tag that matches under the key; a
        file without one (never keyed, or stripped), a wrong key or an edited file fails
        (:class:`lethe.io.ModelFileError`) unless ``trust_unauthenticated=True``, which the model's ``model_file_``
        and every later certificate then state. ``trusted`` (below) is about skops types, not the file. Then the
        checks: the class; S shards and R stages per shard as recorded;
        the partition recomputed from the record keys
        with the saved hash key equals the saved one; every shard's active row set has the recorded size and
        SHA-256 digest; empty shards are exactly those without rows. skops rebuilds only its default types,
        :data:`SKOPS_TRUSTED` and ``trusted``; a type outside them raises (nothing is loaded).

        Parameters
        ----------
        estimator : TorchShardClassifier, optional
            Needed when the shards are torch modules built by a factory (code is never stored in the file): a
            TorchShardClassifier with that factory and the saved training parameters.
        trusted : sequence of str
            More types skops may rebuild.
        """
        opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
        est = cls.from_state(opened.arrays, opened.meta, source=str(path), estimator=estimator, trusted=trusted)
        return set_origin(est, opened.origin)

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], *, source: str = "the state",
                   estimator: Any = None, trusted: Sequence[str] = (), lazy: bool = False,
                   predict_only: bool = False) -> Any:
        """The model of (arrays, metadata) written by :meth:`state`, after the invariant checks of :meth:`load`
        (``source`` names the origin in error messages); the arrays are copied (the model owns its rows), removed
        rows are erased, ``certificate_`` is the saved last certificate (checked against the model).

        ``lazy=True`` keeps the fitted shards and checkpoints as their bytes (not rebuilt, not type-checked): such a
        model can :meth:`remove` (retrained shards are rebuilt; the others carried over byte for byte) and be saved,
        not predict. ``predict_only=True`` reads only the shards' final estimators, the classes and the aggregation
        (no rows, keys, partition or checkpoints need be in ``arrays``): such a model predicts, and refuses
        :meth:`remove` and :meth:`save`."""
        sio = skops_io()
        path = source
        if lazy and meta.get("mode") != "fit":
            raise ValueError(f"lazy=True needs a model without slices (mode 'fit'). Found mode {meta.get('mode')!r}.")
        if meta.get("class") != cls.__name__:
            raise ValueError(f"{path} holds a {meta.get('class')!r}, not a {cls.__name__}.")
        allowed = set(SKOPS_TRUSTED) | set(trusted)
        S, R = int(meta["n_shards"]), int(meta["n_slices"])
        if len(meta["shards"]) != S:
            raise ValueError(f"{path}: {len(meta['shards'])} shards recorded, n_shards is {S}: the file was edited.")

        def skops_load(name: str) -> Any:
            if name not in arrays:
                raise ValueError(f"{path}: entry {name!r} is missing.")
            data = arrays[name].tobytes()
            untrusted = set(sio.get_untrusted_types(data=data)) - allowed
            if untrusted:
                raise ValueError(f"{path}: entry {name!r} needs types outside the trusted list: {sorted(untrusted)}. "
                                 "Pass them as trusted= if you trust the file.")
            return sio.loads(data, trusted=sorted(allowed))

        if predict_only:
            est = cls(n_shards=S, n_slices=R, aggregation=meta["aggregation"])
            finals: list[Any] = []
            for s, sm in enumerate(meta["shards"]):
                r = len(sm["stages"]) - 1
                st = sm["stages"][r]
                if st["kind"] not in ("empty", "constant", "skops"):
                    raise ValueError(f"{path}: shard {s} is a {st['kind']!r} stage; predict_only reads skops shards "
                                     "only (load the full state).")
                if st["kind"] == "empty":
                    finals.append(None)
                else:
                    finals.append(ConstantShard(int(st["label_index"])) if st["kind"] == "constant"
                                  else skops_load(f"shard{s}_stage{r}"))
            if all(e is None for e in finals):
                raise ValueError(f"{path}: no shard is trained.")
            est.__dict__.update({"estimators_": finals, "mode_": meta["mode"], "aggregation_": meta["aggregation"],
                                 "n_features_in_": int(meta["n_features_in"]), "n_shards_": S, "n_slices_": R})
            if "classes" in meta:
                est.classes_ = np.asarray(meta["classes"])
            return est
        pm = meta["prototype"]
        if pm["kind"] == "torch":
            if estimator is None:
                if pm["module"] is None:
                    raise ValueError(f"{path} holds torch shards built by a factory: pass estimator="
                                     "TorchShardClassifier(factory, ...) to load it.")
                proto: Any = TorchShardClassifier(pm["module"], **pm["params"])
            else:
                if not isinstance(estimator, TorchShardClassifier):
                    raise TypeError(f"estimator must be a TorchShardClassifier. Found {type(estimator).__name__}.")
                own = {k: v for k, v in estimator.get_params(deep=False).items() if k != "module"}
                if own != pm["params"]:
                    raise ValueError(f"estimator's parameters {own} differ from the saved ones {pm['params']}: "
                                     "retraining would not be exact.")
                proto = estimator
        else:
            proto = skops_load("prototype")
        est = cls(estimator=proto, n_shards=S, n_slices=R, aggregation=meta["aggregation"])
        secret = bytes.fromhex(meta["key_hex"])
        # the model's own copies (a removal erases rows in place; the caller's arrays are never written)
        keys, active = np.array(arrays["keys"]), np.array(arrays["active"], dtype=bool)
        X, y = np.array(arrays["X"]), np.array(arrays["y"])
        n_rows = keys.shape[0]
        if not (X.shape[0] == y.shape[0] == active.shape[0] == n_rows) or X.ndim != 2 \
                or X.shape[1] != int(meta["n_features_in"]):
            raise ValueError(f"{path}: the rows (X {X.shape}, y {y.shape}), the record keys ({n_rows}) and the removal "
                             f"mask ({active.shape[0]}) do not describe the same rows of {meta['n_features_in']} "
                             "features.")
        # the partition of the rows held, recomputed; a removed row's key (erased, or kept by a file written before
        # erasure) is not read, and its values are erased here
        shard, slc = np.full(n_rows, -1, dtype=np.int64), np.full(n_rows, -1, dtype=np.int64)
        shard[active], slc[active] = shard_assignment(keys[active], secret, S, R)
        if not (np.array_equal(shard[active], np.asarray(arrays["shard_of"])[active])
                and np.array_equal(slc[active], np.asarray(arrays["slice_of"])[active])):
            raise ValueError(f"{path}: the saved partition differs from the keyed hash of the record keys.")
        for a in (X, y, keys):
            a[~active] = np.zeros((), dtype=a.dtype)
        if arrays["seeds"].shape != (S,):
            raise ValueError(f"{path}: {arrays['seeds'].shape[0]} seeds for {S} shards.")
        est.__dict__.update({"key_": secret, "keys_": keys, "X_": X, "y_": y, "active_": active,
                             "shard_of_": shard, "slice_of_": slc, "seeds_": np.array(arrays["seeds"]),
                             "prototype_": proto, "mode_": meta["mode"], "aggregation_": meta["aggregation"],
                             "n_features_in_": int(meta["n_features_in"]), "n_shards_": S, "n_slices_": R,
                             "n_shard_fits_": int(meta["n_shard_fits"]), "n_removed_": int(meta["n_removed"])})
        if "classes" in meta:
            est.classes_ = np.asarray(meta["classes"])
        if meta.get("certificate") is not None:  # files written before it was saved have none
            cert = ExactCertificate.from_dict(meta["certificate"])
            if (cert.n_remaining, cert.n_shards) != (int(np.count_nonzero(active)), S):
                raise ValueError(f"{path}: the last certificate says {cert.n_remaining} records remain in "
                                 f"{cert.n_shards} shards; the model holds {int(np.count_nonzero(active))} in {S}: "
                                 "the file was edited.")
            est.__dict__["last_certificate_"] = cert
        n_stages = R if meta["mode"] != "fit" else 1
        estimators, checkpoints = [], []
        for s, sm in enumerate(meta["shards"]):
            rows = est._shard_rows(s, active)
            if rows.size != sm["rows"] or est._row_digest(rows) != sm["row_digest"]:
                raise ValueError(f"{path}: shard {s}'s row set differs from the recorded one: the file was edited.")
            if len(sm["stages"]) != n_stages:
                raise ValueError(f"{path}: shard {s} has {len(sm['stages'])} stages, expected {n_stages}.")
            items: list[Any] = []
            for r, st in enumerate(sm["stages"]):
                name = f"shard{s}_stage{r}"
                if st["kind"] == "empty":
                    items.append(None)
                elif st["kind"] == "constant":
                    items.append(ConstantShard(int(st["label_index"])))
                elif st["kind"] == "torch":
                    t = est._shard_estimator(s)
                    t._set_state({k: arrays[f"{name}__{k}"] for k in st["params"]}, st)
                    items.append(t)
                else:
                    items.append(_Serialized(arrays[name].tobytes()) if lazy else skops_load(name))
            if (items[-1] is None) != (rows.size == 0):
                raise ValueError(f"{path}: shard {s} is {'empty' if items[-1] is None else 'trained'} but holds "
                                 f"{rows.size} rows.")
            estimators.append(items[-1])
            checkpoints.append(items[:-1])
        est.estimators_, est.checkpoints_ = estimators, checkpoints
        return est
