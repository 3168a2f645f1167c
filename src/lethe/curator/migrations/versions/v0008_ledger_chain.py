"""Schema version 8: ``ledger.hash``, the tamper-evident hash chain of the ledger (issue 38).

Every event carries ``SHA-256(previous event's hash ‖ canonical JSON of the event)`` (:mod:`lethe.curator.chain`);
existing events get their links here, in id order. ``lethe ledger verify`` and the console's ledger check walk the
chain; the head is published by ``GET /v1/keys`` and ``GET /v1/status``.

Revision ID: 0008
Revises: 0005
"""

from __future__ import annotations

from lethe.curator.migrations import store_step

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
upgrade, downgrade = store_step("migrate_chain_ledger")
