"""Schema version 3: the console's composite indexes on ``deletion_requests`` are part of the schema.

Version 2 created them when the console started (and ran without them, slower, on a read-only store); they are now
created once, here, for existing stores, and with the tables for new ones.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from lethe.curator.store import migrate_2_to_3

    migrate_2_to_3(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("The curator's store is never downgraded.")
