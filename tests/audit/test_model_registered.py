"""``lethe audit --model NAME`` (issue 27): the membership-inference audit of a curator model, deleted records (a
file the operator kept) vs public held-out records, on every version whose artifact exists; refusals that change
nothing; output that names no key and no value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

pytest.importorskip("fastapi")

from lethe.audit.model import audit_model  # noqa: E402
from lethe.certified.rows import INTERCEPT_SCALE  # noqa: E402
from lethe.cli import main  # noqa: E402
from lethe.curator import Curator, Settings  # noqa: E402
from lethe.curator.audits import audit_registered_model, removal_versions  # noqa: E402
from lethe.curator.errors import InvalidInputError  # noqa: E402
from lethe.curator.store import Model, ModelVersion  # noqa: E402
from lethe.preprocessing import SchemaEncoder  # noqa: E402
from lethe.schema import load_schema  # noqa: E402

from ..curator.test_schema_service import SCHEMA, write_table  # noqa: E402

N_DELETED = 40


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    train = write_table(tmp_path / "train.csv", 300, seed=0, rare=False)
    write_table(tmp_path / "test.csv", 200, seed=1, prefix="test", rare=False)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=16))
    c.register_dataset("shop", tmp_path / "train.csv", schema=tmp_path / "schema.json")
    c.register_dataset("shop-test", tmp_path / "test.csv", schema=tmp_path / "schema.json")
    c.train("shop", "m", params={"lam": 1e-3, "sigma": 1.0}, random_state=0, heldout="shop-test")
    gone = train.iloc[10:10 + N_DELETED]
    gone.to_csv(tmp_path / "deleted.csv", index=False)  # kept for the audit before the requests
    for key in gone["customer"]:
        c.submit_deletion("shop", key)
    c.process_pending(force=True)
    yield c, tmp_path, train, gone
    c.close()


def _margins_from_export(c: Curator, frame: pd.DataFrame) -> np.ndarray:
    """z of the published version from its public export (weights on [x·s, s]) and the schema alone."""
    w = np.asarray(c.public_model("m")["arrays"]["w"], dtype=np.float64).ravel()
    X = SchemaEncoder(load_schema(SCHEMA)).transform(frame[[col["name"] for col in SCHEMA["columns"]]])
    return X @ w[:-1] * INTERCEPT_SCALE + w[-1] * INTERCEPT_SCALE


def test_the_audit_of_a_registered_model_is_the_audit_of_its_published_weights(shop: Any) -> None:
    c, tmp, _train, gone = shop
    versions = c.model_versions("m")
    assert len(versions) >= 3  # 40 deletions in batches of 16: several versions, all but the last destroyed
    res = audit_registered_model(c, "m", tmp / "deleted.csv")
    assert res.audit is not None and len(res.audit.versions) == 1
    v = res.audit.versions[0]
    assert v.name == f"v{len(versions)}" and v.n_deleted == N_DELETED and v.n_heldout == 200
    assert [name for name, _ in res.not_audited] == [f"v{i}" for i in range(1, len(versions))]
    assert all("destroyed" in why for _, why in res.not_audited)
    # the same numbers from the public export, the schema and lethe.audit.model directly
    test = pd.read_csv(tmp / "test.csv")
    ref = audit_model([lambda frame: _margins_from_export(c, frame)], gone, gone["outcome"].to_numpy(), test,
                      test["outcome"].to_numpy(), epsilon=1.0, delta=1e-4, classes=["no", "yes"])
    r = ref.versions[0]
    assert (v.auc, v.advantage, v.low, v.high, v.bound) == pytest.approx((r.auc, r.advantage, r.low, r.high, r.bound))
    assert v.epsilon == 1.0 and v.delta == 1e-4  # the model's own guarantee (its parameters)
    # 40 deleted records: the interval (±0.26) is wider than the bound 0.462 — inconclusive, never "passed"
    assert v.high - v.low > v.bound and res.verdict == "inconclusive" and not res.passed and not res.audit.failed
    # the version that removed each record: the one its request's removal certificate names (requests listed newest
    # first, submitted in the file's order)
    items = c.list_requests(limit=100)["items"][::-1]
    assert len(items) == N_DELETED
    expected = [c.certificate(r["certificates"][0])["new_version"] for r in items]
    with c.store.read() as s:
        ds = c.datasets.find(s, "shop")
        model_id = s.scalar(select(Model.id))
        number_of = {vid: num for vid, num in s.execute(select(ModelVersion.id, ModelVersion.number))}
    got = removal_versions(c, ds, model_id, list(gone["customer"]), number_of)
    assert got.tolist() == expected and len(set(expected)) > 1
    text = str(res)
    assert "v1" in text and "not audited" in text and "lethe audit --experiment mnist" in text
    for key in gone["customer"]:
        assert key not in text


def test_records_still_held_or_never_removed_are_refused_by_count_only(shop: Any, tmp_path: Path) -> None:
    c, tmp, train, gone = shop
    mixed = pd.concat([gone.iloc[:5], train.iloc[200:203]])  # 3 records the model still trains on
    mixed.to_csv(tmp / "mixed.csv", index=False)
    with pytest.raises(InvalidInputError, match=r"3 of its 8 records are still held by dataset 'shop' .* and 0 were "
                                                r"never removed") as err:
        audit_registered_model(c, "m", tmp / "mixed.csv")
    for key in mixed["customer"]:
        assert key not in str(err.value)
    stranger = write_table(tmp / "stranger.csv", 5, seed=7, prefix="nobody", rare=False)
    with pytest.raises(InvalidInputError, match=r"0 of its 5 records are still held .* and 5 were never removed"):
        audit_registered_model(c, "m", tmp / "stranger.csv")
    assert stranger.shape[0] == 5
    with pytest.raises(InvalidInputError, match="the curator erases a deleted record when its request is processed"):
        audit_registered_model(c, "m", None)
    # a file that breaks the schema: the column and the rule, never the value
    bad = gone.copy()
    bad["age"] = bad["age"].astype(object)
    bad.iloc[0, bad.columns.get_loc("age")] = "forty-two"
    bad.to_csv(tmp / "bad.csv", index=False)
    with pytest.raises(InvalidInputError) as err:
        audit_registered_model(c, "m", tmp / "bad.csv")
    assert "forty-two" not in str(err.value) and gone["customer"].iloc[0] not in str(err.value)


def test_lethe_audit_model_on_the_command_line(shop: Any, capsys: Any) -> None:
    c, tmp, _train, gone = shop
    data_dir = str(c.data_dir)
    code = main(["audit", "--model", "m", "--data-dir", data_dir, "--deleted", str(tmp / "deleted.csv"),
                 "--out", str(tmp / "out" / "audit.txt")])
    out = capsys.readouterr().out
    assert code == 3, out  # inconclusive: 40 deleted records are too few for the bound 0.462
    assert "deleted records (from the file given) vs 200 held-out records (registered dataset 'shop-test')" in out
    assert "INCONCLUSIVE" in out and "PASSED" not in out and "95 % CI" in out and "detects" in out
    saved = json.loads((tmp / "out" / "audit.json").read_text())
    assert saved["passed"] is False and saved["verdict"] == "inconclusive"
    assert saved["n_deleted"] == N_DELETED and len(saved["audit"]["versions"]) == 1
    for key in gone["customer"]:
        assert key not in out and key not in (tmp / "out" / "audit.json").read_text()
    # a held-out file instead of the registered dataset gives the same audit
    code = main(["audit", "--model", "m", "--data-dir", data_dir, "--deleted", str(tmp / "deleted.csv"),
                 "--heldout", str(tmp / "test.csv")])
    out2 = capsys.readouterr().out
    assert code == 3 and "held-out records (file 'test.csv')" in out2
    assert out.splitlines()[3] == out2.splitlines()[3]  # the version's row: the same numbers
    code = main(["audit", "--model", "m", "--data-dir", data_dir])
    assert code == 2 and "--deleted FILE" in capsys.readouterr().err


def test_a_dataset_without_schema_is_audited_from_its_columns(tmp_path: Path) -> None:
    """A numeric dataset registered with --key/--label: the deleted file and the held-out dataset are read by the
    dataset's columns; the numbers are those of lethe.audit.model on the published weights."""
    from ..curator.conftest import PARAMS, make_data

    data = make_data(tmp_path / "data.csv")
    held = make_data(tmp_path / "held.csv", n=150, seed=3)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=32))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.register_dataset("people-held", held.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    frame = pd.read_csv(data.csv)
    gone = frame.iloc[:30]
    gone.to_csv(tmp_path / "deleted.csv", index=False, float_format="%.17g")
    for key in gone["user_id"]:
        c.submit_deletion("people", key)
    c.process_pending(force=True)
    with pytest.raises(InvalidInputError, match="no model of dataset 'people' was trained with a held-out set"):
        audit_registered_model(c, "clf", tmp_path / "deleted.csv")
    res = audit_registered_model(c, "clf", tmp_path / "deleted.csv", heldout="people-held")
    w = np.asarray(c.public_model("clf")["arrays"]["w"], dtype=np.float64).ravel()
    ref = audit_model([w], data.X[:30], data.y[:30], held.X, held.y, epsilon=1.0, delta=1e-4, classes=[0.0, 1.0])
    v, r = res.audit.versions[0], ref.versions[0]
    assert (v.auc, v.advantage, v.low, v.high) == pytest.approx((r.auc, r.advantage, r.low, r.high))
    assert v.n_deleted == 30 and v.n_heldout == 150
    c.close()
