"""Issue 13: one bad request never fails the others. A batch the mechanism fails on is split until the request that
fails alone is found; the others are published with their own certificates, and only the bad one has attempts
counted. Nothing is published on failure, the warm solver state is dropped, and nothing of the failure (row, value)
reaches requesters or logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.curator import Curator, Settings
from lethe.curator.service import Principal
from lethe.curator.store import DeletionRequest, Model, ModelVersion

from .._certified import exact_residual
from .conftest import PARAMS, Data

BAD = 37  # the CSV row (key user-0037) the injected mechanism fault is tied to
SENTINEL = "poisoned-row"


def _inject(monkeypatch: pytest.MonkeyPatch, data: Data, calls: list[int], *, advance: bool) -> None:
    """Make the mechanism fail whenever the batch holds the record of row ``BAD`` — recognised by its feature values,
    so both the warm path and the cold one (``remove`` restores, then calls ``remove_warm``) hit it. With
    ``advance`` the real removal runs first and advances the warm state before the error (a half-done solver)."""
    orig = CertifiedRemovalAdapter.remove_warm
    bad_x = data.X[BAD]

    def remove_warm(self: CertifiedRemovalAdapter, warm: Any, rows: np.ndarray, rng: np.random.Generator) -> Any:
        calls.append(len(rows))
        X = warm.estimator.X_
        hit = [int(r) for r in rows if np.array_equal(np.asarray(X[int(r)]), bad_x)]
        if hit and not advance:
            raise FloatingPointError(f"{SENTINEL}: row {hit[0]} value {bad_x[0]!r}")
        out = orig(self, warm, rows, rng)
        if hit:
            raise FloatingPointError(f"{SENTINEL}: row {hit[0]} value {bad_x[0]!r}")
        return out

    monkeypatch.setattr(CertifiedRemovalAdapter, "remove_warm", remove_warm)


def _flow(tmp_path: Path, data: Data, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
          *, advance: bool) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=8, max_attempts=3))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    c.warm_up()
    who = {"alice": [3, BAD, 90], "bob": [5, 120], "carol": [7, 150, 180]}  # 8 requests: one batch
    principals = {name: Principal(name, "requester") for name in who}
    ids: dict[str, list[str]] = {}
    for name, rows in who.items():
        ids[name] = [c.submit_deletion("people", data.keys[i], principal=principals[name])[0]["id"] for i in rows]
    bad_id = ids["alice"][1]
    calls: list[int] = []
    _inject(monkeypatch, data, calls, advance=advance)
    caplog.set_level(logging.DEBUG, logger="lethe")
    for _ in range(3):  # the worker's polls: each gives the bad request one attempt (then it backs off)
        c.process_pending(force=True)
    assert calls[0] == 8  # the whole batch was tried first

    # the others are done, each with its own removal certificate; only the bad one failed, after its 3 attempts
    for name, rids in ids.items():
        for rid in rids:
            view = c.request_status(rid, principal=principals[name])
            if rid == bad_id:
                assert view["status"] == "failed" and view["attempts"] == 3, view
                assert view["certificates"] == []
            else:
                assert view["status"] == "done" and view["attempts"] == 0 and view["error"] is None, view
                (cert,) = c.request_certificates(rid, principal=principals[name])
                assert cert["kind"] == "removal" and cert["request_id"] == rid
    assert c.dataset_info("people")["n_records"] == 200 - 7

    # requesters' answers reveal nothing of the others, nor the fault's row or value
    bad_x0 = repr(data.X[BAD][0])
    for name, rids in ids.items():
        p = principals[name]
        others = [r for n, rs in ids.items() if n != name for r in rs]
        answers = [c.list_requests(p)]
        for rid in rids:
            answers += [c.request_status(rid, principal=p), c.request_certificates(rid, principal=p)]
        text = json.dumps(answers, default=str)
        assert not any(o in text for o in others), name
        assert SENTINEL not in text and f"row {BAD}" not in text and bad_x0 not in text, name
    bad_view = c.request_status(bad_id, principal=principals["alice"])
    assert bad_view["error"] == "processing failed; the operator has been notified"
    logged = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
    assert "FloatingPointError" in logged
    assert SENTINEL not in logged and f"row {BAD}" not in logged and bad_x0 not in logged

    # nothing of a failed attempt is published: only the current version's artifact is on disk, and it is certified
    # for exactly the records present (its residual bound covers the true gradient residual)
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == "clf"))
        v = s.get(ModelVersion, m.current_version_id)
        assert v.n_records == 200 - 7
        assert s.get(DeletionRequest, bad_id).record_id is not None  # its record is still there
        files = {v.artifact}
        _ids, X, y = c.datasets.current_data(s, m.dataset_id, data.X.shape[1])
    assert set(c.artifacts.all_files()) == files
    adapter = CertifiedRemovalAdapter(dict(PARAMS))
    (state,) = adapter.states(c.artifacts.load(v.artifact, v.sha256))
    truth = exact_residual(adapter.mechanism, state, np.asarray(X), np.where(y == 1.0, 1.0, -1.0))
    assert truth <= state.residual_bound
    # the last attempt failed: its warm state was dropped (rebuilt from the published version by the next batch)
    assert m.id not in c.batches.warm
    monkeypatch.undo()
    view, _ = c.submit_deletion("people", data.keys[BAD])
    assert [r.status for r in c.process_pending(force=True)] == ["done"]
    assert c.dataset_info("people")["n_records"] == 200 - 8
    with c.store.read() as s:
        assert c.batches.warm.version_of(m.id) == s.scalar(select(Model).where(Model.name == "clf")).current_version_id
    c.close()


def test_one_bad_request_does_not_fail_the_others(tmp_path: Path, data: Data, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    _flow(tmp_path, data, monkeypatch, caplog, advance=False)


def test_a_half_done_warm_removal_is_dropped(tmp_path: Path, data: Data, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """The mechanism advances its warm state, then fails: the state must be dropped and rebuilt, or the parts of
    the split batch would be removed from a model that already lost them."""
    _flow(tmp_path, data, monkeypatch, caplog, advance=True)


def test_a_storage_fault_is_not_split(curator: Curator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault no request causes (here: the disk) fails the batch once, as before: no split into many attempts."""
    ids = [curator.submit_deletion("people", f"user-{i:04d}")[0]["id"] for i in (1, 2, 3, 4)]
    calls: list[int] = []

    def full(self: object, warm: object, rows: np.ndarray, rng: object) -> None:
        calls.append(len(rows))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CertifiedRemovalAdapter, "remove_warm", full)
    (res,) = curator.process_pending(force=True)
    assert res.status == "retry" and calls == [4]
    assert [curator.request_status(i)["attempts"] for i in ids] == [1, 1, 1, 1]
