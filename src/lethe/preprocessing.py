"""Putting data into the unit ball that the certificates of Guo et al. 2020 need (‖xᵢ‖₂ ≤ 1, Thm 1).

* :func:`normalize_rows` — xᵢ ↦ xᵢ / max(1, ‖xᵢ‖₂), the one row-normalisation rule of lethe (zero rows stay zero;
  huge entries never overflow to a zero row).
* :class:`UnitBallNormalizer` — the same map as a *stateless* scikit-learn transformer: it learns nothing from the
  data, so it can precede a certified estimator in a :class:`lethe.pipeline.UnlearningPipeline` (a removed record
  leaves no trace in it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import validate_data

from lethe._validation import check_unit_rows, normalize_rows, row_norms


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


__all__ = ["UnitBallNormalizer", "check_unit_rows", "normalize_rows", "row_norms"]
