"""Reproductions of the papers' experiments (Guo et al. 2020 §4; Chourasia & Shah 2023) with figures and a report.

Entry point: :func:`lethe.experiments.reproduce.main` (``lethe reproduce`` / ``python -m lethe.experiments.reproduce``).
Needs matplotlib (the ``plots`` extra); tqdm progress bars are used when installed.
"""

from lethe.experiments._common import FULL, PROFILES, QUICK, Profile

__all__ = ["FULL", "PROFILES", "QUICK", "Profile"]
