"""Membership-inference attacks on binary linear models (labels ±1).

Both attacks score a labelled point (x, y) by the target model's logit-scaled confidence in the true label,
φ = log(p_y / (1 − p_y)) = y · z(x) for a model with margin z (Carlini et al. 2022, §IV-B):

* :func:`loss_scores` — the loss-threshold attack (Yeom et al. 2018): low loss ⇒ member. The loss
  log(1 + e^{−φ}) is decreasing in φ, so φ itself ranks points identically.
* :func:`lira_offline_scores` — LiRA, offline variant (Carlini et al. 2022, Alg. 1 without "in" models): for each
  point, fit a Gaussian N(μ, s²) to φ under shadow models trained *without* it, and score the target's φ by its
  z-value (φ − μ)/s, which orders points as the one-sided likelihood-ratio test does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


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
                        min_std: float = 1e-3) -> np.ndarray:
    """Offline LiRA score (φ_target − μ_out)/s_out per point; ``shadow_phis`` has shape (n_shadows, n_points)."""
    S = np.asarray(shadow_phis, dtype=float)
    if S.ndim != 2 or S.shape[0] < 2 or S.shape[1] != np.asarray(target_phi).shape[0]:
        raise ValueError(f"shadow_phis must have shape (>= 2 shadows, {np.asarray(target_phi).shape[0]}). "
                         f"Found {S.shape}.")
    mu = S.mean(axis=0)
    sd = np.maximum(S.std(axis=0, ddof=1), min_std)
    return (np.asarray(target_phi, dtype=float) - mu) / sd
