"""Schema version 3: stored certificates reduced to their publishable fields again.

Batches published by the set-wise publication (bulk inserts, before this revision) bypassed the ORM validator that
reduces a certificate to its allow-listed fields, so their certificates kept the mechanism's timings and solver
diagnostics (``seconds``, ``solve_error``, ``remainder_bound``, ``iterations``, ...). They are rewritten to their
allow-listed fields (answers were already filtered when shown).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_2_to_3")
