"""Reader for the IDX format of the original MNIST files (LeCun et al.)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

_DTYPES: dict[int, str] = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into an array.

    The header is two zero bytes, a type code, the number of dimensions k, then k big-endian uint32 sizes.

    Raises
    ------
    ValueError
        If the magic number is wrong or the payload does not match the declared shape.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file: bad magic number {raw[:4]!r}.")
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        raise ValueError(f"{path}: unknown IDX type code {code:#x}.")
    header = 4 + 4 * ndim
    shape = tuple(int(s) for s in np.frombuffer(raw[4:header], dtype=">u4"))
    dtype = np.dtype(_DTYPES[code])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"{path}: payload has {len(raw) - header} bytes, shape {shape} needs {expected}.")
    return np.frombuffer(raw[header:], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
