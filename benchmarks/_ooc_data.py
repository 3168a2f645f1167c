"""Generate the out-of-core benchmark's data set (issue 14) straight into a Zarr store, block by block.

Rows xᵢ ~ N(0, I_d) scaled to ‖xᵢ‖ ≤ 1/1.2, labels yᵢ = sign(xᵢᵀw* + logistic noise) from a planted w*. Written
uncompressed (Gaussian float64 does not compress; decompression would only cost CPU on every pass) in Zarr chunks
of ``zarr_chunk`` rows, so a removal reads ``zarr_chunk`` × d × 8 bytes per removed row. Each block is generated
from its own seed (reproducible, any block order), in this process: memory O(block × d).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def generate_store(path: Path, n: int, d: int, zarr_chunk: int = 4096, block: int = 262_144, seed: int = 0,
                   log: bool = True) -> None:
    import zarr

    block = max(zarr_chunk, block - block % zarr_chunk)
    root = zarr.open_group(str(path), mode="w")
    Xz = root.create_array("X", shape=(n, d), chunks=(zarr_chunk, d), dtype="f8", compressors=None)
    yz = root.create_array("y", shape=(n,), chunks=(max(zarr_chunk, 1 << 20),), dtype="f8", compressors=None)
    w_true = np.random.default_rng(seed).normal(size=d) * 3.0
    t0 = time.perf_counter()
    for k, lo in enumerate(range(0, n, block)):
        hi = min(n, lo + block)
        rng = np.random.default_rng([seed, k])
        x = rng.standard_normal((hi - lo, d))
        x /= np.maximum(np.sqrt(np.einsum("ij,ij->i", x, x)), 1.0)[:, None] * 1.2
        y = np.where(x @ w_true + rng.logistic(size=hi - lo) > 0, 1.0, -1.0)
        Xz[lo:hi] = x
        yz[lo:hi] = y
        if log and (k % 20 == 0 or hi == n):
            print(f"  generated {hi}/{n} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
    root.attrs["complete"] = True


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--zarr-chunk-rows", type=int, default=4096)
    ap.add_argument("--path", required=True)
    a = ap.parse_args()
    generate_store(Path(a.path), a.rows, a.features, a.zarr_chunk_rows)
