"""Removal through pipelines: stateless or frozen steps are accepted, steps fitted on the private data refused."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, Normalizer, StandardScaler

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.pipeline import UnlearningPipeline, make_unlearning_pipeline
from lethe.preprocessing import UnitBallNormalizer


def _clf():
    return CertifiedLogisticRegression(lam=1e-3, sigma=0.1, random_state=0)


def test_pipeline_removes_by_dataframe_index_through_stateless_steps():
    pd = pytest.importorskip("pandas")
    X, y = load_digits(return_X_y=True, as_frame=True)
    X.index = pd.Index([f"img-{i}" for i in range(len(X))])
    pipe = make_unlearning_pipeline(FunctionTransformer(np.sqrt), Normalizer(), _clf()).fit(X, y)
    assert pipe.score(X, y) > 0.85
    cert = pipe.remove(keys=["img-3", "img-99"])
    clf = pipe[-1]
    assert cert.n_removed == 2 and clf.n_remaining_ == len(X) - 2
    assert cert.residual_bound <= cert.budget
    with pytest.raises(ValueError, match="not a record"):
        pipe.remove(keys=["img-3"])
    pipe.remove([5])  # by position too
    assert clone(pipe).steps[-1][1].get_params() == clf.get_params()


def test_pipeline_refuses_a_step_fitted_on_the_private_data():
    X, y = load_digits(return_X_y=True)
    pipe = UnlearningPipeline([("scale", StandardScaler()), ("norm", UnitBallNormalizer()), ("clf", _clf())])
    with pytest.raises(ValueError, match=r"step 'scale' \(StandardScaler\) learns from the training data"):
        pipe.fit(X, y)
    # a plain Pipeline fitted with the scaler, then converted, is refused at removal as well
    plain = make_pipeline(StandardScaler(), UnitBallNormalizer(), _clf()).fit(X, y)
    with pytest.raises(ValueError, match="learns from the training data"):
        UnlearningPipeline(plain.steps).remove([0])
    assert plain[-1].n_remaining_ == len(X)


def test_pipeline_accepts_a_frozen_step_fitted_on_public_data():
    X, y = load_digits(return_X_y=True)
    public, private = X[:500], X[500:]
    scaler = FrozenEstimator(StandardScaler().fit(public))
    pipe = make_unlearning_pipeline(scaler, UnitBallNormalizer(), _clf()).fit(private, y[500:])
    mean = scaler.estimator.mean_.copy()
    pipe.remove([0, 1, 2])
    np.testing.assert_array_equal(scaler.estimator.mean_, mean)  # never refitted on the private rows


def test_pipeline_final_step_must_remove():
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    with pytest.raises(ValueError, match="has no remove"):
        make_unlearning_pipeline(Normalizer(), LogisticRegression()).fit(X, y)
