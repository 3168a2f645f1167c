"""Shared helpers of the model-file tests (imported as ``from ._files import ...`` or ``from .._files import ...``).

A lethe model file is an ``.npz`` whose ``META_KEY`` array holds the JSON metadata (:mod:`lethe.io`). The tests of
every estimator's ``load`` read a genuine file raw, edit its arrays or metadata, and write it back with any HMAC
tag kept as it was, so that the invariant checks (without a key) or the tag (with one) must refuse it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lethe.io import KEY_ENV, KEY_FILE_ENV, META_KEY, write_npz_atomic

#: A model key for the tests that tag their files.
KEY = bytes(range(32))

ArraysEdit = Callable[[dict[str, np.ndarray]], Any]
MetaEdit = Callable[[dict[str, Any]], Any]


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model key from the environment: import it into a test module (autouse) so only the keys the tests pass
    count."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def read_model_file(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, metadata) of a model file, read raw (no check, no authentication)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads(bytes(arrays.pop(META_KEY)).decode())


def edit_model_file(path: Path, out: Path, arrays_fn: ArraysEdit | None = None,
                    meta_fn: MetaEdit | None = None) -> Path:
    """Write ``out``: the file ``path`` with its arrays and metadata edited in place by ``arrays_fn``/``meta_fn``
    (the tag, if any, kept as it was: it no longer matches)."""
    arrays, meta = read_model_file(path)
    if arrays_fn:
        arrays_fn(arrays)
    if meta_fn:
        meta_fn(meta)
    write_npz_atomic(out, arrays, json.dumps(meta, sort_keys=True).encode(), mode=0o600)
    return out


def set_in(d: Any, path: Sequence[Any], value: Any) -> None:
    """``d[path[0]][path[1]]... = value``."""
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
