"""Schema version 7: the privacy ledger per dataset (issue 36, :mod:`lethe.curator.lifetime`).

Tables ``privacy_streams`` (every release stream of every model trained on a dataset: μ₁ of one release, its
horizon, the releases published — the count the service keeps, which an artifact's may not fall behind) and
``privacy_budgets`` (the operator's lifetime budget per dataset). Existing ``released-logistic`` models get an open
stream with the releases their published version records.

Revision ID: 0007
Revises: 0005 (revision 0006 is added on another branch; the chain is re-linked when they are merged)
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_5_to_7")
