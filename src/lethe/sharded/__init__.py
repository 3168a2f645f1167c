"""Exact unlearning by sharding (SISA; Bourtoule et al., IEEE S&P 2021) for any scikit-learn estimator or torch module.

The training set is split into S isolated shards; each shard trains its own copy of the estimator, and the copies
are aggregated (majority vote or mean probability for classifiers, mean for regressors). A removal retrains only the
shards that held the removed records. With R > 1 slices, each shard trains incrementally slice by slice (SISA's
cumulative slices: stage r trains on slices 0..r) and keeps a checkpoint after every stage; a removal then replays
the shard only from the checkpoint before the earliest slice that held a removed record.

The guarantee is exact (ε = 0, δ = 0): training is a deterministic function of the shard's rows (in their input
order), the recorded partition and the recorded seeds, and the partition of a record depends on its key only. So,
after any sequence of removals, the model equals bit for bit the model fitted from scratch on the remaining records
with the same ``key`` and ``random_state`` (the test suite checks this on predictions and parameters).

Partition
---------
Record r with key k goes to shard ``h(k) mod S`` and slice ``(h(k) // S) mod R``, where h(k) is the first 8 bytes
(big-endian) of HMAC-SHA256(key, encode(k)) and ``key`` is a secret of at least 16 bytes (drawn from the operating
system at ``fit`` when not given). Without the secret, the shard of a record is independent of its key (HMAC is a
pseudo-random function), so publishing which shard changed between two releases does not by itself say whose
record was removed. With the secret, anyone can compute every record's shard: the secret is held like the training
data (owner-only files, no pickle).

The package: :mod:`~lethe.sharded.estimators` (:class:`ShardedClassifier`, :class:`ShardedRegressor`),
:mod:`~lethe.sharded.base` (their shared machinery), :mod:`~lethe.sharded.partition` (the keyed partition),
:mod:`~lethe.sharded.certificate` (:class:`ExactCertificate`), :mod:`~lethe.sharded.storage` (skops, the trusted
types) and :mod:`~lethe.sharded.torch` (:class:`TorchShardClassifier`, the torch member). The public names are
re-exported here (``from lethe.sharded import ShardedClassifier``).
"""

from __future__ import annotations

from lethe.sharded.base import ConstantShard
from lethe.sharded.certificate import ExactCertificate
from lethe.sharded.estimators import ShardedClassifier, ShardedRegressor
from lethe.sharded.partition import MIN_KEY_BYTES, shard_assignment
from lethe.sharded.storage import SKOPS_TRUSTED, skops_io
from lethe.sharded.torch import TorchShardClassifier

__all__ = ["MIN_KEY_BYTES", "SKOPS_TRUSTED", "ConstantShard", "ExactCertificate", "ShardedClassifier",
           "ShardedRegressor", "TorchShardClassifier", "shard_assignment", "skops_io"]
