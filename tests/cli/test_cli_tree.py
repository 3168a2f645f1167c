"""``lethe train --mechanism released-logistic --param noise_mechanism=tree`` (issue 39): the tree's parameters go
through ``--param`` like the other release parameters (cadence, horizon); the budget shows the mechanism, and a
premise that fails (the Gram cap) is refused with the parameter's name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_cli import csv, run  # noqa: F401  (the fixture and the runner)


def test_train_a_tree_stream_from_the_cli(tmp_path: Path, csv: Path,  # noqa: F811
                                          capsys: pytest.CaptureFixture[str]) -> None:
    dd = ["--data-dir", str(tmp_path / "data")]
    assert run(capsys, "dataset", "add", "people", str(csv), "--key", "uid", "--label", "y", "--label-classes=-1,1",
               *dd)[0] == 0
    base = ["train", "people", "rel", "--mechanism", "released-logistic", "--param", "lam=0.5", "--param",
            "horizon=8", "--param", "noise_mechanism=tree"]
    rc, _, err = run(capsys, *base, "--param", "gram_cap=0.5", *dd)
    assert rc == 1 and "gram_cap must be >=" in err
    rc, out, err = run(capsys, *base, "--param", "gram_cap=120", *dd)  # 120 unit rows: λ_max(XᵀX) ≤ 120
    assert rc == 0 and json.loads(out)["served"] == "releases", err
    rc, out, _ = run(capsys, "budget", "rel", *dd)
    budget = json.loads(out)
    assert rc == 0 and budget["noise_mechanism"] == "tree" and budget["gram_cap"] == 120
    assert budget["sigma"] == budget["sigma_first"] and budget["mu"] > 0
    rc, out, _ = run(capsys, "budget", "--dataset", "people", *dd)
    (stream,) = json.loads(out)["streams"]
    assert stream["noise_mechanism"] == "tree" and stream["mu_stream"] >= budget["mu"]
