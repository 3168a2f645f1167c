"""Purge at scale (issue 12): on a dataset of 10⁶ records, after deletions are processed no file under the data
directory holds a deleted record's key or feature values, and the data plane was erased in place (same file, the
removed rows zero, every other row intact). Slow (≈ 1–2 minutes): ``pytest -m slow tests/curator/test_purge_scale.py``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from lethe.curator import Curator, Settings
from lethe.curator.dataplane import DataPlane

pytestmark = pytest.mark.slow

N, D, GONE = 1_000_000, 4, 40


def _files(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, fs in os.walk(root) for f in fs if (Path(d) / f).is_file()]  # not a socket


def test_no_byte_of_deleted_records_remains_at_a_million_records(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(N, 1))
    y = (X @ rng.normal(size=D) > 0).astype(float)
    keys = np.array([f"user-{i:07d}" for i in range(N)])
    np.savez(tmp_path / "big.npz", key=keys, label=y, X=X)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=16))
    c.register_dataset("big", tmp_path / "big.npz", key="key", label="label")
    c.train("big", "clf", params={"lam": 1e-2, "sigma": 1.0})
    with c.store.read() as s:
        plane = s.get(DataPlane, 1)
    feats = c.matrices.resolve(plane.features_path)
    inode, size = feats.stat().st_ino, feats.stat().st_size
    gone = rng.choice(N, size=GONE, replace=False)
    control = int(np.setdiff1d(np.arange(100), gone)[0])
    for i in gone:
        c.submit_deletion("big", str(keys[i]))
    while c.pending_count():
        c.process_pending(force=True)
    assert c.status()["requests"]["done"] == GONE and not c.purge_pending()
    c.close()
    # the data plane: erased in place
    assert feats.stat().st_ino == inode and feats.stat().st_size == size
    M = np.memmap(feats, dtype="<f8", mode="r", shape=(N, D))
    assert np.all(M[np.sort(gone)] == 0.0)
    keep = np.ones(N, dtype=bool)
    keep[gone] = False
    assert np.array_equal(np.asarray(M[keep]), X[keep])
    del M
    # every file: no key, no feature value of a deleted record; the control record is found (the search works)
    blobs = {p: p.read_bytes() for p in _files(tmp_path / "d")}
    for i in [*gone.tolist(), control]:
        pats = [keys[i].encode()] + [struct.pack(order + "d", v) for v in X[i] for order in "<>"]
        hits = [str(p.relative_to(tmp_path / "d")) for p, b in blobs.items() for pat in pats if pat in b]
        if i == control:
            assert hits, "the search found nothing for a record that was not deleted"
        else:
            assert hits == [], f"bytes of deleted record {i} found in {hits}"
