"""Reading a dataset to register: CSV, Parquet or ``.npz`` (no pickle) with a key column and a label column.

CSV options: with or without a header line (without one, columns are named ``"0"``, ``"1"``, ... and ``--key``,
``--label`` name them by position); categorical feature columns, one-hot encoded here (one column ``col=value`` per
value seen, in sorted order); string labels (mapped to 0, 1, ... in sorted order, the classes kept with the
dataset); any file name, with the format given explicitly (``file_format``) when the suffix does not say it.

With a declared schema (:mod:`lethe.schema`, ``lethe dataset add --schema``): :func:`read_schema_frame` reads the
file, :func:`encode_with_schema` encodes it with :class:`lethe.preprocessing.SchemaEncoder` — categories, bounds and
scalings are the schema's, nothing is learned from the rows (the one-hot path above learns its categories from the
rows, and its ``col=value`` names then say which values were in the data).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from lethe.schema import Schema

SUFFIXES = (".csv", ".parquet", ".pq", ".npz")
FORMATS = {"csv": ".csv", "parquet": ".parquet", "npz": ".npz"}
MAX_KEY_LENGTH = 512


@dataclass(frozen=True, eq=False)
class Table:
    """Keys (strings), features X (n, d) float64, labels y (n,) float64 and the feature names; for string labels
    the classes (y holds their positions), for one-hot encoded columns their categories."""

    keys: list[str]
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    label_classes: list[str] | None = None
    categories: dict[str, list[str]] | None = None


def read_table(path: str | Path, *, key: str, label: str, features: list[str] | None = None, header: bool = True,
               categorical: list[str] | None = None, file_format: str | None = None) -> Table:
    """Read ``path`` and validate it.

    Parameters
    ----------
    path : file name ending in ``.csv``, ``.parquet``/``.pq`` or ``.npz``
    key, label : names of the key and label columns (for ``.npz``: names of 1-D arrays)
    features : feature columns (default: every other column). For ``.npz``: the names of 1-D arrays, or one name of
        a 2-D array (default ``"X"``).
    header : CSV only: False if the first line is data; columns are then named ``"0"``, ``"1"``, ...
    categorical : CSV/Parquet: feature columns to one-hot encode (``col=value`` columns, values in sorted order).
    file_format : ``"csv"``, ``"parquet"`` or ``"npz"``; default from the suffix.

    Raises ``ValueError`` naming the rule and the offending value (duplicate or empty key, non-finite value, missing
    column, unsupported suffix); ``FileNotFoundError`` if the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Dataset file {str(path)!r} does not exist.")
    if file_format is not None:
        if file_format not in FORMATS:
            raise ValueError(f"file_format (--format) must be one of {sorted(FORMATS)}. Found {file_format!r}.")
        suffix = FORMATS[file_format]
    else:
        suffix = path.suffix.lower()
        if suffix not in SUFFIXES:
            raise ValueError(f"The dataset file must end in one of {SUFFIXES}, or its format be given (--format "
                             f"csv|parquet|npz). Found {path.name!r}.")
    classes: list[str] | None = None
    cats: dict[str, list[str]] | None = None
    if suffix == ".npz":
        if categorical:
            raise ValueError("categorical columns (--categorical) are for CSV and Parquet files. Found a .npz file.")
        keys_raw, X, y, names = _read_npz(path, key, label, features)
    else:
        keys_raw, X, y, names, classes, cats = _read_frame(path, suffix, key, label, features, header,
                                                           list(categorical or []))
    keys = [key_text(k) for k in keys_raw]
    check_record_keys(keys, key)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = label_array(np.asarray(y).reshape(-1))
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"Features must form a 2-D array with at least one column. Found shape {X.shape}.")
    if X.shape[0] != y.shape[0] or X.shape[0] != len(keys):
        raise ValueError(f"Keys, features and labels must have the same number of rows. Found {len(keys)}, "
                         f"{X.shape[0]} and {y.shape[0]}.")
    if X.shape[0] < 2:
        raise ValueError(f"A dataset needs at least 2 records. Found {X.shape[0]}.")
    for name, arr in (("features", X), ("labels", y if y.dtype.kind == "f" else np.zeros(0))):
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            row = int(bad[0][0])
            raise ValueError(f"{name} must be finite. Found a non-finite value in the row with key {keys[row]!r}.")
    return Table(keys=keys, X=X, y=y, feature_names=names, label_classes=classes, categories=cats)


def label_array(y: np.ndarray) -> np.ndarray:
    """Numeric labels as float64; text labels (any non-numeric value) as str, refused if empty."""
    if y.dtype.kind in "iufb":
        return y.astype(np.float64)
    try:
        return y.astype(np.float64)
    except (TypeError, ValueError):
        pass
    out = np.asarray([v.decode() if isinstance(v, bytes) else str(v) for v in y.tolist()])
    empty = np.flatnonzero(np.char.str_len(out) == 0) if out.size else np.zeros(0, dtype=int)
    if empty.size:
        raise ValueError(f"Labels must not be empty. Found an empty label in row {int(empty[0])}.")
    return out


def key_text(k: object) -> str:
    if isinstance(k, bytes):
        return k.decode()
    if isinstance(k, float | np.floating) and float(k).is_integer():
        return str(int(k))
    return str(k)


def check_record_keys(keys: list[str], column: str) -> None:
    seen: set[str] = set()
    for k in keys:
        if not k or k.strip() == "" or k == "nan":
            raise ValueError(f"Key column {column!r} must not contain empty values. Found {k!r}.")
        if len(k) > MAX_KEY_LENGTH:
            raise ValueError(f"Keys must have at most {MAX_KEY_LENGTH} characters. Found one with {len(k)}.")
        if k in seen:
            raise ValueError(f"Key column {column!r} must hold unique keys. Found {k!r} more than once.")
        seen.add(k)


def _read_frame(path: Path, suffix: str, key: str, label: str, features: list[str] | None, header: bool,
                categorical: list[str]) -> tuple[list[object], np.ndarray, np.ndarray, list[str], list[str] | None,
                                                 dict[str, list[str]] | None]:
    import pandas as pd

    if suffix == ".csv":
        # keys and categorical columns as text; every other column parsed by pandas (exact float round trip)
        text_cols = {c: str for c in (key, *categorical)}
        if not header:
            text_cols = {int(c): str for c in text_cols if c.isdigit()}  # type: ignore[misc]
        df = pd.read_csv(path, dtype=text_cols, keep_default_na=False, header=0 if header else None)
    else:
        df = pd.read_parquet(path)
    cols = [str(c) for c in df.columns]
    df.columns = cols
    for name in (key, label, *(features or []), *categorical):
        if name not in cols:
            hint = "" if header or suffix != ".csv" else " (without a header, columns are named by position: 0, 1, ...)"
            raise ValueError(f"Column {name!r} is not in {path.name}{hint}. Columns: {cols[:50]}.")
    if features is None:
        features = [c for c in cols if c not in (key, label)]
    unknown = [c for c in categorical if c not in features]
    if unknown:
        raise ValueError(f"categorical columns must be feature columns. Found {unknown}.")
    if not features:
        raise ValueError(f"{path.name} has no feature columns besides {key!r} and {label!r}.")
    blocks: list[np.ndarray] = []
    names: list[str] = []
    cats: dict[str, list[str]] = {}
    for c in features:
        if c in categorical:
            values = df[c].astype(str).to_numpy()
            levels = sorted(set(values.tolist()))
            cats[c] = levels
            blocks.append((values[:, None] == np.array(levels, dtype=object)[None, :]).astype(np.float64))
            names += [f"{c}={v}" for v in levels]
        else:
            try:
                col = df[c].to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"Feature column {c!r} must be numeric; declare it categorical (--categorical {c}) "
                                 f"to one-hot encode it.") from None
            blocks.append(col[:, None])
            names.append(c)
    X = np.hstack(blocks)
    classes: list[str] | None = None
    try:
        y = df[label].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raw = df[label].astype(str).to_numpy()
        classes = sorted(set(raw.tolist()))
        index = {v: i for i, v in enumerate(classes)}
        y = np.array([index[v] for v in raw], dtype=np.float64)
    return list(df[key].tolist()), X, y, names, classes, (cats or None)


def _read_npz(path: Path, key: str, label: str,
              features: list[str] | None) -> tuple[list[object], np.ndarray, np.ndarray, list[str]]:
    with np.load(path, allow_pickle=False) as z:
        names = list(z.files)
        features = features or ["X"]
        for name in (key, label, *features):
            if name not in names:
                raise ValueError(f"Array {name!r} is not in {path.name}. Arrays: {names}.")
        try:
            keys = z[key]
            y = z[label]
            if len(features) == 1 and z[features[0]].ndim == 2:
                X = z[features[0]]
                fnames = [f"{features[0]}{j}" for j in range(X.shape[1])]
            else:
                X = np.column_stack([z[f] for f in features])
                fnames = list(features)
        except ValueError as exc:  # object arrays need pickle: refused
            raise ValueError(f"{path.name}: arrays must not need pickle (object dtype): {exc}") from exc
    if keys.ndim != 1:
        raise ValueError(f"Key array {key!r} must be 1-D. Found shape {keys.shape}.")
    if not np.issubdtype(X.dtype, np.number) or not (np.issubdtype(y.dtype, np.number) or y.dtype.kind in "US"):
        raise ValueError(f"Feature arrays must be numeric and labels numeric or text. Found {X.dtype} and {y.dtype}.")
    return list(keys.tolist()), X, y, fnames


def read_schema_frame(path: str | Path, schema: Schema, *, file_format: str | None = None,
                      header: bool = True) -> pd.DataFrame:
    """A CSV or Parquet file as a DataFrame whose categorical and key columns are text, as a schema reads them.

    CSV: declared categorical columns, the key and a text label are read as strings exactly as written (``"?"``
    stays ``"?"``); an empty cell is missing (NaN), which a categorical column encodes as its declared rule says
    and a numeric column as its ``missing`` rule says. ``.npz`` is refused (a schema is for named columns)."""
    import pandas as pd

    from lethe.schema import CategoricalColumn

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Dataset file {str(path)!r} does not exist.")
    suffix = FORMATS.get(file_format, "") if file_format is not None else path.suffix.lower()
    if file_format is not None and file_format not in FORMATS:
        raise ValueError(f"file_format (--format) must be one of {sorted(FORMATS)}. Found {file_format!r}.")
    if suffix not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"A dataset registered with a schema must be a CSV or Parquet file (named columns). "
                         f"Found {path.name!r}.")
    if suffix != ".csv":
        frame = pd.read_parquet(path)
        frame.columns = [str(c) for c in frame.columns]
        return frame
    text = {c.name: str for c in schema.columns if isinstance(c, CategoricalColumn)}
    if schema.key is not None:
        text[schema.key] = str
    if schema.label is not None and not all(_is_plain_number(c) for c in schema.label.classes):
        text[schema.label.name] = str
    return pd.read_csv(path, dtype=text, keep_default_na=False, na_values=[""], header=0 if header else None,
                       skipinitialspace=True)


def resolve_schema(source: object, *, key: str | None = None, label: str | None = None) -> Schema:
    """The schema to register a dataset with: :func:`lethe.schema.load_schema` of ``source`` (a YAML/JSON path, a
    mapping or a Schema), with ``key`` as its key column when the schema's is null. A ``key`` or ``label`` other
    than the schema's is refused (``ValueError``: the schema is the one description of the table)."""
    import dataclasses

    from lethe.schema import SchemaError, load_schema

    schema = load_schema(source)  # type: ignore[arg-type]
    if key is not None:
        if schema.key is None:
            schema = dataclasses.replace(schema, key=key)
        elif schema.key != key:
            raise SchemaError(f"key (--key) must be the schema's key column {schema.key!r} when the schema names "
                              f"one. Found {key!r}.")
    if label is not None and (schema.label is None or schema.label.name != label):
        raise SchemaError(f"label (--label) must be the schema's label column "
                          f"{None if schema.label is None else schema.label.name!r}. Found {label!r}.")
    return schema


def _is_plain_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def encode_with_schema(frame: pd.DataFrame, schema: Schema, *, source: str = "the file") -> Table:
    """Encode a table by a declared schema (:class:`lethe.preprocessing.SchemaEncoder`): nothing of the encoding
    is learned from the rows. Keys from ``schema.key``, labels checked against the declared classes; text classes
    are stored as their positions in the declared list (kept as ``label_classes``), numeric classes as numbers.

    Raises ``ValueError`` (:class:`lethe.schema.SchemaError`) naming the column and the rule."""
    from lethe.preprocessing import SchemaEncoder
    from lethe.schema import SchemaError

    if schema.key is None:
        raise SchemaError(f"A dataset registered with a schema needs a key column (the record keys of erasure "
                          f"requests): set 'key' in the schema or give --key. Found key: null for {source}.")
    if schema.label is None:
        raise SchemaError(f"A dataset registered with a schema needs a label: set 'label' in the schema. "
                          f"Found label: null for {source}.")
    cols = [str(c) for c in frame.columns]
    if schema.key not in cols:
        raise SchemaError(f"column {schema.key!r}: the key column is missing from {source}. Columns: {cols[:50]}.")
    schema.check_columns(cols, label=True)
    keys = [key_text(k) for k in frame[schema.key].tolist()]
    check_record_keys(keys, schema.key)
    y_raw = frame[schema.label.name].to_numpy()
    declared = list(schema.label.classes)
    if all(_is_plain_number(c) for c in declared):
        try:
            y = np.asarray(y_raw, dtype=np.float64)
        except (TypeError, ValueError):
            raise SchemaError(f"column {schema.label.name!r}: a label must be one of the classes {declared}; "
                              f"found a non-numeric label in {source}.") from None
        bad = ~np.isin(y, np.asarray(declared, dtype=np.float64))
        classes: list[str] | None = None
    else:
        text = np.asarray([str(v) for v in y_raw.tolist()], dtype=object)
        names = [str(c) for c in declared]
        index = {c: i for i, c in enumerate(names)}
        codes = np.fromiter((index.get(v, -1) for v in text), dtype=np.int64, count=text.size)
        bad = codes < 0
        y, classes = codes.astype(np.float64), names
    if bad.any():
        raise SchemaError(f"column {schema.label.name!r}: a label must be one of the classes {declared}; found "
                          f"another value in the row with key {keys[int(np.flatnonzero(bad)[0])]!r}.")
    X = np.ascontiguousarray(SchemaEncoder(schema).transform(frame), dtype=np.float64)
    if X.shape[0] < 2:
        raise ValueError(f"A dataset needs at least 2 records. Found {X.shape[0]}.")
    bad_x = np.argwhere(~np.isfinite(X))
    if bad_x.size:
        raise ValueError(f"features must be finite. Found a non-finite value in the row with key "
                         f"{keys[int(bad_x[0][0])]!r}.")
    return Table(keys=keys, X=X, y=y, feature_names=schema.feature_names(), label_classes=classes)


def normalize_rows(X: np.ndarray) -> np.ndarray:
    """xᵢ / max(1, ‖xᵢ‖₂): rows already inside the unit ball are unchanged (the same map is applied at predict)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    return X / np.maximum(norms, 1.0)[:, None]


__all__ = ["Table", "encode_with_schema", "normalize_rows", "read_schema_frame", "read_table", "resolve_schema"]
