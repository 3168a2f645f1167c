"""Packaging and command-line polish: defaults in --help, the missing-extra message, the distribution metadata."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import lethe
from lethe.cli import build_parser, missing_extra_message

ROOT = Path(__file__).resolve().parents[1]


def test_help_shows_defaults():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["reproduce"].format_help()
    assert "(default: reproduction)" in text


def test_a_missing_optional_dependency_names_its_extra(tmp_path):
    code = ("import sys\n"
            "for m in ('sqlalchemy', 'fastapi', 'uvicorn'):\n"
            "    sys.modules[m] = None  # importing it now raises ModuleNotFoundError\n"
            "from lethe.cli import main\n"
            f"sys.exit(main(['status', '--data-dir', {str(tmp_path)!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'lethe-unlearning[service]'" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_extra_message_only_for_optional_dependencies():
    assert "[plots]" in missing_extra_message(ModuleNotFoundError("x", name="matplotlib.pyplot"))
    assert missing_extra_message(ModuleNotFoundError("x", name="numpy")) is None


def test_distribution_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "lethe-unlearning" and meta["version"] == lethe.__version__
    assert meta["license"] == "Apache-2.0" and (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert (ROOT / "src" / "lethe" / "py.typed").exists() and (ROOT / "CHANGELOG.md").exists()
    assert meta["urls"]
