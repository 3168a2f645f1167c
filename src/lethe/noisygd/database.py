"""The data of Algorithm 1 (Chourasia & Shah 2023, §2.2): edit requests and the database they edit.

* :class:`EditRequest` — Def. 2.4: a set of replacement operations ⟨ind, y⟩ on distinct indices, applied
  atomically. Deletions and insertions are replacements with the *dummy record* (the all-zero row, label 0),
  footnote 1. Indices are 0-based here (the paper's [n] is 1-based).
* :class:`Database` — an ordered set of n records (rows of X with labels y); D ∘ u returns a new database.

The curator that answers the requests is :class:`lethe.noisygd.edit_stream.NoisyGDCurator` (which re-exports these
names, their first home).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lethe._validation import check_finite_matrix, check_positive_int
from lethe.exceptions import LetheError

__all__ = ["Database", "EditRequest", "EditRequestError", "Replacement"]


class EditRequestError(LetheError, ValueError):
    """An edit request is malformed or does not fit the database; nothing was changed."""


@dataclass(frozen=True)
class Replacement:
    """One replacement operation ⟨ind, y⟩ (Def. 2.4): record ``index`` becomes (``x``, ``label``)."""

    index: int
    x: tuple[float, ...]
    label: float

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int | np.integer):
            raise TypeError(f"Replacement index must be an integer. Found {self.index!r}.")
        object.__setattr__(self, "index", int(self.index))
        object.__setattr__(self, "x", tuple(float(v) for v in self.x))
        object.__setattr__(self, "label", float(self.label))
        if not all(math.isfinite(v) for v in self.x) or not math.isfinite(self.label):
            raise EditRequestError(f"Replacement record for index {self.index} must be finite.")


@dataclass(frozen=True)
class EditRequest:
    """An edit request u = {⟨ind₁, y₁⟩, …, ⟨ind_r, y_r⟩} on distinct indices (Def. 2.4, Eq. 5).

    Examples
    --------
    >>> u = EditRequest.from_arrays([2, 0], [[0.5, 0.5], [0.0, 1.0]], [1.0, -1.0])
    >>> u.indices, u.r
    ((2, 0), 2)
    >>> EditRequest.deletion([1], n_features=2).replacements[0].x
    (0.0, 0.0)
    >>> EditRequest.from_arrays([1, 1], [[0.0], [1.0]], [1.0, 1.0])  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    EditRequestError: An edit request must modify distinct indices (Def. 2.4). Found index 1 twice.
    """

    replacements: tuple[Replacement, ...]

    def __post_init__(self) -> None:
        reps = tuple(self.replacements)
        if len(reps) == 0:
            raise EditRequestError("An edit request must contain at least one replacement. Found 0.")
        for rep in reps:
            if not isinstance(rep, Replacement):
                raise TypeError(f"replacements must be Replacement objects. Found {type(rep).__name__}.")
        seen: set[int] = set()
        for rep in reps:
            if rep.index in seen:
                raise EditRequestError(
                    f"An edit request must modify distinct indices (Def. 2.4). Found index {rep.index} twice."
                )
            seen.add(rep.index)
        object.__setattr__(self, "replacements", reps)

    @property
    def indices(self) -> tuple[int, ...]:
        """(ind₁, …, ind_r)."""
        return tuple(rep.index for rep in self.replacements)

    @property
    def r(self) -> int:
        """Number of replaced records."""
        return len(self.replacements)

    @classmethod
    def from_arrays(cls, indices: Sequence[int], X: Any, y: Any) -> EditRequest:
        """Build from indices, new rows (r × p) and new labels (r,)."""
        idx = list(indices)
        Xa = check_finite_matrix("X", X)
        ya = check_finite_matrix("y", y, ndim=1)
        if not (len(idx) == Xa.shape[0] == ya.shape[0]):
            raise EditRequestError(
                f"indices, X and y must have the same length. Found {len(idx)}, {Xa.shape[0]} and {ya.shape[0]}."
            )
        return cls(tuple(Replacement(i, tuple(row), lab) for i, row, lab in zip(idx, Xa, ya, strict=True)))

    @classmethod
    def deletion(cls, indices: Sequence[int], n_features: int, dummy_label: float = 0.0) -> EditRequest:
        """Delete records by replacing them with the dummy record (zero row; footnote 1)."""
        n_features = check_positive_int("n_features", n_features)
        zero = (0.0,) * n_features
        return cls(tuple(Replacement(i, zero, dummy_label) for i in indices))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"replacements": [{"index": r.index, "x": list(r.x), "label": r.label} for r in self.replacements]}


class Database:
    """An ordered set of n records: rows of ``X`` (n × p, float64) and labels ``y`` (n,). Read-only copies.

    Examples
    --------
    >>> D = Database([[1.0, 0.0], [0.0, 1.0]], [1.0, -1.0])
    >>> D2 = D.apply(EditRequest.deletion([0], n_features=2))
    >>> D2.X.tolist(), D.X.tolist()
    ([[0.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]])
    """

    def __init__(self, X: Any, y: Any) -> None:
        X = np.array(check_finite_matrix("X", X), dtype=np.float64, copy=True)
        y = np.array(check_finite_matrix("y", y, ndim=1), dtype=np.float64, copy=True)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X and y must have the same number of rows. Found {X.shape[0]} and {y.shape[0]}.")
        if X.shape[0] < 1:
            raise ValueError("A database must hold at least one record. Found 0.")
        self._set(X, y)

    def _set(self, X: np.ndarray, y: np.ndarray) -> None:
        X.setflags(write=False)
        y.setflags(write=False)
        self._X, self._y = X, y

    @property
    def X(self) -> np.ndarray:
        """Rows (read-only)."""
        return self._X

    @property
    def y(self) -> np.ndarray:
        """Labels (read-only)."""
        return self._y

    @property
    def n(self) -> int:
        """n."""
        return int(self._X.shape[0])

    @property
    def n_features(self) -> int:
        """p."""
        return int(self._X.shape[1])

    def validate(self, request: EditRequest) -> None:
        """Raise :class:`EditRequestError` if ``request`` does not fit this database (indices, record shapes)."""
        if not isinstance(request, EditRequest):
            raise TypeError(f"request must be an EditRequest. Found {type(request).__name__}.")
        for rep in request.replacements:
            if not 0 <= rep.index < self.n:
                raise EditRequestError(f"Replacement index must be in [0, {self.n}). Found {rep.index}.")
            if len(rep.x) != self.n_features:
                raise EditRequestError(
                    f"Replacement record for index {rep.index} must have {self.n_features} features. "
                    f"Found {len(rep.x)}."
                )

    def apply(self, request: EditRequest) -> Database:
        """D ∘ u (Eq. 5) as a new database; ``self`` is unchanged."""
        self.validate(request)
        X = self._X.copy()
        y = self._y.copy()
        for rep in request.replacements:  # finite by construction of Replacement
            X[rep.index] = rep.x
            y[rep.index] = rep.label
        out = Database.__new__(Database)
        out._set(X, y)  # self was validated and the new rows are finite: one copy, no re-validation
        return out
