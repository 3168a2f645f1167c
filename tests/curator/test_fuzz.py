"""Fuzzing the live API from its published OpenAPI schema with schemathesis: no input may cause a 5xx answer.

Runs the schemathesis CLI against a real uvicorn server (examples, coverage and fuzzing phases; a bounded number of
examples per operation; fixed seed), once with an admin token and once with a requester token, with the
``not_a_server_error`` check.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Server

EXAMPLES = 30


def schemathesis_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("schemathesis")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("schemathesis")
    if found is None:
        pytest.skip("schemathesis is not installed (it is in the dev extra)")
    return [found]


@pytest.mark.parametrize("who", ["admin", "alice"])
def test_no_server_error_under_fuzzing(server: Server, tmp_path: Path, who: str) -> None:
    token = getattr(server, who)
    cmd = [*schemathesis_cmd(), "run", f"{server.url}/openapi.json", "--checks", "not_a_server_error",
           "--phases", "examples,coverage,fuzzing", "--max-examples", str(EXAMPLES), "--seed", "1",
           "--workers", "1", "--generation-database", "none", "--no-color", "--request-timeout", "20",
           "--report-dir", str(tmp_path / "report"), "-H", f"Authorization: Bearer {token}"]
    # aim path parameters at the model that exists, so the fuzzer reaches the logic behind the 404s
    (tmp_path / "schemathesis.toml").write_text('[parameters]\n"path.model" = "clf"\n')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    print(out[-2500:])
    # the run really exercised the API: many generated cases, none failed
    m = re.search(r"(\d+) generated, (\d+) passed", out)
    assert m is not None and int(m.group(2)) >= 100, out[-3000:]
