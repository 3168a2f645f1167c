"""Schema version 4: the console's composite indexes on ``deletion_requests`` are part of the schema.

Versions 2 and 3 created them when the console started (and ran without them, slower, on a read-only store);
they are now created once, here, for existing stores, and with the tables for new ones.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_3_to_4")
