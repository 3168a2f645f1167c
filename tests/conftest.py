"""Shared test configuration: hypothesis profiles.

``ci`` (default) is the fast profile run by ``make test``; ``slow`` (``LETHE_HYPOTHESIS_PROFILE=slow``)
is the exhaustive profile run by ``make test-slow`` (>= 2000 examples per property).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("LETHE_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def model_key_in_a_temporary_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model key (and the release counts beside it) live in a temporary configuration directory shared by the
    session, never in the user's ``~/.config``: ``$XDG_CONFIG_HOME`` points there and no key comes from the user's
    environment (``$LETHE_MODEL_KEY``, ``$LETHE_MODEL_KEY_FILE``). Tests of the key's creation use a fresh
    directory of their own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(_session_config(tmp_path_factory)))
    monkeypatch.delenv("LETHE_MODEL_KEY", raising=False)
    monkeypatch.delenv("LETHE_MODEL_KEY_FILE", raising=False)


_CONFIG: list[object] = []


def _session_config(tmp_path_factory: pytest.TempPathFactory) -> object:
    """The session's configuration directory, holding a key from the start (as on a machine that has saved a model
    before), so that no test depends on another having saved first."""
    if not _CONFIG:
        from lethe.model_keys import create_key_file

        config = tmp_path_factory.mktemp("config")
        create_key_file(config / "lethe" / "model.key")
        _CONFIG.append(config)
    return _CONFIG[0]
