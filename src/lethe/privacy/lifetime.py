"""The lifetime privacy of a record across every release stream of a deployment (issue 36): exact μ-GDP composition.

A record held in a dataset meets every release of every model trained on it: several released models, retrains
(each a new stream with its own accountant), horizon renewals. Each release of a ``released-logistic`` stream is a
Gaussian mechanism of sensitivity Δ and noise σ whatever happened before (:mod:`lethe.privacy.release`), i.e.
μ₁-GDP with μ₁ = Δ/σ (Dong, Roth & Su 2019, Thm 2.7 / Cor 3.3), and μ-GDP mechanisms compose adaptively and exactly
to √(Σ μᵢ²)-GDP (Dong, Roth & Su 2019, Cor 3.3). So every release of every stream together is μ-GDP with

    μ = √(Σ_streams k_s · μ₁,s²)     (k_s releases of stream s),

and the exact (ε, δ) of μ-GDP is Balle & Wang 2018's Thm 8 for a Gaussian of sensitivity μ and σ = 1
(:func:`gdp_epsilon`). No slack: the same conversion the stream's own certificate uses.

A stream's μ₁ is bounded from its public parameters alone: σ = √T σ_BW(ε, δ) Δ (:func:`release_sigma`), so
μ₁ = Δ/σ = 1/(√T σ_BW(ε, δ)) (:func:`stream_release_mu`) — the same for every n_floor — and its whole horizon
is √T μ₁ = 1/σ_BW(ε, δ)-GDP. A stream with more noise than calibrated (allowed) has a smaller μ₁: the bound stays
an upper bound.

Examples
--------
>>> mu1 = stream_release_mu(1.0, 1e-5, 100)
>>> round(gdp_epsilon(lifetime_mu([(mu1, 100)]), 1e-5), 6) <= 1.0 + 1e-9
True
>>> round(gdp_epsilon(lifetime_mu([(mu1, 100)] * 10), 1e-5), 2)
3.62
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from lethe._validation import check_nonnegative, check_nonnegative_int, check_open_unit, check_positive
from lethe.privacy.gaussian import analytic_gaussian_epsilon, analytic_gaussian_sigma
from lethe.privacy.release import release_noise_multiplier

__all__ = ["gdp_epsilon", "gdp_mu", "lifetime_mu", "stream_release_mu"]


def stream_release_mu(epsilon: float, delta: float, horizon: int) -> float:
    """μ₁ of ONE release of a stream calibrated for ``horizon`` releases at (ε, δ): 1/(√T σ_BW(ε, δ))."""
    return 1.0 / release_noise_multiplier(epsilon, delta, horizon)


def lifetime_mu(streams: Iterable[tuple[float, int]]) -> float:
    """μ of every release together: √(Σ k μ₁²) over ``streams`` = (μ₁, k releases) pairs (exact GDP composition)."""
    total = 0.0
    for mu1, k in streams:
        total += check_nonnegative_int("releases", k) * check_nonnegative("mu", mu1) ** 2
    return math.sqrt(total)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ δ for μ-GDP (a Gaussian of sensitivity μ, σ = 1: Balle & Wang 2018, Thm 8),
    rounded up; 0 for μ = 0 (nothing released)."""
    dl = check_open_unit("delta", delta)
    m = check_nonnegative("mu", mu)
    return 0.0 if m == 0.0 else analytic_gaussian_epsilon(dl, 1.0, m)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ whose μ-GDP is (ε, δ)-DP: 1/σ_BW(ε, δ) (the inverse of :func:`gdp_epsilon`)."""
    return 1.0 / analytic_gaussian_sigma(check_positive("epsilon", epsilon), check_open_unit("delta", delta), 1.0)
