"""lethe.datasets.load_german_credit reads the cached UCI file (no download when it is there)."""

from __future__ import annotations

import pytest

from lethe.datasets import german

pytest.importorskip("pandas")


def test_the_cached_file_is_read_with_the_codebook_columns(tmp_path, monkeypatch):
    dest = tmp_path / "german"
    dest.mkdir()
    (dest / "german.data").write_text(
        "A11 6 A34 A43 1169 A65 A75 4 A93 A101 4 A121 67 A143 A152 2 A173 1 A192 A201 1\n"
        "A12 48 A32 A43 5951 A61 A73 2 A92 A101 2 A121 22 A143 A152 1 A173 1 A191 A201 2\n")
    monkeypatch.setattr(german, "pypi_file", None)  # a download would fail: the cached file must be used
    frame = german.load_german_credit(tmp_path)
    assert list(frame.columns) == list(german.COLUMNS)
    assert frame["credit"].tolist() == ["good", "bad"]
    assert frame["duration"].tolist() == [6, 48] and frame["status"].tolist() == ["A11", "A12"]
    for col, cats in german.CATEGORIES.items():
        assert set(frame[col]) <= set(cats)
