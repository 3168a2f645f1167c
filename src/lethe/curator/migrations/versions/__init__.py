"""Alembic revisions of the curator's store, oldest first: 0001 (initial), 0002 (live request uniqueness),
0003 (certificates reduced to their publishable fields), 0004 (the console's request indexes)."""
