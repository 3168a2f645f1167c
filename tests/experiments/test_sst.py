"""The SST-source loader: parsing, labels, the fixed stratified split."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.datasets import sst


def test_parse_ground_truth():
    text = "1\t2.5\tGreat fun.\n2\t-0.6\tToo tepid\n\n3\t0.0\tMeh\t(tab inside)\n"
    ids, scores, sents = sst.parse_ground_truth(text)
    assert ids == [1, 2, 3] and scores == [2.5, -0.6, 0.0]
    assert sents[2] == "Meh\t(tab inside)"
    with pytest.raises(ValueError, match="3 tab-separated"):
        sst.parse_ground_truth("1\tonly two\n")


def test_labels_and_split(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    scores = np.round(rng.uniform(-4, 4, size=300), 2)
    scores[:7] = 0.0
    monkeypatch.setattr(sst, "load_movie_snippets", lambda data_dir=None: ([f"s{i}" for i in range(300)], scores))
    a, ya, b, yb = sst.load_sst(tmp_path)
    assert len(a) + len(b) == int(np.sum(scores != 0)) <= 293  # zeros dropped
    lookup = dict(zip([f"s{i}" for i in range(300)], scores, strict=True))
    assert all((lookup[s] > 0) == (lab > 0) for s, lab in zip(a + b, np.concatenate([ya, yb]), strict=True))
    assert abs(yb.mean() - ya.mean()) < 0.05  # stratified
    a2, _, b2, _ = sst.load_sst(tmp_path)
    assert a2 == a and b2 == b  # fixed split


def test_real_corpus():
    # fetches the vaderSentiment 3.3.2 sdist from PyPI on first use (cached under the data directory afterwards)
    sents, scores = sst.load_movie_snippets()
    assert len(sents) == 10605 and scores.min() >= -4 and scores.max() <= 4
    a, ya, b, yb = sst.load_sst()
    assert len(a) + len(b) == int(np.sum(scores != 0))
