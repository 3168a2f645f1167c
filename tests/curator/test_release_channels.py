"""Nothing published outside the release mechanism (issue 36):

* two worlds that differ only in whether the target's record was held, with the same request stream and the clock
  schedule: every answer another requester, the data subject's text of its certificates and a model-reader receive
  is the same (mutation: a global version number put back in a requester's certificate fails it);
* ``--categorical`` without a schema (categories learned from the rows) is refused for released models and for any
  model served to model-readers, and no model of such a dataset is served to them: after the only
  ``city=Smallville`` record is deleted, no answer a model-reader gets names it;
* the service refuses a seed for ``released-logistic``;
* after the horizon, a release computed with a record deleted since is withdrawn: model-readers are refused, the
  operator sees a fault, the requester is told ``published: false`` and the data subject's text says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from lethe.curator import Curator, Settings
from lethe.curator import store as db
from lethe.curator.console.certificate import explain
from lethe.curator.console.queries import certificates_of
from lethe.curator.errors import InvalidInputError, UnreleasedModelError
from lethe.curator.serving import LearnedFromRowsError, WithdrawnModelError
from lethe.curator.views import ReadViews

from .conftest import Data

T = 60.0
BASE = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-4, "horizon": 50}
VOLATILE = {"id", "request_id", "submitted_at", "processed_at", "issued_at", "seconds_to_publication"}


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _stable(obj: Any) -> Any:
    """An answer without its per-run identifiers and wall-clock times (random ids, real timestamps), which differ
    between any two runs; certificate id lists become their length."""
    if isinstance(obj, dict):
        return {k: (len(v) if k == "certificates" else _stable(v)) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_stable(v) for v in obj]
    return obj


def _answers(root: Path, data: Data, held: bool) -> list[str]:
    """Everything another requester (alice), the data subject of alice's records (the certificate's text) and a
    model-reader receive, after every request and every tick."""
    target = data.keys[7]
    df = pd.read_csv(data.csv, dtype={"user_id": str})
    if not held:
        df = df[df["user_id"] != target]
    root.mkdir(parents=True)
    csv = root / "people.csv"
    df.to_csv(csv, index=False)
    clock = FakeClock()
    c = Curator(root / "lethe-data", settings=Settings(batch_size=1), clock=clock)
    out: list[str] = []
    try:
        c.register_dataset("people", csv, key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "m", mechanism="released-logistic",
                params={**BASE, "cadence": 1, "cadence_seconds": T, "schedule": "clock"})
        alice = c.authenticate(c.create_token("alice", "requester"))
        someone = c.authenticate(c.create_token("target-owner", "requester"))
        reader = c.authenticate(c.create_token("reader", "model-reader"))
        mine: list[str] = []
        for key in [data.keys[1], target, data.keys[2], data.keys[3], data.keys[4]]:
            clock.t += T / 4
            view, _ = c.submit_deletion("people", key, principal=someone if key == target else alice)
            if key != target:
                mine.append(view["id"])
            c.process_pending(force=True)
            for moment in ("after the request", "after a tick"):
                if moment == "after a tick":
                    clock.t += T / 2
                    c.process_pending()
                answer: dict[str, Any] = {"moment": moment}
                answer["requests"] = [c.request_status(r, principal=alice) for r in mine]
                answer["certs"] = [c.request_certificates(r, principal=alice) for r in mine]
                answer["list"] = c.list_requests(alice)["items"]
                with c.store.read() as s:  # the data subject's text of each certificate (the console's words)
                    texts = [explain(v, operator=False) for r in mine for v in certificates_of(s, r)]
                answer["texts"] = [(t.headline, t.sentences, t.details) for t in texts]
                pub = c.public_model("m", principal=reader)
                answer["model"] = {**pub, "arrays": {k: np.shape(v) for k, v in pub["arrays"].items()}}
                answer["predict"] = {k: v for k, v in c.predict("m", [[0.0] * data.X.shape[1]],
                                                                 principal=reader).items() if k != "predictions"}
                out.append(json.dumps(_stable(answer), sort_keys=True, default=str))
    finally:
        c.close()
    return out


def test_every_answer_is_the_same_whether_or_not_the_target_was_held(tmp_path: Path, data: Data,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    held, not_held = _answers(tmp_path / "D", data, True), _answers(tmp_path / "D-prime", data, False)
    assert held == not_held
    assert '"published": false' in held[-1] and "secret state" in held[-1]  # the text follows `published`
    assert '"new_version": null' in held[-1]
    # mutation check: the service's version number (it counts every removal step, the target's included) back in a
    # requester's certificate tells the worlds apart
    original = ReadViews.certificate_view

    def with_version(s: Any, row: db.CertificateRow, principal: Any = None) -> dict[str, Any]:
        out = original(s, row, principal) if principal is not None else original(s, row)
        new = s.get(db.ModelVersion, row.new_version_id) if row.new_version_id is not None else None
        return {**out, "new_version": new.number if new else None}

    monkeypatch.setattr(ReadViews, "certificate_view", staticmethod(with_version))
    assert _answers(tmp_path / "D2", data, True) != _answers(tmp_path / "D2-prime", data, False)


def _smallville(tmp_path: Path, data: Data) -> tuple[Path, str]:
    df = pd.read_csv(data.csv, dtype={"user_id": str})
    df.insert(1, "city", ["Metropolis" if i % 2 else "Gotham" for i in range(len(df))])
    df.loc[5, "city"] = "Smallville"  # held by one record only
    path = tmp_path / "cities.csv"
    df.to_csv(path, index=False, float_format="%.17g")
    return path, data.keys[5]


def test_categories_learned_from_rows_are_never_published(tmp_path: Path, data: Data) -> None:
    csv, smallville = _smallville(tmp_path, data)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", csv, key="user_id", label="label", categorical=["city"], normalize="rows")
        assert "city=Smallville" in c.dataset_info("people")["feature_names"]
        with pytest.raises(InvalidInputError, match=r"3 categories learned from its rows.*--schema"):
            c.train("people", "rel", mechanism="released-logistic", params={**BASE, "lam": 0.05})
        with pytest.raises(InvalidInputError, match=r"categories learned from its rows.*--serve-unreleased"):
            c.train("people", "cr", params={"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4},
                    serve_unreleased=True)
        # operators only (they hold the data): allowed, and never served to model-readers
        c.train("people", "cr", params={"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4})
        with pytest.raises(InvalidInputError, match="categories learned"):
            c.retrain("cr", serve_unreleased=True)
        with c.store.write() as s, s.begin():  # a model opted in before this rule existed
            s.execute(db.Model.__table__.update().values(serve_unreleased=True))
        c.submit_deletion("people", smallville)
        c.process_pending(force=True)
        reader = c.authenticate(c.create_token("reader", "model-reader"))
        for call in (lambda: c.public_model("cr", principal=reader),
                     lambda: c.predict("cr", [[0.0] * c.dataset_info("people")["n_features"]], principal=reader)):
            with pytest.raises(LearnedFromRowsError, match="learned from the rows") as exc:
                call()
            assert "Smallville" not in str(exc.value)
        assert isinstance(exc.value, UnreleasedModelError)  # answered like a scope refusal (403)
    finally:
        c.close()


def test_the_service_refuses_a_seed_for_released_models(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "lethe-data")
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        with pytest.raises(InvalidInputError, match=r"random_state \(--seed\) is refused for 'released-logistic'"):
            c.train("people", "m", mechanism="released-logistic", params=BASE, random_state=0)
        assert not c.status()["models"]
        c.train("people", "m", mechanism="released-logistic", params=BASE)
        with pytest.raises(InvalidInputError, match="random_state"):
            c.retrain("m", random_state=1)
        # two trainings publish different noise (the OS CSPRNG), so a known seed can recover nothing
        c.train("people", "m2", mechanism="released-logistic", params=BASE)
        w1, w2 = (np.asarray(c.public_model(m)["arrays"]["w"]) for m in ("m", "m2"))
        assert not np.array_equal(w1, w2)
        assert c.model_versions("m")[0]["certificate"]["noise_source"] == "os-csprng"
    finally:
        c.close()


@pytest.mark.parametrize("schedule", ["steps", "clock"])
def test_after_the_horizon_the_release_is_withdrawn(tmp_path: Path, data: Data, schedule: str) -> None:
    clock = FakeClock()
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1), clock=clock)
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "m", mechanism="released-logistic",
                params={**BASE, "horizon": 2, "cadence_seconds": T, "schedule": schedule})
        alice = c.authenticate(c.create_token("alice", "requester"))
        reader = c.authenticate(c.create_token("reader", "model-reader"))
        first, _ = c.submit_deletion("people", data.keys[0], principal=alice)
        c.process_pending(force=True)
        clock.t += T
        c.process_pending()  # the clock's release (the steps schedule released on the batch)
        assert c.budget("m")["releases_left"] == 0
        if schedule == "steps":  # the last release holds no deleted record yet: still served
            c.public_model("m", principal=reader)
            assert c.status()["healthy"]
        second, _ = c.submit_deletion("people", data.keys[1], principal=alice)
        c.process_pending(force=True)
        assert c.request_status(second["id"], principal=alice)["status"] == "done"  # the removal still happens
        with pytest.raises(WithdrawnModelError, match="withdrawn"):
            c.public_model("m", principal=reader)
        with pytest.raises(WithdrawnModelError):
            c.predict("m", [[0.0] * data.X.shape[1]], principal=reader)
        c.public_model("m")  # operators still read it
        status = c.status()
        assert not status["healthy"]
        assert [f["fault"] for f in status["faults"]] == ["withdrawn"]
        assert status["faults"][0]["repair"] == "lethe model retrain m"
        from lethe.curator.console import health  # the console's health page shows it too, with its remedy (issue 38)
        (fault,) = [f for f in health.check(c).faults if "withdrawn" in f.title]
        assert "lethe model retrain m" in fault.action
        (cert,) = c.request_certificates(second["id"], principal=alice)
        assert cert["certificate"]["published"] is False and cert["certificate"]["withdrawn"] is True
        with c.store.read() as s:
            (view,) = certificates_of(s, second["id"])
        text = explain(view, operator=False).headline
        assert "withdrawn" in text and "no longer contains" not in text
        # retraining (a new stream, within the lifetime budget) serves the model again
        c.retrain("m")
        c.public_model("m", principal=reader)
        assert c.status()["healthy"]
    finally:
        c.close()
