"""Private releases of a model that forgets (issue 26): the released-logistic family.

* :mod:`lethe.release.estimator` — :class:`ReleasedLogisticRegression`, the scikit-learn estimator;
* :mod:`lethe.release.certificate` — :class:`Release` and the sentences its certificate states;
* :mod:`lethe.release.checks` — the invariants of a stored release stream and the re-measure of its centre;
* :mod:`lethe.release.model_file` — the estimator's ``save``/``load`` and the checks a loaded file must pass.

The public names are re-exported here (``from lethe.release import ReleasedLogisticRegression``).
"""

from __future__ import annotations

from lethe.privacy.release import ReleaseCertificate
from lethe.release.certificate import GUARANTEE, SCHEDULE_REVEALS, SEEDED_GUARANTEE, Release
from lethe.release.checks import check_release_state, measured_centre_residual
from lethe.release.estimator import ReleasedLogisticRegression

__all__ = ["GUARANTEE", "SCHEDULE_REVEALS", "SEEDED_GUARANTEE", "Release", "ReleaseCertificate",
           "ReleasedLogisticRegression", "check_release_state", "measured_centre_residual"]
