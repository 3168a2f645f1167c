"""Adding training records to a certified-removal model: one Newton step towards the model trained on D ∪ A.

Setting. The model w was trained by objective perturbation on D (|D| = n) and possibly updated by removals; its
state carries β ≥ ‖∇L_b(w; D)‖ and the secret b. New records A (|A| = m, ‖xᵢ‖ ≤ 1 for the logistic loss) arrive;
D′ = D ∪ A, n′ = n + m.

Step (the Newton step of Guo et al. 2020, Eq. 3, run in the other direction). With
Δ = Σ_{i∈A} ∇ℓ(wᵀxᵢ, yᵢ) + λ m w (the gradient at w of the terms A adds to L_b, including the growth of the
regulariser λn′/2‖w‖²) and H′ = ∇²L(w; D′) (the Hessian on all n′ rows), set w⁺ = w − H′⁻¹Δ.

Certificate. β⁺ = ‖fl(∇L_b(w⁺; D′))‖ + the rounding allowance of that evaluation
(:meth:`CertifiedRemoval.residual_with_allowance`, the same rule that certifies training, Guo et al. 2020,
footnote 1). **Claim:** ‖∇L_b(w⁺; D′)‖ ≤ β⁺. **Proof:** the computed gradient differs from the exact one by at most
the allowance (Higham 2002, §3.1: every entry of Xᵀℓ′(Xw) + λn′w + b is a sum whose terms pass through at most
S + 2 roundings, S ≤ n′ the backend's summation length; the allowance bounds the accumulated error of these sums
and of the margins in the 2-norm, see :func:`lethe.certified.bounds.gradient_rounding_allowance` and
docs/tighter_bounds.md §0a), and the triangle inequality gives the exact norm ≤ computed
norm + allowance. ∎ So w⁺ is the exact minimiser of
L_b(·; D′) − u′ᵀ(·) with ‖u′‖ ≤ β⁺, and while β⁺ ≤ ε′ Guo et al. 2020, Thm 2–3 make it (ε, δ)-indistinguishable from
a model trained on D′ from scratch — the same certificate as training on D′ with this b. When β⁺ > ε′ the model is
retrained on D′ with a fresh b (Alg. 2, line 17).

Why the step is good. By Taylor's theorem ∇L_b(w⁺; D′) = u + Δ − H′v + R = u + R with u = ∇L_b(w; D), v = H′⁻¹Δ,
‖u‖ ≤ β, and ‖R‖ ≤ γ/2 ‖X′‖₂ ‖v‖ ‖X′v‖ (Guo et al. 2020, Cor. 1's argument with D′ in place of D \\ x: the integral
form gives the factor 1/2). So β⁺ ≈ β + O(‖v‖²): one Newton step keeps the budget as a removal does. β⁺ is
*measured* rather than bounded by that sum, which needs b — as training does (and with the same caveat about the
retraining decision, docs/tighter_bounds.md §9).

‖X′‖₂ grows with the added rows, so the state's ``x_norm_bound`` is recomputed on D′
(the data backend's ``spectral_norm_bound``, a certified upper bound for dense and CSR data; later removals use it).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from lethe._rng import check_random_state
from lethe.certified import objective as obj
from lethe.certified.data import backend_of
from lethe.certified.mechanism import Certificate, CertifiedRemoval, ModelState
from lethe.certified.training import Evaluation

_BOUND = ("measured gradient residual on D ∪ A after one Newton step + rounding allowance "
          "(as training: Guo et al. 2020, footnote 1; lethe.certified.addition)")


def add_step(config: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, active: np.ndarray,
             new: np.ndarray) -> ModelState:
    """The Newton step w⁺ = w − H′⁻¹Δ towards the minimiser of L_b on the rows ``active | new`` and its certified
    residual bound β⁺ (module docstring). ``new`` are rows of (X, y) not yet in the model. No budget decision."""
    keep = np.asarray(active, dtype=bool).copy()
    if np.any(keep[new]):
        raise ValueError("Rows to add must not already be in the model.")
    keep[new] = True
    loss, lam = config.loss_, config.lam
    w = state.w
    Xa, ya = X[new], y[new]
    delta = Xa.T @ loss.d1(Xa @ w, ya) + lam * new.size * w
    Xp, yp = X[keep], y[keep]
    H = obj.hessian(w, Xp, yp, loss, lam)
    w_new = w - cho_solve(cho_factor(H), delta)
    # β = ‖fl(∇L_b(w⁻; D ∪ A))‖ + its rounding allowance, measured afresh at w⁻ (the evaluation holds no point yet)
    beta = config.residual_with_allowance(w_new, Xp, yp, Evaluation(Xp, yp, loss, lam, state.b))
    return ModelState(w=w_new, b=state.b, n=int(np.count_nonzero(keep)), residual_bound=beta,
                      x_norm_bound=backend_of(Xp).spectral_norm_bound(Xp),
                      removals_since_training=state.removals_since_training, retrainings=state.retrainings,
                      train_iterations=state.train_iterations)


def certificate(config: CertifiedRemoval, state: ModelState, *, retrained: bool, n_added: int,
                seconds: float) -> Certificate:
    """The certificate of an addition (``operation="add"``, or ``"retrain"`` when the budget forced one)."""
    cert = config.certify("retrain" if retrained else "add", state, step=state.residual_bound,
                               retrained=retrained, removed=(), worst=float("nan"), solve_error=0.0, seconds=seconds)
    bound = _BOUND if not retrained else cert.bound + f" (after adding {n_added} rows)"
    return dataclasses.replace(cert, bound=bound)


def add_rows(config: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray, active: np.ndarray,
             new: np.ndarray, *, random_state: Any = None) -> tuple[ModelState, Certificate]:
    """Add rows ``new`` of (X, y) to the model trained on the rows ``active``: the Newton step, certified by its
    measured residual, or a retraining on D ∪ A with a fresh b if that exceeds the budget ε′ (Alg. 2)."""
    t0 = time.perf_counter()
    proposed = add_step(config, state, X, y, active, new)
    if config.noise == "none" or proposed.residual_bound <= config.budget:
        return proposed, certificate(config, proposed, retrained=False, n_added=new.size,
                                     seconds=time.perf_counter() - t0)
    keep = np.asarray(active, dtype=bool).copy()
    keep[new] = True
    fresh = config.retrain(proposed, X, y, keep, check_random_state(random_state))
    return fresh, certificate(config, fresh, retrained=True, n_added=new.size, seconds=time.perf_counter() - t0)


__all__ = ["add_rows", "add_step", "certificate"]
