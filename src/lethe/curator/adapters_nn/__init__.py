"""Old path of :mod:`lethe.nn.adapter` (the ``noisy-finetune`` service adapter moved into its family's package,
issue 34): re-exports its names so that code written against the old path still imports. Internal; use
:mod:`lethe.nn.adapter`.

A package rather than a module file so that the old file counts as moved for git (its history and concurrent edits
follow it to :mod:`lethe.nn.adapter`).
"""

from __future__ import annotations

from lethe.nn.adapter import NoisyFineTuneAdapter

__all__ = ["NoisyFineTuneAdapter"]
