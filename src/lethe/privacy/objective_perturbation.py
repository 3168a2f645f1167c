"""(ε, δ)-DP of objective perturbation with Gaussian b (the training of Guo et al. 2020, Alg. 1).

The released model is the exact minimiser of

    J_b(w; D) = Σᵢ ℓ(wᵀxᵢ, yᵢ) + (λn/2)‖w‖² + bᵀw,      b ~ N(0, σ² I_d),

for a generalised linear loss ℓ(z, y) with |∂ℓ/∂z| ≤ L, 0 ≤ ∂²ℓ/∂z² ≤ c and rows ‖xᵢ‖₂ ≤ 1 (logistic: L = 1,
c = 1/4). Neighbours have the same n and differ in one record.

Symbols and argument names: σ → ``sigma``, λ → ``lam``, n → ``n_samples``, L → ``lipschitz``, c → ``curvature``,
ε, δ → ``epsilon``, ``delta``.

Derivation (the change-of-variables argument of Chaudhuri, Monteleoni & Sarwate 2011, Thm 9, and Kifer, Smith &
Thakurta 2012, with a Gaussian b; written out in ``docs/privacy.md``). w ↦ b_D(w) = −∇(Σ ℓ + λn‖·‖²/2)(w) is a
bijection of R^d with Jacobian determinant det H_D(w), H_D(w) = Σ ℓ''ᵢ xᵢxᵢᵀ + λn I. So the density of the output
is p_D(w) = ν(b_D(w)) det H_D(w), ν the N(0, σ² I) density, and for neighbours D, D' (record 1 replaced)

* det H_D(w) / det H_D'(w) ≤ 1 + c x₁ᵀA⁻¹x₁ ≤ 1 + c/(λn)  (rank-one update of A ⪰ λn I);
* b_D'(w) = b_D(w) + v with v = ℓ'(wᵀx₁)x₁ − ℓ'(wᵀx₁')x₁' ∈ span{x₁, x₁'} and ‖v‖ ≤ 2L, so with b = b_D(w),
  ln ν(b)/ν(b + v) = (2⟨b, v⟩ + ‖v‖²)/(2σ²) ≤ 2L‖Pb‖/σ² + 2L²/σ², P the projection onto span{x₁, x₁'}.

Under w ~ M(D), b ~ N(0, σ² I) and ‖Pb‖²/σ² is χ² with ≤ 2 degrees of freedom: P(‖Pb‖ > σ√(2 ln(1/δ))) ≤ δ.
Hence the privacy loss is at most

    ε(σ) = 2L√(2 ln(1/δ))/σ + 2L²/σ² + ln(1 + c/(λn))

with probability ≥ 1 − δ, which is (ε, δ)-DP by the lecture's PLRV theorem (both orders of the pair are
symmetric). The guarantee is for the exact minimiser; an optimiser stopped at gradient norm τ releases the exact
minimiser for b' = b − ∇J_b(ŵ), a data-dependent shift of norm ≤ τ that this bound does not cover.
"""

from __future__ import annotations

import math
from typing import Any

from lethe._validation import check_nonnegative, check_open_unit, check_positive, check_positive_int

__all__ = ["objective_perturbation_epsilon", "objective_perturbation_sigma"]


def _check_glm(delta: Any, lam: Any, n_samples: Any, lipschitz: Any, curvature: Any,
               ) -> tuple[float, float, int, float, float]:
    """The setting of both functions below, checked: δ in (0, 1), λ > 0, n ≥ 1, L > 0, c ≥ 0."""
    d = check_open_unit("delta", delta)
    lm = check_positive("lam", lam)
    n = check_positive_int("n_samples", n_samples)
    return d, lm, n, check_positive("lipschitz", lipschitz), check_nonnegative("curvature", curvature)


def _determinant_term(lam: float, n_samples: int, curvature: float) -> float:
    return math.log1p(curvature / (lam * n_samples))


def objective_perturbation_epsilon(
    sigma: float,
    delta: float,
    lam: float,
    n_samples: int,
    lipschitz: float = 1.0,
    curvature: float = 0.25,
) -> float:
    """ε of objective perturbation with b ~ N(0, σ² I): 2L√(2 ln(1/δ))/σ + 2L²/σ² + ln(1 + c/(λn)).

    See the module docstring for the derivation and its assumptions (GLM loss, ‖x‖ ≤ 1, exact minimiser).

    Examples
    --------
    >>> round(objective_perturbation_epsilon(10.0, 1e-5, 1e-3, 10_000), 4)
    1.0044
    """
    s = check_positive("sigma", sigma)
    d, lm, n, L, c = _check_glm(delta, lam, n_samples, lipschitz, curvature)
    return 2.0 * L * math.sqrt(2.0 * math.log(1.0 / d)) / s + 2.0 * L * L / (s * s) + _determinant_term(lm, n, c)


def objective_perturbation_sigma(
    epsilon: float,
    delta: float,
    lam: float,
    n_samples: int,
    lipschitz: float = 1.0,
    curvature: float = 0.25,
) -> float:
    """Smallest σ with :func:`objective_perturbation_epsilon` ≤ ε (a quadratic in 1/σ).

    With a = L√(2 ln(1/δ)) and r = ε − ln(1 + c/(λn)) > 0: 2L² s² + 2a s − r = 0 for s = 1/σ, so
    s = (−a + √(a² + 2L² r)) / (2L²). Raises if ε ≤ ln(1 + c/(λn)) (the determinant term alone uses the budget).

    Examples
    --------
    >>> sigma = objective_perturbation_sigma(1.0, 1e-5, 1e-3, 10_000)
    >>> round(sigma, 4)
    10.0442
    >>> objective_perturbation_epsilon(sigma, 1e-5, 1e-3, 10_000) <= 1.0
    True
    """
    e = check_positive("epsilon", epsilon)
    d, lm, n, L, c = _check_glm(delta, lam, n_samples, lipschitz, curvature)
    det = _determinant_term(lm, n, c)
    r = e - det
    if not r > 0:
        raise ValueError(
            f"epsilon must be > ln(1 + curvature/(lam*n_samples)) = {det:.6g} for objective perturbation "
            f"(increase lam or n). Found {epsilon}."
        )
    a = L * math.sqrt(2.0 * math.log(1.0 / d))
    # s = r / (a + sqrt(a² + 2L² r)) is the same root without cancellation
    s = r / (a + math.sqrt(a * a + 2.0 * L * L * r))
    sigma = 1.0 / s
    while objective_perturbation_epsilon(sigma, d, lm, n, L, c) > e:  # pragma: no cover - rounding guard
        sigma *= 1.0 + 1e-12
    return sigma
