"""Slow property tests in this directory (``@pytest.mark.slow``, ≥ 2000 hypothesis examples each) run only when
asked for: ``make test-slow`` (``pytest -m slow`` with ``LETHE_HYPOTHESIS_PROFILE=slow``). A plain ``pytest`` run
skips them, so the CI profile stays fast; every slow test has a CI twin with the same property and strategy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("-m") or ""
    if "slow" in markexpr or os.environ.get("LETHE_HYPOTHESIS_PROFILE") == "slow":
        return
    skip = pytest.mark.skip(reason="slow profile: run `make test-slow` (pytest -m slow, LETHE_HYPOTHESIS_PROFILE=slow)")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
