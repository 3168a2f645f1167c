"""The curator's flow without HTTP: register, train, submit, process, publish, certificates, refusals."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import delete, func, select, text, update

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.curator import (
    ConflictError,
    Curator,
    InvalidInputError,
    NotFoundError,
    Principal,
    Settings,
    get_adapter,
)
from lethe.curator.store import (
    DeletionRequest,
    LedgerEvent,
    LedgerViolation,
    Model,
    ModelVersion,
    Record,
)

from .._certified import exact_residual
from .conftest import PARAMS, Data, make_data, snapshot


def published(c: Curator, model: str = "clf") -> tuple[ModelVersion, dict[str, np.ndarray]]:
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == model))
        v = s.get(ModelVersion, m.current_version_id)
    art = c.artifacts.load(v.artifact, v.sha256)
    return v, art.arrays


def current_data(c: Curator) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(keys, X, y) of the records present; the keys are the records table's key digests (it never holds a plain
    key), compare them with ``digests``."""
    with c.store.read() as s:
        keys = list(s.scalars(select(Record.key).order_by(Record.id)))
        ds_id = s.scalar(select(Record.dataset_id))
        _ids, X, y = c.datasets.current_data(s, ds_id, 10)
    return keys, np.asarray(X), np.asarray(y)


def digests(c: Curator, keys: list[str], dataset_id: int = 1) -> list[str]:
    return [c.key_digest(dataset_id, k) for k in keys]


def test_flow_matches_the_estimator_run_directly(curator: Curator, data: Data) -> None:
    # Reproduce the service's run with the estimator itself: same seed, same data order, same removals.
    est = CertifiedLogisticRegression(**PARAMS, random_state=0).fit(data.X, data.y)
    state = est.states_[0]
    v1, arrays = published(curator)
    np.testing.assert_array_equal(arrays["w"], state.w)
    np.testing.assert_array_equal(arrays["b"], state.b)

    gone = ["user-0003", "user-0100", "user-0007"]
    ids = [curator.submit_deletion("people", k)[0]["id"] for k in gone]
    results = curator.process_pending()
    assert [r.status for r in results] == ["done"]
    assert results[0].new_versions == {"clf": 2}

    idx = sorted(data.keys.index(k) for k in gone)
    cert2 = est.remove(idx)
    state2 = est.states_[0]
    mech = est.mechanism_
    v2, arrays2 = published(curator)
    np.testing.assert_allclose(arrays2["w"], state2.w, rtol=0, atol=1e-12)
    assert v2.number == 2 and v2.n_records == N_AFTER(3)

    keys, X, y = current_data(curator)
    assert keys == digests(curator, [k for k in data.keys if k not in gone])
    # the published version is certified for exactly the records that remain (bound >= true residual)
    exact = exact_residual(mech, state2, X, np.where(y == 1.0, 1.0, -1.0))
    assert exact <= v2.summary["residual_bound"]
    for rid in ids:
        view = curator.request_status(rid)
        assert view["status"] == "done" and view["processed_at"] is not None
        (cert,) = curator.request_certificates(rid)
        assert cert["kind"] == "removal" and cert["model"] == "clf"
        assert (cert["old_version"], cert["new_version"]) == (1, 2)
        assert cert["certificate"]["n_removed"] == 3
        assert cert["certificate"]["residual_bound"] == pytest.approx(cert2.residual_bound)
        assert cert["certificate"]["step_bound"] == pytest.approx(cert2.step_bound)
        assert cert["submitted_at"] is not None and cert["issued_at"] is not None
    # the superseded version and its secret state are gone from disk
    assert curator.artifacts.all_files() == [v2.artifact]
    with curator.store.read() as s:
        assert s.get(ModelVersion, v1.id).status == "destroyed"
    assert not curator.purge_pending()


def N_AFTER(k: int) -> int:  # noqa: N802
    return 200 - k


def test_artifacts_are_owner_only_and_b_never_leaves(curator: Curator) -> None:
    v, arrays = published(curator)
    mode = stat.S_IMODE(os.stat(curator.artifacts.resolve(v.artifact)).st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(curator.data_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(curator.data_dir / "lethe.db").st_mode) == 0o600
    b = arrays["b"]
    text_out = repr(curator.budget("clf")) + repr(curator.status()) + repr(curator.ledger(1000))
    for value in b[:3]:
        assert repr(float(value)) not in text_out
    assert "b" not in curator.budget("clf")


def test_batching_waits_for_size_or_delay(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=3, max_delay=3600.0))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=1)
    c.submit_deletion("people", "user-0001")
    c.submit_deletion("people", "user-0002")
    assert c.process_pending() == []  # neither full nor old enough
    c.submit_deletion("people", "user-0003")
    (res,) = c.process_pending()
    assert len(res.request_ids) == 3 and res.new_versions == {"clf": 2}
    c.submit_deletion("people", "user-0004")
    assert c.process_pending() == []
    assert [r.status for r in c.process_pending(force=True)] == ["done"]
    c.settings = Settings(batch_size=3, max_delay=0.0)
    c.submit_deletion("people", "user-0005")
    assert len(c.process_pending()) == 1


def test_refusals_change_nothing(curator: Curator) -> None:
    before = snapshot(curator)
    with pytest.raises(NotFoundError, match="Unknown dataset"):
        curator.submit_deletion("nope", "user-0001")
    with pytest.raises(InvalidInputError, match="key must be"):
        curator.submit_deletion("people", "")
    with pytest.raises(InvalidInputError, match="2 columns|10 numbers"):
        curator.predict("clf", [[0.1, 0.2]])
    with pytest.raises(InvalidInputError, match="finite"):
        curator.predict("clf", [[float("nan")] * 10])
    with pytest.raises(NotFoundError, match="Unknown model"):
        curator.predict("other", [[0.0] * 10])
    with pytest.raises(InvalidInputError, match="lam must be > 0"):
        curator.train("people", "m2", params={"lam": -1.0})
    with pytest.raises(InvalidInputError, match="Unknown parameter"):
        curator.train("people", "m2", params={"lamda": 1.0})
    with pytest.raises(ConflictError, match="already exists"):
        curator.train("people", "clf", params=PARAMS)
    with pytest.raises(NotFoundError):
        curator.request_status("no-such-request")
    assert snapshot(curator) == before


def test_repeated_and_idempotent_requests(curator: Curator) -> None:
    alice, bob = Principal("alice", "requester"), Principal("bob", "requester")
    v1, created = curator.submit_deletion("people", "user-0010", principal=alice, client_request_id="r-1")
    assert created and v1["status"] == "pending"
    before = snapshot(curator)
    again, created = curator.submit_deletion("people", "user-0010", principal=alice, client_request_id="r-1")
    assert not created and again["id"] == v1["id"]
    with pytest.raises(ConflictError, match="different deletion"):
        curator.submit_deletion("people", "user-0011", principal=alice, client_request_id="r-1")
    mine, created = curator.submit_deletion("people", "user-0010", principal=alice)  # a repeat: its own request
    assert not created and mine["id"] == v1["id"]
    with pytest.raises(NotFoundError):  # bob cannot see alice's request
        curator.request_status(v1["id"], principal=bob)
    assert snapshot(curator) == before
    # bob asks for the same key while alice's request is pending: a request of his own, pending, that completes
    # with alice's batch (issue 26: answered like any present key)
    follower, created = curator.submit_deletion("people", "user-0010", principal=bob)
    assert created and follower["status"] == "pending" and v1["id"] not in str(follower)
    curator.process_pending(force=True)
    # after processing: the idempotent repeat still answers, a repeat by alice is her own request
    again, created = curator.submit_deletion("people", "user-0010", principal=alice, client_request_id="r-1")
    assert not created and again["status"] == "done" and again["outcome"] == "removed"
    again, created = curator.submit_deletion("people", "user-0010", principal=alice)
    assert not created and again["id"] == v1["id"]
    bobs = curator.request_status(follower["id"], principal=bob)
    assert bobs["status"] == "done" and bobs["outcome"] == "removed" and len(bobs["certificates"]) == 1
    certs = curator.request_certificates(v1["id"], principal=alice)
    assert len(certs) == 1
    with pytest.raises(NotFoundError):
        curator.certificate(certs[0]["id"], principal=bob)
    assert curator.certificate(certs[0]["id"], principal=alice)["request_id"] == v1["id"]


def test_requests_name_keys_only_by_digest(curator: Curator) -> None:
    view, _ = curator.submit_deletion("people", "user-0042")
    with curator.store.read() as s:
        req = s.get(DeletionRequest, view["id"])
        assert "user-0042" not in repr(vars(req))
        assert req.key_digest == curator.key_digest(1, "user-0042")


def test_ledger_is_append_only(curator: Curator) -> None:
    with pytest.raises(LedgerViolation):
        with curator.store.write() as s, s.begin():
            ev = s.scalars(select(LedgerEvent)).first()
            assert ev is not None
            ev.kind = "forged"
    with pytest.raises(LedgerViolation):
        with curator.store.write() as s, s.begin():
            s.delete(s.scalars(select(LedgerEvent)).first())
    with pytest.raises(LedgerViolation):
        with curator.store.write() as s, s.begin():
            s.execute(update(LedgerEvent).values(kind="forged"))
    with pytest.raises(LedgerViolation):
        with curator.store.write() as s, s.begin():
            s.execute(delete(LedgerEvent))
    # below the ORM: the SQLite trigger
    raw = curator.store.raw_sqlite()
    try:
        with pytest.raises(Exception, match="append-only"):
            raw.driver_connection.execute("UPDATE ledger SET kind = 'forged'")
        with pytest.raises(Exception, match="append-only"):
            raw.driver_connection.execute("DELETE FROM ledger")
    finally:
        raw.close()
    with curator.store.read() as s:
        assert s.scalar(select(func.count()).select_from(LedgerEvent).where(LedgerEvent.kind == "forged")) == 0
        assert s.execute(text("SELECT count(*) FROM ledger")).scalar() > 0


def test_mechanism_failure_keeps_requests_and_model(curator: Curator, monkeypatch: pytest.MonkeyPatch) -> None:
    view, _ = curator.submit_deletion("people", "user-0020")
    before = snapshot(curator)
    adapter_cls = type(get_adapter("certified-removal", PARAMS))

    def boom(self: object, *a: object, **k: object) -> None:
        raise FloatingPointError("solver diverged")

    monkeypatch.setattr(adapter_cls, "remove", boom)
    monkeypatch.setattr(adapter_cls, "remove_warm", boom)  # the path the worker takes for a warm model
    (res,) = curator.process_pending()
    assert res.status == "retry" and "solver diverged" in (res.error or "")
    after = snapshot(curator)
    assert after["versions"] == before["versions"] and after["files"] == before["files"]
    assert curator.request_status(view["id"])["status"] == "pending"
    curator.settings = Settings(max_attempts=2)
    (res,) = curator.process_pending()
    assert res.status == "failed"
    assert curator.request_status(view["id"])["status"] == "failed"
    monkeypatch.undo()
    # a failed request can be submitted again, and then succeeds
    again, created = curator.submit_deletion("people", "user-0020")
    assert created
    assert [r.status for r in curator.process_pending()] == ["done"]


def test_dataset_without_models_gets_deletion_receipts(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d")
    c.register_dataset("raw", data.csv, key="user_id", label="label")
    view, _ = c.submit_deletion("raw", "user-0005")
    c.process_pending()
    (cert,) = c.request_certificates(view["id"])
    assert cert["kind"] == "deletion" and cert["model"] is None
    assert c.dataset_info("raw")["n_records"] == 199


def test_at_least_two_records_remain(tmp_path: Path) -> None:
    data = make_data(tmp_path / "small.csv", n=4, d=3)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=10))
    c.register_dataset("tiny", data.csv, key="user_id", label="label")
    c.train("tiny", "m", params={"lam": 1.0, "sigma": 1.0, "epsilon": 1.0})
    ids = [c.submit_deletion("tiny", k)[0]["id"] for k in data.keys[:3]]
    res = c.process_pending(force=True)
    assert [r.status for r in res] == ["done", "failed"]
    assert [c.request_status(i)["status"] for i in ids] == ["done", "done", "failed"]
    assert "at least 2 must remain" in (c.request_status(ids[2])["error"] or "")
    assert c.budget("m")["n_records"] == 2


def test_recovery_destroys_orphans_and_superseded(curator: Curator) -> None:
    # a crashed batch leaves a new artifact nobody refers to, and a superseded version not yet destroyed
    v, arrays = published(curator)
    from lethe.curator import Artifact

    orphan, _ = curator.artifacts.save(Artifact(arrays=arrays, meta={}))
    (curator.artifacts.root / ".tmp-half-written.npz").write_bytes(b"partial")
    with curator.store.write() as s, s.begin():
        s.get(ModelVersion, v.id).status = "superseded"
        new = ModelVersion(model_id=v.model_id, number=2, parent_id=v.id, status="published", artifact=orphan,
                           sha256="x", n_records=v.n_records, summary={})
        s.add(new)
    stale = curator.data_dir / v.artifact
    other, _ = curator.artifacts.save(Artifact(arrays=arrays, meta={}))
    report = curator.recover()
    assert report["orphans_destroyed"] == 2 and report["superseded_destroyed"] == 1
    assert not stale.exists() and not (curator.data_dir / other).exists()
    assert curator.artifacts.all_files() == [orphan]


@pytest.mark.parametrize("fmt", ["parquet", "npz"])
def test_register_parquet_and_npz(tmp_path: Path, data: Data, fmt: str) -> None:
    if fmt == "parquet":
        path = tmp_path / "d.parquet"
        pd.read_csv(data.csv, dtype={"user_id": str}).to_parquet(path)
        kwargs = {}
    else:
        path = tmp_path / "d.npz"
        np.savez(path, keys=np.array(data.keys), X=data.X, y=data.y)
        kwargs = {}
    c = Curator(tmp_path / "d")
    key, label = ("user_id", "label") if fmt == "parquet" else ("keys", "y")
    info = c.register_dataset("people", path, key=key, label=label, **kwargs)
    assert info["n_records"] == 200 and info["n_features"] == 10
    keys, X, y = current_data(c)
    assert keys == digests(c, data.keys)
    np.testing.assert_array_equal(X, data.X)
    np.testing.assert_array_equal(y, data.y)


def test_register_refuses_bad_tables(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d")
    df = pd.read_csv(data.csv, dtype={"user_id": str})
    df.loc[5, "user_id"] = df.loc[4, "user_id"]
    df.to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ValueError, match="unique keys. Found 'user-0004'"):
        c.register_dataset("x", tmp_path / "dup.csv", key="user_id", label="label")
    with pytest.raises(ValueError, match="Column 'uid' is not in"):
        c.register_dataset("x", data.csv, key="uid", label="label")
    with pytest.raises(FileNotFoundError):
        c.register_dataset("x", tmp_path / "missing.csv", key="user_id", label="label")
    (tmp_path / "dup.txt").write_text("user_id,label\n")
    with pytest.raises(ValueError, match="must end in one of"):
        c.register_dataset("x", tmp_path / "dup.txt", key="user_id", label="label")
    c.register_dataset("x", data.csv, key="user_id", label="label")
    with pytest.raises(ConflictError):
        c.register_dataset("x", data.csv, key="user_id", label="label")
    assert c.status()["datasets"] == [{"name": "x", "n_records": 200, "n_features": 10}]


def test_row_norms_and_normalisation(tmp_path: Path, data: Data) -> None:
    df = pd.read_csv(data.csv, dtype={"user_id": str})
    df.loc[0, "f0"] = 5.0
    df.to_csv(tmp_path / "big.csv", index=False)
    c = Curator(tmp_path / "d")
    c.register_dataset("big", tmp_path / "big.csv", key="user_id", label="label")
    with pytest.raises(InvalidInputError, match="L2 norm <= 1"):
        c.train("big", "m", params=PARAMS)
    c.register_dataset("big-n", tmp_path / "big.csv", key="user_id", label="label", normalize="rows")
    c.train("big-n", "m", params=PARAMS, random_state=0)
    out = c.predict("m", [[50.0] + [0.0] * 9, [0.01] * 10])
    assert out["version"] == 1 and set(out["predictions"]) <= {0.0, 1.0}


def test_budget_exhaustion_retrains_with_fresh_secret(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=40))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-3, "sigma": 0.1, "epsilon": 0.1}, random_state=0)
    _, arrays1 = published(c)
    for k in data.keys[:40]:
        c.submit_deletion("people", k)
    c.process_pending(force=True)
    b = c.budget("clf")
    assert b["retrainings"] >= 1 and b["n_records"] == 160
    _, arrays2 = published(c)
    assert not np.array_equal(arrays1["b"], arrays2["b"])
    kinds = [e["kind"] for e in c.ledger(1000)]
    assert "retrain" in kinds


def test_noisy_gd_mechanism_through_the_service(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=8))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "ngd", mechanism="noisy-gd", params={"lam": 0.1, "r": 2, "epsilon_dd": 0.5}, random_state=0)
    v1, a1 = published(c, "ngd")
    assert set(a1) == {"theta"}  # no records and no generator state in the artifact
    ids = [c.submit_deletion("people", k)[0]["id"] for k in ("user-0001", "user-0002", "user-0003")]
    (res,) = c.process_pending(force=True)
    assert res.status == "done" and res.new_versions == {"ngd": 2}
    cert = c.request_certificates(ids[0])[0]["certificate"]
    assert cert["operation"] == "edit" and cert["edit_requests"] == 2  # 3 deletions in requests of <= r = 2
    assert cert["n"] == 200  # replaced by dummy records: the database size stays n (footnote 1)
    assert 0 < cert["epsilon_dd"] <= 0.5 and cert["n_remaining"] == 197
    v2, a2 = published(c, "ngd")
    assert v2.n_records == 197 and v2.summary["n_dummies"] == 3 and v2.summary["edits"] == 2
    assert not np.array_equal(a1["theta"], a2["theta"])
    assert c.artifacts.all_files() == [v2.artifact]
    assert c.predict("ngd", data.X[:4].tolist())["version"] == 2
    with pytest.raises(InvalidInputError, match="Unknown parameter"):
        c.train("people", "bad", mechanism="noisy-gd", params={"sigma": 1.0})


def test_worker_never_waits_on_a_progress_bar_lock_held_by_a_dead_process(curator: Curator) -> None:
    # tqdm's constructor takes tqdm.get_lock() even when disabled; that lock is a multiprocessing RLock shared with
    # forked processes, so a worker SIGKILLed while holding it hung every later batch (found in test_crash). The
    # unattended path must not touch it: hold the lock from another thread and process a batch.
    import threading

    from tqdm import tqdm

    lock = tqdm.get_lock()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(120)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    assert held.wait(10)
    results: list[object] = []
    try:
        curator.submit_deletion("people", "user-0003")
        worker = threading.Thread(target=lambda: results.extend(curator.process_pending(force=True)), daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "process_pending blocked on tqdm's lock"
    finally:
        release.set()
        t.join(10)
    assert [r.status for r in results] == ["done"]  # type: ignore[attr-defined]
