"""Alembic revisions of the curator's store, oldest first: 0001 (initial), 0002 (live request uniqueness),
0003 (the console's request indexes)."""
