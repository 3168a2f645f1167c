"""The service's Noisy-GD adapter takes the labels a dataset holds, strings included (a schema dataset's declared
classes, e.g. Adult's "<=50K"/">50K"): training failed with "could not convert string to float" before."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from lethe.noisygd.adapter import NoisyGDAdapter  # noqa: E402


@pytest.mark.parametrize("labels", [("<=50K", ">50K"), (0, 1), (-1.0, 1.0)])
def test_train_remove_and_predict_in_the_dataset_label_space(labels):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] > 0, labels[1], labels[0])
    ad = NoisyGDAdapter(NoisyGDAdapter.check_params({}))
    art, cert = ad.train(X, y, np.random.default_rng(1))
    assert art.meta["classes"] == [type(labels[0])(c) if isinstance(labels[0], str) else float(c) for c in labels]
    pred = ad.predict(art, X)
    assert set(np.unique(pred).tolist()) <= set(art.meta["classes"])
    keep = np.ones(120, dtype=bool)
    keep[[3, 7]] = False
    art2, _ = ad.remove(art, X, y, np.array([3, 7]), np.random.default_rng(2))
    assert art2.meta["classes"] == art.meta["classes"] and art2.meta["n"] == 118
    bad = y.astype(object).copy()
    bad[5] = "other" if isinstance(labels[0], str) else 7
    with pytest.raises(ValueError, match="Labels must be one of"):
        ad.remove(art, X, bad.astype(y.dtype) if not isinstance(labels[0], str) else bad.astype(str),
                  np.array([3]), np.random.default_rng(3))
