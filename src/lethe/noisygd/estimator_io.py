"""Inputs and model files shared by the Noisy-GD estimators (:mod:`lethe.noisygd.estimators`,
:mod:`lethe.noisygd.pnsgd`): rows mapped to the unit ball, what a model file records about its estimator, opening and
checking a model file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lethe.io import ModelFileError, open_model_file
from lethe.model_origin import ModelFileOrigin

__all__ = ["check_file_keys", "file_meta", "open_file", "rows_to_unit_ball"]


def rows_to_unit_ball(X: np.ndarray, how: str) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    if how == "clip":
        return X / np.maximum(1.0, norms)[:, None]
    if how == "normalize":
        return X / np.where(norms > 0, norms, 1.0)[:, None]
    bad = np.flatnonzero(norms > 1.0 + 1e-12)
    if bad.size:
        raise ValueError(
            f"row_norm='error': every row must have L2 norm <= 1. Found {norms[bad[0]]!r} at row {bad[0]}."
        )
    return X


def file_meta(est: Any) -> dict[str, Any]:
    """What every Noisy-GD model file records about its estimator: class, parameters (an integer seed or None:
    a generator is not saved), classes, ``n_features_in_`` and the feature names if any."""
    params = est.get_params(deep=False)
    rs = params["random_state"]
    params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
    kind = est.classes_.dtype.kind
    classes = [int(c) if kind in "iub" else float(c) if kind == "f" else str(c) for c in est.classes_]
    meta = {"class": type(est).__name__, "params": params, "classes": classes,
            "n_features_in": int(est.n_features_in_)}
    if hasattr(est, "feature_names_in_"):
        meta["feature_names_in"] = [str(c) for c in est.feature_names_in_]
    return meta


def open_file(cls: type, path: str | Path, key: bytes | str | None, trust_unauthenticated: bool = False,
               ) -> tuple[dict[str, np.ndarray], dict[str, Any], Callable[[str], ModelFileError], ModelFileOrigin]:
    """(arrays, metadata, fail, origin) of an authenticated model file of class ``cls``
    (:func:`lethe.io.open_model_file`'s policy: refused without a valid tag unless ``trust_unauthenticated``);
    ``fail(msg)`` is the :class:`~lethe.io.ModelFileError` that refuses it."""
    opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
    arrays, meta = opened.arrays, opened.meta
    where = str(path)

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{where}: {msg} The file was edited or corrupted; it is refused.")

    if meta.get("class") != cls.__name__:
        raise ModelFileError(f"{where} holds a {meta.get('class')!r}, not a {cls.__name__}.")
    return arrays, meta, fail, opened.origin


def check_file_keys(keys: np.ndarray | None, gone: np.ndarray, fail: Callable[[str], ModelFileError]) -> None:
    """Record keys of a model file: one per row, distinct for the rows kept, blank for the rows removed."""
    if keys is None:
        return
    blank = "" if keys.dtype.kind == "U" else 0
    if keys.shape != gone.shape or keys.dtype.kind not in "iuU" or np.any(keys[gone] != blank) or \
            np.unique(keys[~gone]).size != int((~gone).sum()):
        raise fail("keys must be one per row, distinct for the rows kept and blank for the rows removed.")
