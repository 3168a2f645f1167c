"""Per record, what it has been exposed to (issue 36): ``lethe budget --dataset D --key K`` for the operator, and the
requester's certificates for its own record — per stream the releases that held it, and their ε, composed exactly
(checked against an independent Balle–Wang computation; a view that counts a deleted record in every release fails
it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lethe import cli
from lethe.curator import Curator, Settings
from lethe.curator.errors import NotFoundError
from lethe.privacy.gaussian import analytic_gaussian_epsilon, analytic_gaussian_sigma

from .conftest import Data

BASE = {"lam": 0.05, "epsilon": 1.0, "delta": 1e-5, "horizon": 10, "cadence": 1}


def _eps(counts: list[int]) -> float:
    """ε at δ = 1e-5 of ``counts`` releases of streams calibrated at (1, 1e-5) for 10 releases, computed directly."""
    mu1 = 1.0 / (math.sqrt(BASE["horizon"]) * analytic_gaussian_sigma(1.0, 1e-5, 1.0))
    mu = math.sqrt(sum(counts)) * mu1
    return 0.0 if mu == 0 else analytic_gaussian_epsilon(1e-5, 1.0, mu)


def test_each_record_sees_the_releases_that_held_it(tmp_path: Path, data: Data,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        c.set_lifetime_budget("people", 5.0)
        c.train("people", "m1", mechanism="released-logistic", params=BASE)
        alice = c.authenticate(c.create_token("alice", "requester"))
        bob = c.authenticate(c.create_token("bob", "requester"))
        first, _ = c.submit_deletion("people", data.keys[0], principal=alice)
        pending = c.record_exposure("people", data.keys[0])
        assert pending["status"] == "pending" and pending["streams"][0]["releases_held"] == 1
        c.process_pending(force=True)  # m1: release 1, without keys[0]
        c.train("people", "m2", mechanism="released-logistic", params=BASE)  # a stream after that deletion
        second, _ = c.submit_deletion("people", data.keys[1], principal=alice)
        c.process_pending(force=True)  # m1: release 2, m2: release 1, both without keys[1]

        gone0, gone1, kept = (c.record_exposure("people", k) for k in data.keys[:3])
        assert gone0["status"] == gone1["status"] == "deleted" and kept["status"] == "kept"
        assert [(r["model"], r["releases_held"], r["first_release_without"]) for r in gone0["streams"]] == [
            ("m1", 1, 1), ("m2", 0, None)]
        assert gone0["streams"][1]["state"].startswith("never held")
        assert [(r["model"], r["releases_held"], r["first_release_without"]) for r in gone1["streams"]] == [
            ("m1", 2, 2), ("m2", 1, 1)]
        assert [r["releases_held"] for r in kept["streams"]] == [3, 2]
        # exact composition of what held each record, against an independent computation
        for view, counts in ((gone0, [1]), (gone1, [2, 1]), (kept, [3, 2])):
            assert view["exposure_epsilon"] == pytest.approx(_eps(counts), rel=1e-6)
            assert view["exposure_epsilon"] >= _eps(counts) - 1e-9
            assert view["exposure_releases"] == sum(counts)
        # a record held throughout has the dataset's lifetime epsilon; a deleted one less
        ledger = c.privacy_ledger("people")
        assert kept["exposure_epsilon"] == pytest.approx(ledger["lifetime_epsilon"], rel=1e-9)
        assert gone0["exposure_epsilon"] < gone1["exposure_epsilon"] < kept["exposure_epsilon"]
        assert gone0["exposure_epsilon_committed"] == gone0["exposure_epsilon"]  # nothing more to come
        assert kept["exposure_epsilon_committed"] == pytest.approx(_eps([10, 10]), rel=1e-6)
        assert c.record_exposure("people", "nobody")["status"] == "not held"
        with pytest.raises(NotFoundError):
            c.record_exposure("nope", data.keys[0])

        # the requester's certificates carry its own record's exposure, nobody else's
        for rid, view in ((first["id"], gone0), (second["id"], gone1)):
            certs = c.request_certificates(rid, principal=alice)
            assert certs and all(ct["exposure"] == {k: v for k, v in view.items() if k not in ("dataset", "key")}
                                 for ct in certs)
            with pytest.raises(NotFoundError):
                c.request_certificates(rid, principal=bob)
        # a request that held no record: no exposure (the same answer as a key never held)
        none, _ = c.submit_deletion("people", "nobody", principal=bob)
        c.process_pending(force=True)
        assert all(ct["exposure"] is None for ct in c.request_certificates(none["id"], principal=bob))
    finally:
        c.close()
    # the operator's CLI
    dd = ["--data-dir", str(tmp_path / "lethe-data")]
    assert cli.main(["budget", "--dataset", "people", "--key", data.keys[1], *dd]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "deleted" and out["exposure_epsilon"] == pytest.approx(gone1["exposure_epsilon"])
    assert cli.main(["budget", "m1", "--key", data.keys[1], *dd]) == 2
    assert "--key need --dataset" in capsys.readouterr().err
