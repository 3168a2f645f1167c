"""Operating failures: permissions, read-only and full storage, recovery before serving, ``forget --now`` exit codes
(docs/curator.md, "Operating guide")."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import lethe.cli as cli
from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.retention import Retention
from lethe.curator.store import ModelVersion

from .conftest import PARAMS, Data


def test_existing_data_dir_is_made_owner_only(tmp_path: Path, data: Data) -> None:
    d = tmp_path / "existing"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    (d / "secrets").mkdir(mode=0o755)
    os.chmod(d / "secrets", 0o755)
    c = Curator(d)
    c.close()
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "secrets").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "secrets" / "artifact_key").st_mode) == 0o600


def test_read_only_database_gives_a_clear_cli_error(tmp_path: Path, curator: Curator,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    curator.close()
    db = curator.data_dir / "lethe.db"
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    rc = cli.main(["forget", "people", "user-0001", "--data-dir", str(curator.data_dir), "--database-url", url])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "lethe: error:" in err and "read-only" in err and "Traceback" not in err


def _full(*args: object, **kwargs: object) -> None:
    raise OperationalError("INSERT ...", {}, sqlite3.OperationalError("database or disk is full"))


def test_full_disk_is_507_for_the_api_and_clear_for_the_cli(curator: Curator, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    token = curator.create_token("alice", "requester")
    monkeypatch.setattr(Curator, "submit_deletion", _full)
    monkeypatch.setattr(Curator, "submit_deletions", _full)  # the API server's intake
    with TestClient(create_app(curator, run_worker=False)) as client:
        r = client.post("/v1/deletions", json={"dataset": "people", "key": "user-0001"},
                        headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 507 and "full" in r.text and str(curator.data_dir) not in r.text
    rc = cli.main(["forget", "people", "user-0001", "--data-dir", str(curator.data_dir)])
    out, err = capsys.readouterr()
    assert rc == 1 and "is full" in err and "Traceback" not in err


def test_recovery_runs_before_serving(tmp_path: Path, data: Data, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    c.submit_deletion("people", "user-0001")
    # a crash right after the publish commit: nothing after it ran (no destruction, no purge)
    monkeypatch.setattr(Retention, "destroy_superseded", lambda self, **kwargs: [])
    monkeypatch.setattr(Retention, "purge", lambda self, attempts=20, **kwargs: False)
    c.process_pending(force=True)
    monkeypatch.undo()
    with c.store.read() as s:
        old = s.scalar(select(ModelVersion).where(ModelVersion.status == "superseded"))
        assert old is not None
        old_path = c.data_dir / old.artifact
    assert old_path.exists() and c.purge_pending()
    with TestClient(create_app(c, run_worker=False)):  # startup done = ready to serve
        assert not old_path.exists()
        assert not c.purge_pending()
    c.close()


def test_forget_now_fails_when_not_done(curator: Curator, capsys: pytest.CaptureFixture[str]) -> None:
    with curator.store.read() as s:
        v = s.scalar(select(ModelVersion).where(ModelVersion.status == "published"))
        assert v is not None
        (curator.data_dir / v.artifact).unlink()  # a missing artifact: the batch is held
    curator.close()
    rc = cli.main(["forget", "people", "user-0001", "--now", "--data-dir", str(curator.data_dir)])
    out, err = capsys.readouterr()
    assert rc == 1 and "not done" in err
    rc = cli.main(["status", "--data-dir", str(curator.data_dir)])
    out, err = capsys.readouterr()
    assert rc == 3 and "lethe model retrain clf" in err
    assert cli.main(["model", "retrain", "clf", "--data-dir", str(curator.data_dir)]) == 0
    assert cli.main(["process", "--all", "--data-dir", str(curator.data_dir)]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--data-dir", str(curator.data_dir)]) == 0


def test_drop_commands_need_confirmation(curator: Curator, capsys: pytest.CaptureFixture[str]) -> None:
    """`lethe model drop` and `lethe dataset drop` refuse without --yes (nothing dropped) and drop with it."""
    d = str(curator.data_dir)
    curator.close()
    assert cli.main(["model", "drop", "clf", "--data-dir", d]) != 0
    assert "Dropping model 'clf' destroys all its versions; confirm with --yes." in capsys.readouterr().err
    assert cli.main(["dataset", "drop", "people", "--data-dir", d]) != 0
    assert "Dropping dataset 'people' deletes all its records; confirm with --yes." in capsys.readouterr().err
    c = Curator(d)
    try:
        assert [m["name"] for m in c.status()["models"]] == ["clf"] and c.dataset_info("people")["n_records"] > 0
    finally:
        c.close()
    assert cli.main(["model", "drop", "clf", "--yes", "--data-dir", d]) == 0
    assert cli.main(["dataset", "drop", "people", "--yes", "--data-dir", d]) == 0
    capsys.readouterr()
    c = Curator(d)
    try:
        assert c.status()["models"] == [] and c.status()["datasets"] == []
    finally:
        c.close()
