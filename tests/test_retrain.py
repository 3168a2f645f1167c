"""Exact retraining as an unlearning family (lethe.retrain, issue 37)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from lethe.protocols import Certificate
from lethe.retrain import RetrainingClassifier


def _data():
    X, y = load_breast_cancer(return_X_y=True)
    return X[:200], y[:200]


def test_a_removal_leaves_the_model_fitted_from_scratch_on_the_remaining_rows():
    X, y = _data()
    model = RetrainingClassifier().fit(X, y, sample_ids=np.arange(1000, 1200))
    cert = model.remove(keys=[1003, 1010])
    model.remove([20])
    keep = np.setdiff1d(np.arange(200), [3, 10, 20])
    ref = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X[keep], y[keep])
    assert np.array_equal(model.predict_proba(X), ref.predict_proba(X))
    assert (cert.guarantee, cert.epsilon, cert.delta, cert.n_removed, cert.n_remaining) == ("exact", 0.0, 0.0, 2, 198)
    assert isinstance(cert, Certificate) and cert.observer == "one published version"
    assert "consecutive" not in cert.observer and "difference" in cert.to_dict()["consecutive_versions"]
    Xr, _yr, pos = model.remaining_rows()
    assert Xr.shape[0] == 197 and not np.isin([3, 10, 20], pos).any()  # removed rows are not kept
    assert model.keys_[3] == 0 and not model.active_[[3, 10, 20]].any()


def test_unknown_removed_and_bad_requests_change_nothing():
    X, y = _data()
    model = RetrainingClassifier().fit(X, y, sample_ids=np.arange(200))
    model.remove(keys=[5])
    before = model.predict_proba(X)
    for bad in ({"keys": [5]}, {"keys": [999]}, {"indices": [5]}, {"indices": [1, 1]}):
        with pytest.raises(ValueError):
            model.remove(**bad)
    assert np.array_equal(model.predict_proba(X), before) and int(model.active_.sum()) == 199


class _FailsBelow(ClassifierMixin, BaseEstimator):
    """Refuses to fit on fewer than ``k`` rows (a refit that fails)."""

    def __init__(self, k=195):
        self.k = k

    def fit(self, X, y):
        if X.shape[0] < self.k:
            raise RuntimeError("too few rows")
        self.classes_ = np.unique(y)
        self.mean_ = X.mean(axis=0)
        return self

    def predict(self, X):
        return np.full(X.shape[0], self.classes_[0])


def test_a_refit_that_fails_leaves_the_model_as_it_was():
    X, y = _data()
    model = RetrainingClassifier(_FailsBelow()).fit(X, y)
    model.remove([0, 1, 2])
    mean = model.estimator_.mean_.copy()
    with pytest.raises(RuntimeError, match="too few rows"):
        model.remove([3, 4, 5, 6, 7, 8])
    assert np.array_equal(model.estimator_.mean_, mean) and model.active_[3:9].all()
    assert model.remaining_rows()[0].shape[0] == 197


def test_added_rows_are_trained_on_and_removable_by_key():
    X, y = _data()
    model = RetrainingClassifier().fit(X[:150], y[:150], sample_ids=np.arange(150))
    cert = model.add(X[150:], y[150:], sample_ids=np.arange(150, 200))
    assert cert.n_added == 50 and cert.n_remaining == 200
    model.remove(keys=[160])
    assert not model.active_[160] and model.remaining_rows()[0].shape[0] == 199
    with pytest.raises(ValueError, match="new keys"):
        model.add(X[:1], y[:1], sample_ids=[3])
