"""Differential-privacy toolkit: mechanisms, privacy loss, composition, accounting, output perturbation.

The public API is re-exported here; the math lives in one module per topic:

* :mod:`lethe.privacy.gaussian` — classical and analytic (exact) Gaussian calibration;
* :mod:`lethe.privacy.rdp` — Rényi DP of the Gaussian/Laplace mechanisms, composition, conversions.
"""

from __future__ import annotations

from lethe.privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)
from lethe.privacy.rdp import (
    DEFAULT_ORDERS,
    best_dp_over_orders,
    compose_rdp,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    rdp_to_dp,
    rdp_to_dp_tight,
)

__all__ = [
    "DEFAULT_ORDERS",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "best_dp_over_orders",
    "classical_gaussian_sigma",
    "compose_rdp",
    "gaussian_rdp",
    "laplace_rdp",
    "pure_dp_rdp",
    "rdp_to_dp",
    "rdp_to_dp_tight",
]
