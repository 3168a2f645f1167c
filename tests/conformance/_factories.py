"""Small fitted models of every estimator of every registered family, for the conformance suite.

``FACTORIES`` maps an estimator's dotted path (as the registry names it, :mod:`lethe.families`) to a pair (unfitted
estimator maker, data maker). A family whose estimator has no entry here fails
``test_every_registered_estimator_has_a_factory``: adding a family means adding it here (or, for a third-party
family, giving its :class:`~lethe.families.Family` a ``conformance`` entry in ``extra``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def binary(n: int = 240, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return X, y


def three(n: int = 240, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, d)) * 0.2 + np.eye(3, d)[y] * 0.6
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, y


def regression(n: int = 240, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, _ = binary(n, d, seed)
    rng = np.random.default_rng(seed + 1)
    return X, X @ np.arange(1.0, d + 1.0) * 0.2 + 0.05 * rng.normal(size=n)


def _certified_logistic() -> Any:
    from lethe.certified.estimators import CertifiedLogisticRegression
    return CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0)


def _certified_linear() -> Any:
    from lethe.certified.estimators import CertifiedLinearRegression
    return CertifiedLinearRegression(lam=1e-2)


def _released() -> Any:
    from lethe.release import ReleasedLogisticRegression
    return ReleasedLogisticRegression(lam=1e-2, horizon=50, random_state=0)


def _sharded_classifier() -> Any:
    from sklearn.linear_model import LogisticRegression

    from lethe.sharded import ShardedClassifier
    return ShardedClassifier(LogisticRegression(), n_shards=3, key=b"k" * 32, random_state=0)


def _sharded_regressor() -> Any:
    from sklearn.linear_model import Ridge

    from lethe.sharded import ShardedRegressor
    return ShardedRegressor(Ridge(), n_shards=3, key=b"k" * 32, random_state=0)


def _noisygd_logistic() -> Any:
    from lethe.noisygd.estimators import NoisyGDLogisticRegression
    return NoisyGDLogisticRegression(random_state=0)


def _noisygd_mlp() -> Any:
    from lethe.noisygd.estimators import NoisyGDMLPClassifier
    return NoisyGDMLPClassifier(n_hidden=3, n_iter=20, n_iter_unlearn=5, random_state=0)


def _noisygd_bounded() -> Any:
    from lethe.noisygd.estimators import NoisyGDBoundedMLPClassifier
    return NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, n_iter=20, n_iter_unlearn=5, random_state=0)


def _pnsgd() -> Any:
    from lethe.noisygd.pnsgd import PNSGDLogisticRegression
    return PNSGDLogisticRegression(batch_size=32, learn_epochs=2, random_state=0)


def _finetune() -> Any:
    from lethe.nn.estimators import NoisyFineTuneClassifier
    return NoisyFineTuneClassifier(random_state=0, unlearn_steps=2, batch_size=16, train_epochs=2, post_steps=1,
                                   model_radius=3.0)


FACTORIES: dict[str, tuple[Any, Any]] = {
    "lethe.certified.estimators:CertifiedLogisticRegression": (_certified_logistic, binary),
    "lethe.certified.estimators:CertifiedLinearRegression": (_certified_linear, regression),
    "lethe.release:ReleasedLogisticRegression": (_released, lambda: binary(n=4000, d=4)),
    "lethe.sharded:ShardedClassifier": (_sharded_classifier, binary),
    "lethe.sharded:ShardedRegressor": (_sharded_regressor, regression),
    "lethe.noisygd.estimators:NoisyGDLogisticRegression": (_noisygd_logistic, binary),
    "lethe.noisygd.estimators:NoisyGDMLPClassifier": (_noisygd_mlp, binary),
    "lethe.noisygd.estimators:NoisyGDBoundedMLPClassifier": (_noisygd_bounded, binary),
    "lethe.noisygd.pnsgd:PNSGDLogisticRegression": (_pnsgd, binary),
    "lethe.nn.estimators:NoisyFineTuneClassifier": (_finetune, three),
}


#: Small service-adapter parameters per mechanism (``lethe.curator.adapters.get_adapter``) and the extra keyword
#: arguments its ``train`` takes; a family with an adapter needs an entry here.
ADAPTERS: dict[str, tuple[dict[str, Any], bool]] = {
    "certified-removal": ({"lam": 1e-2, "sigma": 1.0}, False),
    "released-logistic": ({"lam": 5e-2, "horizon": 20}, False),
    "sharded": ({"estimator": "logistic-regression", "n_shards": 2}, True),
    "noisy-gd": ({}, False),
    "noisy-finetune": ({"module": {"kind": "mlp", "hidden": [4]}, "train_epochs": 1, "post_steps": 1}, False),
}
