"""Old path of :mod:`lethe.release.adapter` (the ``released-logistic`` service adapter moved into its family's
package, issue 34): re-exports its names so that code written against the old path still imports. Internal; use
:mod:`lethe.release.adapter`.

A package rather than a module file so that the old file counts as moved for git (its history and concurrent edits
follow it to :mod:`lethe.release.adapter`).
"""

from __future__ import annotations

from lethe.release.adapter import SCHEDULE_REVEALS, ReleasedLogisticAdapter, check_released_logistic, release_noise

__all__ = ["SCHEDULE_REVEALS", "ReleasedLogisticAdapter", "check_released_logistic", "release_noise"]
