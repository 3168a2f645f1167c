"""Old path of :mod:`lethe.sharded.adapter` (the ``sharded`` service adapter moved into its family's package,
issue 34): re-exports its names so that code written against the old path still imports. Internal; use
:mod:`lethe.sharded.adapter`.

A package rather than a module file so that the old file counts as moved for git (its history and concurrent edits
follow it to :mod:`lethe.sharded.adapter`).
"""

from __future__ import annotations

from lethe.sharded.adapter import ESTIMATORS, ShardedAdapter

__all__ = ["ESTIMATORS", "ShardedAdapter"]
