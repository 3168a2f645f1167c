"""Differential-privacy toolkit: mechanisms, privacy loss, composition, accounting, output perturbation.

The public API is re-exported here; the math lives in one module per topic:

* :mod:`lethe.privacy.gaussian` — classical and analytic (exact) Gaussian calibration, exact δ(ε);
* :mod:`lethe.privacy.mechanisms` — Laplace and Gaussian mechanisms (scalar/vector, seeded or OS randomness);
* :mod:`lethe.privacy.plrv` — the privacy loss random variable and the (ε, δ) curves it implies;
* :mod:`lethe.privacy.composition` — group privacy, basic and advanced composition (lecture 9);
* :mod:`lethe.privacy.rdp` — Rényi DP of the Gaussian/Laplace mechanisms, composition, conversions;
* :mod:`lethe.privacy.accountant` — a budgeted ledger of frozen, serializable events;
* :mod:`lethe.privacy.output_perturbation` — output perturbation for L2-regularised ERM and its estimator;
* :mod:`lethe.privacy.objective_perturbation` — (ε, δ)-DP calibration of Gaussian objective perturbation;
* :mod:`lethe.privacy.release` — a sequence of Gaussian releases with fresh noise: calibration over a horizon, ε spent,
  the release accountant and certificate (used by :mod:`lethe.release`).

See ``docs/privacy.md`` for the derivations.
"""

from __future__ import annotations

from lethe.privacy.accountant import (
    ApproxDPEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyAccountant,
    PrivacyEvent,
    event_from_dict,
)
from lethe.privacy.composition import (
    advanced_composition,
    advanced_composition_epsilon,
    basic_composition,
    group_privacy,
)
from lethe.privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)
from lethe.privacy.mechanisms import (
    GaussianMechanism,
    LaplaceMechanism,
    OSRandomSource,
    gaussian_mechanism,
    laplace_mechanism,
)
from lethe.privacy.objective_perturbation import objective_perturbation_epsilon, objective_perturbation_sigma
from lethe.privacy.output_perturbation import (
    OutputPerturbationLogisticRegression,
    erm_sensitivity,
    excess_risk_bound,
    excess_risk_bound_from_sigma,
    output_perturbation_sigma,
)
from lethe.privacy.plrv import (
    GaussianPrivacyLoss,
    LaplacePrivacyLoss,
    empirical_hockey_stick,
    empirical_tail,
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
from lethe.privacy.release import (
    ReleaseAccountant,
    ReleaseCertificate,
    auto_n_floor,
    release_delta,
    release_epsilon_spent,
    release_noise_multiplier,
    release_sigma,
)

__all__ = [
    "DEFAULT_ORDERS",
    "ApproxDPEvent",
    "GaussianEvent",
    "GaussianMechanism",
    "GaussianPrivacyLoss",
    "LaplaceEvent",
    "LaplaceMechanism",
    "LaplacePrivacyLoss",
    "OSRandomSource",
    "OutputPerturbationLogisticRegression",
    "PrivacyAccountant",
    "PrivacyEvent",
    "ReleaseAccountant",
    "ReleaseCertificate",
    "advanced_composition",
    "advanced_composition_epsilon",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "auto_n_floor",
    "basic_composition",
    "best_dp_over_orders",
    "classical_gaussian_sigma",
    "compose_rdp",
    "empirical_hockey_stick",
    "empirical_tail",
    "erm_sensitivity",
    "event_from_dict",
    "excess_risk_bound",
    "excess_risk_bound_from_sigma",
    "gaussian_mechanism",
    "gaussian_rdp",
    "group_privacy",
    "laplace_mechanism",
    "laplace_rdp",
    "objective_perturbation_epsilon",
    "objective_perturbation_sigma",
    "output_perturbation_sigma",
    "pure_dp_rdp",
    "rdp_to_dp",
    "rdp_to_dp_tight",
    "release_delta",
    "release_epsilon_spent",
    "release_noise_multiplier",
    "release_sigma",
]
