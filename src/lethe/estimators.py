"""Deprecated import path: the certified-removal estimators moved to :mod:`lethe.certified.estimators` (issue 34,
one package per family). This module re-exports the names it had and warns on import (``DeprecationWarning``); it
will be removed in the next release. Import from :mod:`lethe.certified.estimators` instead."""

from __future__ import annotations

import warnings

from lethe.certified.estimators import (
    INTERCEPT_SCALE,
    NOISE_TAIL_PROBABILITY,
    CertifiedLinearRegression,
    CertifiedLogisticRegression,
    MulticlassCertificate,
    check_sample_ids,
    joint_residual,
    keys_of,
    noise_norm_tail,
    removal_rows,
)

warnings.warn("lethe.estimators is deprecated and will be removed in the next release; import from "
              "lethe.certified.estimators instead.", DeprecationWarning, stacklevel=2)

__all__ = ["INTERCEPT_SCALE", "NOISE_TAIL_PROBABILITY", "CertifiedLinearRegression", "CertifiedLogisticRegression",
           "MulticlassCertificate", "check_sample_ids", "joint_residual", "keys_of", "noise_norm_tail", "removal_rows"]
