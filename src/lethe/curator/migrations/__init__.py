"""Schema migrations of the curator's store (Alembic).

:meth:`lethe.curator.store.Store.create` runs them: a new store is created from the models and stamped with the
newest revision; an existing one is upgraded to it (a store from before Alembic was used is first stamped with the
revision its ``meta.schema_version`` names). Each revision lives in ``versions/``; add one with a new file whose
``down_revision`` is the current head, and bump ``SCHEMA_VERSION`` / ``REVISIONS`` in :mod:`lethe.curator.store`.
"""
