"""Alembic environment: run the revisions on the connection :class:`lethe.curator.store.Store` hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from lethe.curator.store import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # used from the alembic command line: an URL in the config
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
