"""What the release *schedule* tells a model-reader (issue 26: "no sequence of releases ... that reveals more than
the certificate says"). The attacker knows every record but the target's and every deletion request, the target's
own included; two worlds differ only in whether the target's record was held: D (held, so its request removes it)
and D' (never held, so its request finds nothing). The (ε, δ) of ``released-logistic`` covers the releases'
*contents*; what a model-reader also sees is *when* releases happen and the version number it is told.

- ``schedule="steps"`` (release after K removal steps): a removal step happens only when a request finds a record,
  so the release numbers a model-reader sees differ between the worlds — the attacker tells D from D' every time.
  The certificate says so (``schedule: "steps"``; docs/release_privacy.md §3). This test pins the leak.
- ``schedule="clock"`` (a release every T seconds, whatever happened): the observable schedule is identical in both
  worlds, request by request and tick by tick (mutation check: a clock schedule that also releases on a batch, as
  ``"steps"`` does, makes the two schedules differ and fails it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from lethe.curator import Curator, Settings

from .conftest import Data

T = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _world(root: Path, data: Data, target: str, held: bool, params: dict[str, Any], clock: FakeClock) -> Curator:
    df = pd.read_csv(data.csv, dtype={"user_id": str})
    if not held:
        df = df[df["user_id"] != target]
    csv = root / "people.csv"
    root.mkdir(parents=True)
    df.to_csv(csv, index=False)
    c = Curator(root / "lethe-data", settings=Settings(batch_size=1), clock=clock)
    c.register_dataset("people", csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "m", mechanism="released-logistic", params=params)
    return c


def _observed(tmp_path: Path, data: Data, held: bool, params: dict[str, Any]) -> list[tuple[float, int]]:
    """What a model-reader sees: (time, version it is told) after every request and every tick."""
    clock = FakeClock()
    target = data.keys[7]
    c = _world(tmp_path / ("D" if held else "D-prime"), data, target, held, params, clock)
    token = c.create_token("reader", scope="model-reader")
    reader = c.authenticate(token)
    seen = []
    try:
        # the same request stream in both worlds; a request every T/2 seconds, a tick between requests (spaced so that
        # a batch-triggered release would not coincide with a clock release)
        for key in [data.keys[1], target, data.keys[2], data.keys[3], data.keys[4], data.keys[5]]:
            clock.t += T / 4
            c.submit_deletion("people", key)
            c.process_pending(force=True)
            seen.append((clock.t, c.public_model("m", principal=reader)["version"]))
            clock.t += T / 4
            c.process_pending()  # the worker's tick
            seen.append((clock.t, c.public_model("m", principal=reader)["version"]))
    finally:
        c.close()
    return seen


BASE = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 50}


def test_a_step_schedule_tells_whether_the_target_was_held(tmp_path: Path, data: Data) -> None:
    params = {**BASE, "cadence": 1}
    assert _observed(tmp_path, data, True, params) != _observed(tmp_path, data, False, params)


@pytest.mark.parametrize("schedule", ["steps", "clock"])
def test_the_certificate_says_what_the_schedule_reveals(tmp_path: Path, data: Data, schedule: str) -> None:
    c = _world(tmp_path / schedule, data, data.keys[7], True,
               {**BASE, "cadence_seconds": T, "schedule": schedule}, FakeClock())
    try:
        req = c.submit_deletion("people", data.keys[7])[0]
        c.process_pending(force=True)
        (cert,) = c.request_certificates(req["id"], principal=c.authenticate(c.create_token("r", "admin")))
        says = cert["certificate"]["schedule_reveals"]
        assert ("when a held record's deletion was processed" in says) == (schedule == "steps")
        assert c.budget("m")["schedule_reveals"] == says
    finally:
        c.close()


@pytest.mark.parametrize("cadence", [1, 3])
def test_a_clock_schedule_is_the_same_in_both_worlds(tmp_path: Path, data: Data, cadence: int) -> None:
    params = {**BASE, "cadence": cadence, "cadence_seconds": T, "schedule": "clock"}
    held, not_held = _observed(tmp_path / "a", data, True, params), _observed(tmp_path / "b", data, False, params)
    assert held == not_held
    assert [v for _, v in held] == sorted(v for _, v in held) and held[-1][1] > held[0][1]  # releases did happen


def test_a_clock_schedule_needs_its_period(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "lethe-data")
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        with pytest.raises(ValueError, match="cadence_seconds must be a number of seconds"):
            c.train("people", "m", mechanism="released-logistic", params={**BASE, "schedule": "clock"})
        with pytest.raises(ValueError, match="schedule must be 'steps' or 'clock'"):
            c.train("people", "m", mechanism="released-logistic", params={**BASE, "schedule": "hourly"})
        assert c.status()["models"] == [] or not c.status()["models"]
    finally:
        c.close()
