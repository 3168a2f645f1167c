"""0 categories, bounds or names learned from rows in anything a model-reader downloads (issue 36).

* Everything a model-reader can download of a released model (``public_model``: every field; ``predict``) is listed,
  and every value but the release's weights is recomputed from the DECLARATION alone (the schema, the operator's
  parameters, the release number): two worlds whose rows differ — the record holding the only ``city=Smallville``,
  the largest ``income`` and the only label ``"yes"`` among the first rows — give the same download (but the weights).
  Mutation: publishing the classes learned from the rows (``classes_``, the model's own list) fails it: declared
  ``[0, 1]`` integers against ``[0.0, 1.0]`` floats read from the stored rows.
* A model served to model-readers (released, or ``--serve-unreleased``) on a dataset whose label classes are not
  declared is refused, naming what to declare; ``--label-classes`` declares them; a row outside them is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from lethe.curator import Curator, Settings
from lethe.curator import serving as serving_mod
from lethe.curator import store as db
from lethe.curator.errors import InvalidInputError, UnreleasedModelError
from lethe.schema import load_schema

from .conftest import Data

BASE = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 20}
SCHEMA = {"label": {"name": "y", "classes": [0, 1]}, "key": "id",
          "columns": [{"name": "age", "type": "numeric", "lower": 0, "upper": 100},
                      {"name": "income", "type": "numeric", "lower": 0, "upper": 1e6, "log1p": True},
                      {"name": "city", "type": "categorical", "categories": ["Gotham", "Metropolis", "Smallville"],
                       "unknown": "other"}]}


def _frame(held: bool) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 80
    df = pd.DataFrame({"id": [f"p{i}" for i in range(n)], "age": rng.uniform(20, 70, n),
                       "income": rng.uniform(1e4, 9e4, n), "city": ["Gotham", "Metropolis"] * (n // 2),
                       "y": (rng.uniform(size=n) > 0.5).astype(int)})
    df.loc[3, ["city", "income", "y"]] = ["Smallville", 9.9e5, 1]  # one of a kind
    return df if held else df.drop(index=3)


def _download(root: Path, held: bool) -> dict[str, Any]:
    root.mkdir(parents=True)
    _frame(held).to_csv(root / "t.csv", index=False)
    c = Curator(root / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("t", root / "t.csv", schema=SCHEMA)
        c.train("t", "m", mechanism="released-logistic", params=BASE)
        reader = c.authenticate(c.create_token("reader", "model-reader"))
        pub = c.public_model("m", principal=reader)
        pred = c.predict("m", records=[{"age": 30, "income": 5e4, "city": "Gotham"}], principal=reader)
        return {"public": pub, "predict": pred}
    finally:
        c.close()


def _declared_view(pub: dict[str, Any]) -> dict[str, Any]:
    """What the download must be, from the declaration alone (the weights are the release's, its length is)."""
    schema = load_schema(SCHEMA)
    return {"model": "m", "version": 0, "mechanism": "released-logistic", "feature_names": schema.feature_names(),
            "normalize": "none", "classes": SCHEMA["label"]["classes"], "schema": schema.to_dict(),
            "arrays": {"w": len(schema.feature_names())}}


def _without_weights(d: dict[str, Any]) -> dict[str, Any]:
    return {**d["public"], "arrays": {k: len(v) for k, v in d["public"]["arrays"].items()}}


def _check(tmp_path: Path) -> None:
    held, not_held = _download(tmp_path / "A", True), _download(tmp_path / "B", False)
    for d in (held, not_held):
        assert set(d["public"]) == {"model", "version", "mechanism", "feature_names", "normalize", "classes", "schema",
                                    "arrays"}  # a new field must be added here, with where it comes from
        # exact JSON text: a value of the declaration, not one read back from the stored rows
        assert json.dumps(_without_weights(d), sort_keys=True) == json.dumps(_declared_view(d["public"]),
                                                                             sort_keys=True)
        assert set(d["predict"]) == {"model", "version", "predictions"} and d["predict"]["version"] == 0
        assert d["predict"]["predictions"][0] in SCHEMA["label"]["classes"]
    assert json.dumps(_without_weights(held), sort_keys=True) == json.dumps(_without_weights(not_held), sort_keys=True)


def test_a_model_readers_download_holds_nothing_learned_from_rows(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _check(tmp_path / "ok")
    # mutation: the classes learned from the rows (the model's own classes_) published to model-readers
    monkeypatch.setattr(serving_mod, "served_classes", lambda declared, learned: learned)
    with pytest.raises(AssertionError):
        _check(tmp_path / "mutated")


def test_served_models_need_declared_label_classes(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "lethe-data")
    try:
        c.register_dataset("plain", data.csv, key="user_id", label="label")
        for kwargs in ({"mechanism": "released-logistic", "params": BASE},
                       {"params": {"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}, "serve_unreleased": True,
                        "random_state": 0}):
            with pytest.raises(InvalidInputError, match=r"no declared label classes.*--schema.*--label-classes A,B"):
                c.train("plain", "m", **kwargs)
        assert not c.status()["models"]
        # operators only: no declaration needed (they hold the data)
        c.train("plain", "ops", params={"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}, random_state=0)
        with pytest.raises(InvalidInputError, match="no declared label classes"):
            c.retrain("ops", random_state=1, serve_unreleased=True)
        # declared: trained and served; the classes a model-reader sees are the declared values
        c.register_dataset("declared", data.csv, key="user_id", label="label", label_classes="0,1")
        assert c.dataset_info("declared")["declared_classes"] == [0, 1]
        c.train("declared", "rel", mechanism="released-logistic", params=BASE)
        reader = c.authenticate(c.create_token("reader", "model-reader"))
        assert json.dumps(c.public_model("rel", principal=reader)["classes"]) == "[0, 1]"
        # a row outside the declared classes, a declaration of the wrong size for the model: refused
        with pytest.raises(InvalidInputError, match="every label must be one of the declared classes"):
            c.register_dataset("bad", data.csv, key="user_id", label="label", label_classes="1,2")
        c.register_dataset("three", data.csv, key="user_id", label="label", label_classes="0,1,2")
        with pytest.raises(InvalidInputError, match="exactly the 3 declared classes"):
            c.train("three", "rel3", mechanism="released-logistic", params=BASE)
        with pytest.raises(InvalidInputError, match="--label-classes does not apply with --schema"):
            c.register_dataset("both", data.csv, schema=SCHEMA, label_classes="0,1")
        assert {m["name"] for m in c.status()["models"]} == {"ops", "rel"}
        # a model opted in before the rule, on an undeclared dataset: its learned classes are never served
        with c.store.write() as s, s.begin():
            s.execute(db.Model.__table__.update().where(db.Model.name == "ops").values(serve_unreleased=True))
        for call in (lambda: c.public_model("ops", principal=reader),
                     lambda: c.predict("ops", [[0.0] * data.X.shape[1]], principal=reader)):
            with pytest.raises(UnreleasedModelError, match="no declared label classes"):
                call()
        assert c.public_model("ops")["classes"] is not None  # operators (they hold the data) still see them
        # declared afterwards (an upgraded store): checked against the present rows, then served as declared
        with pytest.raises(InvalidInputError, match="every label must be one of the declared classes"):
            c.declare_label_classes("plain", "0,2")
        _frame(True).to_csv(tmp_path / "t.csv", index=False)
        c.register_dataset("tab", tmp_path / "t.csv", schema=SCHEMA)
        with pytest.raises(InvalidInputError, match="registered with a schema"):
            c.declare_label_classes("tab", "0,1")
        assert c.declare_label_classes("plain", "0,1")["declared_classes"] == [0, 1]
        with pytest.raises(InvalidInputError, match="already declares"):
            c.declare_label_classes("plain", "0,1")
        assert json.dumps(c.public_model("ops", principal=reader)["classes"]) == "[0, 1]"
        assert c.predict("ops", [[0.0] * data.X.shape[1]], principal=reader)["predictions"][0] in (0, 1)
    finally:
        c.close()
