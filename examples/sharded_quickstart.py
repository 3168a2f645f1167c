"""Exact unlearning for a gradient-boosted model: shard it (SISA), remove a customer, check the model equals one
trained without them, save and reload.

Run: ``OMP_NUM_THREADS=1 python examples/sharded_quickstart.py`` (scikit-learn's breast-cancer table, seconds).
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import HistGradientBoostingClassifier

from lethe.sharded import ShardedClassifier


def main() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    customer_ids = np.array([f"cust-{i:05d}" for i in range(len(y))])  # stable record keys (not row positions)
    key = secrets.token_bytes(32)  # the secret of the keyed partition: keep it like the data
    params = {"n_shards": 8, "aggregation": "mean_proba", "key": key, "random_state": 0}

    model = ShardedClassifier(HistGradientBoostingClassifier(max_iter=50, early_stopping=False), **params)
    model.fit(X, y, sample_ids=customer_ids)
    print(f"training accuracy {model.score(X, y):.3f}, rows per shard {model.shard_sizes_.tolist()}")

    gone = ["cust-00007", "cust-00123", "cust-00404"]
    cert = model.remove(keys=gone)
    print("certificate for the requester:", cert.public_dict())
    print("for the operator only:", {k: cert.to_dict()[k] for k in sorted(cert.OPERATOR_ONLY)})

    # exactness: the same as training without them, with the same key and seeds
    keep = ~np.isin(customer_ids, gone)
    fresh = ShardedClassifier(HistGradientBoostingClassifier(max_iter=50, early_stopping=False), **params)
    fresh.fit(X[keep], y[keep], sample_ids=customer_ids[keep])
    print("equal bit for bit to a model trained without them:",
          np.array_equal(model.predict_proba(X), fresh.predict_proba(X)))

    with tempfile.TemporaryDirectory() as tmp:
        path = model.save(Path(tmp) / "sharded.npz")  # no pickle, owner-only: holds the key and the rows
        loaded = ShardedClassifier.load(path)
        print("reloaded model predicts the same:", np.array_equal(loaded.predict_proba(X), model.predict_proba(X)))


if __name__ == "__main__":
    main()
