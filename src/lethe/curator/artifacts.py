"""Model artifacts on disk: one ``.npz`` file per model version, written without pickle, owner-only (0600).

An artifact holds the mechanism's arrays (for certified removal: the weights ``w`` and the SECRET perturbation
``b``) and JSON metadata. Files are written atomically by :func:`lethe.io.save_npz`, verified by SHA-256 when loaded,
and destroyed — overwritten with zeros, flushed, then unlinked — once their version is superseded.

Layout: ``<data_dir>/artifacts/<uuid>.npz`` inside a directory of mode 0700.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lethe.io import load_npz, save_npz

ARTIFACT_DIR = "artifacts"


@dataclass(frozen=True, eq=False)
class Artifact:
    """What a mechanism adapter keeps of one model version: arrays (some secret) and JSON metadata."""

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


class ArtifactError(RuntimeError):
    """An artifact is missing, corrupt, or does not match its recorded checksum."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ArtifactStore:
    """Reads, writes and destroys artifacts under ``<data_dir>/artifacts``."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.root = self.data_dir / ARTIFACT_DIR

    def _dir(self) -> Path:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return self.root

    def save(self, artifact: Artifact) -> tuple[str, str]:
        """Write a new artifact file (a fresh name); return (path relative to the data directory, sha256)."""
        path = self._dir() / f"{uuid.uuid4().hex}.npz"
        save_npz(path, artifact.arrays, artifact.meta, secret=True)
        self._fsync_dir(path.parent)
        return str(path.relative_to(self.data_dir)), _sha256(path)

    def load(self, relpath: str, sha256: str) -> Artifact:
        """Read an artifact and check it against its recorded checksum."""
        path = self.resolve(relpath)
        if not path.is_file():
            raise ArtifactError(f"Artifact {relpath} is missing.")
        digest = _sha256(path)
        if digest != sha256:
            raise ArtifactError(f"Artifact {relpath} does not match its checksum (expected {sha256}, found {digest}).")
        arrays, meta = load_npz(path)
        return Artifact(arrays=arrays, meta=meta)

    def resolve(self, relpath: str) -> Path:
        """The absolute path of a stored relative path; refuses paths that leave the artifact directory."""
        path = (self.data_dir / relpath).resolve()
        if self.root not in path.parents:
            raise ArtifactError(f"Artifact path {relpath!r} is outside {self.root}.")
        return path

    def destroy(self, relpath: str) -> bool:
        """Overwrite the file with zeros, flush it, then unlink it. Returns False if it was already gone."""
        path = self.resolve(relpath)
        return destroy_file(path)

    def all_files(self) -> list[str]:
        """Every artifact file (relative paths), including temporary ones left by a crash."""
        if not self.root.exists():
            return []
        return sorted(str(p.relative_to(self.data_dir)) for p in self.root.rglob("*") if p.is_file())

    @staticmethod
    def _fsync_dir(d: Path) -> None:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def destroy_file(path: Path) -> bool:
    """Overwrite ``path`` with zeros (same length), fsync, unlink. Returns False if it did not exist.

    On copy-on-write or journaling file systems and SSDs the old blocks may survive on the device; the
    file system no longer exposes them. See ``docs/curator.md`` (operating guide) for disk-level measures.
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        zeros = b"\0" * min(size, 1 << 20)
        left = size
        while left > 0:
            left -= os.write(fd, zeros[: min(left, len(zeros))])
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


__all__ = ["Artifact", "ArtifactError", "ArtifactStore", "destroy_file"]
