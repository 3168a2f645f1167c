"""Membership-inference audit of unlearning: loss-threshold and (offline and online) LiRA attacks, advantage with
exact intervals, next to the bounds of the guarantees (Chourasia & Shah 2023, Thm 4.1, Eq. 12; (ε, δ)
hypothesis-testing bound); and version-diff attacks on a published sequence of models with the identification rate
an (ε, δ) guarantee allows (:mod:`lethe.audit.version_diff`, issue 26); and the audit of every published version
of a user's own model (:mod:`lethe.audit.model`)."""

from lethe.audit.attacks import lira_offline_scores, lira_online_scores, logit_confidence, loss_scores
from lethe.audit.model import ModelAudit, VersionAudit, audit_model, audit_version
from lethe.audit.stats import Advantage, advantage, clopper_pearson, dp_advantage_bound, eq12_advantage_bound
from lethe.audit.version_diff import (
    IdentificationRate,
    allowed_identification_rate,
    averaged_difference,
    batch_deletion_guess,
    diff_geometry,
    identification_rate,
    single_deletion_guess,
    single_deletion_scores,
)

__all__ = ["Advantage", "IdentificationRate", "ModelAudit", "VersionAudit", "advantage",
           "allowed_identification_rate", "audit_model", "audit_version", "averaged_difference",
           "batch_deletion_guess", "clopper_pearson", "diff_geometry", "dp_advantage_bound", "eq12_advantage_bound",
           "identification_rate", "lira_offline_scores", "lira_online_scores", "logit_confidence", "loss_scores",
           "single_deletion_guess", "single_deletion_scores"]
