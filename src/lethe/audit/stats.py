"""Statistics of a membership-inference audit: advantage with exact confidence intervals, and the bounds the
guarantees imply.

Advantage (Yeom et al. 2018): Adv = TPR − FPR of an attack that says "member" when its score exceeds a threshold.
The threshold is chosen by 2-fold cross-fitting (chosen on one half, counted on the other, and vice versa), so the
reported advantage is not inflated by choosing the threshold on the points it is counted on. The interval is
Clopper–Pearson on TPR and on FPR, each at level 1 − α/2 (Bonferroni), combined as
[TPR_lo − FPR_hi, TPR_hi − FPR_lo].
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score

from lethe._rng import RandomState, check_random_state
from lethe._validation import check_open_unit, check_positive_int
from lethe.io import JsonRecord


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact two-sided (1 − α) interval for a binomial proportion with k successes in n trials.

    Clopper & Pearson (1934), computed by SciPy (``binomtest(k, n).proportion_ci(1 − α, method="exact")``):
    lower = Beta⁻¹(α/2; k, n − k + 1) (0 if k = 0), upper = Beta⁻¹(1 − α/2; k + 1, n − k) (1 if k = n).
    """
    n = check_positive_int("n", n)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer. Found {k!r} of type {type(k).__name__}.")
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, n] = [0, {n}]. Found {k}.")
    alpha = check_open_unit("alpha", alpha)
    ci = binomtest(int(k), n).proportion_ci(confidence_level=1.0 - alpha, method="exact")
    return float(ci.low), float(ci.high)


def best_threshold(pos: np.ndarray, neg: np.ndarray) -> float:
    """The threshold t maximising mean(pos > t) − mean(neg > t) (ties: the smallest such t)."""
    cand = np.unique(np.concatenate([pos, neg, [-np.inf]]))
    ps, ns = np.sort(pos), np.sort(neg)
    tpr = 1.0 - np.searchsorted(ps, cand, side="right") / ps.size
    fpr = 1.0 - np.searchsorted(ns, cand, side="right") / ns.size
    return float(cand[int(np.argmax(tpr - fpr))])


@dataclass(frozen=True)
class Advantage(JsonRecord):
    """An attack's measured advantage with its Clopper–Pearson interval and the counts it rests on."""

    advantage: float
    low: float
    high: float
    tpr: float
    fpr: float
    n_pos: int
    n_neg: int
    auc: float


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve (probability a random positive outscores a random negative; ties count ½).

    scikit-learn's :func:`~sklearn.metrics.roc_auc_score` with the positives labelled 1.
    """
    pos, neg = np.asarray(pos, dtype=float).ravel(), np.asarray(neg, dtype=float).ravel()
    if pos.size < 1 or neg.size < 1:
        raise ValueError(f"Need at least 1 positive and 1 negative score. Found {pos.size} and {neg.size}.")
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    return float(roc_auc_score(labels, np.concatenate([pos, neg])))


def advantage(pos: Any, neg: Any, *, alpha: float = 0.05, random_state: RandomState = 0) -> Advantage:
    """Cross-fitted advantage of "score > t ⇒ positive" with a (1 − α) Clopper–Pearson interval.

    ``pos``: scores of the points that are in the questioned set (e.g. removed), ``neg``: of never-seen points.
    """
    pos, neg = np.asarray(pos, dtype=float).ravel(), np.asarray(neg, dtype=float).ravel()
    if pos.size < 2 or neg.size < 2:
        raise ValueError(f"Need at least 2 positive and 2 negative scores. Found {pos.size} and {neg.size}.")
    rng = check_random_state(random_state)
    fp, fn = rng.permutation(pos.size) % 2, rng.permutation(neg.size) % 2
    tp = fpos = 0
    for fold in (0, 1):
        t = best_threshold(pos[fp != fold], neg[fn != fold])
        tp += int(np.sum(pos[fp == fold] > t))
        fpos += int(np.sum(neg[fn == fold] > t))
    tlo, thi = clopper_pearson(tp, pos.size, alpha / 2)
    flo, fhi = clopper_pearson(fpos, neg.size, alpha / 2)
    tpr, fpr = tp / pos.size, fpos / neg.size
    return Advantage(advantage=tpr - fpr, low=tlo - fhi, high=thi - flo, tpr=tpr, fpr=fpr, n_pos=int(pos.size),
                     n_neg=int(neg.size), auc=auc(pos, neg))


def dp_advantage_bound(epsilon: float, delta: float) -> float:
    """Largest TPR − FPR of any test between two (ε, δ)-indistinguishable distributions: δ + (1 − δ) tanh(ε/2).

    From the hypothesis-testing region of (ε, δ)-DP (Kairouz, Oh & Viswanath 2015, Thm 2.1): FPR α, TPR ≤
    min(e^ε α + δ, 1 − e^{−ε}(1 − δ − α)); the two lines meet at α = (1 − δ)/(e^ε + 1). Applies to Guo et al.'s
    (ε, δ)-certified removal for the game "was this point removed, or never in the training set?".

    >>> round(dp_advantage_bound(1.0, 0.0), 4)
    0.4621
    """
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"Need epsilon >= 0 and delta in [0, 1]. Found {epsilon}, {delta}.")
    return delta + (1.0 - delta) * math.tanh(epsilon / 2.0)


def eq12_advantage_bound(q: float, epsilon: float) -> float:
    """Chourasia & Shah 2023, Thm 4.1, Eq. (12), capped at 1 (from :mod:`lethe.noisygd.guarantees`)."""
    from lethe.noisygd.guarantees import membership_advantage_bound

    return min(1.0, membership_advantage_bound(q, epsilon))
