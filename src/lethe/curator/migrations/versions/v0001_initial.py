"""Initial schema (lethe 0.1, ``meta.schema_version`` 1).

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    from lethe.curator.store import Base

    Base.metadata.create_all(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("The curator's store is never downgraded.")
