"""Every family's stored state is checked by the family's own rule (issue 34: without a branch in the generic
``check_invariants``, a ``sharded`` or ``noisy-finetune`` artifact loaded with no invariant check at all)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from lethe.curator.adapters import get_adapter  # noqa: E402
from lethe.curator.artifacts import Artifact, ArtifactError, check_invariants  # noqa: E402


def test_a_state_of_a_mechanism_no_family_runs_is_refused():
    art = Artifact(arrays={"w": np.zeros(3)}, meta={"mechanism": "made-up", "n": 5})
    with pytest.raises(ArtifactError, match="no registered family runs mechanism 'made-up'"):
        check_invariants(art, {"mechanism": "made-up", "n_features": 3})


def test_a_noisy_finetune_state_is_checked_by_its_family():
    pytest.importorskip("torch")
    adapter = get_adapter("noisy-finetune", {"module": {"kind": "mlp", "hidden": [4]}, "train_epochs": 1,
                                             "post_steps": 1})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3)) * 0.3
    y = (X[:, 0] > 0).astype(float)
    art, _ = adapter.train(X, y, rng)
    binding = {"mechanism": "noisy-finetune", "n_features": 3, "params": adapter.params}
    check_invariants(art, binding)
    for edit in (lambda a, m: a.__setitem__("theta", a["theta"][:-1]),           # another module's size
                 lambda a, m: a["theta"].__setitem__(0, np.nan),                  # not finite
                 lambda a, m: m.__setitem__("n_features", 4),                     # another dataset
                 lambda a, m: m.__setitem__("classes", [0.0])):                   # one class
        arrays = {k: np.array(v, copy=True) for k, v in art.arrays.items()}
        meta = dict(art.meta)
        edit(arrays, meta)
        with pytest.raises(ArtifactError):
            check_invariants(Artifact(arrays=arrays, meta=meta), binding)


def test_a_sharded_state_is_checked_by_its_family():
    adapter = get_adapter("sharded", {"estimator": "logistic-regression", "n_shards": 3})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)) * 0.3
    y = (X[:, 0] > 0).astype(float)
    art, _ = adapter.train(X, y, rng, keys=[f"k{i}" for i in range(60)])
    binding = {"mechanism": "sharded", "n_features": 3, "params": adapter.params}
    check_invariants(art, binding)
    for edit in (lambda a, m: a.__setitem__("hash_key", a["hash_key"][:8]),          # a guessable hash key
                 lambda a, m: m.__setitem__("n", 59),                                 # keys and records disagree
                 lambda a, m: m["blobs"][0].__setitem__(1, 10**9),                    # an entry outside the shards
                 lambda a, m: m.__setitem__("estimator", "mlp"),                      # another estimator
                 lambda a, m: a.pop("keys")):                                         # a secret array missing
        arrays = {k: np.array(v, copy=True) for k, v in art.arrays.items()}
        meta = {**art.meta, "blobs": [list(b) for b in art.meta["blobs"]]}
        edit(arrays, meta)
        with pytest.raises(ArtifactError):
            check_invariants(Artifact(arrays=arrays, meta=meta), binding)
