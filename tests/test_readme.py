"""The README's first example (a Pipeline with removal by key on scikit-learn's digits) runs as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_use_example_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pandas")
    text = README.read_text()
    use = text[text.index("## Use"):]
    code = re.search(r"```python\n(.*?)```", use, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "README.md", "exec"), {"__name__": "__readme__"})  # noqa: S102
    assert capsys.readouterr().out.startswith("True ")
    assert (tmp_path / "model.npz").stat().st_mode & 0o777 == 0o600
