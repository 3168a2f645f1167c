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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

from lethe._random import RandomState, check_random_state


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact two-sided (1 − α) interval for a binomial proportion with k successes in n trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"Need 0 <= k <= n and n > 0. Found k = {k}, n = {n}.")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1). Found {alpha}.")
    lo = 0.0 if k == 0 else float(beta_dist.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def best_threshold(pos: np.ndarray, neg: np.ndarray) -> float:
    """The threshold t maximising mean(pos > t) − mean(neg > t) (ties: the smallest such t)."""
    cand = np.unique(np.concatenate([pos, neg, [-np.inf]]))
    ps, ns = np.sort(pos), np.sort(neg)
    tpr = 1.0 - np.searchsorted(ps, cand, side="right") / ps.size
    fpr = 1.0 - np.searchsorted(ns, cand, side="right") / ns.size
    return float(cand[int(np.argmax(tpr - fpr))])


@dataclass(frozen=True)
class Advantage:
    """An attack's measured advantage with its Clopper–Pearson interval and the counts it rests on."""

    advantage: float
    low: float
    high: float
    tpr: float
    fpr: float
    n_pos: int
    n_neg: int
    auc: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve (probability a random positive outscores a random negative; ties count ½)."""
    allv = np.concatenate([pos, neg])
    ranks = np.empty(allv.size)
    order = np.argsort(allv, kind="mergesort")
    sv = allv[order]
    r = np.arange(1, allv.size + 1, dtype=float)
    # average ranks of ties
    _, start, counts = np.unique(sv, return_index=True, return_counts=True)
    for s, c in zip(start, counts, strict=True):
        if c > 1:
            r[s:s + c] = r[s:s + c].mean()
    ranks[order] = r
    return float((ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


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
