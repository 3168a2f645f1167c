"""What a release publishes and what it promises: :class:`Release` (one published version) and the sentences its
:class:`~lethe.privacy.release.ReleaseCertificate` states (:data:`GUARANTEE`, :data:`SCHEDULE_REVEALS`,
:data:`SEEDED_GUARANTEE`), used by :class:`lethe.release.ReleasedLogisticRegression`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lethe.privacy.release import ReleaseCertificate

__all__ = ["GUARANTEE", "SCHEDULE_REVEALS", "SEEDED_GUARANTEE", "Release"]


GUARANTEE = ("(epsilon, delta)-differential privacy of the whole sequence of releases with respect to adding or "
             "removing any one record (fresh Gaussian noise per release, exact composition; "
             "docs/release_privacy.md), given the release schedule: the releases' times and count are published and "
             "are not covered (see schedule_reveals)")
_GUARANTEE = GUARANTEE

#: What the library's schedule reveals (``ReleaseCertificate.schedule_reveals``): releases follow the caller's calls
#: of ``remove`` (every ``cadence`` removals) and ``release`` (docs/release_privacy.md §3).
SCHEDULE_REVEALS = ("that removals happened, how many and when: a release follows every `cadence` calls of remove "
                    "(and every call of release); with releases on a clock only (release() every T seconds, a "
                    "cadence no removal reaches) it reveals nothing about the records")

#: The guarantee a SEEDED stream states instead (``random_state`` not None): anyone who knows or guesses the seed
#: regenerates the noise and subtracts it, recovering the exact centre; such releases are not private.
SEEDED_GUARANTEE = ("NOT PRIVATE: the release noise was seeded (random_state is not None); anyone who knows the seed "
                    "subtracts it and recovers the exact centre. Use random_state=None (operating-system randomness) "
                    "for anything published")


@dataclass(frozen=True)
class Release:
    """One published version: its number (0 = after ``fit``), the released weights and intercept, and the
    certificate of the whole sequence up to and including it. ``coef`` is a read-only copy."""

    version: int
    coef: np.ndarray
    intercept: float
    certificate: ReleaseCertificate

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: the published numbers and the certificate."""
        return {"version": self.version, "coef": [float(v) for v in self.coef], "intercept": float(self.intercept),
                "certificate": self.certificate.to_dict()}
