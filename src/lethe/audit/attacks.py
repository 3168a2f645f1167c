"""Membership-inference attacks on binary linear models (labels ±1).

Every attack scores a labelled point (x, y) by the target model's logit-scaled confidence in the true label,
φ = log(p_y / (1 − p_y)) = y · z(x) for a model with margin z (Carlini et al. 2022, §IV-B):

* :func:`loss_scores` — the loss-threshold attack (Yeom et al. 2018): low loss ⇒ member. The loss
  log(1 + e^{−φ}) is decreasing in φ, so φ itself ranks points identically.
* :func:`lira_offline_scores` — LiRA, offline variant (Carlini et al. 2022, Alg. 1 without "in" models): for each
  point, fit a Gaussian N(μ, s²) to φ under shadow models trained *without* it, and score the target's φ by its
  z-value (φ − μ)/s, which orders points as the one-sided likelihood-ratio test does.
* :func:`lira_online_scores` — LiRA, online variant (Carlini et al. 2022, Alg. 1): shadow models are trained on
  random subsets of the candidate points, so each point is "in" some shadows and "out" of others; per point, fit
  N(μ_in, s_in²) and N(μ_out, s_out²) to φ and score the target's φ by the log-likelihood ratio
  log N(φ; μ_in, s_in²) − log N(φ; μ_out, s_out²). Per-point spreads are used where a point has at least
  ``min_count`` shadows on that side, the spread pooled over all points otherwise (Carlini et al.'s "global
  variance" for few shadows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import norm


def logit_confidence(model: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """φ = y · z(x): the margin towards the true label (``model.decision_function``, classes −1 < +1)."""
    z = np.asarray(model.decision_function(X), dtype=float)
    if z.ndim != 1:
        raise ValueError(f"Only binary models are supported (decision_function of shape (n,)). Found {z.shape}.")
    return np.asarray(y, dtype=float) * z


def loss_scores(model: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Loss-threshold attack score: −ℓ(x, y) = −log(1 + e^{−φ}); higher means "member"."""
    return -np.logaddexp(0.0, -logit_confidence(model, X, y))


def lira_offline_scores(target_phi: np.ndarray, shadow_phis: Sequence[np.ndarray] | np.ndarray,
                        min_std: float = 1e-3, *, shadow_out: np.ndarray | None = None) -> np.ndarray:
    """Offline LiRA score (φ_target − μ_out)/s_out per point; ``shadow_phis`` has shape (n_shadows, n_points).

    Every shadow is "out" for every point unless ``shadow_out`` (bool, same shape) says which entries are; then each
    point's μ_out and s_out (ddof 1) come from its own "out" entries only (one entry: spread 0, floored at
    ``min_std``).
    """
    phi, S = _check_scores(target_phi, shadow_phis)
    if shadow_out is None:
        mu = S.mean(axis=0)
        sd = S.std(axis=0, ddof=1)
    else:
        cnt, mu, sq = _masked_moments(S, _check_mask(shadow_out, S.shape, "shadow_out"))
        sd = np.sqrt(sq.sum(axis=0) / np.maximum(cnt - 1, 1))
    return (phi - mu) / np.maximum(sd, min_std)


def _check_scores(target_phi: Any, shadow_phis: Any) -> tuple[np.ndarray, np.ndarray]:
    """φ of the target model (n_points,) and of the shadows (n_shadows ≥ 2, n_points), as float arrays."""
    phi = np.asarray(target_phi, dtype=float)
    S = np.asarray(shadow_phis, dtype=float)
    if S.ndim != 2 or S.shape[0] < 2 or phi.ndim != 1 or S.shape[1] != phi.shape[0]:
        raise ValueError(f"shadow_phis must have shape (>= 2 shadows, {phi.shape[0] if phi.ndim else 1}) "
                         f"matching target_phi. Found {S.shape} and target_phi {phi.shape}.")
    return phi, S


def _check_mask(mask: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    M = np.asarray(mask)
    if M.shape != shape or M.dtype != bool:
        raise ValueError(f"{name} must be a boolean array of shape {shape}. Found {M.dtype} {M.shape}.")
    return M


def _masked_moments(S: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point (column): count and mean of the entries of S where ``mask`` holds; their squared deviations from
    that mean (0 elsewhere)."""
    cnt = mask.sum(axis=0)
    if np.any(cnt == 0):
        j = int(np.flatnonzero(cnt == 0)[0])
        raise ValueError(f"Every point needs at least one shadow on each side (in and out). Point {j} has none.")
    mu = np.where(mask, S, 0.0).sum(axis=0) / cnt
    return cnt, mu, np.where(mask, S - mu, 0.0) ** 2


def _side_fit(S: np.ndarray, mask: np.ndarray, min_count: int, min_std: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-point mean and spread of the entries of S where ``mask`` holds (pooled spread for sparse points)."""
    cnt, mu, sq = _masked_moments(S, mask)
    pooled = float(np.sqrt(sq.sum() / max(int(cnt.sum()) - S.shape[1], 1)))
    own = np.sqrt(sq.sum(axis=0) / np.maximum(cnt - 1, 1))
    sd = np.where(cnt >= min_count, own, pooled)
    return mu, np.maximum(sd, min_std)


def lira_online_scores(target_phi: np.ndarray, shadow_phis: Sequence[np.ndarray] | np.ndarray,
                       shadow_in: np.ndarray, *, min_count: int = 8, min_std: float = 1e-3) -> np.ndarray:
    """Online LiRA: log N(φ; μ_in, s_in²) − log N(φ; μ_out, s_out²) per point (higher means "member").

    ``shadow_phis`` (n_shadows, n_points): φ of every point under every shadow model; ``shadow_in`` (same shape,
    bool): whether the point was in that shadow's training set. Every point needs at least one "in" and one "out"
    shadow.
    """
    phi, S = _check_scores(target_phi, shadow_phis)
    M = _check_mask(shadow_in, S.shape, "shadow_in")
    if min_count < 2:
        raise ValueError(f"min_count must be >= 2 (a spread needs two samples). Found {min_count}.")
    mu_in, sd_in = _side_fit(S, M, min_count, min_std)
    mu_out, sd_out = _side_fit(S, ~M, min_count, min_std)
    return norm.logpdf(phi, mu_in, sd_in) - norm.logpdf(phi, mu_out, sd_out)
