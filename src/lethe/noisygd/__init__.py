"""Deletion with Noisy-GD: learning, unlearning, edit requests and deletion privacy (Chourasia & Shah 2023).

* math — :mod:`~lethe.noisygd.algorithm` (Noisy-GD, Algorithm 2; loss kernels), :mod:`~lethe.noisygd.models`,
  :mod:`~lethe.noisygd.schedule` (Thm 5.1, 5.2, G.15 Eq. 114), :mod:`~lethe.noisygd.guarantees`
  (Thm G.7, G.9, 4.1, 4.3);
* mechanism — :mod:`~lethe.noisygd.edit_stream` (the stream of edit requests of Algorithm 1: edit requests Def. 2.4,
  the paper's data curator Def. 5.1, requesters). Not to be confused with :mod:`lethe.curator`, the deletion
  *service* (store, worker, HTTP API) that runs this curator through its ``noisy-gd`` adapter;
* front end — :mod:`~lethe.noisygd.estimators` (scikit-learn classifiers with ``edit`` / ``remove``),
  :mod:`~lethe.noisygd.pnsgd` (projected noisy SGD, Chien et al. 2024), :mod:`~lethe.noisygd.estimator_io` (their
  inputs and model files).

Derivations and the paper's inconsistencies (and which reading is used) are in ``docs/noisygd.md``.
"""

from lethe.noisygd.algorithm import NoisyGDChainsResult, NoisyGDResult, clip_rows, noisy_gd, noisy_gd_chains
from lethe.noisygd.certificate import NoisyGDCertificate
from lethe.noisygd.edit_stream import (
    AdaptiveRequester,
    CuratorConfig,
    Database,
    EditRequest,
    EditRequestError,
    NoisyGDCurator,
    NonAdaptiveRequester,
    Replacement,
    Transcript,
    identity_publish,
    interact,
)
from lethe.noisygd.estimators import (
    NoisyGDBoundedMLPClassifier,
    NoisyGDLogisticRegression,
    NoisyGDMLPClassifier,
)
from lethe.noisygd.guarantees import (
    adaptive_deletion_epsilon,
    deletion_privacy_to_dp,
    exposure_deletion_epsilon,
    membership_advantage_bound,
    noisy_gd_rdp,
    noisy_gd_rdp_convex,
)
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, MLPModel
from lethe.noisygd.pnsgd import PNSGDCertificate, PNSGDLogisticRegression
from lethe.noisygd.schedule import (
    ConvexSchedule,
    NonConvexSchedule,
    convex_deletion_epsilon,
    convex_excess_risk_bound,
    convex_schedule,
    convex_unlearning_steps,
    nonconvex_deletion_epsilon,
    nonconvex_excess_risk_bound,
    nonconvex_schedule,
    nonconvex_schedule_for_loss,
)

__all__ = [
    "AdaptiveRequester",
    "PNSGDCertificate",
    "PNSGDLogisticRegression",
    "BoundedMLPModel",
    "ConvexSchedule",
    "CuratorConfig",
    "Database",
    "EditRequest",
    "EditRequestError",
    "LogisticModel",
    "MLPModel",
    "NoisyGDCertificate",
    "NoisyGDBoundedMLPClassifier",
    "NoisyGDCurator",
    "NoisyGDLogisticRegression",
    "NoisyGDMLPClassifier",
    "NoisyGDChainsResult",
    "NoisyGDResult",
    "NonAdaptiveRequester",
    "NonConvexSchedule",
    "Replacement",
    "Transcript",
    "adaptive_deletion_epsilon",
    "clip_rows",
    "convex_deletion_epsilon",
    "convex_excess_risk_bound",
    "convex_schedule",
    "convex_unlearning_steps",
    "deletion_privacy_to_dp",
    "exposure_deletion_epsilon",
    "identity_publish",
    "interact",
    "membership_advantage_bound",
    "noisy_gd",
    "noisy_gd_chains",
    "noisy_gd_rdp",
    "noisy_gd_rdp_convex",
    "nonconvex_deletion_epsilon",
    "nonconvex_excess_risk_bound",
    "nonconvex_schedule",
    "nonconvex_schedule_for_loss",
]
