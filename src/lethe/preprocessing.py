"""Putting data into the unit ball that the certificates of Guo et al. 2020 need (‖xᵢ‖₂ ≤ 1, Thm 1).

* :func:`normalize_rows` — xᵢ ↦ xᵢ / max(1, ‖xᵢ‖₂), the one row-normalisation rule of lethe (zero rows stay zero;
  huge entries never overflow to a zero row).
* :class:`UnitBallNormalizer` — the same map as a *stateless* scikit-learn transformer: it learns nothing from the
  data, so it can precede a certified estimator in a :class:`lethe.pipeline.UnlearningPipeline` (a removed record
  leaves no trace in it).
* :class:`SchemaEncoder` — a table (DataFrame, records, object array) to float64 rows in the unit ball, by a declared
  public :class:`lethe.schema.Schema` alone: one-hot blocks over public category lists, clipped and scaled numeric
  columns. Stateless too (docs/tabular.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import validate_data

from lethe._validation import check_unit_rows, normalize_rows, row_norms
from lethe.schema import OTHER, CategoricalColumn, NumericColumn, Schema, SchemaError, as_columns, load_schema


class UnitBallNormalizer(TransformerMixin, BaseEstimator):
    """Scale every row with ‖xᵢ‖₂ > 1 onto the unit sphere; rows inside the ball are unchanged. Stateless.

    ``fit`` only records the number of features (scikit-learn's contract); nothing learned depends on the values of
    the rows, so removing a training record never needs to touch this step.

    Examples
    --------
    >>> import numpy as np
    >>> UnitBallNormalizer().fit_transform(np.array([[3.0, 4.0], [0.1, 0.2]])).tolist()
    [[0.6, 0.8], [0.1, 0.2]]
    """

    def fit(self, X: Any, y: Any = None) -> UnitBallNormalizer:
        """Record the number of features; learns nothing from the rows."""
        validate_data(self, X)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """:func:`normalize_rows` of X."""
        X = validate_data(self, X, reset=False)
        return normalize_rows(X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags


def _category_codes(values: Any, col: CategoricalColumn) -> np.ndarray:
    """Position of each value in ``col.categories`` (int64), −1 for a value outside them or missing. The values are
    factorised once (pandas), and only their distinct values are looked up in the declared list."""
    lookup = {c: i for i, c in enumerate(col.categories)}
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas comes with the 'tabular' extra
        return np.fromiter((lookup.get(v, -1) if isinstance(v, str | int | bool) else -1 for v in values),
                           dtype=np.int64, count=len(values))
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    table = np.fromiter((lookup.get(_hashable(u), -1) for u in np.asarray(uniques, dtype=object)), dtype=np.int64,
                        count=len(uniques))
    table = np.append(table, -1)  # code −1 (missing) → −1
    return table[np.asarray(codes, dtype=np.int64)]


def _hashable(v: Any) -> Any:
    v = v.item() if isinstance(v, np.generic) else v
    try:
        hash(v)
    except TypeError:
        return None
    return v


def _at(values: Any, i: int) -> Any:
    """The value at position i of an array or a pandas Series."""
    return values.iloc[i] if hasattr(values, "iloc") else values[i]


def _numeric_values(values: Any, col: NumericColumn) -> np.ndarray:
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        bad = next(x for x in np.asarray(values, dtype=object) if not _is_number(x))
        raise SchemaError(f"column {col.name!r}: a numeric column must hold numbers. Found {bad!r}.") from None
    if col.missing == "error" and np.isnan(v).any():
        raise SchemaError(f"column {col.name!r}: a missing value (NaN) is not allowed (missing: error). Found NaN "
                          f"at row position {int(np.flatnonzero(np.isnan(v))[0])}.")
    return v


def _is_number(x: Any) -> bool:
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return True


class SchemaEncoder(TransformerMixin, BaseEstimator):
    """Encode a table by a declared public :class:`~lethe.schema.Schema` into float64 rows with ‖xᵢ‖₂ ≤ 1.

    The encoder learns **nothing** from the rows it is fitted on: ``fit`` only checks that the declared columns are
    present; the output features (:meth:`get_feature_names_out`), their order and every number used to encode come
    from the schema. Removing a record therefore never needs to touch this step, and no output (feature names, the
    model's coefficient shape, a saved model) can name a category or bound that only the private rows held. It is
    tagged stateless (``requires_fit=False``), so :class:`lethe.pipeline.UnlearningPipeline` accepts it before a
    certified estimator; it also works inside scikit-learn's :class:`~sklearn.compose.ColumnTransformer`.

    Encoding of column j into its block zⱼ:

    * categorical: the indicator of the value's category (a value outside the public list: the declared
      ``<other>`` indicator, or :class:`~lethe.schema.SchemaError` with ``unknown="error"``); ‖zⱼ‖ = Bⱼ = 1;
    * numeric: v clipped to [lower, upper], optionally t = log1p(v), then ``minmax`` z = (2t − a − b)/(b − a)
      (|z| ≤ Bⱼ = 1), ``standard`` z = (t − c)/s with public c, s (|z| ≤ Bⱼ = max(|a − c|, |b − c|)/s) or
      ``none`` (|z| ≤ Bⱼ = max(|a|, |b|)), [a, b] the (transformed) bounds.

    Each block is multiplied by wⱼ / R with wⱼ the column's ``weight`` and R = √(Σₖ wₖ² Bₖ²) (a constant of the
    schema). **Unit ball**: ‖x‖² = Σⱼ (wⱼ/R)² ‖zⱼ‖² ≤ Σⱼ wⱼ² Bⱼ² / R² = 1. (R is enlarged by a relative 1e−12 so
    that floating-point rounding cannot push a row above 1.) Since R is a constant, this is a fixed linear rescaling
    of the blocks: a linear model on x is the model on z with λ measured in the units of x (docs/tabular.md).

    Parameters
    ----------
    schema : Schema, mapping, or path to a YAML/JSON schema file
    sparse_output : bool, default=False
        Return a CSR matrix (one non-zero per categorical column: memory O(n × columns), not O(n × features)).

    Examples
    --------
    >>> enc = SchemaEncoder({"columns": [{"name": "age", "type": "numeric", "lower": 0, "upper": 100},
    ...                                  {"name": "sex", "type": "categorical", "categories": ["F", "M"]}]})
    >>> enc.get_feature_names_out().tolist()
    ['age', 'sex=F', 'sex=M', 'sex=<other>']
    >>> X = enc.fit_transform([{"age": 100, "sex": "M"}, {"age": 50, "sex": "X"}])
    >>> bool((np.linalg.norm(X, axis=1) <= 1).all())
    True
    """

    def __init__(self, schema: Any, sparse_output: bool = False) -> None:
        self.schema = schema
        self.sparse_output = sparse_output

    def _schema(self) -> Schema:
        return load_schema(self.schema)

    def fit(self, X: Any, y: Any = None) -> SchemaEncoder:
        """Check that X has the declared columns; learns nothing (no attribute is set)."""
        as_columns(X, self._schema())
        return self

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The declared output features (``name`` for numeric, ``name=category`` / ``name=<other>``)."""
        schema = self._schema()
        if input_features is not None:
            got = [str(f) for f in input_features]
            if got != schema.feature_columns:
                raise SchemaError(f"input_features must be the declared columns {schema.feature_columns}. "
                                  f"Found {got}.")
        return np.asarray(schema.feature_names(), dtype=object)

    @staticmethod
    def row_scale(schema: Schema) -> float:
        """1 / R of the class docstring."""
        R = math.sqrt(sum(c.weight ** 2 * c.block_bound ** 2 for c in schema.columns))
        return 1.0 / (R * (1.0 + 1e-12))

    def transform(self, X: Any) -> Any:
        """Encode X (a DataFrame with the declared columns, a list of records, or an object array whose columns are
        the declared columns in order) into an (n, n_features) float64 array (or CSR with ``sparse_output``)."""
        if not isinstance(self.sparse_output, bool):
            raise TypeError(f"sparse_output must be a bool. Found {type(self.sparse_output).__name__}.")
        schema = self._schema()
        cols = as_columns(X, schema)
        n = len(cols[0]) if cols else 0
        g = self.row_scale(schema)
        blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (column index within the output, value) per row
        offset = 0
        for col, values in zip(schema.columns, cols, strict=True):
            w = col.weight * g
            if isinstance(col, CategoricalColumn):
                codes = _category_codes(values, col)
                unknown = codes < 0
                if unknown.any():
                    if col.unknown == "error":
                        i = int(np.flatnonzero(unknown)[0])
                        raise SchemaError(f"column {col.name!r}: a value outside the declared categories "
                                          f"(unknown: error) at row position {i}. Found {_at(values, i)!r}.")
                    codes = np.where(unknown, len(col.categories), codes)
                blocks.append((offset + codes, np.full(n, w)))
            else:
                blocks.append((np.full(n, offset, dtype=np.int64), w * col.encode(_numeric_values(values, col))))
            offset += len(col.feature_names)
        if self.sparse_output:
            import scipy.sparse as sp
            k = len(blocks)
            indices = np.empty((n, k), dtype=np.int64)
            data = np.empty((n, k), dtype=np.float64)
            for j, (ix, v) in enumerate(blocks):
                indices[:, j], data[:, j] = ix, v
            return sp.csr_matrix((data.ravel(), indices.ravel(), np.arange(0, n * k + 1, k)), shape=(n, offset))
        out = np.zeros((n, offset), dtype=np.float64)
        rows = np.arange(n)
        for ix, v in blocks:
            out[rows, ix] = v
        return out

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags


__all__ = ["OTHER", "SchemaEncoder", "UnitBallNormalizer", "check_unit_rows", "normalize_rows", "row_norms"]
