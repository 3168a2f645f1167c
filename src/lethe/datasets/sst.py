"""Movie-review sentences with human sentiment scores, offline (the corpus SST was built from).

The source distribution (sdist, not the wheel) of the PyPI package ``vaderSentiment==3.3.2`` contains
``additional_resources/hutto_ICWSM_2014.tar.gz``, whose ``movieReviewSnippets_GroundTruth.txt`` holds 10,605
Rotten Tomatoes sentences (Pang & Lee 2005) — tab-separated id, mean human score in [−4, 4], sentence; latin-1.
Label: score > 0 (positive); sentences scored exactly 0 are dropped. The split is a fixed stratified 80/20 split.

The first call runs ``pip download --no-deps --no-binary :all: vaderSentiment==3.3.2`` (it reaches only PyPI),
extracts the file and caches it as JSON under the data directory (``$LETHE_DATA`` or ``./data``).
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

from lethe.datasets.mnist import data_home
from lethe.datasets.pypi import pypi_file

PYPI_SDIST = "vaderSentiment==3.3.2"
_INNER = "additional_resources/hutto_ICWSM_2014.tar.gz"
_MEMBER = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
CACHE_NAME = "sst_movie_snippets.json"


def parse_ground_truth(text: str) -> tuple[list[int], list[float], list[str]]:
    """Parse the tab-separated (id, mean score, sentence) lines; blank lines are skipped."""
    ids, scores, sents = [], [], []
    for k, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        parts = line.split("\t", 2)
        if len(parts) != 3:
            raise ValueError(f"Line {k + 1} of {_MEMBER} must have 3 tab-separated fields. Found {len(parts)}.")
        ids.append(int(parts[0]))
        scores.append(float(parts[1]))
        sents.append(parts[2].strip())
    return ids, scores, sents


def _fetch(dest: Path) -> None:
    with pypi_file(PYPI_SDIST, "vaderSentiment-*.tar.gz", wheel=False) as sdist, tarfile.open(sdist) as outer:
        inner_name = next((n for n in outer.getnames() if n.endswith(_INNER)), None)
        if inner_name is None:
            raise RuntimeError(f"{sdist.name} does not contain {_INNER}.")
        fobj = outer.extractfile(inner_name)
        assert fobj is not None
        with tarfile.open(fileobj=io.BytesIO(fobj.read())) as inner:
            member = inner.extractfile(_MEMBER)
            assert member is not None
            text = member.read().decode("latin-1")
    ids, scores, sents = parse_ground_truth(text)
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_text(json.dumps({"source": f"PyPI sdist {PYPI_SDIST}, {_MEMBER}", "id": ids, "score": scores,
                                    "sentence": sents}), encoding="utf-8")
    tmp_dest.replace(dest)


def load_movie_snippets(data_dir: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """All 10,605 sentences and their mean human scores in [−4, 4]."""
    cache = data_home(data_dir) / CACHE_NAME
    if not cache.exists():
        _fetch(cache)
    d = json.loads(cache.read_text(encoding="utf-8"))
    return list(d["sentence"]), np.asarray(d["score"], dtype=np.float64)


def load_sst(data_dir: str | Path | None = None, test_fraction: float = 0.2, seed: int = 0,
             ) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """Binary sentiment (label +1 if score > 0, −1 if < 0; zeros dropped), fixed stratified train/test split.

    Returns (train sentences, train labels, test sentences, test labels); labels float64 in {−1, +1}.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1). Found {test_fraction}.")
    sents, scores = load_movie_snippets(data_dir)
    keep = np.flatnonzero(scores != 0.0)
    y = np.where(scores[keep] > 0, 1.0, -1.0)
    rng = np.random.default_rng(seed)
    test = np.zeros(keep.size, dtype=bool)
    for label in (-1.0, 1.0):
        rows = np.flatnonzero(y == label)
        test[rng.choice(rows, size=int(round(test_fraction * rows.size)), replace=False)] = True
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    return [sents[keep[i]] for i in tr], y[tr], [sents[keep[i]] for i in te], y[te]
