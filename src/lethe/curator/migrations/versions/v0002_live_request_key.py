"""Schema version 2: at most one live request per dataset and key; certificates reduced to publishable fields.

Duplicate live requests (possible on PostgreSQL before this constraint) are closed as ``failed`` except the
earliest; stored certificates are rewritten to their allow-listed fields (version 1 stored ``removed_indices``, the
row positions of each batch); request errors are scrubbed; the partial unique index ``uq_live_request_key`` is
created.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from lethe.curator.store import migrate_1_to_2

    migrate_1_to_2(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("The curator's store is never downgraded.")
