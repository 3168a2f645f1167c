"""Version-diff attacks from *predictions* of two consecutive versions (issue 29, item 3): for models whose weights
are not published or have no closed-form removal step (a sharded model, any estimator), the observer queries the
versions before and after a deletion on every candidate record and ranks the candidates by how much the deletion
hurt each one.

Threat model: the attacker knows every candidate record (xᵢ, yᵢ) — the training table, one row of which is deleted
between the two versions — and can query both versions on them: class probabilities (:func:`loss_increase_scores`)
or predicted labels only (:func:`label_flip_scores`). It guesses the candidate with the largest score; ties are
broken uniformly at random (:func:`guess`), so a score that does not separate the candidates scores like a random
guess (rate 1/N). Rows known to be gone already (deleted at earlier versions) are excluded.

Why it works on a sharded model: a deletion retrains the one shard that held the record on n/S rows; the retrained
shard no longer fits the record, whose loss rises, while most other records' losses move less (an estimator that
memorises its rows — trees, nearest neighbours — moves its own rows most). Exactness (ε = 0 against retraining) says
nothing against this observer: the published sequence, not one version, is what is observed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["guess", "label_flip_scores", "loss_increase_scores", "rank_of"]


def _check_pair(old: Any, new: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} before and after must be 2-D arrays of one shape (candidates × classes). Found "
                         f"{a.shape} and {b.shape}.")
    return a, b


def loss_increase_scores(proba_old: Any, proba_new: Any, y_index: Any, *, floor: float = 1e-12) -> np.ndarray:
    """ℓᵢ(new) − ℓᵢ(old) with ℓ the log-loss of candidate i's true class: −log max(p, floor).

    Parameters
    ----------
    proba_old, proba_new : array (N, K)
        Class probabilities of the N candidates under the versions before and after the deletion.
    y_index : int array (N,)
        Column of each candidate's true class.
    floor : float
        Probabilities are clipped below at ``floor`` (a log of 0 would be infinite).
    """
    p0, p1 = _check_pair(proba_old, proba_new, "proba")
    yi = np.asarray(y_index)
    if yi.shape != (p0.shape[0],) or yi.dtype.kind not in "iu" or yi.min() < 0 or yi.max() >= p0.shape[1]:
        raise ValueError(f"y_index must hold one class column in [0, {p0.shape[1]}) per candidate. Found shape "
                         f"{yi.shape}, dtype {yi.dtype}.")
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1). Found {floor}.")
    rows = np.arange(p0.shape[0])
    return np.log(np.maximum(p0[rows, yi], floor)) - np.log(np.maximum(p1[rows, yi], floor))


def label_flip_scores(pred_old: Any, pred_new: Any, y: Any) -> np.ndarray:
    """1 for a candidate predicted correctly before and wrongly after, −1 for the reverse, 0 otherwise: what an
    observer of predicted labels only (the service's ``predict``) can score."""
    a, b, t = np.asarray(pred_old), np.asarray(pred_new), np.asarray(y)
    if not a.shape == b.shape == t.shape or a.ndim != 1:
        raise ValueError(f"pred_old, pred_new and y must be 1-D of one length. Found {a.shape}, {b.shape}, {t.shape}.")
    return (a == t).astype(np.float64) - (b == t).astype(np.float64)


def _masked(scores: Any, exclude: Any) -> np.ndarray:
    s = np.array(scores, dtype=np.float64)
    if s.ndim != 1 or s.size < 1 or np.isnan(s).any():
        raise ValueError(f"scores must be a non-empty 1-D array without NaN. Found shape {s.shape}.")
    if exclude is not None:
        ex = np.asarray(exclude, dtype=bool)
        if ex.shape != s.shape:
            raise ValueError(f"exclude must be a boolean mask of the candidates' shape {s.shape}. Found {ex.shape}.")
        if ex.all():
            raise ValueError("exclude must leave at least one candidate.")
        s[ex] = -np.inf
    return s


def guess(scores: Any, rng: np.random.Generator, *, exclude: Any = None) -> int:
    """The candidate with the largest score (a uniformly random one among ties); ``exclude`` (bool mask) never."""
    s = _masked(scores, exclude)
    best = np.flatnonzero(s == s.max())
    return int(best[rng.integers(best.size)]) if best.size > 1 else int(best[0])


def rank_of(scores: Any, target: int, *, exclude: Any = None) -> float:
    """The expected rank (1 = first) of candidate ``target`` under random tie-breaking: 1 + #{greater} +
    #{equal others}/2."""
    s = _masked(scores, exclude)
    if not 0 <= int(target) < s.size or not np.isfinite(s[target]) and s[target] < 0:
        raise ValueError(f"target must be a candidate not excluded, in [0, {s.size}). Found {target}.")
    v = s[target]
    return float(1 + np.sum(s > v) + (np.sum(s == v) - 1) / 2)
