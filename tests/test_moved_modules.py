"""Old import paths of modules split into packages keep working for one release (issue 34 item 4): a package's
``__init__`` re-exports its public names, and a module path that disappeared is a shim that warns."""

from __future__ import annotations

import importlib
import sys

import pytest

# old import path -> (name, module that now defines it)
REEXPORTED = [
    ("lethe.release", "ReleasedLogisticRegression", "lethe.release.estimator"),
    ("lethe.release", "Release", "lethe.release.certificate"),
    ("lethe.release", "GUARANTEE", "lethe.release.certificate"),
    ("lethe.release", "SCHEDULE_REVEALS", "lethe.release.certificate"),
    ("lethe.release", "SEEDED_GUARANTEE", "lethe.release.certificate"),
    ("lethe.release", "ReleaseCertificate", "lethe.privacy.release"),
    ("lethe.release", "check_release_state", "lethe.release.checks"),
    ("lethe.release", "measured_centre_residual", "lethe.release.checks"),
    ("lethe.sharded", "ShardedClassifier", "lethe.sharded.estimators"),
    ("lethe.sharded", "ShardedRegressor", "lethe.sharded.estimators"),
    ("lethe.sharded", "ExactCertificate", "lethe.sharded.certificate"),
    ("lethe.sharded", "TorchShardClassifier", "lethe.sharded.torch"),
    ("lethe.sharded", "shard_assignment", "lethe.sharded.partition"),
    ("lethe.sharded", "MIN_KEY_BYTES", "lethe.sharded.partition"),
    ("lethe.sharded", "SKOPS_TRUSTED", "lethe.sharded.storage"),
    ("lethe.sharded", "skops_io", "lethe.sharded.storage"),
    ("lethe.sharded", "ConstantShard", "lethe.sharded.base"),
    ("lethe.noisygd.estimators", "PNSGDLogisticRegression", "lethe.noisygd.pnsgd"),
    ("lethe.noisygd.estimators", "PNSGDCertificate", "lethe.noisygd.pnsgd"),
    ("lethe.noisygd", "PNSGDLogisticRegression", "lethe.noisygd.pnsgd"),
    ("lethe.noisygd", "PNSGDCertificate", "lethe.noisygd.pnsgd"),
    ("lethe.noisygd.edit_stream", "CuratorConfig", "lethe.noisygd.config"),
    ("lethe.noisygd.edit_stream", "NonAdaptiveRequester", "lethe.noisygd.requesters"),
    ("lethe.noisygd.edit_stream", "AdaptiveRequester", "lethe.noisygd.requesters"),
    ("lethe.noisygd", "CuratorConfig", "lethe.noisygd.config"),
    ("lethe.noisygd", "NonAdaptiveRequester", "lethe.noisygd.requesters"),
    # the families' service adapters, moved from lethe.curator into their packages (internal paths: no warning)
    ("lethe.curator.adapters_release", "ReleasedLogisticAdapter", "lethe.release.adapter"),
    ("lethe.curator.adapters_release", "release_noise", "lethe.release.adapter"),
    ("lethe.curator.adapters_release", "check_released_logistic", "lethe.release.adapter"),
    ("lethe.curator.adapters_sharded", "ShardedAdapter", "lethe.sharded.adapter"),
    ("lethe.curator.adapters_sharded", "ESTIMATORS", "lethe.sharded.adapter"),
    ("lethe.curator.adapters_nn", "NoisyFineTuneAdapter", "lethe.nn.adapter"),
]

# a module path that no longer exists as a module of its own -> (its names, where they live now)
SHIMS = [
    ("lethe.sharded_torch", ("TorchShardClassifier", "shift_images"), "lethe.sharded.torch"),
]


@pytest.mark.parametrize(("old", "name", "new"), REEXPORTED, ids=[f"{o}.{n}" for o, n, _ in REEXPORTED])
def test_the_old_path_gives_the_same_object(old, name, new):
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize(("old", "names", "new"), SHIMS, ids=[o for o, _, _ in SHIMS])
def test_a_shim_warns_and_re_exports(old, names, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        mod = importlib.import_module(old)
    for name in names:
        assert getattr(mod, name) is getattr(importlib.import_module(new), name)
