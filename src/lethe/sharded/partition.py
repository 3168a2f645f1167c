"""The keyed partition of a sharded model (SISA): record r with key k goes to shard ``h(k) mod S`` and slice
``(h(k) // S) mod R``, h(k) the first 8 bytes of HMAC-SHA256(key, encode(k)) (see :mod:`lethe.sharded`); the checks
of the secret and of the shard and slice counts."""

from __future__ import annotations

import hmac
from typing import Any

import numpy as np

__all__ = ["MIN_KEY_BYTES", "check_count", "check_secret", "shard_assignment"]

MIN_KEY_BYTES = 16


def _encode_key(k: Any) -> bytes:
    """A record key as bytes, with its type: ``i:<decimal>`` for integers, ``s:<utf-8>`` for strings."""
    if isinstance(k, str | np.str_):
        return b"s:" + str(k).encode("utf-8")
    return b"i:" + str(int(k)).encode("ascii")


def shard_assignment(keys: Any, key: bytes, n_shards: int, n_slices: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(shard, slice) of each record key: h = first 8 bytes of HMAC-SHA256(``key``, encode(record key)) as an
    unsigned big-endian integer; shard = h mod S, slice = (h // S) mod R.

    The bias of ``mod`` is below S·R / 2⁶⁴ per value. Both arrays are int64.
    """
    keys = np.asarray(keys)
    h = np.fromiter((int.from_bytes(hmac.digest(key, _encode_key(k), "sha256")[:8], "big")  # one-shot, in C
                     for k in keys), dtype=np.uint64, count=keys.shape[0])
    shard = (h % np.uint64(n_shards)).astype(np.int64)
    slc = ((h // np.uint64(n_shards)) % np.uint64(n_slices)).astype(np.int64)
    return shard, slc


def check_secret(key: Any) -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise TypeError(f"key must be bytes (a secret for the keyed hash) or None. Found {type(key).__name__}.")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key must hold at least {MIN_KEY_BYTES} bytes. Found {len(key)} bytes.")
    return bytes(key)


def check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer. Found {type(value).__name__}.")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1. Found {value}.")
    return int(value)
