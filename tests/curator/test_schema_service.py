"""Tabular datasets in the service (issue 27): registration with a declared schema, held-out accuracy, predictions
on raw records, every library parameter, and the scan of everything published for values learned from rows."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.curator import Curator, Settings
from lethe.curator.adapters import get_adapter
from lethe.curator.api import create_app
from lethe.curator.console import health
from lethe.curator.console import queries as Q
from lethe.curator.errors import InvalidInputError
from lethe.preprocessing import SchemaEncoder
from lethe.schema import load_schema

from ..console.conftest import CSRF_RE

SCHEMA = {
    "label": {"name": "outcome", "classes": ["no", "yes"]},
    "key": "customer",
    "columns": [
        {"name": "age", "type": "numeric", "lower": 18, "upper": 100},
        {"name": "color", "type": "categorical", "categories": ["red", "green", "blue", "teal"], "unknown": "other"},
        {"name": "spend", "type": "numeric", "lower": 0, "upper": 100000, "log1p": True},
    ],
}
PARAMS = {"lam": 1e-3, "sigma": 1.0}
# values only the private rows hold: a category the schema does not declare, the one holder of a rare declared
# category's numbers, and the table's extremes (a schema drafted from the rows would publish these as bounds)
SECRET_CATEGORY = "Mauvelous"
RARE_KEY, RARE_AGE, RARE_SPEND = "cust-rare-7731", 63.25871, 48213.77391
MAX_SPEND, MIN_AGE = 91234.56789, 19.48271


def write_table(path: Path, n: int, seed: int, *, prefix: str = "cust", rare: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = np.round(rng.uniform(25, 80, size=n), 3)
    color = rng.choice(["red", "green", "blue"], size=n)
    spend = np.round(rng.lognormal(7, 1.2, size=n).clip(0, 60000), 2)
    score = 0.04 * (age - 50) + 0.6 * (np.log1p(spend) - 7) + np.where(color == "red", 1.0, -0.3)
    outcome = np.where(score + rng.normal(scale=0.5, size=n) > 0, "yes", "no")
    keys = [f"{prefix}-{i:05d}" for i in range(n)]
    df = pd.DataFrame({"customer": keys, "age": age, "color": color, "spend": spend, "outcome": outcome})
    if rare:
        df.loc[3, "color"] = SECRET_CATEGORY  # undeclared: encoded as color=<other>
        df.loc[5, "spend"] = MAX_SPEND
        df.loc[6, "age"] = MIN_AGE
        df.loc[7, ["customer", "age", "color", "spend"]] = [RARE_KEY, RARE_AGE, "teal", RARE_SPEND]
    df.to_csv(path, index=False)
    return df


@pytest.fixture
def tab(tmp_path: Path) -> Iterator[tuple[Curator, Path, pd.DataFrame, pd.DataFrame]]:
    schema_path = tmp_path / "schema.json"
    schema_path.write_text(json.dumps(SCHEMA))
    train = write_table(tmp_path / "train.csv", 300, seed=0)
    test = write_table(tmp_path / "test.csv", 200, seed=1, prefix="test", rare=False)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=4))
    c.register_dataset("shop", tmp_path / "train.csv", schema=schema_path)
    c.register_dataset("shop-test", tmp_path / "test.csv", schema=schema_path)
    yield c, tmp_path, train, test
    c.close()


def test_schema_registration_encodes_by_the_schema_alone(tab: Any) -> None:
    c, tmp, train, _ = tab
    info = c.dataset_info("shop")
    schema = load_schema(SCHEMA)
    assert info["feature_names"] == schema.feature_names() and info["categories"] is None
    assert info["schema"] == schema.to_dict() and info["key_column"] == "customer"
    assert info["label_column"] == "outcome" and info["label_classes"] == ["no", "yes"]
    with c.store.read() as s:
        ds = c.datasets.find(s, "shop")
        _ids, X, y = c.datasets.current_data(s, ds.id, ds.n_features)
    expected = SchemaEncoder(schema).transform(train)  # the library's encoder: the same rows, bit for bit
    np.testing.assert_array_equal(X, expected)
    assert list(y) == list(train["outcome"]) and np.all(np.linalg.norm(X, axis=1) <= 1.0)
    # a schema with a null key takes --key; a key or label other than the schema's is refused, nothing registered
    nokey = dict(SCHEMA, key=None)
    c.register_dataset("shop2", tmp / "train.csv", schema=nokey, key="customer")
    assert c.dataset_info("shop2")["key_column"] == "customer"
    for kwargs in ({"key": "age"}, {"label": "color"}):
        with pytest.raises(ValueError, match="must be the schema's"):
            c.register_dataset("shop3", tmp / "train.csv", schema=SCHEMA, **kwargs)
    with pytest.raises(ValueError, match="needs a key column"):
        c.register_dataset("shop3", tmp / "train.csv", schema=nokey)
    with pytest.raises(InvalidInputError, match="do not apply with --schema"):
        c.register_dataset("shop3", tmp / "train.csv", schema=SCHEMA, categorical=["color"])
    bad = dict(SCHEMA, label={"name": "outcome", "classes": ["no", "maybe"]})
    with pytest.raises(ValueError, match="a label must be one of the classes"):
        c.register_dataset("shop3", tmp / "train.csv", schema=bad)
    with pytest.raises(ValueError, match="key and label"):
        c.register_dataset("shop3", tmp / "train.csv")
    assert "shop3" not in {d["name"] for d in c.status()["datasets"]}


def test_heldout_accuracy_tabular_defaults_and_every_version(tab: Any) -> None:
    c, _tmp, train, test = tab
    out = c.train("shop", "m", params=PARAMS, random_state=0, heldout="shop-test")
    assert out["params"]["fit_intercept"] is True  # the tabular default
    held = out["heldout"]
    schema = load_schema(SCHEMA)
    # the same model in the library: same data, same parameters, same seed -> the same accuracy
    Xtr, ytr = schema.split(train)
    Xte, yte = schema.split(test)
    enc = SchemaEncoder(schema)
    est = CertifiedLogisticRegression(**PARAMS, fit_intercept=True, random_state=0).fit(enc.transform(Xtr), ytr)
    lib_acc = float(np.mean(est.predict(enc.transform(Xte)) == yte))
    assert held == {"dataset": "shop-test", "n": 200, "accuracy": pytest.approx(lib_acc, abs=1e-12)}
    assert 0.7 < held["accuracy"] <= 1.0  # a learnable table: well above the majority class
    with c.store.read() as s:
        m_id = c.serving.find_model(s, "m").id
        assert Q.holdout_assignments(s) == {m_id: "shop-test"}
        assert Q.holdout_accuracies(s, m_id) == {1: held["accuracy"]}
    for k in list(train["customer"][10:14]):
        c.submit_deletion("shop", k)
    results = c.process_pending(force=True)
    assert [(r.status, r.new_versions, r.error) for r in results] == [("done", {"m": 2}, None)], results
    assert health.evaluate_holdout(c) == 1, c.status()  # the console's evaluator: every later version
    with c.store.read() as s:
        accs = Q.holdout_accuracies(s, m_id)
    assert set(accs) == {1, 2} and abs(accs[2] - accs[1]) < 0.05
    # refused held-out sets: unknown, the training data itself, other features; nothing trained
    c.register_dataset("learned", _tmp / "train.csv", key="customer", label="outcome", categorical=["color"])
    for bad, match in (("nope", "registered dataset"), ("shop", "another dataset"), ("learned", "same schema")):
        with pytest.raises(InvalidInputError, match=match):
            c.train("shop", "m2", params=PARAMS, heldout=bad)
    assert {m["name"] for m in c.status()["models"]} == {"m"}


def test_every_library_parameter_is_accepted(tab: Any, tmp_path: Path) -> None:
    c, *_ = tab
    lib = set(CertifiedLogisticRegression().get_params()) - {"random_state", "negative_subsample"}
    adapter = get_adapter("certified-removal", {"fit_intercept": True, "normalize_rows": True})
    assert lib <= set(adapter.params) and adapter.params["fit_intercept"] is True
    for bad in ({"fit_intercept": "yes"}, {"normalize_rows": 1}):
        with pytest.raises(TypeError, match="must be a bool"):
            get_adapter("certified-removal", bad)
    # explicit fit_intercept=false overrides the tabular default; its weights have d entries, not d + 1
    c.train("shop", "flat", params={**PARAMS, "fit_intercept": False}, random_state=0)
    assert len(c.public_model("flat")["arrays"]["w"]) == len(load_schema(SCHEMA).feature_names()) == 7
    c.train("shop", "bent", params={**PARAMS, "normalize_rows": True, "fit_intercept": True}, random_state=0)
    assert len(c.public_model("bent")["arrays"]["w"]) == 8
    with pytest.raises(InvalidInputError, match="negative_subsample"):
        c.train("shop", "sub", params={**PARAMS, "negative_subsample": 2.0})


def test_intercept_model_survives_removals_as_the_library_does(tab: Any) -> None:
    """With fit_intercept, the service's restore → remove path gives the library's weights after the same
    removal (the warm model's rows are the estimator's: [x/√2, 1/√2])."""
    c, _tmp, train, _ = tab
    c.train("shop", "m", params=PARAMS, random_state=0)
    schema = load_schema(SCHEMA)
    X = SchemaEncoder(schema).transform(train)
    est = CertifiedLogisticRegression(**PARAMS, fit_intercept=True, random_state=0).fit(X, train["outcome"])
    np.testing.assert_allclose(c.public_model("m")["arrays"]["w"], est.states_[0].w, rtol=1e-9, atol=1e-12)
    keys = list(train["customer"][20:24])
    for k in keys:
        c.submit_deletion("shop", k)
    c.process_pending(force=True)
    est.remove(np.arange(20, 24))
    pub = c.public_model("m")
    assert pub["version"] == 2
    np.testing.assert_allclose(pub["arrays"]["w"], est.states_[0].w, rtol=1e-7, atol=1e-10)
    recs = train.drop(columns=["customer", "outcome"]).iloc[:50].to_dict("records")
    assert c.predict("m", records=recs)["predictions"] == list(est.predict(X[:50]))


def _client(c: Curator) -> TestClient:
    return TestClient(create_app(c, run_worker="none"), base_url="http://127.0.0.1")


def test_predict_accepts_raw_records_and_never_echoes_a_value(tab: Any) -> None:
    c, _tmp, _train, test = tab
    c.train("shop", "m", params=PARAMS, random_state=0, serve_unreleased=True)  # opted in: certified-removal
    token = c.create_token("app", "model-reader")  # predictions are the model-reader scope's (issue 26)
    recs = test.drop(columns=["customer", "outcome"]).iloc[:20].to_dict("records")
    feats = SchemaEncoder(load_schema(SCHEMA)).transform(test.iloc[:20]).tolist()
    with _client(c) as cl:
        h = {"Authorization": f"Bearer {token}"}
        by_rec = cl.post("/v1/models/m/predict", json={"records": recs}, headers=h)
        by_feat = cl.post("/v1/models/m/predict", json={"features": feats}, headers=h)
        assert by_rec.status_code == 200 and by_feat.status_code == 200, by_rec.text
        assert by_rec.json()["predictions"] == by_feat.json()["predictions"]
        assert set(by_rec.json()["predictions"]) <= {"no", "yes"}
        # an undeclared category is the schema's <other>; extra fields (the label) are ignored
        odd = [dict(recs[0], color="Zebra-Stripe", outcome="yes")]
        assert cl.post("/v1/models/m/predict", json={"records": odd}, headers=h).status_code == 200
        bad_cases = [
            ([dict(recs[0], age="Sixty-Three-Secret")], "column 'age'", "must hold numbers"),
            ([{"age": 40.0, "color": "red"}], "column 'spend'", "is missing from the data"),
        ]
        for records, column, rule in bad_cases:
            r = cl.post("/v1/models/m/predict", json={"records": records}, headers=h)
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert column in detail and rule in detail
            assert "Secret" not in detail and "40.0" not in detail and "'red'" not in detail
        for body in ({}, {"records": recs, "features": feats}):
            assert cl.post("/v1/models/m/predict", json=body, headers=h).status_code == 422


def test_records_refused_for_a_dataset_without_schema(tmp_path: Path) -> None:
    from .conftest import make_data

    data = make_data(tmp_path / "data.csv", n=60, d=4)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label")
        c.train("people", "clf", params=PARAMS, random_state=0)
        with pytest.raises(InvalidInputError, match="registered with a schema"):
            c.predict("clf", records=[{"f0": 0.1}])
        assert c.public_model("clf")["schema"] is None and len(c.public_model("clf")["arrays"]["w"]) == 4
    finally:
        c.close()


def _scan_targets() -> list[str]:
    return [SECRET_CATEGORY, RARE_KEY, repr(RARE_AGE), repr(RARE_SPEND), repr(MAX_SPEND), repr(MIN_AGE),
            "63.2587", "48213.77", "91234.56", "19.4827"]


def _texts_of_npz(content: bytes) -> str:
    out = []
    with zipfile.ZipFile(io.BytesIO(content)) as z:
        for name in z.namelist():
            out.append(name)
            out.append(z.read(name).decode("latin-1"))
    return "\n".join(out)


def test_nothing_published_names_a_value_learned_from_rows(tab: Any) -> None:
    """Register with a schema, delete the only holder of a rare category (and the rows holding the extremes and
    the undeclared category), then scan everything the service publishes: API answers, model export, feature
    names, certificates, console pages, metrics. The schema's own categories and bounds are public; nothing else."""
    c, _tmp, _train, _test = tab
    acc1 = c.train("shop", "m", params=PARAMS, random_state=0, heldout="shop-test")["heldout"]["accuracy"]
    admin = c.create_token("ops", "admin")
    alice = c.create_token("alice", "requester")
    deleted = [RARE_KEY, "cust-00003", "cust-00005", "cust-00006"]
    with _client(c) as cl:
        h = {"Authorization": f"Bearer {alice}"}
        rids = [cl.post("/v1/deletions", json={"dataset": "shop", "key": k}, headers=h).json()["id"]
                for k in deleted]
        results = c.process_pending(force=True)
        assert [(r.status, r.new_versions, r.error) for r in results] == [("done", {"m": 2}, None)], results
        health.evaluate_holdout(c)  # (the console's evaluator thread may have been first)
        ha = {"Authorization": f"Bearer {admin}"}
        published: list[str] = []
        for path in ("/v1/models/m", "/v1/models/m/versions", "/v1/models/m/budget", "/v1/status", "/metrics",
                     "/v1/deletions"):
            r = cl.get(path, headers=ha)
            assert r.status_code == 200, (path, r.text)
            published.append(r.text)
        for rid in rids:
            r = cl.get(f"/v1/deletions/{rid}/certificates", headers=h)
            assert r.status_code == 200 and r.json(), r.text
            published.append(r.text)
        # the console, signed in as the admin
        page = cl.get("/console/login")
        csrf = CSRF_RE.search(page.text)
        assert csrf is not None
        r = cl.post("/console/login", data={"token": admin, "csrf": csrf.group(1)}, follow_redirects=False)
        assert r.status_code == 303
        for path in ("/console/requests", "/console/models", "/console/ledger", "/console/health"):
            r = cl.get(path)
            assert r.status_code == 200, path
            published.append(r.text)
        with c.store.read() as s:
            accs = Q.holdout_accuracies(s, c.serving.find_model(s, "m").id)
        assert accs[1] == acc1 and set(accs) == {1, 2}  # every version's held-out accuracy, shown by the console
        models_page = cl.get("/console/models").text
        assert all(f"{100 * a:.1f} %" in models_page for a in accs.values())
        for rid in rids:
            published.append(cl.get(f"/console/requests/{rid}").text)
            published.append(cl.get(f"/console/requests/{rid}/certificate.html").text)
        export = cl.get("/console/models/m/public.npz")
        assert export.status_code == 200
        published.append(_texts_of_npz(export.content))
    model = json.loads(published[0])
    assert model["feature_names"] == load_schema(SCHEMA).feature_names()  # the schema's, whatever the rows held
    assert "color=teal" in model["feature_names"]  # declared (public), though its only holder is deleted
    blob = "\n".join(published)
    assert "Held-out accuracy" in blob and "shop-test" in blob
    leaks = [t for t in _scan_targets() if t in blob]
    assert leaks == []


def test_scan_catches_a_vocabulary_learned_from_rows(tab: Any) -> None:
    """Mutation check of the scan: the old one-hot path (categories learned from the rows) publishes the
    undeclared category in the feature names, and the same scan finds it."""
    c, tmp, *_ = tab
    c.register_dataset("learned", tmp / "train.csv", key="customer", label="outcome", categorical=["color"],
                       normalize="rows")
    c.train("learned", "lm", params=PARAMS, random_state=0)
    blob = json.dumps(c.public_model("lm"))
    assert [t for t in _scan_targets() if t in blob] == [SECRET_CATEGORY]


def test_cli_schema_heldout_and_any_param(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As a user would: `lethe dataset add --schema`, `lethe train --heldout --param fit_intercept=...`."""
    import lethe.cli as cli

    schema_path = tmp_path / "schema.yaml"
    load_schema(dict(SCHEMA, key=None)).save(schema_path)
    write_table(tmp_path / "train.csv", 200, seed=0)
    write_table(tmp_path / "test.csv", 100, seed=1, prefix="test", rare=False)
    dd = ["--data-dir", str(tmp_path / "data")]

    def run(*argv: str) -> tuple[int, str, str]:
        rc = cli.main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, err = run("dataset", "add", "shop", str(tmp_path / "train.csv"), "--schema", str(schema_path),
                       "--key", "customer", "--json", *dd)
    assert rc == 0, err
    assert json.loads(out)["feature_names"] == load_schema(SCHEMA).feature_names()
    rc, _, err = run("dataset", "add", "shop-test", str(tmp_path / "test.csv"), "--schema", str(schema_path), *dd)
    assert rc == 1 and "needs a key column" in err  # the schema's key is null and no --key
    rc, out, err = run("dataset", "add", "shop-test", str(tmp_path / "test.csv"), "--schema", str(schema_path),
                       "--key", "customer", *dd)
    assert rc == 0, err  # without --json: a summary of a few lines (the full record ran to hundreds)
    assert out.startswith("registered dataset 'shop-test'") and len(out.splitlines()) <= 6
    assert "encoded by its schema" in out and "--json prints the full record" in out
    rc, out, err = run("train", "shop", "m", "--lam", "1e-3", "--sigma", "1", "--param", "fit_intercept=false",
                       "--heldout", "shop-test", "--seed", "0", *dd)
    assert rc == 0, err
    res = json.loads(out)
    assert res["params"]["fit_intercept"] is False and 0.6 < res["heldout"]["accuracy"] <= 1.0
    rc, _, err = run("train", "shop", "m2", "--param", "fit_intercept=1", *dd)
    assert rc == 1 and "fit_intercept must be a bool" in err
    rc, _, err = run("dataset", "add", "x", str(tmp_path / "train.csv"), *dd)
    assert rc == 1 and "key and label" in err


def test_holdout_rows_are_never_taken_from_another_store(tmp_path: Path) -> None:
    """Two stores in one process whose held-out datasets share an id and a row count but not their features: each
    version is evaluated on its own store's rows (the console's cache was keyed by (dataset id, n) only, so the
    second store got the first one's rows, its predictions failed and its versions were never evaluated)."""
    from lethe.curator.settings import Settings as S

    stores = []
    for i, n_features in enumerate((3, 5)):
        rng = np.random.default_rng(i)
        cols = {f"f{j}": rng.normal(size=60) for j in range(n_features)}
        frame = pd.DataFrame({"id": [f"r{k}" for k in range(60)], **cols})
        frame["y"] = (frame["f0"] > 0).astype(int)
        frame.to_csv(tmp_path / f"t{i}.csv", index=False)
        c = Curator(tmp_path / f"d{i}", settings=S(batch_size=1))
        c.register_dataset("test", tmp_path / f"t{i}.csv", key="id", label="y", normalize="rows")  # id 1, 60 rows
        c.register_dataset("train", tmp_path / f"t{i}.csv", key="id", label="y", normalize="rows")
        c.train("train", "m", params={"lam": 0.01}, random_state=0, heldout="test")
        stores.append(c)
    try:
        for c in stores:
            c.submit_deletion("train", "r7")
            c.process_pending(force=True)
            assert health.evaluate_holdout(c) == 1  # version 2 of this store's model, on this store's rows
            with c.store.read() as s:
                assert set(Q.holdout_accuracies(s, c.serving.find_model(s, "m").id)) == {1, 2}
    finally:
        for c in stores:
            c.close()
