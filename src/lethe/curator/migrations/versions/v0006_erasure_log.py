"""Schema version 6: the erasure log (``erasures``) — the keyed digests of the keys deletion requests named, kept
when their dataset is dropped, so that registering the dataset again from its source (the documented repair of a
damaged data file) does not re-ingest a record erased on request (issue 35). Datasets dropped before the upgrade
get their entries from their requests.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_5_to_6")
