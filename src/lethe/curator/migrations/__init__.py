"""Schema migrations of the curator's store (Alembic).

:meth:`lethe.curator.store.Store.create` runs them: a new store is created from the models and stamped with the
newest revision; an existing one is upgraded to it (a store from before Alembic was used is first stamped with the
revision its ``meta.schema_version`` names). Each revision lives in ``versions/``; add one with a new file whose
``down_revision`` is the current head, its step in :mod:`lethe.curator.migrations.steps`, and bump
``SCHEMA_VERSION`` / ``REVISIONS`` in :mod:`lethe.curator.store`.
"""

from __future__ import annotations

from collections.abc import Callable


def store_step(migrate: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """A revision's ``upgrade`` and ``downgrade``: run :mod:`lethe.curator.migrations.steps`' ``migrate`` on Alembic's
    connection.

    ``migrate`` names a function of the steps module that takes the connection (e.g. ``"migrate_1_to_2"``); it is
    looked up when the revision runs, so importing a revision does not import the store. Stores are never
    downgraded: ``downgrade`` raises ``NotImplementedError``.
    """

    def upgrade() -> None:
        from alembic import op

        from lethe.curator.migrations import steps

        getattr(steps, migrate)(op.get_bind())

    def downgrade() -> None:
        raise NotImplementedError("The curator's store is never downgraded.")

    return upgrade, downgrade
