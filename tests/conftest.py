"""Shared test configuration: hypothesis profiles.

``ci`` (default) is the fast profile run by ``make test``; ``slow`` (``LETHE_HYPOTHESIS_PROFILE=slow``)
is the exhaustive profile run by ``make test-slow`` (>= 2000 examples per property).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("LETHE_HYPOTHESIS_PROFILE", "ci"))
