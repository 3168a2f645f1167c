"""The service mode of ``benchmarks/bench_release_privacy.py`` (issue 36) on a tiny configuration: a dataset with a
declared schema, K released models on it, deletions posted over HTTP by a requester, every release downloaded over
HTTP by a model-reader, the version-diff attack on what the model-reader saw, against the rate the LIFETIME ε the
service reports allows."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lethe.audit.version_diff import allowed_identification_rate
from lethe.privacy.gaussian import analytic_gaussian_epsilon, analytic_gaussian_sigma

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from release_privacy_service import run  # noqa: E402

SCHEMA = """\
label: {name: y, classes: ["no", "yes"]}
key: null
columns:
  - {name: a, type: numeric, lower: -3, upper: 3}
  - {name: b, type: numeric, lower: -3, upper: 3}
  - {name: c, type: categorical, categories: [red, green, blue], unknown: other}
"""


def test_the_service_mode_attacks_what_a_model_reader_saw_at_the_lifetime_epsilon(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n, K, D, eps, delta = 120, 2, 3, 1.0, 1e-5
    a, b = rng.normal(size=n), rng.normal(size=n)
    frame = pd.DataFrame({"a": a, "b": b, "c": rng.choice(["red", "green", "blue"], size=n),
                          "y": np.where(a + 0.5 * rng.normal(size=n) > 0, "yes", "no")})
    (tmp_path / "schema.yaml").write_text(SCHEMA)
    res = run(frame, tmp_path / "schema.yaml", name="tiny", streams=K, deletions=D, lam=0.05, epsilon=eps,
              delta=delta, work=tmp_path)
    T = D + 1
    # the model-reader saw every release of every stream, numbered by release (no service version numbers)
    assert res["reader_versions"] == [list(range(T))] * K
    assert res["releases_seen"] == res["lifetime_releases"] == K * T
    assert res["classes"] == ["no", "yes"]
    # the lifetime epsilon the service reports is an independent composition of every release of every stream:
    # K streams of T releases, each release a Gaussian of sensitivity Δ and noise √T σ_BW(ε, δ) Δ
    mu = math.sqrt(K * T) / (math.sqrt(T) * analytic_gaussian_sigma(eps, delta, 1.0))
    independent = analytic_gaussian_epsilon(res["lifetime_delta"], 1.0, mu)
    assert res["lifetime_epsilon"] >= independent - 1e-9
    assert res["lifetime_epsilon"] == pytest.approx(independent, rel=1e-6)
    assert res["lifetime_epsilon"] > eps  # two streams: more than one certificate's epsilon
    # the identification rate is set against the rate the LIFETIME epsilon allows, over the D deletions
    r = res["rate"]
    assert r.trials == D and 0 <= r.hits <= D and r.low <= r.rate <= r.high
    assert r.allowed == allowed_identification_rate(res["lifetime_epsilon"], res["lifetime_delta"], n - D + 1)
    assert r.allowed > res["allowed_one_stream"]


def test_the_service_mode_runs_tree_streams(tmp_path: Path) -> None:
    """``noise="tree"`` (issue 39): the models publish tree-aggregated releases; a tree stream counts its whole
    horizon's μ_T = 1/σ_BW(ε, δ) in the ledger, so K streams give √K μ_T as K whole fresh streams do."""
    rng = np.random.default_rng(1)
    n, K, D, eps, delta = 120, 2, 3, 1.0, 1e-5
    a, b = rng.normal(size=n), rng.normal(size=n)
    frame = pd.DataFrame({"a": a, "b": b, "c": rng.choice(["red", "green", "blue"], size=n),
                          "y": np.where(a + 0.5 * rng.normal(size=n) > 0, "yes", "no")})
    (tmp_path / "schema.yaml").write_text(SCHEMA)
    res = run(frame, tmp_path / "schema.yaml", name="tiny", streams=K, deletions=D, lam=0.5, epsilon=eps,
              delta=delta, work=tmp_path, noise="tree")
    assert res["reader_versions"] == [list(range(D + 1))] * K
    mu = math.sqrt(K) / analytic_gaussian_sigma(eps, delta, 1.0)
    assert res["lifetime_epsilon"] == pytest.approx(analytic_gaussian_epsilon(res["lifetime_delta"], 1.0, mu),
                                                    rel=1e-6)
    assert res["rate"].trials == D
