"""Alembic environment: run the revisions on the connection :class:`lethe.curator.store.Store` hands over.

Imported outside an Alembic run (e.g. by a doctest collector) it does nothing.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine

from lethe.curator.store import Base


def _run(config: Any) -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # used from the alembic command line: an URL in the config
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as conn:
            context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


_config: Any
try:
    _config = context.config
except Exception:  # no Alembic run in progress
    _config = None
if _config is not None:
    _run(_config)
