"""Reading the UCI Adult files (offline: a small copy in the layout of the cache)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lethe.datasets import load_adult
from lethe.datasets.adult import COLUMNS
from lethe.preprocessing import SchemaEncoder
from lethe.schema import OTHER, load_schema

ADULT_SCHEMA = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml"
DATA = ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, "
        "United-States, <=50K\n"
        "52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, ?, Wife, White, Female, 15024, 0, 40, "
        "Holand-Netherlands, >50K\n\n")
TEST = ("|1x3 Cross validator\n"
        "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, "
        "United-States, <=50K.\n")


def test_load_adult_reads_the_cached_uci_files(tmp_path):
    (tmp_path / "adult").mkdir()
    for name, text in (("adult.data", DATA), ("adult.test", TEST), ("adult.names", "| names\n")):
        (tmp_path / "adult" / name).write_text(text, encoding="utf-8")
    train, test = load_adult(tmp_path)
    assert list(train.columns) == list(COLUMNS) and len(train) == 2 and len(test) == 1
    assert train["income"].tolist() == ["<=50K", ">50K"] and test["income"].tolist() == ["<=50K"]  # no "."
    assert train["occupation"].tolist() == ["Adm-clerical", "?"]  # stripped; "?" kept
    assert train["age"].dtype.kind in "if"
    schema = load_schema(ADULT_SCHEMA)
    X, y = schema.split(train)
    Z = SchemaEncoder(schema).transform(X)
    names = SchemaEncoder(schema).get_feature_names_out().tolist()
    assert Z[1, names.index(f"occupation={OTHER}")] > 0  # "?" is outside the public list: the declared <other>
    assert Z[1, names.index("native_country=Holand-Netherlands")] > 0
    assert np.all(np.linalg.norm(Z, axis=1) <= 1.0)
