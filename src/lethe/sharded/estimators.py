"""Exact sharded unlearning (SISA) for any classifier or regressor: :class:`ShardedClassifier`,
:class:`ShardedRegressor` (see :mod:`lethe.sharded`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets

from lethe.sharded.base import ConstantShard, ShardedBase

__all__ = ["ShardedClassifier", "ShardedRegressor"]


class ShardedClassifier(ClassifierMixin, ShardedBase):
    """Exact unlearning for any classifier: S shards by keyed hash, optional R slices with checkpoints (SISA).

    Parameters
    ----------
    estimator : scikit-learn classifier or callable
        Cloned for each shard, with ``random_state`` set to the shard's seed when it has that parameter. A callable
        without ``fit`` is a torch module factory ``factory(n_features, n_classes)`` wrapped in
        :class:`TorchShardClassifier`.
    n_shards : int
        S (default 8).
    n_slices : int
        R (default 1: a removal retrains its shard from scratch). R > 1 needs ``partial_fit`` (called with
        ``classes=``; SGDClassifier, MLPClassifier, :class:`TorchShardClassifier`): stage r is one ``partial_fit``
        call on slices 0..r. ``warm_start`` is not used: a warm-started refit of a boosting or forest ensemble adds
        nothing at a fixed size, so its later slices would silently train nothing, and the estimators whose
        warm-started fit continues training (MLP, SGD) have ``partial_fit``.
    aggregation : {"vote", "mean_proba"}
        Majority vote of the shards' predictions (ties → the smallest class; ``predict_proba`` gives the vote
        shares), or the mean of their ``predict_proba`` (default "vote").
    key : bytes, optional
        Secret of ≥ 16 bytes for the keyed hash; None draws 32 bytes from the operating system at ``fit``
        (``key_``, saved by :meth:`save`). A model holding a key refuses pickle (it is a secret).
    random_state : None, int or numpy.random.Generator
        Seeds the shards: shard s gets the s-th child of ``SeedSequence(entropy)``, entropy drawn from
        ``random_state`` (``seeds_``). An int makes fit reproducible bit for bit.

    Attributes
    ----------
    key_ : bytes
        The secret hash key.
    keys_, shard_of_, slice_of_ : ndarray
        Record keys and their (shard, slice).
    seeds_ : ndarray of shape (S,)
    estimators_ : list
        The shards' estimators (None for an empty shard).
    checkpoints_ : list of lists
        Per shard, the estimator after stages 0..R-2 (None where no row had come yet).
    active_ : ndarray of bool
        Rows not removed.
    n_shard_fits_ : int
        Shard trainings so far (``fit``/``partial_fit`` calls on shards): the cost counter.
    """

    aggregations = ("vote", "mean_proba")

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        y = super()._check_y(y, n)
        check_classification_targets(y)
        return y

    def _proba_of(self, est: Any, X: np.ndarray) -> np.ndarray:
        K = len(self.classes_)
        out = np.zeros((X.shape[0], K))
        if isinstance(est, ConstantShard):
            out[:, est.label_index] = 1.0
            return out
        if self.aggregation_ == "vote":
            out[np.arange(X.shape[0]), np.searchsorted(self.classes_, est.predict(X))] = 1.0
            return out
        out[:, np.searchsorted(self.classes_, est.classes_)] = est.predict_proba(X)
        return out

    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean over the non-empty shards of their one-hot votes ("vote") or probabilities ("mean_proba")."""
        members = self._members()
        X = self._check_X(X)
        total = np.zeros((X.shape[0], len(self.classes_)))
        for _, est in members:
            total += self._proba_of(est, X)
        return total / len(members)

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)  # first: an unfitted model says NotFittedError
        return self.classes_[np.argmax(proba, axis=1)]


class ShardedRegressor(RegressorMixin, ShardedBase):
    """Exact unlearning for any regressor: S shards by keyed hash, optional R slices (see :class:`ShardedClassifier`
    for the parameters); ``aggregation="mean"`` averages the non-empty shards' predictions."""

    aggregations = ("mean",)

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        return super()._check_y(y, n).astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        members = self._members()
        X = self._check_X(X)
        total = np.zeros(X.shape[0])
        for _, est in members:
            total += np.asarray(est.predict(X), dtype=np.float64)
        return total / len(members)
