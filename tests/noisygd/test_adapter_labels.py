"""The service's Noisy-GD and noisy fine-tuning adapters take the labels a dataset holds, strings included (a schema
dataset's declared classes, e.g. Adult's "<=50K"/">50K"): training failed with "could not convert string to float"
before (found through `lethe train adult M --mechanism noisy-gd` on the Adult schema)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")


def _adapter(name):
    if name == "noisy-gd":
        from lethe.noisygd.adapter import NoisyGDAdapter as cls
    else:
        pytest.importorskip("torch")
        from lethe.nn.adapter import NoisyFineTuneAdapter as cls
    return cls(cls.check_params({}))


@pytest.mark.parametrize("name", ["noisy-gd", "noisy-finetune"])
@pytest.mark.parametrize("labels", [("<=50K", ">50K"), (0, 1), (-1.0, 1.0)])
def test_train_remove_and_predict_in_the_dataset_label_space(name, labels):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] > 0, labels[1], labels[0])
    ad = _adapter(name)
    art, _ = ad.train(X, y, np.random.default_rng(1))
    assert art.meta["classes"] == [c if isinstance(c, str) else float(c) for c in labels]
    assert set(np.asarray(ad.predict(art, X)).tolist()) <= set(art.meta["classes"])
    art2, _ = ad.remove(art, X, y, np.array([3, 7]), np.random.default_rng(2))
    assert art2.meta["classes"] == art.meta["classes"] and art2.meta["n"] == 118
    bad = y.copy() if not isinstance(labels[0], str) else y.astype(object)
    bad[5] = "other" if isinstance(labels[0], str) else 7
    with pytest.raises(ValueError, match="Labels must be one of"):
        ad.remove(art, X, bad if not isinstance(labels[0], str) else bad.astype(str), np.array([3]),
                  np.random.default_rng(3))
