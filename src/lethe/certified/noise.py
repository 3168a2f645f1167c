"""The objective perturbation b and the residual budget it buys (Guo et al. 2020, Thm 3, Alg. 1–2).

Symbols → arguments: σ → ``sigma``, ε → ``epsilon``, δ → ``delta``, ε′ (largest admissible gradient-residual
norm, "the budget") → return value of :func:`residual_budget`, c → :func:`gaussian_c`.

* ``noise="gaussian"`` (Thm 3 ii): b ~ N(0, σ² I_d). Two calibrations of the budget ε′:

  - ``calibration="paper"``: c = √(2 log(1.5/δ)), σ = c ε′ / ε, i.e. ε′ = σ ε / c (Alg. 2, line 16). Thm 3 (ii)
    rests on the Gaussian-mechanism argument of Dwork & Roth, Thm 3.22, which is stated for ε < 1; for ε ≥ 1
    :func:`residual_budget` checks the calibration against the *exact* privacy profile of the Gaussian mechanism
    (Balle & Wang 2018) and refuses a calibration that would not hold.
  - ``calibration="analytic"``: the exact calibration of the analytic Gaussian mechanism (Balle & Wang 2018,
    Thm 8 / Alg. 1): ε′ is the largest sensitivity Δ for which N(0, σ² I) is (ε, δ)-DP, ε′ = σ / σ₁(ε, δ) with
    σ₁ = :func:`lethe.privacy.analytic_gaussian_sigma` at sensitivity 1. Valid for every ε > 0, and never smaller
    than the paper's ε′ where the paper's is valid (σ₁ is the *smallest* admissible noise). The step of Thm 3 (ii)
    that it replaces is exactly the Gaussian-mechanism inequality: the densities of b and b − u, ‖u‖ ≤ ε′, satisfy
    the (ε, δ) condition, then Thm 2's argument applies unchanged (docs/tighter_bounds.md §6).

* ``noise="laplace"`` (Thm 3 i): density p(b) ∝ exp(−‖b‖₂ / σ): a direction uniform on the sphere and a norm
  ~ Γ(shape=d, scale=σ). p(b₁)/p(b₂) ≤ exp(‖b₁ − b₂‖/σ), so a residual of norm ≤ ε′ = σ ε gives pure ε-removal
  (already exact; ``calibration`` does not apply).
* ``noise="none"``: b = 0. Only meaningful for losses with γ = 0 (least squares), where the Newton step is exact
  and removal is 0-certified.
"""

from __future__ import annotations

import math

import numpy as np

from lethe._validation import check_choice, check_open_unit, check_positive

NOISES = ("gaussian", "laplace", "none")
CALIBRATIONS = ("paper", "analytic")


def gaussian_c(delta: float) -> float:
    """c = √(2 log(1.5/δ)) (Guo et al. 2020, Thm 3 ii: δ = 1.5 e^{−c²/2}; Alg. 2 line 7).

    >>> round(gaussian_c(1e-4), 4)
    4.3854
    """
    delta = check_open_unit("delta", delta)
    return math.sqrt(2.0 * math.log(1.5 / delta))


def residual_budget(sigma: float, epsilon: float, delta: float | None, noise: str = "gaussian",
                    calibration: str = "paper") -> float:
    """The largest accumulated gradient-residual norm ε′ that keeps (ε, δ)- (or ε-) certified removal.

    Gaussian, ``calibration="paper"``: ε′ = σ ε / c with c = :func:`gaussian_c` (Guo et al. 2020, Alg. 2).
    Gaussian, ``calibration="analytic"``: ε′ = σ / σ₁(ε, δ) (Balle & Wang 2018, exact for every ε).
    Laplace-type: ε′ = σ ε (Thm 3 i).

    Soundness guard (Gaussian): Thm 3 (ii) is the Gaussian mechanism with L2 sensitivity ε′ and noise σ. Its exact
    δ at ε is δ(ε) = Φ(ε′/(2σ) − εσ/ε′) − e^ε Φ(−ε′/(2σ) − εσ/ε′) (Balle & Wang 2018, Thm 8). If the paper's
    calibration gives δ(ε) > δ (possible for large ε, outside Dwork & Roth's ε < 1 domain), this raises; the
    analytic budget is checked the same way (and shrunk, should rounding ever put it above the exact value).

    >>> round(residual_budget(10.0, 1.0, 1e-4), 4)
    2.2803
    >>> round(residual_budget(10.0, 1.0, 1e-4, calibration="analytic"), 4)
    3.139
    """
    sigma = check_positive("sigma", sigma)
    epsilon = check_positive("epsilon", epsilon)
    noise = check_choice("noise", noise, NOISES)
    calibration = check_choice("calibration", calibration, CALIBRATIONS)
    if noise == "laplace":
        return sigma * epsilon
    if noise == "none":
        return 0.0
    if delta is None:
        raise ValueError("delta must be given for Gaussian noise. Found None.")
    delta = check_open_unit("delta", delta)
    if calibration == "analytic":
        from lethe.privacy import analytic_gaussian_sigma

        budget = sigma / float(analytic_gaussian_sigma(epsilon, delta, 1.0))
        while gaussian_delta_exact(epsilon, sigma, budget) > delta:  # pragma: no cover - rounding guard
            budget *= 1.0 - 1e-12
        return budget
    c = gaussian_c(delta)
    budget = sigma * epsilon / c
    exact = gaussian_delta_exact(epsilon, sigma, budget)
    if exact > delta:
        raise ValueError(
            f"The paper's calibration c = sqrt(2 log(1.5/delta)) does not give ({epsilon}, {delta})-removal at "
            f"epsilon = {epsilon}: the exact delta is {exact:.3g}. Use a smaller epsilon or the analytic calibration."
        )
    return budget


def gaussian_delta_exact(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism N(0, σ²) with L2 sensitivity Δ (Balle & Wang 2018, Thm 8)."""
    from lethe.privacy import analytic_gaussian_delta

    return float(analytic_gaussian_delta(epsilon, sigma, sensitivity))


def sample_perturbation(d: int, sigma: float, noise: str, rng: np.random.Generator) -> np.ndarray:
    """Draw b ∈ R^d for Algorithm 1 (Guo et al. 2020, Thm 3).

    Gaussian: σ · N(0, I_d). Laplace-type: u · r with u uniform on the unit sphere and r ~ Γ(d, σ), which is the
    density ∝ exp(−‖b‖/σ) (Chaudhuri et al. 2011). None: zeros.
    """
    noise = check_choice("noise", noise, NOISES)
    if noise == "none":
        return np.zeros(d)
    sigma = check_positive("sigma", sigma)
    if noise == "gaussian":
        return sigma * rng.standard_normal(d)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    return u * rng.gamma(shape=d, scale=sigma)


def epsilon_spent(residual_bound: float, sigma: float, delta: float | None, noise: str,
                  calibration: str = "paper") -> float:
    """The ε that an accumulated residual bound β certifies at this σ (inverse of :func:`residual_budget`).

    Paper calibration: β c / σ. Analytic: the smallest ε with δ(ε; σ, sensitivity β) ≤ δ
    (:func:`lethe.privacy.analytic_gaussian_epsilon`, rounded up).
    """
    if noise == "laplace":
        return residual_bound / sigma
    if noise == "none":
        return 0.0 if residual_bound == 0 else math.inf
    assert delta is not None
    if calibration == "analytic":
        from lethe.privacy import analytic_gaussian_epsilon

        if residual_bound <= 0.5 * delta * sigma:
            # μ = β/σ ≤ δ/2: δ(0) = 2Φ(μ/2) − 1 ≤ μ/√(2π) < δ, so ε = 0 (this also keeps μ from underflowing to 0)
            return 0.0
        try:
            eps = _fast_analytic_epsilon(delta, residual_bound / sigma)
        except (OverflowError, ZeroDivisionError, ValueError):  # extreme regimes: use the exact root-finder
            eps = None
        if eps is not None and gaussian_delta_exact(eps, sigma, residual_bound) <= delta:
            return eps  # verified against the exact profile of lethe.privacy
        return float(analytic_gaussian_epsilon(delta, sigma, residual_bound))
    return residual_bound * gaussian_c(delta) / sigma


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _fast_analytic_epsilon(delta: float, mu: float) -> float | None:
    """A candidate for the smallest ε with δ(ε; μ) ≤ δ, by Newton's method on log δ (d log δ/dε = −e^ε Φ(b)/δ,
    b = −μ/2 − ε/μ) safeguarded by bisection, in plain double precision, padded up by 1e-9 relative. The caller
    verifies it against the exact profile (per-certificate cost ~0.03 ms instead of a bracketing root-finder's
    ~0.2 ms); ``None`` if the iteration fails (the caller then uses :func:`lethe.privacy.analytic_gaussian_epsilon`).
    """
    def dlt(e: float) -> float:
        return _phi(mu / 2 - e / mu) - math.exp(e) * _phi(-mu / 2 - e / mu)

    if dlt(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, max(mu * mu / 2 + mu * math.sqrt(2 * math.log(1.25 / delta)), 1e-12)
    for _ in range(60):
        if dlt(hi) <= delta:
            break
        lo, hi = hi, 2 * hi
    else:
        return None
    e = hi
    for _ in range(100):
        d = dlt(e)
        if d <= delta:
            hi = e
        else:
            lo = e
        if hi - lo <= 1e-12 * hi:
            break
        slope = -math.exp(e) * _phi(-mu / 2 - e / mu)
        step = (d - delta) / slope if slope < 0 else math.inf
        e_new = e - step
        e = e_new if lo < e_new < hi else 0.5 * (lo + hi)
    return hi * (1.0 + 1e-9) if math.isfinite(hi) else None
