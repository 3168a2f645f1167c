"""Schema version 5: ``models.serve_unreleased``, the operator's opt-in to serve a model whose certificates cover one
published version (issue 26, part 3: predictions and weights are served from released models only).

Every existing model gets ``false``: after the upgrade, model-readers are refused the predictions and weights of a
``certified-removal``, Noisy-GD, noisy fine-tuning or sharded model until an operator retrains it with the opt-in
(``lethe model retrain`` keeps the stored choice; ``lethe train --serve-unreleased`` sets it) or replaces it with a
``released-logistic`` model. Admins and the CLI keep reading every model.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_4_to_5")
