"""The time cadence of ``released-logistic`` (issue 26, part 3: "every K deletions or T seconds ... configurable and
its effect accounted"), with a fake clock: a release is due when K removal steps are pending OR T seconds have passed
since the last release with at least one step pending; the worker publishes a due release on its tick without a new
batch; every release counts once in the accountant, and the horizon bounds the releases whatever the clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.adapters import get_adapter
from lethe.curator.store import CertificateRow, LedgerEvent
from lethe.curator.worker import run_worker
from lethe.privacy.release import release_epsilon_spent, release_sigma

from .conftest import Data

T = 60.0
PARAMS = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 6, "cadence": 3, "cadence_seconds": T}


class FakeClock:
    """Seconds that move only when told to."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cur(tmp_path: Path, data: Data, clock: FakeClock) -> Iterator[Curator]:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1), clock=clock)
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "m", mechanism="released-logistic", params=PARAMS)
    yield c
    c.close()


def _state(c: Curator) -> dict[str, Any]:
    b = c.budget("m")
    return {"version": b["version"], "releases": b["releases"], "pending": b["pending_removals"],
            "w": np.asarray(c.public_model("m")["arrays"]["w"]), "epsilon_spent": b["epsilon_spent"],
            "released_at": b["released_at"], "sigma": b["sigma"], "budget": b}


def _delete(c: Curator, key: str) -> list[Any]:
    c.submit_deletion("people", key)
    return c.process_pending(force=True)


def _epsilon_after(budget: dict[str, Any], releases: int) -> float:
    """ε spent after ``releases`` releases, computed from the public parameters alone (σ/Δ calibrated for the horizon
    at (ε, δ); then the exact ε of ``releases`` Gaussian releases), not read from the service's accountant."""
    ratio = release_sigma(budget["epsilon"], budget["delta"], budget["horizon"], 1.0)
    return release_epsilon_spent(releases, ratio, 1.0, budget["delta"])


def test_time_rule_publishes_on_the_tick_and_counts_once(cur: Curator, data: Data, clock: FakeClock) -> None:
    s0 = _state(cur)
    assert s0["releases"] == 1 and s0["pending"] == 0 and s0["released_at"] == clock.t
    assert s0["budget"]["cadence_seconds"] == T
    clock.advance(1)
    _delete(cur, data.keys[1])  # one step pending: neither K = 3 steps nor T seconds
    s1 = _state(cur)
    assert (s1["version"], s1["releases"], s1["pending"]) == (2, 1, 1)
    assert np.array_equal(s1["w"], s0["w"])  # a version, but no release: the previous release is served
    clock.advance(T - 2)  # T − 1 seconds since the last release
    assert cur.process_pending() == []  # not due
    assert _state(cur)["version"] == 2
    clock.advance(1)  # T seconds since the last release, one step pending: due without a new batch
    (res,) = cur.process_pending()
    assert res.request_ids == () and res.status == "done" and res.new_versions == {"m": 3}
    s2 = _state(cur)
    assert (s2["version"], s2["releases"], s2["pending"]) == (3, 2, 0) and s2["released_at"] == clock.t
    assert not np.array_equal(s2["w"], s1["w"])  # fresh noise
    assert s2["epsilon_spent"] > s1["epsilon_spent"]
    assert cur.process_pending() == []  # nothing pending: no release, however long we wait
    clock.advance(10 * T)
    assert cur.process_pending() == [] and _state(cur)["releases"] == 2
    # recorded: the version's certificate is a "release" one, the ledger has a "release" event
    hist = cur.model_versions("m")
    assert hist[-1]["kind"] == "release" and hist[-1]["n_requests"] == 0
    assert hist[-1]["certificate"]["published"] is True and hist[-1]["certificate"]["releases"] == 2
    with cur.store.read() as s:
        assert [e.payload["releases"] for e in s.scalars(select(LedgerEvent).where(LedgerEvent.kind == "release"))
                ] == [2]
        assert len(list(s.scalars(select(CertificateRow).where(CertificateRow.kind == "release")))) == 1


def test_time_rule_inside_a_batch_and_count_rule(cur: Curator, data: Data, clock: FakeClock) -> None:
    # T seconds after the last release, a removal step is released by its own batch (no wait for the tick)
    clock.advance(T)
    _delete(cur, data.keys[2])
    s = _state(cur)
    assert (s["version"], s["releases"], s["pending"]) == (2, 2, 0)
    cert = cur.model_versions("m")[-1]["certificate"]
    assert cert["operation"] == "remove" and cert["published"] is True
    # the count rule: K = 3 steps within T seconds publish at the third
    for i, key in enumerate(data.keys[3:6]):
        clock.advance(1)
        _delete(cur, key)
        assert _state(cur)["releases"] == (3 if i == 2 else 2)
    assert _state(cur)["pending"] == 0


def test_accounting_is_per_release_and_the_horizon_bounds_the_clock(cur: Curator, data: Data,
                                                                    clock: FakeClock) -> None:
    """Every release — made due by the clock, by the count, or by a batch after T seconds — counts once: the
    service's ε spent equals an independently rebuilt accountant's after as many releases as distinct published
    weight vectors; past the horizon (6 releases) nothing more is released, whatever the clock."""
    seen = [_state(cur)["w"]]
    keys = iter(data.keys[10:60])
    for step in range(12):
        clock.advance(T if step % 2 else 1)
        _delete(cur, next(keys))
        clock.advance(T)
        cur.process_pending()  # the tick
        st = _state(cur)
        if not any(np.array_equal(st["w"], w) for w in seen):
            seen.append(st["w"])
        assert st["releases"] == len(seen) <= PARAMS["horizon"]
        assert st["epsilon_spent"] == pytest.approx(_epsilon_after(st["budget"], st["releases"]), rel=1e-12)
    final = _state(cur)
    assert final["releases"] == PARAMS["horizon"] and final["budget"]["releases_left"] == 0
    clock.advance(100 * T)
    assert cur.process_pending() == []  # due by the clock but nothing left: no release, no loop


def test_the_worker_publishes_a_due_release_on_its_tick(cur: Curator, data: Data, clock: FakeClock) -> None:
    clock.advance(1)
    _delete(cur, data.keys[7])
    clock.advance(T)
    assert run_worker(cur, once=True) == 1  # one version: the scheduled release
    assert _state(cur)["releases"] == 2 and _state(cur)["pending"] == 0


def test_cadence_seconds_is_validated() -> None:
    base = {k: v for k, v in PARAMS.items() if k != "cadence_seconds"}
    assert get_adapter("released-logistic", base).params["cadence_seconds"] is None
    for bad, err in ((0, ValueError), (-1.0, ValueError), (float("inf"), ValueError), (True, TypeError),
                     ("60", TypeError)):
        with pytest.raises(err, match="cadence_seconds must be"):
            get_adapter("released-logistic", {**base, "cadence_seconds": bad})


def test_release_refuses_without_pending_steps(cur: Curator) -> None:
    from lethe.curator.serving import Serving
    from lethe.curator.store import Dataset, Model, ModelVersion

    with cur.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == "m"))
        assert m is not None
        v, ds = s.get(ModelVersion, m.current_version_id), s.get(Dataset, m.dataset_id)
        assert v is not None and ds is not None
        binding = Serving.binding(m.name, m.mechanism, dict(m.params), ds.n_features)
        art = cur.artifacts.load(v.artifact, v.sha256, binding)
        adapter = get_adapter(m.mechanism, dict(m.params))
    with pytest.raises(ValueError, match="pending steps must be >= 1"):
        adapter.release(art, np.random.default_rng(0))
