"""The curator service: deletion requests end to end (store, mechanism adapters, worker, HTTP API).

Mechanisms come from the registry of families (:mod:`lethe.families`); no module registers one by being
imported here. Needs the ``service`` extra (SQLAlchemy, FastAPI, uvicorn, pandas, pyarrow, tqdm). See
``docs/curator.md``.

>>> from lethe.curator import Curator, Settings   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from lethe.curator.adapters import MechanismAdapter, available_mechanisms, get_adapter, register_adapter
from lethe.curator.artifacts import Artifact, ArtifactError, ArtifactStore
from lethe.curator.batches import BatchResult
from lethe.curator.errors import (
    BusyError,
    ConflictError,
    CuratorError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from lethe.curator.service import Curator
from lethe.curator.settings import Principal, Settings
from lethe.curator.worker import BackgroundWorker, run_worker


def __getattr__(name: str) -> Any:
    """A family's service adapter asked for here (where one was exported before issue 34 moved each adapter into its
    family's package) is found through the registry, with a DeprecationWarning (:func:`adapters.moved_adapter`)."""
    from lethe.curator.adapters import moved_adapter

    return moved_adapter(__name__, name)


__all__ = [
    "Artifact", "ArtifactError", "ArtifactStore", "BackgroundWorker", "BatchResult", "BusyError",
    "ConflictError", "Curator", "CuratorError", "InvalidInputError", "MechanismAdapter",
    "NotFoundError", "PermissionDeniedError", "Principal", "Settings", "available_mechanisms", "get_adapter",
    "register_adapter", "run_worker",
]
