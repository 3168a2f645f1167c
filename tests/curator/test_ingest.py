"""Registering real CSVs: no header, categorical columns one-hot encoded, string labels, any file name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lethe.cli as cli
from lethe.curator import Curator
from lethe.curator.errors import InvalidInputError
from lethe.curator.tables import read_table


def _write(path: Path, header: bool) -> tuple[list[str], np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(5)
    n = 60
    keys = [f"k{i}" for i in range(n)]
    x = rng.uniform(-0.4, 0.4, size=(n, 2))
    colour = [("red", "green", "blue")[i % 3] for i in range(n)]
    label = ["yes" if x[i, 0] > 0 else "no" for i in range(n)]
    lines = (["id,a,b,colour,outcome"] if header else []) + [
        f"{keys[i]},{float(x[i, 0])!r},{float(x[i, 1])!r},{colour[i]},{label[i]}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return keys, x, colour, label


def test_no_header_categorical_string_labels_any_suffix(tmp_path: Path) -> None:
    path = tmp_path / "export.txt"
    keys, x, colour, label = _write(path, header=False)
    with pytest.raises(ValueError, match="--format"):
        read_table(path, key="0", label="4")
    with pytest.raises(ValueError, match="--categorical 3"):
        read_table(path, key="0", label="4", header=False, file_format="csv")
    t = read_table(path, key="0", label="4", header=False, categorical=["3"], file_format="csv")
    assert t.keys == keys and t.label_classes == ["no", "yes"]
    assert t.feature_names == ["1", "2", "3=blue", "3=green", "3=red"]
    np.testing.assert_array_equal(t.X[:, :2], x)  # exact float round trip
    assert t.X[0, 4] == 1.0 and t.X[1, 3] == 1.0 and t.X[2, 2] == 1.0 and np.all(t.X[:, 2:].sum(axis=1) == 1)
    assert t.y.tolist() == [1.0 if v == "yes" else 0.0 for v in label]
    with pytest.raises(ValueError, match="named by position"):
        read_table(path, key="id", label="4", header=False, file_format="csv")


def test_cli_registers_and_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "people.data"
    _write(path, header=True)
    dd = ["--data-dir", str(tmp_path / "d")]
    assert cli.main(["dataset", "add", "people", str(path), "--key", "id", "--label", "outcome",
                     "--categorical", "colour", "--format", "csv", "--normalize", "rows", *dd]) == 0
    assert cli.main(["train", "people", "clf", "--lam", "0.01", "--epsilon", "1", "--delta", "1e-4", "--seed", "0",
                     *dd]) == 0
    capsys.readouterr()
    c = Curator(tmp_path / "d")
    info = c.dataset_info("people")
    assert info["label_classes"] == ["no", "yes"] and info["categories"] == {"colour": ["blue", "green", "red"]}
    assert info["n_features"] == 5
    c.close()


def test_unnormalised_rows_error_names_the_cli_option(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3)) * 5
    path.write_text("id,a,b,c,y\n" + "\n".join(f"r{i},{X[i, 0]},{X[i, 1]},{X[i, 2]},{i % 2}" for i in range(30)))
    c = Curator(tmp_path / "d")
    c.register_dataset("big", path, key="id", label="y")
    with pytest.raises(InvalidInputError, match="--normalize rows") as err:
        c.train("big", "clf", params={"lam": 0.01})
    assert "normalize_rows=True" not in str(err.value)
    c.close()
