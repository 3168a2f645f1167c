"""Install hints name extras that exist and install what they promise (issue 37)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from lethe import schema

ROOT = Path(__file__).resolve().parents[1]


def test_the_yaml_hint_names_an_extra_that_installs_pyyaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    (tmp_path / "schema.yaml").write_text("columns: {}\n", encoding="utf-8")
    with pytest.raises(ImportError) as err:
        schema.load_schema(tmp_path / "schema.yaml")  # a YAML schema needs PyYAML
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = re.findall(r"([\w-]+)\[(\w+)\]", str(err.value))
    assert named, str(err.value)
    for package, extra in named:
        assert package == project["name"]  # 'lethe[tabular]' named a package that does not exist
        deps = project["optional-dependencies"][extra]
        assert any(d.lower().startswith("pyyaml") for d in deps), (extra, deps)
