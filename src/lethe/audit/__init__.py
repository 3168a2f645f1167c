"""Membership-inference audit of unlearning: loss-threshold and (offline and online) LiRA attacks, advantage with
exact intervals, next to the bounds of the guarantees (Chourasia & Shah 2023, Thm 4.1, Eq. 12; (ε, δ)
hypothesis-testing bound); :mod:`lethe.audit.model` audits every published version of a user's own model."""

from lethe.audit.attacks import lira_offline_scores, lira_online_scores, logit_confidence, loss_scores
from lethe.audit.model import ModelAudit, VersionAudit, audit_model, audit_version
from lethe.audit.stats import Advantage, advantage, clopper_pearson, dp_advantage_bound, eq12_advantage_bound

__all__ = ["Advantage", "ModelAudit", "VersionAudit", "advantage", "audit_model", "audit_version", "clopper_pearson",
           "dp_advantage_bound", "eq12_advantage_bound", "lira_offline_scores", "lira_online_scores",
           "logit_confidence", "loss_scores"]
