"""``lethe plan --dataset NAME`` (issue 27): the λ/σ trade-off of a registered dataset, scored on PUBLIC rows; by
default trained on them too (nothing private touched), or on the dataset's records with the cost stated."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")

from lethe.certified.estimators import CertifiedLogisticRegression  # noqa: E402
from lethe.cli import main  # noqa: E402
from lethe.curator import Curator  # noqa: E402
from lethe.curator.errors import InvalidInputError  # noqa: E402
from lethe.curator.planning import plan_dataset  # noqa: E402
from lethe.planning import plan_lambda  # noqa: E402
from lethe.preprocessing import SchemaEncoder  # noqa: E402
from lethe.schema import load_schema  # noqa: E402

from .test_schema_service import SCHEMA, write_table  # noqa: E402

GRID = {"lams": [1e-2, 1e-3], "sigmas": [0.1, 10.0], "max_removals": 30}


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    train = write_table(tmp_path / "train.csv", 300, seed=0, rare=False)
    test = write_table(tmp_path / "test.csv", 200, seed=1, prefix="test", rare=False)
    c = Curator(tmp_path / "lethe-data")
    c.register_dataset("shop", tmp_path / "train.csv", schema=tmp_path / "schema.json")
    c.register_dataset("shop-test", tmp_path / "test.csv", schema=tmp_path / "schema.json")
    yield c, tmp_path, train, test
    c.close()


def _encoded(frame: Any) -> tuple[np.ndarray, np.ndarray]:
    schema = load_schema(SCHEMA)
    X, y = schema.split(frame)
    return SchemaEncoder(schema).transform(X), np.asarray(y, dtype=object)


def test_the_public_plan_is_plan_lambda_on_the_public_rows_alone(shop: Any) -> None:
    c, tmp, train, test = shop
    with pytest.raises(InvalidInputError, match=r"heldout \(--heldout\) is required: no model of dataset 'shop'"):
        plan_dataset(c, "shop", **GRID)
    plan = plan_dataset(c, "shop", heldout="shop-test", random_state=3, **GRID)
    X, y = _encoded(test)
    ref = plan_lambda(X, y, data="public", estimator=CertifiedLogisticRegression(fit_intercept=True),
                      random_state=3, **GRID)
    assert plan.table.points == ref.points and plan.table.data == "public"
    # nothing private was read: the same plan after the private rows changed (half of them deleted)
    for key in train["customer"][:150]:
        c.submit_deletion("shop", key)
    c.process_pending(force=True)
    assert plan_dataset(c, "shop", heldout="shop-test", random_state=3, **GRID).table.points == ref.points
    text = str(plan)
    assert "accuracy measured on: registered dataset 'shop-test', 40 of its 200 rows (public)" in text
    assert "nothing private is touched" in text and "cost:" not in text
    # a model trained with that held-out set makes it the default; a file of public records works alike
    c.train("shop", "m", params={"lam": 1e-3}, random_state=0, heldout="shop-test")
    assert plan_dataset(c, "shop", random_state=3, **GRID).table.points == ref.points
    assert plan_dataset(c, "shop", heldout=str(tmp / "test.csv"), random_state=3, **GRID).table.points == ref.points


def test_the_private_plan_trains_on_the_records_scores_on_public_rows_and_states_the_cost(shop: Any) -> None:
    c, _tmp, train, test = shop
    plan = plan_dataset(c, "shop", heldout="shop-test", rows="private", min_removals=30, random_state=1, **GRID)
    Xtr, ytr = _encoded(train)
    Xv, yv = _encoded(test)
    with pytest.warns(UserWarning, match="no removal certificate covers that choice"):
        ref = plan_lambda(Xtr, ytr, data="private", X_val=Xv, y_val=yv,
                          estimator=CertifiedLogisticRegression(fit_intercept=True), random_state=1, **GRID)
    assert plan.table.points == ref.points and plan.best == ref.best(30)
    text = str(plan)
    assert "models trained on: the dataset's 300 current (private) records" in text
    assert "cost: plan_lambda on private data" in text
    assert "accuracy measured on: registered dataset 'shop-test'" in text
    assert f"train with: lethe train shop MODEL --lam {plan.best.lam:g}" in text


def test_bad_plans_are_refused(shop: Any) -> None:
    c, _tmp, _train, _test = shop
    with pytest.raises(InvalidInputError, match="rows .* must be one of"):
        plan_dataset(c, "shop", heldout="shop-test", rows="mine", **GRID)
    with pytest.raises(InvalidInputError, match="must be another dataset than the training data"):
        plan_dataset(c, "shop", heldout="shop", **GRID)
    with pytest.raises(InvalidInputError, match="must name a registered dataset or an existing file"):
        plan_dataset(c, "shop", heldout="nope", **GRID)
    with pytest.raises(InvalidInputError, match=r"max_removals \(--max-removals\) must be below the 160 training rows"):
        plan_dataset(c, "shop", heldout="shop-test", lams=[1e-3], sigmas=[1.0], max_removals=500)
    with pytest.raises(InvalidInputError, match="needs min_removals"):
        plan_dataset(c, "shop", heldout="shop-test", plan_sigma=True, **GRID)


def test_lethe_plan_on_the_command_line(shop: Any, capsys: Any) -> None:
    c, _tmp, _train, _test = shop
    code = main(["plan", "--dataset", "shop", "--heldout", "shop-test", "--data-dir", str(c.data_dir),
                 "--lams", "1e-2,1e-3", "--sigmas", "10", "--max-removals", "20", "--removals", "20"])
    out = capsys.readouterr().out
    assert code == 0
    assert "chosen on public data" in out and ">= 20" in out and "most accurate point supporting 20 removals" in out
    code = main(["plan", "--dataset", "shop", "--heldout", "shop-test", "--data-dir", str(c.data_dir),
                 "--lams", "x"])
    assert code == 1 and "--lams must be comma-separated numbers" in capsys.readouterr().err


def test_the_default_max_removals_scales_with_a_small_table(shop: Any, capsys: Any) -> None:
    """Issue 37: the default --max-removals (1000 before) refused every table under 1,250 rows without naming the
    flag; now min(1000, training rows // 5), printed."""
    c, _tmp, _train, _test = shop
    code = main(["plan", "--dataset", "shop", "--heldout", "shop-test", "--data-dir", str(c.data_dir),
                 "--lams", "1e-2", "--sigmas", "10"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "max_removals: 32 (default: min(1000, training rows // 5) for 160 training rows" in out
    code = main(["plan", "--dataset", "shop", "--heldout", "shop-test", "--data-dir", str(c.data_dir),
                 "--lams", "1e-2", "--sigmas", "10", "--max-removals", "1000"])
    assert code == 1 and "--max-removals" in capsys.readouterr().err


def test_lethe_plan_advise_compares_the_families_and_prints_the_command(shop: Any, capsys: Any) -> None:
    c, _tmp, _train, _test = shop
    code = main(["plan", "--dataset", "shop", "--heldout", "shop-test", "--data-dir", str(c.data_dir), "--advise",
                 "--removals", "10"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "majority class" in out and "exact retraining" in out and "certified removal" in out
    assert "recommended:" in out and "lethe train shop MODEL" in out
    assert "10 deletions expected; observer: one version" in out
    # the printed command trains the recommended model through the service as printed
    line = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("lethe train shop MODEL"))
    argv = shlex.split(line.split("   #")[0])[1:]
    argv[argv.index("MODEL")] = "advised"
    code = main([*argv, "--data-dir", str(c.data_dir), "--seed", "0"])
    assert code == 0, capsys.readouterr()
    capsys.readouterr()
    code = main(["plan", "--dataset", "shop", "--data-dir", str(c.data_dir), "--advise", "--removals", "0"])
    assert code == 1 and "expected_deletions (--removals) must be >= 1" in capsys.readouterr().err
