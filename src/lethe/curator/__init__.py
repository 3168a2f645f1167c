"""The curator service: deletion requests end to end (store, mechanism adapters, worker, HTTP API).

Mechanisms come from the registry of families (:mod:`lethe.families`); no module registers one by being
imported here. Needs the ``service`` extra (SQLAlchemy, FastAPI, uvicorn, pandas, pyarrow, tqdm). See
``docs/curator.md``.

>>> from lethe.curator import Curator, Settings   # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from lethe.certified.adapter import CertifiedRemovalAdapter


def __getattr__(name: str) -> Any:
    """``CertifiedRemovalAdapter`` lives in its family's package (:mod:`lethe.certified.adapter`, issue 34) and is
    imported when asked for: the service imports a family's adapter only when one of its models is in use."""
    if name == "CertifiedRemovalAdapter":
        from lethe.certified.adapter import CertifiedRemovalAdapter

        return CertifiedRemovalAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Artifact", "ArtifactError", "ArtifactStore", "BackgroundWorker", "BatchResult", "BusyError",
    "CertifiedRemovalAdapter", "ConflictError", "Curator", "CuratorError", "InvalidInputError", "MechanismAdapter",
    "NotFoundError", "PermissionDeniedError", "Principal", "Settings", "available_mechanisms", "get_adapter",
    "register_adapter", "run_worker",
]
