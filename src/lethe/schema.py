"""A declared, public description of a table: what every column may hold and how it is encoded (issue 27).

A certificate covers the whole published model, so the encoding of a table must not be *learned* from its private
rows: a one-hot vocabulary fitted on the training rows keeps a category whose only holder was deleted (the feature
``native_country=Holand-Netherlands`` still says such a person was in the data), a scaler's ``mean_`` still averages
removed rows. A :class:`Schema` is written once, from public knowledge (a data set's published documentation, a
public sample), and everything the encoder (:class:`lethe.preprocessing.SchemaEncoder`) emits follows from it alone:

* **categorical** columns: the public list of categories, and the policy for a value outside it (``unknown="other"``:
  one declared ``<other>`` indicator column; ``unknown="error"``: a :class:`SchemaError`) — never a new column;
* **numeric** columns: public bounds ``[lower, upper]`` (values are clipped to them), an optional ``log1p``, and a
  scaling: ``"minmax"`` onto [−1, 1] (default), ``"standard"`` with a PUBLIC ``center`` and ``scale``, or ``"none"``;
* the **label** column and its classes, and an optional **key** column (record keys for erasure requests).

Written in YAML or JSON (:func:`load_schema`, :meth:`Schema.save`)::

    label: {name: income, classes: ["<=50K", ">50K"]}
    key: null
    columns:
      - {name: age, type: numeric, lower: 17, upper: 90}
      - {name: capital_gain, type: numeric, lower: 0, upper: 99999, log1p: true}
      - {name: sex, type: categorical, categories: [Female, Male], unknown: other}

:func:`draft_schema` writes a draft from a PUBLIC sample; every category and bound in it is copied from that sample
and becomes public with the model. Validation errors are :class:`SchemaError` (a ``ValueError``) naming the column,
the rule and the value found.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OTHER = "<other>"
_UNKNOWN_POLICIES = ("other", "error")
_SCALINGS = ("minmax", "standard", "none")


class SchemaError(ValueError):
    """A schema, or data checked against it, breaks a rule; the message names the column, the rule and the value."""


def _err(column: str | None, rule: str, found: Any) -> SchemaError:
    where = f"column {column!r}: " if column is not None else ""
    return SchemaError(f"{where}{rule}. Found {found!r}.")


def _scalar(v: Any) -> Any:
    """A JSON-able Python scalar for a category value (numpy scalars → Python)."""
    return v.item() if isinstance(v, np.generic) else v


def _finite(column: str, name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise _err(column, f"{name} must be a number", v)
    f = float(v)
    if not math.isfinite(f):
        raise _err(column, f"{name} must be finite", v)
    return f


def _check_weight(column: str, weight: Any) -> float:
    w = _finite(column, "weight", weight)
    if w <= 0:
        raise _err(column, "weight must be > 0", weight)
    return w


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose values come from a public list.

    Parameters
    ----------
    name : str
    categories : sequence of str, int or bool
        The public categories, in output order; one indicator feature ``name=category`` each.
    unknown : {"other", "error"}, default="other"
        A value outside ``categories`` (or missing): ``"other"`` sets the declared indicator ``name=<other>``;
        ``"error"`` raises :class:`SchemaError`.
    weight : float, default=1.0
        Relative weight of the column's block in the encoded row (see :class:`lethe.preprocessing.SchemaEncoder`).
    """

    name: str
    categories: tuple[Any, ...]
    unknown: str = "other"
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _err(None, "a column name must be a non-empty string", self.name)
        cats = tuple(_scalar(c) for c in self.categories)
        if not cats:
            raise _err(self.name, "categories must not be empty", list(cats))
        for c in cats:
            if not isinstance(c, str | int | bool) or (isinstance(c, float)):
                raise _err(self.name, "a category must be a string, an integer or a boolean", c)
        seen: set[Any] = set()
        for c in cats:
            if c in seen:
                raise _err(self.name, "categories must be distinct", c)
            seen.add(c)
        if OTHER in cats:
            raise _err(self.name, f"{OTHER!r} is reserved for the unknown-category column", OTHER)
        if self.unknown not in _UNKNOWN_POLICIES:
            raise _err(self.name, f"unknown must be one of {_UNKNOWN_POLICIES}", self.unknown)
        object.__setattr__(self, "categories", cats)
        object.__setattr__(self, "weight", _check_weight(self.name, self.weight))

    @property
    def feature_names(self) -> list[str]:
        """``name=category`` for each category, then ``name=<other>`` if ``unknown="other"``."""
        out = [f"{self.name}={c}" for c in self.categories]
        return out + [f"{self.name}={OTHER}"] if self.unknown == "other" else out

    @property
    def block_bound(self) -> float:
        """Upper bound on the Euclidean norm of this column's (unweighted) block: one indicator is 1, the rest 0."""
        return 1.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "type": "categorical", "categories": list(self.categories),
                             "unknown": self.unknown}
        if self.weight != 1.0:
            d["weight"] = self.weight
        return d


@dataclass(frozen=True)
class NumericColumn:
    """A numeric column with public bounds.

    The value v is clipped to [``lower``, ``upper``], then mapped by ``log1p`` if asked (t = log(1 + v), needs
    ``lower`` > −1), then scaled: ``"minmax"``: z = (2t − (a + b)) / (b − a) ∈ [−1, 1], with [a, b] the transformed
    bounds; ``"standard"``: z = (t − center) / scale with a PUBLIC center and scale (never the private rows'
    mean); ``"none"``: z = t.

    Parameters
    ----------
    name : str
    lower, upper : float
        Public bounds, lower < upper.
    log1p : bool, default=False
    scaling : {"minmax", "standard", "none"}, default="minmax"
    center, scale : float, optional
        Required for (and only for) ``scaling="standard"``; ``scale`` > 0.
    missing : {"error", "center"}, default="error"
        A missing value (NaN/None): raise :class:`SchemaError`, or encode as z = 0.
    weight : float, default=1.0
    """

    name: str
    lower: float
    upper: float
    log1p: bool = False
    scaling: str = "minmax"
    center: float | None = None
    scale: float | None = None
    missing: str = "error"
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _err(None, "a column name must be a non-empty string", self.name)
        lo, hi = _finite(self.name, "lower", self.lower), _finite(self.name, "upper", self.upper)
        if not lo < hi:
            raise _err(self.name, "lower must be < upper", {"lower": self.lower, "upper": self.upper})
        if not isinstance(self.log1p, bool):
            raise _err(self.name, "log1p must be true or false", self.log1p)
        if self.log1p and lo <= -1.0:
            raise _err(self.name, "log1p needs lower > -1", self.lower)
        if self.scaling not in _SCALINGS:
            raise _err(self.name, f"scaling must be one of {_SCALINGS}", self.scaling)
        if self.scaling == "standard":
            if self.center is None or self.scale is None:
                raise _err(self.name, "scaling 'standard' needs a public center and scale",
                           {"center": self.center, "scale": self.scale})
            object.__setattr__(self, "center", _finite(self.name, "center", self.center))
            sc = _finite(self.name, "scale", self.scale)
            if sc <= 0:
                raise _err(self.name, "scale must be > 0", self.scale)
            object.__setattr__(self, "scale", sc)
        elif self.center is not None or self.scale is not None:
            raise _err(self.name, "center and scale are only used with scaling 'standard'",
                       {"scaling": self.scaling, "center": self.center, "scale": self.scale})
        if self.missing not in ("error", "center"):
            raise _err(self.name, "missing must be 'error' or 'center'", self.missing)
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        object.__setattr__(self, "weight", _check_weight(self.name, self.weight))

    @property
    def feature_names(self) -> list[str]:
        return [self.name]

    def _bounds_t(self) -> tuple[float, float]:
        if self.log1p:
            return math.log1p(self.lower), math.log1p(self.upper)
        return self.lower, self.upper

    def encode(self, v: np.ndarray) -> np.ndarray:
        """z for a float64 array v (NaN → 0 when ``missing="center"``; the caller checks NaN otherwise)."""
        t = np.clip(v, self.lower, self.upper)
        if self.log1p:
            t = np.log1p(t)
        a, b = self._bounds_t()
        if self.scaling == "minmax":
            z = np.clip((2.0 * t - (a + b)) / (b - a), -1.0, 1.0)  # the clip only removes rounding
        elif self.scaling == "standard":
            assert self.center is not None and self.scale is not None
            z = (t - self.center) / self.scale
        else:
            z = t
        return np.where(np.isnan(z), 0.0, z)

    @property
    def block_bound(self) -> float:
        """Upper bound on |z| over every value: 1 for ``"minmax"``; max(|a − c|, |b − c|)/s for ``"standard"``;
        max(|a|, |b|) for ``"none"`` (z is monotone in the clipped value, so its extremes are at the bounds; 0 for
        a missing value)."""
        a, b = self._bounds_t()
        if self.scaling == "minmax":
            return 1.0
        if self.scaling == "standard":
            assert self.center is not None and self.scale is not None
            return max(abs(a - self.center), abs(b - self.center)) / self.scale
        return max(abs(a), abs(b))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "type": "numeric", "lower": self.lower, "upper": self.upper}
        if self.log1p:
            d["log1p"] = True
        if self.scaling != "minmax":
            d["scaling"] = self.scaling
        if self.scaling == "standard":
            d["center"], d["scale"] = self.center, self.scale
        if self.missing != "error":
            d["missing"] = self.missing
        if self.weight != 1.0:
            d["weight"] = self.weight
        return d


Column = CategoricalColumn | NumericColumn


@dataclass(frozen=True)
class LabelSpec:
    """The label column and its public classes."""

    name: str
    classes: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _err(None, "the label name must be a non-empty string", self.name)
        cls = tuple(_scalar(c) for c in self.classes)
        if len(cls) < 2 or len(set(cls)) != len(cls):
            raise _err(self.name, "label classes must be at least 2 distinct values", list(cls))
        object.__setattr__(self, "classes", cls)


@dataclass(frozen=True)
class Schema:
    """A declared table description (module docstring). Build it from a dict (:meth:`from_dict`), a file
    (:func:`load_schema`) or a public sample (:func:`draft_schema`).

    Parameters
    ----------
    columns : sequence of CategoricalColumn or NumericColumn
        The feature columns, in output order.
    label : LabelSpec, optional
    key : str, optional
        A column holding record keys (never a feature).
    """

    columns: tuple[Column, ...]
    label: LabelSpec | None = None
    key: str | None = None
    _names: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cols = tuple(self.columns)
        if not cols:
            raise _err(None, "a schema needs at least one feature column", [])
        for c in cols:
            if not isinstance(c, CategoricalColumn | NumericColumn):
                raise TypeError(f"columns must be CategoricalColumn or NumericColumn. Found {type(c).__name__}.")
        names = [c.name for c in cols]
        for n in names:
            if names.count(n) > 1:
                raise _err(n, "column names must be distinct", n)
        if self.label is not None and self.label.name in names:
            raise _err(self.label.name, "the label column cannot also be a feature", self.label.name)
        if self.key is not None:
            if not isinstance(self.key, str) or not self.key:
                raise _err(None, "key must be a column name", self.key)
            if self.key in names or (self.label is not None and self.key == self.label.name):
                raise _err(self.key, "the key column cannot be a feature or the label", self.key)
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "_names", tuple(names))

    @property
    def feature_columns(self) -> list[str]:
        """Names of the input feature columns, in order."""
        return list(self._names)

    def feature_names(self) -> list[str]:
        """The encoder's output features, in order (all declared: none depends on data)."""
        return [f for c in self.columns for f in c.feature_names]

    @property
    def n_features(self) -> int:
        return sum(len(c.feature_names) for c in self.columns)

    # ---- serialisation -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"label": None if self.label is None else {"name": self.label.name, "classes": list(self.label.classes)},
                "key": self.key, "columns": [c.to_dict() for c in self.columns]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schema:
        """Build and validate a schema from its dict form (the module docstring's layout)."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a schema must be a mapping. Found {type(d).__name__}.")
        extra = set(d) - {"columns", "label", "key"}
        if extra:
            raise _err(None, "a schema has only the keys columns, label, key", sorted(extra))
        cols_in = d.get("columns")
        if not isinstance(cols_in, list):
            raise _err(None, "columns must be a list", cols_in)
        cols: list[Column] = []
        for c in cols_in:
            if not isinstance(c, Mapping):
                raise _err(None, "each column must be a mapping", c)
            name = c.get("name")
            kind = c.get("type")
            body = {k: v for k, v in c.items() if k != "type"}
            allowed = ({"name", "categories", "unknown", "weight"} if kind == "categorical" else
                       {"name", "lower", "upper", "log1p", "scaling", "center", "scale", "missing", "weight"})
            if kind not in ("categorical", "numeric"):
                raise _err(name, "type must be 'categorical' or 'numeric'", kind)
            bad = set(body) - allowed
            if bad:
                raise _err(name, f"unknown keys for a {kind} column (allowed: {sorted(allowed)})", sorted(bad))
            try:
                if kind == "categorical":
                    if not isinstance(body.get("categories"), list):
                        raise _err(name, "categories must be a list", body.get("categories"))
                    cols.append(CategoricalColumn(**body))
                else:
                    if "lower" not in body or "upper" not in body:
                        raise _err(name, "a numeric column needs lower and upper bounds",
                                   {k: body.get(k) for k in ("lower", "upper")})
                    cols.append(NumericColumn(**body))
            except TypeError as e:  # a missing required field
                raise _err(name, f"incomplete {kind} column ({e})", dict(c)) from None
        label = d.get("label")
        lab = None
        if label is not None:
            if not isinstance(label, Mapping) or set(label) != {"name", "classes"} or not isinstance(
                    label.get("classes"), list):
                raise _err(None, "label must be {name: ..., classes: [...]}", label)
            lab = LabelSpec(name=label["name"], classes=tuple(label["classes"]))
        return cls(columns=tuple(cols), label=lab, key=d.get("key"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def save(self, path: str | Path) -> Path:
        """Write the schema as YAML (``.yaml``/``.yml``, needs PyYAML) or JSON (any other suffix)."""
        p = Path(path)
        if p.suffix.lower() in (".yaml", ".yml"):
            yaml = _yaml()
            p.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
        else:
            p.write_text(self.to_json() + "\n", encoding="utf-8")
        return p

    # ---- data against the schema ---------------------------------------------------------------------------
    def check_columns(self, present: Iterable[Any], *, label: bool = False) -> None:
        """Raise :class:`SchemaError` naming the first declared column missing from ``present``."""
        have = set(present)
        for n in self._names:
            if n not in have:
                raise _err(n, "a declared feature column is missing from the data", sorted(map(str, have))[:20])
        if label and self.label is not None and self.label.name not in have:
            raise _err(self.label.name, "the label column is missing from the data", sorted(map(str, have))[:20])

    def check_labels(self, y: Any) -> np.ndarray:
        """y as an array, every value one of the declared classes (else :class:`SchemaError`)."""
        if self.label is None:
            raise _err(None, "the schema declares no label", None)
        arr = np.asarray(y, dtype=object)
        ok = np.isin(arr, np.asarray(self.label.classes, dtype=object))
        if not ok.all():
            raise _err(self.label.name, f"a label must be one of the classes {list(self.label.classes)}",
                       _scalar(arr[np.flatnonzero(~ok)[0]]))
        return np.asarray(y)

    def split(self, frame: Any) -> tuple[Any, np.ndarray]:
        """(features, labels) of a pandas DataFrame: the declared feature columns (indexed by the key column when
        the schema has one, so that an :class:`~lethe.pipeline.UnlearningPipeline` removes records by key) and the
        labels, checked against the declared classes."""
        if self.label is None:
            raise _err(None, "split needs a schema with a label", None)
        self.check_columns(frame.columns, label=True)
        X = frame[self.feature_columns]
        if self.key is not None:
            if self.key not in frame.columns:
                raise _err(self.key, "the key column is missing from the data", sorted(map(str, frame.columns))[:20])
            X = X.set_axis(frame[self.key].to_numpy(), axis=0)
        return X, self.check_labels(frame[self.label.name].to_numpy())


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - PyYAML is part of the 'tabular' extra
        raise ImportError("YAML schemas need PyYAML (pip install 'lethe-unlearning[tabular]', or "
                          "'lethe-unlearning[service]'); or write the schema as JSON.") from e
    return yaml


def load_schema(source: str | Path | Mapping[str, Any] | Schema) -> Schema:
    """A :class:`Schema` from a YAML/JSON file path, a dict, or a Schema (returned as is)."""
    if isinstance(source, Schema):
        return source
    if isinstance(source, Mapping):
        return Schema.from_dict(source)
    if not isinstance(source, str | Path):
        raise TypeError(f"source must be a path, a mapping or a Schema. Found {type(source).__name__}.")
    p = Path(source)
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() in (".yaml", ".yml"):
        data = _yaml().safe_load(text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{p}: not valid JSON ({e}). Found a file with suffix {p.suffix!r}.") from None
    return Schema.from_dict(data)


def draft_schema(public_sample: Any, *, label: str | None = None, key: str | None = None,
                 max_categories: int = 100, log1p_ratio: float = 100.0) -> Schema:
    """Draft a schema from a PUBLIC sample (a pandas DataFrame), to be reviewed and saved.

    Non-numeric columns (object, string, boolean and ``category`` dtypes) become categorical with the sample's
    distinct values (sorted, ``unknown="other"``); numeric
    columns get the sample's min and max as bounds (``log1p`` when they are ≥ 0 and the max exceeds
    ``log1p_ratio`` × (median + 1)); the label's classes are its distinct values.

    **Warning**: every category and every min/max of the sample is written into the schema and becomes public with
    the model (a :class:`UserWarning` says so). Use a sample that is public already (a published extract,
    documentation, synthetic data) — never the private training rows, or the schema itself leaks them (a category
    seen only in one person's row, the largest income).

    Raises
    ------
    SchemaError
        A categorical column with more than ``max_categories`` values (likely an identifier: make it the key).
    """
    warnings.warn("draft_schema: every category and numeric bound of this sample is copied into the schema and "
                  "becomes PUBLIC with every model encoded by it. Use only a public sample, never private rows; "
                  "review the draft (bounds, categories) before use.", UserWarning, stacklevel=2)
    cols: list[Column] = []
    classes = None
    for name in public_sample.columns:
        s = public_sample[name]
        if name == key:
            continue
        if name == label:
            classes = tuple(sorted({_scalar(v) for v in s.dropna().unique()}, key=str))
            continue
        kind = getattr(s.dtype, "kind", "O")
        if kind in "iuf":
            v = s.to_numpy(dtype=np.float64)
            v = v[~np.isnan(v)]
            if v.size == 0:
                raise _err(str(name), "a numeric column of the sample has no value", [])
            lo, hi = float(v.min()), float(v.max())
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            log = bool(lo >= 0 and hi > log1p_ratio * (float(np.median(v)) + 1.0))
            cols.append(NumericColumn(name=str(name), lower=lo, upper=hi, log1p=log,
                                      missing="center" if s.isna().any() else "error"))
        else:
            cats = sorted({_scalar(v) for v in s.dropna().unique()}, key=str)
            if len(cats) > max_categories:
                raise _err(str(name), f"a categorical column may have at most max_categories={max_categories} "
                           "values (an identifier? declare it as the key)", len(cats))
            cols.append(CategoricalColumn(name=str(name), categories=tuple(cats)))
    lab = None
    if label is not None:
        if classes is None:
            raise _err(label, "the label column is missing from the sample", list(public_sample.columns)[:20])
        lab = LabelSpec(name=label, classes=classes)
    return Schema(columns=tuple(cols), label=lab, key=key)


def as_columns(X: Any, schema: Schema) -> Sequence[Any]:
    """The declared feature columns of X, each a 1-D array (a pandas Series for a DataFrame), in schema order.

    X: a pandas DataFrame (columns by name; extra columns are ignored), a list of records (dicts), or a 2-D array
    whose columns are the declared columns in order."""
    names = schema.feature_columns
    if hasattr(X, "columns") and hasattr(X, "iloc"):
        schema.check_columns(X.columns)
        return [X[n] for n in names]
    if isinstance(X, Mapping):
        raise TypeError("X must be a DataFrame, a list of records or a 2-D array. Found a single mapping "
                        "(wrap one record in a list).")
    if isinstance(X, list) and X and isinstance(X[0], Mapping):
        for i, r in enumerate(X):
            if not isinstance(r, Mapping):
                raise TypeError(f"every record must be a mapping. Found {type(r).__name__} at position {i}.")
        schema.check_columns(set().union(*(r.keys() for r in X)))
        out = []
        for n in names:
            col = np.empty(len(X), dtype=object)
            for i, r in enumerate(X):
                if n not in r:
                    raise _err(n, f"record {i} has no value for a declared column", sorted(map(str, r))[:20])
                col[i] = r[n]
            out.append(col)
        return out
    arr = np.asarray(X, dtype=object)
    if arr.ndim != 2:
        raise ValueError(f"X must be 2-D (rows × the {len(names)} declared columns). Found shape {arr.shape}.")
    if arr.shape[1] != len(names):
        raise _err(None, f"an array must have one column per declared feature column ({len(names)}: {names})",
                   arr.shape[1])
    return [arr[:, j] for j in range(len(names))]


__all__ = ["OTHER", "CategoricalColumn", "LabelSpec", "NumericColumn", "Schema", "SchemaError", "as_columns",
           "draft_schema", "load_schema"]
