"""Issue 35: the documented repair — drop a dataset and register it again from its source — never brings back a
record erased on request (the erasure log survives the drop), under the same name or another; the log holds keyed
digests only; the upgrade to schema 6 builds it for datasets dropped before."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from lethe.curator import Curator, Settings
from lethe.curator.settings import Principal
from lethe.curator.store import Erasure

from .conftest import Data, lethe_cmd, make_data

ERASED = ["user-0003", "user-0010", "user-0042", "user-0150"]


def _erase(c: Curator, keys: list[str]) -> None:
    for k in keys:
        c.submit_deletion("people", k, principal=Principal("alice", "requester"))
    c.process_pending(force=True)
    assert c.status()["requests"]["done"] == len(keys)


def _present(c: Curator, name: str, keys: list[str]) -> list[str]:
    from lethe.curator.store import Dataset, Record

    with c.store.read() as s:
        ds = s.scalar(select(Dataset).where(Dataset.name == name))
        assert ds is not None
        held = set(s.scalars(select(Record.key).where(Record.dataset_id == ds.id)))
        return [k for k in keys if c.directory.key_digest(ds.id, k) in held]


@pytest.mark.parametrize("new_name", ["people", "people-v2"])
def test_reregistering_after_drop_brings_no_erased_record_back(curator: Curator, data: Data, new_name: str) -> None:
    _erase(curator, ERASED)
    curator.drop_model("clf")
    dropped = curator.drop_dataset("people")
    assert dropped["erasures_kept"] == len(ERASED)
    again = curator.register_dataset(new_name, data.csv, key="user_id", label="label")
    assert again["not_reingested"] == len(ERASED) and again["n_records"] == len(data.keys) - len(ERASED)
    assert _present(curator, new_name, ERASED) == []
    assert _present(curator, new_name, data.keys[:3]) == data.keys[:3]
    with curator.store.read() as s:  # digests only: no key anywhere in the log
        rows = s.scalars(select(Erasure)).all()
    assert len(rows) == len(ERASED) and not {r.digest for r in rows} & set(ERASED)
    assert all(len(r.digest) == 64 for r in rows)
    # a second drop and registration: still nothing back (the first log is found by its source file)
    curator.drop_dataset(new_name)
    third = curator.register_dataset("people-v3", data.csv, key="user_id", label="label")
    assert third["not_reingested"] == len(ERASED) and _present(curator, "people-v3", ERASED) == []


def test_unrelated_source_and_name_are_not_filtered(curator: Curator, tmp_path: Path) -> None:
    _erase(curator, ERASED[:2])
    other = make_data(tmp_path / "other.csv", n=50, seed=3)  # the same key names, another data set
    info = curator.register_dataset("other", other.csv, key="user_id", label="label")
    assert "not_reingested" not in info and info["n_records"] == 50


def test_cli_says_how_many_were_not_reingested(tmp_path: Path, data: Data) -> None:
    d = tmp_path / "cli-data"
    c = Curator(d, settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    _erase(c, ERASED[:3])
    c.close()

    def run(*a: str) -> Any:
        return subprocess.run([*lethe_cmd(), *a, "--data-dir", str(d)], capture_output=True, text=True)

    assert run("dataset", "drop", "people", "--yes").returncode == 0
    out = run("dataset", "add", "people", str(data.csv), "--key", "user_id", "--label", "label")
    assert out.returncode == 0, out.stderr
    assert "3 records erased on request were not re-ingested" in out.stderr


def test_upgrade_logs_datasets_dropped_before(tmp_path: Path, data: Data) -> None:
    """A store dropped under schema 5 (no erasure log): the upgrade builds the log from the requests."""
    from sqlalchemy import text

    c = Curator(tmp_path / "old", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    _erase(c, ERASED[:2])
    c.drop_dataset("people")
    with c.store.write_engine.begin() as conn:  # back to schema 5: no erasure log
        conn.execute(text("DROP TABLE erasures"))
        conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    c.close()
    c = Curator(tmp_path / "old", settings=Settings(batch_size=4))
    info = c.register_dataset("people", data.csv, key="user_id", label="label")
    assert info["not_reingested"] == 2
    c.close()
    shutil.rmtree(tmp_path / "old")


def test_drop_then_register_keeps_model_repair_path(curator: Curator, data: Data) -> None:
    """The status advice for a damaged data file names the safe repair."""
    from lethe.curator.dataplane import DataPlane

    with curator.store.read() as s:
        plane = s.scalars(select(DataPlane)).first()
        assert plane is not None
        path = curator.matrices.resolve(plane.features_path)
    with open(path, "r+b") as f:
        f.truncate(8)
    st = curator.status()
    repair = next(f["repair"] for f in st["faults"] if "dataset" in f)
    assert "erased on request are not re-ingested" in repair



def test_retraining_refuses_records_erased_on_request(curator: Curator) -> None:
    """A record put back after its deletion (a store restored from an older copy of the records): retraining checks
    the erasure log and refuses to train on it."""
    from sqlalchemy import insert

    from lethe.curator.errors import ConflictError
    from lethe.curator.store import Dataset, Record

    _erase(curator, ERASED[:1])
    with curator.store.write() as s, s.begin():
        ds = s.scalar(select(Dataset).where(Dataset.name == "people"))
        assert ds is not None
        s.execute(insert(Record), [{"id": 10_000, "dataset_id": ds.id, "features": b"", "label": 0.0,
                                    "key": curator.directory.key_digest(ds.id, ERASED[0])}])
    with pytest.raises(ConflictError, match="erased on request"):
        curator.retrain("clf")
