"""scikit-learn estimators for certified removal (Guo et al. 2020), in one place:

* :class:`CertifiedLogisticRegression` — binary logistic regression, or one-vs-all for more classes (§4.2), with the
  machinery both estimators share (:mod:`lethe.certified.estimators_logistic`);
* :class:`CertifiedLinearRegression` — ridge least squares with exact (0-certified) removal
  (:mod:`lethe.certified.estimators_linear`).

Their model files are in :mod:`lethe.certified.estimators_files`, their certified addition of records in
:mod:`lethe.certified.estimators_add`. This module only re-exports (the estimators' public path; the deprecated
``lethe.estimators`` re-exports it).
"""

from __future__ import annotations

from lethe.certified.estimators_linear import CertifiedLinearRegression
from lethe.certified.estimators_logistic import CertifiedLogisticRegression
from lethe.certified.model_file import NOISE_TAIL_PROBABILITY, noise_norm_tail
from lethe.certified.one_vs_all import MulticlassCertificate, joint_residual
from lethe.certified.rows import INTERCEPT_SCALE
from lethe.estimator_data import check_sample_ids, keys_of, removal_rows

__all__ = ["INTERCEPT_SCALE", "NOISE_TAIL_PROBABILITY", "CertifiedLinearRegression", "CertifiedLogisticRegression",
           "MulticlassCertificate", "check_sample_ids", "joint_residual", "keys_of", "noise_norm_tail", "removal_rows"]
