"""Schema version 2: at most one live request per dataset and key; certificates reduced to publishable fields.

Duplicate live requests (possible on PostgreSQL before this constraint) are closed as ``failed`` except the
earliest; stored certificates are rewritten to their allow-listed fields (version 1 stored ``removed_indices``, the
row positions of each batch); request errors are scrubbed; the partial unique index ``uq_live_request_key`` is
created.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_1_to_2")
