"""Influence of single training rows: ‖H⁻¹Δᵢ‖ (Guo et al. 2020, §4.1, Fig. 3).

Δᵢ = λ w + ∇ℓ(wᵀxᵢ, yᵢ) is the gradient a single row contributes; H⁻¹Δᵢ is the Newton removal step for that row
(the influence function of Cook & Weisberg / Koh & Liang). Rows with large ‖H⁻¹Δᵢ‖ are atypical and costly to
remove; prototypical rows are cheap. Uses the Hessian on all active rows (the per-row leave-one-out Hessian differs
by one rank-one term; this is a ranking tool, not a certificate).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from lethe.certified import objective as obj
from lethe.certified.mechanism import CertifiedRemoval, ModelState


def influence_norms(mech: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray,
                    active: np.ndarray | None = None) -> np.ndarray:
    """‖H⁻¹Δᵢ‖₂ for every row i of X (``nan`` for inactive rows). One Hessian, one multi-right-hand-side solve."""
    if active is None:
        active = np.ones(X.shape[0], dtype=bool)
    loss, lam = mech.loss_, mech.lam
    H = obj.hessian(state.w, X, y, loss, lam, mask=active)
    rows = np.flatnonzero(active)
    D = X[rows] * loss.d1(X[rows] @ state.w, y[rows])[:, None] + lam * state.w[None, :]
    V = cho_solve(cho_factor(H), D.T)
    out = np.full(X.shape[0], np.nan)
    out[rows] = np.linalg.norm(V, axis=0)
    return out
