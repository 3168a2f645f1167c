"""The declared schema: files round-trip, every rule is enforced with an error naming column, rule and value, and a
draft from a sample warns that its contents become public."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lethe.schema import (
    OTHER,
    CategoricalColumn,
    LabelSpec,
    NumericColumn,
    Schema,
    SchemaError,
    as_columns,
    draft_schema,
    load_schema,
)

ADULT_SCHEMA = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml"

SMALL = {
    "label": {"name": "y", "classes": ["no", "yes"]},
    "key": "id",
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100},
        {"name": "gain", "type": "numeric", "lower": 0, "upper": 1e5, "log1p": True},
        {"name": "color", "type": "categorical", "categories": ["red", "blue"], "unknown": "error"},
        {"name": "size", "type": "categorical", "categories": ["S", "M", "L"]},
    ],
}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_schema_round_trips_through_its_file(tmp_path, suffix):
    s = Schema.from_dict(SMALL)
    back = load_schema(s.save(tmp_path / f"s{suffix}"))
    assert back == s
    assert back.to_dict() == s.to_dict()
    assert back.feature_names() == ["age", "gain", "color=red", "color=blue", "size=S", "size=M", "size=L",
                                    f"size={OTHER}"]
    assert back.n_features == 8


def test_the_shipped_adult_schema_declares_the_uci_lists():
    s = load_schema(ADULT_SCHEMA)
    assert s.label == LabelSpec("income", ("<=50K", ">50K"))
    assert len(s.feature_columns) == 14
    by_name = {c.name: c for c in s.columns}
    assert len(by_name["native_country"].categories) == 41  # adult.names lists 41 countries
    assert "Holand-Netherlands" in by_name["native_country"].categories
    assert len(by_name["education"].categories) == 16
    assert all(c.unknown == "other" for c in s.columns if isinstance(c, CategoricalColumn))


def _with(path: tuple, value) -> dict:
    d = json.loads(json.dumps(SMALL))
    target = d
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


@pytest.mark.parametrize(("path", "value", "column", "words"), [
    (("columns", 0, "lower"), 200, "age", "lower must be < upper"),
    (("columns", 0, "upper"), float("inf"), "age", "upper must be finite"),
    (("columns", 0, "upper"), "ten", "age", "upper must be a number"),
    (("columns", 0, "lower"), KeyError, "age", "needs lower and upper"),
    (("columns", 1, "lower"), -2, "gain", "log1p needs lower > -1"),
    (("columns", 0, "scaling"), "robust", "age", "scaling must be one of"),
    (("columns", 0, "scaling"), "standard", "age", "needs a public center and scale"),
    (("columns", 0, "weight"), 0, "age", "weight must be > 0"),
    (("columns", 0, "bins"), 3, "age", "unknown keys"),
    (("columns", 0, "type"), "text", "age", "type must be"),
    (("columns", 2, "categories"), ["red", "red"], "color", "categories must be distinct"),
    (("columns", 2, "categories"), [], "color", "categories must not be empty"),
    (("columns", 2, "categories"), ["red", 1.5], "color", "a category must be a string"),
    (("columns", 2, "categories"), ["red", OTHER], "color", "reserved"),
    (("columns", 2, "unknown"), "new_column", "color", "unknown must be one of"),
    (("columns", 3, "name"), "age", "age", "column names must be distinct"),
    (("key",), "age", "age", "key column cannot be a feature"),
    (("label", "classes"), ["yes"], "y", "at least 2 distinct"),
])
def test_every_rule_is_enforced_with_column_rule_and_value(path, value, column, words):
    with pytest.raises(SchemaError) as exc:
        Schema.from_dict(_with(path, value))
    msg = str(exc.value)
    assert f"column {column!r}" in msg
    assert words in msg
    assert "Found" in msg


def test_standard_scaling_needs_public_center_and_scale_and_bounds_the_block():
    c = NumericColumn("x", lower=-5, upper=15, scaling="standard", center=5, scale=2)
    assert c.block_bound == 5.0
    np.testing.assert_allclose(c.encode(np.array([-100.0, 5.0, 15.0])), [-5.0, 0.0, 5.0])
    with pytest.raises(SchemaError, match="only used with scaling 'standard'"):
        NumericColumn("x", lower=0, upper=1, center=0.5)


def test_bad_files_and_sources_are_refused(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_schema(bad)
    with pytest.raises(TypeError, match="path, a mapping or a Schema"):
        load_schema(3)
    with pytest.raises(SchemaError, match="only the keys"):
        Schema.from_dict({**SMALL, "version": 2})


def test_labels_and_split_follow_the_schema():
    s = Schema.from_dict(SMALL)
    frame = pd.DataFrame({"id": ["a", "b"], "age": [30, 40], "gain": [0, 10], "color": ["red", "blue"],
                          "size": ["S", "XL"], "y": ["no", "yes"], "extra": [1, 2]})
    X, y = s.split(frame)
    assert list(X.columns) == s.feature_columns
    assert list(X.index) == ["a", "b"]  # the key column becomes the index (record keys for remove(keys=...))
    assert y.tolist() == ["no", "yes"]
    with pytest.raises(SchemaError, match=r"column 'y': a label must be one of the classes .* Found 'maybe'"):
        s.check_labels(["no", "maybe"])
    with pytest.raises(SchemaError, match="column 'color': a declared feature column is missing"):
        s.split(frame.drop(columns="color"))


def test_records_and_arrays_are_read_by_declared_column():
    s = Schema.from_dict(SMALL)
    recs = [{"age": 1, "gain": 2, "color": "red", "size": "S"}]
    assert [c.tolist() for c in as_columns(recs, s)] == [[1], [2], ["red"], ["S"]]
    with pytest.raises(SchemaError, match="column 'size': a declared feature column is missing"):
        as_columns([{"age": 1, "gain": 2, "color": "red"}], s)
    with pytest.raises(SchemaError, match="one column per declared feature column"):
        as_columns(np.zeros((2, 3)), s)
    with pytest.raises(TypeError, match="single mapping"):
        as_columns(recs[0], s)


def test_draft_schema_warns_that_its_contents_become_public():
    sample = pd.DataFrame({"age": [20, 30, 65], "gain": [0, 0, 50000], "color": ["red", "blue", "red"],
                           "y": ["no", "yes", "no"], "id": [1, 2, 3]})
    with pytest.warns(UserWarning, match="becomes PUBLIC"):
        s = draft_schema(sample, label="y", key="id")
    by_name = {c.name: c for c in s.columns}
    assert s.feature_columns == ["age", "gain", "color"]
    assert (by_name["age"].lower, by_name["age"].upper, by_name["age"].log1p) == (20.0, 65.0, False)
    assert by_name["gain"].log1p  # heavy-tailed, non-negative
    assert by_name["color"].categories == ("blue", "red")
    assert s.label == LabelSpec("y", ("no", "yes"))
    assert s.key == "id"
    ids = pd.DataFrame({"user": [f"u{i}" for i in range(20)]})
    with pytest.warns(UserWarning), pytest.raises(SchemaError, match="column 'user': .*max_categories=10"):
        draft_schema(ids, max_categories=10)
