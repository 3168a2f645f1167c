"""Exact retraining as an unlearning family (issue 37): remove = drop the rows and refit from scratch.

On a small table a refit costs tens of milliseconds (83 ms for 800 rows of the German credit table with one-hot
encoding, scaling and a logistic regression), less than the latency a certified removal is usually asked for, and it
loses no accuracy: the model after a removal IS the model trained without the removed rows. That is the strongest
guarantee for an observer of one published version (ε = 0, δ = 0). What it does not cover, as for sharded models
(docs/sharded.md, "What consecutive releases reveal"): an observer who keeps consecutive versions sees the difference
the removed rows made (e.g. which way the weights moved), which can reveal them; publish only the current version,
or use a family that covers every release (:class:`lethe.release.ReleasedLogisticRegression`).

:class:`RetrainingClassifier` wraps any scikit-learn classifier or pipeline (its steps may learn from the rows: every
step is refitted) and follows :class:`lethe.protocols.Unlearner`'s ``remove``/``add`` meaning (original row
positions or record keys, O(1) per key through :mod:`lethe.keymap`). A removed row is dropped from the rows the model
keeps. It holds no secret (no noise), so it pickles like any scikit-learn estimator (with the remaining rows: keep the
file private); it has no lethe ``save``/``load`` file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted

from lethe._locking import SerialisedModel, serialised
from lethe.estimator_data import check_keys, check_new_keys, keys_of, removal_rows
from lethe.io import JsonRecord

__all__ = ["RetrainingCertificate", "RetrainingClassifier"]


@dataclass(frozen=True)
class RetrainingCertificate(JsonRecord):
    """Certificate of a removal (or addition) by exact retraining: ε = 0, δ = 0 for one published version.

    The promise: the model after the operation was fitted from scratch, by the same estimator with the same
    parameters (seed included), on exactly the remaining rows; it is the model retrained without the removed
    records. An observer of consecutive versions is not covered (the module's text).

    Attributes
    ----------
    guarantee : str
        ``"exact"``.
    epsilon, delta : float
        0.0 and 0.0.
    n_removed, n_added, n_remaining : int
    seconds : float
        Wall time of the refit.
    """

    guarantee: str
    epsilon: float
    delta: float
    n_removed: int
    n_added: int
    n_remaining: int
    seconds: float

    @property
    def observer(self) -> str:
        """``"one published version"``: consecutive versions reveal what changed (not covered)."""
        return "one published version"

    @property
    def consecutive_versions(self) -> str:
        """What an observer of consecutive versions learns (this certificate does not cover it)."""
        return ("the difference between the version before and after the operation is the removed (or added) "
                "records' whole influence on the model, which can reveal them; publish only the current version, or "
                "use lethe.release.ReleasedLogisticRegression, whose guarantee covers every release")

    def to_dict(self) -> dict[str, Any]:
        """Every field, with ``observer`` and ``consecutive_versions``."""
        d = super().to_dict()
        d["observer"] = self.observer
        d["consecutive_versions"] = self.consecutive_versions
        return d


def _take(X: Any, rows: np.ndarray) -> Any:
    """Rows of an array, sparse matrix or DataFrame, by position."""
    return X.iloc[rows] if hasattr(X, "iloc") else X[rows]


def _concat(A: Any, B: Any) -> Any:
    if hasattr(A, "iloc"):
        import pandas as pd

        return pd.concat([A, B], ignore_index=True)
    import scipy.sparse as sp

    if sp.issparse(A):
        return sp.vstack([A, B], format="csr")
    return np.concatenate([np.asarray(A), np.asarray(B)])


class RetrainingClassifier(SerialisedModel, ClassifierMixin, BaseEstimator):
    """Exact unlearning by refitting ``estimator`` on the remaining rows at every removal.

    Parameters
    ----------
    estimator : scikit-learn classifier or pipeline, optional
        Default: ``StandardScaler`` + ``LogisticRegression(max_iter=1000)`` (numeric features). For a table with
        categorical columns pass a pipeline that encodes them (e.g. ``OneHotEncoder`` in a ``ColumnTransformer``).

    Attributes
    ----------
    estimator_ : the fitted estimator (on the remaining rows)
    active_ : ndarray of bool, one per original row (False: removed)
    keys_ : ndarray or None, record keys (removed ones blanked)
    certificate_ : RetrainingCertificate or None
    fit_seconds_ : float, wall time of the last fit or refit

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> model = RetrainingClassifier().fit(X, y)
    >>> cert = model.remove([0, 1])
    >>> (cert.guarantee, cert.epsilon, cert.n_remaining)
    ('exact', 0.0, 567)
    """

    supports_add = True

    def __init__(self, estimator: Any = None) -> None:
        self.estimator = estimator

    def _prototype(self) -> Any:
        if self.estimator is not None:
            return clone(self.estimator)
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))

    def _refit(self, X: Any, y: np.ndarray) -> tuple[Any, float]:
        t0 = time.perf_counter()
        est = self._prototype().fit(X, y)
        return est, time.perf_counter() - t0

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> RetrainingClassifier:
        """Fit on (X, y); ``sample_ids`` (or a DataFrame's index) names the records for ``remove(keys=...)``."""
        y = np.asarray(y)
        n = X.shape[0]
        if y.shape != (n,):
            raise ValueError(f"y must be 1-D with one label per row of X ({n}). Found shape {y.shape}.")
        keys = keys_of(X, sample_ids)
        X = X.copy() if hasattr(X, "copy") else np.array(X)
        est, secs = self._refit(X, y)
        self.estimator_, self.fit_seconds_ = est, secs
        self._X, self._y, self._pos = X, y.copy(), np.arange(n, dtype=np.int64)
        self.active_, self.keys_ = np.ones(n, dtype=bool), keys
        self.classes_ = est.classes_
        self.certificate_: RetrainingCertificate | None = None
        return self

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> RetrainingCertificate:
        """Remove training rows (ORIGINAL positions of ``fit``'s X, or record keys) and refit on the rest. On any
        error (unknown or removed rows, no row left, a refit that fails) the model is unchanged."""
        check_is_fitted(self, "estimator_")
        idx = removal_rows(indices, keys, active=self.active_, record_keys=self.keys_, owner=self)
        if idx.size >= int(self.active_.sum()):
            raise ValueError(f"Cannot remove all {int(self.active_.sum())} remaining rows: one must remain.")
        keep = np.flatnonzero(~np.isin(self._pos, idx))
        X, y = _take(self._X, keep), self._y[keep]
        est, secs = self._refit(X, y)  # raises before anything changed
        self.estimator_, self.fit_seconds_, self.classes_ = est, secs, est.classes_
        self._X, self._y, self._pos = X, y, self._pos[keep]
        self.active_[idx] = False  # in place, after the refit succeeded (the key map stays valid: lethe.keymap)
        if self.keys_ is not None:  # a removed record's key must not stay in memory
            self.keys_[idx] = "" if self.keys_.dtype.kind == "U" else 0
        self.certificate_ = RetrainingCertificate(guarantee="exact", epsilon=0.0, delta=0.0, n_removed=int(idx.size),
                                                  n_added=0, n_remaining=int(keep.size), seconds=secs)
        return self.certificate_

    @serialised
    def add(self, X: Any, y: Any, sample_ids: Any = None) -> RetrainingCertificate:
        """Append rows (they get the next original positions) and refit; exact, like a removal."""
        check_is_fitted(self, "estimator_")
        y = np.asarray(y)
        m = X.shape[0]
        if y.shape != (m,):
            raise ValueError(f"y must be 1-D with one label per row of X ({m}). Found shape {y.shape}.")
        keys = None
        if self.keys_ is not None:
            if sample_ids is None:
                raise ValueError("sample_ids: this model has record keys; give the keys of the new rows.")
            keys = check_keys(sample_ids, m)
            check_new_keys(keys, self.keys_, self.active_)
        elif sample_ids is not None:
            raise ValueError("sample_ids: this model was fitted without record keys.")
        Xa, ya = _concat(self._X, X), np.concatenate([self._y, y])
        est, secs = self._refit(Xa, ya)
        n0 = self.active_.shape[0]
        self.estimator_, self.fit_seconds_, self.classes_ = est, secs, est.classes_
        self._X, self._y = Xa, ya
        self._pos = np.concatenate([self._pos, np.arange(n0, n0 + m, dtype=np.int64)])
        self.active_ = np.concatenate([self.active_, np.ones(m, dtype=bool)])
        if keys is not None:
            self.keys_ = np.concatenate([self.keys_, keys])
        self.certificate_ = RetrainingCertificate(guarantee="exact", epsilon=0.0, delta=0.0, n_removed=0, n_added=m,
                                                  n_remaining=int(self._pos.size), seconds=secs)
        return self.certificate_

    def remaining_rows(self) -> tuple[Any, np.ndarray, np.ndarray]:
        """(X, y, original positions) of the rows the model is trained on."""
        check_is_fitted(self, "estimator_")
        return self._X, self._y.copy(), self._pos.copy()

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "estimator_")
        return np.asarray(self.estimator_.predict(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "estimator_")
        return np.asarray(self.estimator_.predict_proba(X))
