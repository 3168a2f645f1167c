"""Alembic revisions of the curator's store, oldest first: 0001 (initial), 0002 (live request uniqueness)."""
