"""The privacy ledger per dataset (issue 36): every release of every released model trained on a dataset's records,
composed exactly; an operator's lifetime budget no script of retrains, second models, exhausted horizons, exports or
rolled-back artifacts can pass without a refusal; the reported lifetime ε is at least an independent composition of
every release the test itself observed; and the store's release count refuses an artifact that is behind it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mpmath
import pytest
from sqlalchemy import text

from lethe.curator import Curator, Settings, lifetime
from lethe.curator.errors import InvalidInputError
from lethe.curator.lifetime import LifetimeBudgetError, ReleaseCountError

from .conftest import Data

DELTA = 1e-5
BASE = {"lam": 0.05, "epsilon": 0.5, "delta": DELTA, "horizon": 4, "cadence": 1}


def _plrv_delta(epsilon: float, streams: list[tuple[float, float, int]]) -> float:
    """δ(ε) of every release together, computed independently of the ledger: one Gaussian release of noise σ and
    sensitivity Δ has privacy loss N(η, 2η), η = Δ²/(2σ²); the losses of composed releases add, so the total is
    N(H, 2H), H = Σ k η; δ(ε) = E[(1 − e^{ε − L})₊] by mpmath quadrature (``streams``: (σ, Δ, releases))."""
    mpmath.mp.dps = 30
    h = sum(k * mpmath.mpf(d) ** 2 / (2 * mpmath.mpf(s) ** 2) for s, d, k in streams)
    if h == 0:
        return 0.0
    sd, eps = mpmath.sqrt(2 * h), mpmath.mpf(epsilon)
    return float(mpmath.quad(lambda lv: (1 - mpmath.exp(eps - lv)) * mpmath.npdf(lv, h, sd),
                             [eps, eps + sd, eps + 10 * sd, mpmath.inf]))


def _covers(reported: float, streams: list[tuple[float, float, int]]) -> bool:
    """The reported lifetime ε is at least the true ε of the independent composition (δ(reported) ≤ δ)."""
    return _plrv_delta(reported, streams) <= DELTA * (1 + 1e-7)


class Observer:
    """The test's own record of every release stream: (σ, Δ, releases) read from each model's budget when its stream
    ends (retrain, drop) and, for live streams, now."""

    def __init__(self, c: Curator) -> None:
        self.c = c
        self.ended: list[tuple[float, float, int]] = []
        self.live: set[str] = set()

    def stream(self, model: str) -> tuple[float, float, int]:
        b = self.c.budget(model)
        return float(b["sigma"]), float(b["sensitivity"]), int(b["releases"])

    def train(self, model: str, params: dict[str, Any]) -> None:
        self.c.train("people", model, mechanism="released-logistic", params=params)
        self.live.add(model)

    def retrain(self, model: str) -> None:
        before = self.stream(model)
        self.c.retrain(model)
        self.ended.append(before)

    def all(self) -> list[tuple[float, float, int]]:
        return [*self.ended, *(self.stream(m) for m in sorted(self.live))]


def _check(c: Curator, obs: Observer) -> dict[str, Any]:
    led = c.privacy_ledger("people")
    assert led["lifetime_epsilon"] <= led["lifetime_budget"]
    assert led["lifetime_epsilon"] <= led["lifetime_epsilon_committed"] + 1e-12
    assert _covers(led["lifetime_epsilon"], obs.all()), (led, obs.all())
    return led


def test_an_operator_script_cannot_pass_the_lifetime_budget(tmp_path: Path, data: Data,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        led = c.set_lifetime_budget("people", 1.3, DELTA)
        assert (led["lifetime_budget"], led["lifetime_epsilon"], led["streams"]) == (1.3, 0.0, [])
        obs = Observer(c)
        obs.train("a", BASE)
        _check(c, obs)
        # the certificate of every released model states the lifetime ε beside the stream's
        cert = c.model_versions("a")[0]["certificate"]
        assert 0 < cert["lifetime_epsilon"] <= cert["lifetime_budget"] == 1.3 and cert["lifetime_delta"] == DELTA
        # a second released model that would pass the budget is refused, naming it and what it would take
        with pytest.raises(LifetimeBudgetError, match=r"above its lifetime budget epsilon = 1.3\b.*It would take a "
                                                      r"lifetime budget of at least .*--set-epsilon.*at most \d+"):
            obs.c.train("people", "b", mechanism="released-logistic", params={**BASE, "epsilon": 1.25})
        assert [m["name"] for m in c.status()["models"]] == ["a"]  # nothing was changed
        obs.train("b", {**BASE, "epsilon": 0.8})
        # deletions through both models, exports (post-processing: free), the horizon of "a" exhausted
        spent = []
        for key in data.keys[:4]:
            c.submit_deletion("people", key)
            c.process_pending(force=True)
            c.public_model("a")
            spent.append(_check(c, obs)["lifetime_epsilon"])
        assert spent == sorted(spent) and spent[-1] > spent[0]
        assert c.budget("a")["releases_left"] == 0 and c.budget("a")["withdrawn"] is True
        # retrain × 10: each retrain closes the old stream at what it published and commits a new horizon; the
        # budget refuses the one that would pass it
        refused = 0
        for _ in range(10):
            try:
                obs.retrain("a")
            except LifetimeBudgetError as exc:
                refused += 1
                assert "Retraining 'a'" in str(exc) and "lethe budget --dataset people" in str(exc)
                continue
            c.submit_deletion("people", data.keys[10 + len(obs.ended)])
            c.process_pending(force=True)
            _check(c, obs)
        assert refused >= 1
        led = _check(c, obs)
        assert led["lifetime_epsilon_committed"] <= 1.3
        # the budget cannot be lowered below what is committed
        with pytest.raises(InvalidInputError, match="at least the lifetime epsilon already committed"):
            c.set_lifetime_budget("people", led["lifetime_epsilon_committed"] * 0.9)
        # dropping a model keeps its releases in the ledger
        dropped = obs.stream("b")
        c.drop_model("b")
        obs.live.discard("b")
        obs.ended.append(dropped)
        after = _check(c, obs)
        assert after["lifetime_epsilon"] == led["lifetime_epsilon"]
        assert after["lifetime_epsilon_committed"] <= led["lifetime_epsilon_committed"]
        # shown in `lethe budget`, /v1/status and /metrics
        assert c.budget("a")["lifetime_epsilon"] == after["lifetime_epsilon"]
        assert c.status()["privacy"]["people"]["lifetime_epsilon"] == after["lifetime_epsilon"]
        assert "lethe_model_lifetime_epsilon" in c.prometheus.render()
        # mutation check: a ledger that forgets one stream reports an ε the independent composition exceeds
        rows = lifetime._streams

        monkeypatch.setattr(lifetime, "_streams", lambda s, d: rows(s, d)[1:])
        assert not _covers(c.privacy_ledger("people")["lifetime_epsilon"], obs.all())
    finally:
        c.close()


def test_the_store_release_count_refuses_a_rolled_back_artifact(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1, max_attempts=1))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "a", mechanism="released-logistic", params={**BASE, "horizon": 10})
        c.submit_deletion("people", data.keys[0])
        c.process_pending(force=True)
        assert c.budget("a")["releases"] == 2 and c.privacy_ledger("people")["streams"][0]["releases"] == 2
        assert c.status()["healthy"]
        # the artifact now records fewer releases than the store: as if an older authentic file were restored
        with c.store.write_engine.begin() as conn:
            conn.execute(text("UPDATE privacy_streams SET releases = 5"))
        faults = c.status()["faults"]
        assert any(f.get("fault") == "release count behind" for f in faults), faults
        view, _ = c.submit_deletion("people", data.keys[1])
        c.process_pending(force=True)
        assert c.request_status(view["id"])["status"] != "done"  # nothing was published from it
        assert c.budget("a")["releases"] == 2
        # the rule itself: a version's count may not fall behind the store's, nor jump
        with c.store.write() as s, s.begin():
            model_id = s.execute(text("SELECT id FROM models WHERE name = 'a'")).scalar()
            with pytest.raises(ReleaseCountError, match="rolled back"):
                lifetime.record_releases(s, model_id, {"releases": 4})
            with pytest.raises(ReleaseCountError, match="at most one release"):
                lifetime.record_releases(s, model_id, {"releases": 7})
    finally:
        c.close()


def test_the_ledger_composes_exactly(tmp_path: Path, data: Data) -> None:
    """The ledger's ε is tight: within 1e-6 relative of the independent quadrature (not just an upper bound)."""
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        obs = Observer(c)
        obs.train("a", BASE)
        obs.train("b", {**BASE, "epsilon": 0.3, "horizon": 7})
        for key in data.keys[:3]:
            c.submit_deletion("people", key)
            c.process_pending(force=True)
        eps = c.privacy_ledger("people")["lifetime_epsilon"]
        assert _covers(eps, obs.all())
        assert _plrv_delta(eps * (1 - 1e-6), obs.all()) > DELTA  # not loose
        # the figures: streams of (1, 1e-5) — 2 → 1.47, 5 → 2.44, 10 → 3.6, 100 → 14
        from lethe.privacy.lifetime import gdp_epsilon, lifetime_mu, stream_release_mu

        mu1 = stream_release_mu(1.0, DELTA, 1000)
        got = [round(gdp_epsilon(lifetime_mu([(mu1, 1000)] * k), DELTA), 2) for k in (2, 5, 10, 100)]
        assert got == [1.47, 2.44, 3.62, 14.43]
        assert math.isclose(gdp_epsilon(lifetime_mu([(mu1, 1000)]), DELTA), 1.0, rel_tol=1e-9)
    finally:
        c.close()


def test_the_upgrade_opens_a_stream_for_existing_released_models(tmp_path: Path, data: Data) -> None:
    from lethe.curator.store import REVISIONS, SCHEMA_VERSION

    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    c.train("people", "a", mechanism="released-logistic", params=BASE)
    c.submit_deletion("people", data.keys[0])
    c.process_pending(force=True)
    with c.store.write_engine.begin() as conn:  # make it look like a version-5 store
        conn.execute(text("DROP TABLE privacy_streams"))
        conn.execute(text("DROP TABLE privacy_budgets"))
        conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    c.close()
    c = Curator(tmp_path / "lethe-data")
    try:
        with c.store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[SCHEMA_VERSION]
        led = c.privacy_ledger("people")
        assert [(s["model"], s["releases"], s["open"]) for s in led["streams"]] == [("a", 2, True)]
        assert led["lifetime_epsilon"] > 0
    finally:
        c.close()
