"""Model artifacts on disk: one ``.npz`` file per model version, written without pickle, owner-only (0600).

An artifact holds the mechanism's arrays (for certified removal: the weights ``w`` and the SECRET perturbation
``b``) and JSON metadata. Files are written atomically (temporary file, fsync, rename) and destroyed — overwritten with
zeros, flushed, then unlinked — once their version is superseded.

Authentication: a file edited on disk must not certify (a β set to 0, a σ raised in the parameters, scaled weights
would otherwise give a false certificate). Every artifact carries ``HMAC-SHA256(key, canonical(arrays, meta,
binding))`` where the key is 32 random bytes in ``<data_dir>/secrets/artifact_key`` (0600, created on first use)
and the *binding* names what the file is for: the mechanism, its parameters (σ, λ, ε, δ, ...), the model and the
number of features. Loading checks, in order: the SHA-256 recorded in the database, the HMAC (a missing one is a
failure), the binding the caller expects (parameters in the database edited → refused), then the state's invariants
(:func:`check_invariants`: shapes, finiteness, β ≤ ε′ for certified removal). Any failure is an
:class:`ArtifactError`; nothing is certified from that file. The HMAC does not protect against someone who can read
the secrets directory: keep the data directory owner-only (it is created 0700).

Layout: ``<data_dir>/artifacts/<uuid>.npz`` inside a directory of mode 0700.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lethe.curator.files import fsync_path, load_or_create_secret, write_zeros
from lethe.io import META_KEY, write_npz_atomic  # the same layout as lethe.io's files: arrays + JSON meta as uint8


def _write_npz(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write arrays + JSON metadata atomically (temporary file, fsync, rename), mode 0600, without pickle.

    The metadata is encoded here (no ``format_version``, non-finite floats allowed) because it is what the HMAC
    covers (:func:`canonical_bytes`); the file writing itself is :func:`lethe.io.write_npz_atomic`.
    """
    write_npz_atomic(path, arrays, json.dumps(meta, sort_keys=True, allow_nan=True).encode(), mode=0o600)


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as z:
        if META_KEY not in z.files:
            raise ValueError(f"no {META_KEY!r} entry")
        meta = json.loads(bytes(z[META_KEY]).decode())
        arrays = {k: z[k] for k in z.files if k != META_KEY}
    if not isinstance(meta, dict):
        raise ValueError("metadata is not an object")
    return arrays, meta

ARTIFACT_DIR = "artifacts"
KEY_FILE = "secrets/artifact_key"
MAC_FIELD = "_mac"
BINDING_FIELD = "_binding"
_DOMAIN = b"lethe-artifact-hmac-v1\x00"


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


def canonical_bytes(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> bytes:
    """The bytes the HMAC covers: a domain tag, the JSON metadata (sorted keys, binding included), then every array
    by sorted name with its dtype, shape and C-order bytes."""
    parts = [_DOMAIN, json.dumps(meta, sort_keys=True, allow_nan=True).encode(), b"\x00"]
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        head = json.dumps([name, a.dtype.str, list(a.shape)]).encode()
        parts += [len(head).to_bytes(8, "little"), head, a.nbytes.to_bytes(8, "little"), a.tobytes()]
    return b"".join(parts)


def _load_key(path: Path) -> bytes:
    """The artifact HMAC key: 32 random bytes, created 0600 on first use (exclusive create: no race)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = load_or_create_secret(path, 32)
    if len(data) != 32:
        raise ArtifactError(f"The artifact key {path.name} is damaged: expected 32 bytes, found {len(data)}.")
    return data


def finite_array(arrays: dict[str, np.ndarray], name: str, d: int | None) -> np.ndarray:
    a = arrays.get(name)
    if a is None:
        raise ArtifactError(f"array {name!r} is missing.")
    if a.dtype != np.float64 or a.ndim != 1 or (d is not None and a.shape[0] != d):
        raise ArtifactError(f"array {name!r} must be float64 of shape ({d},). Found {a.dtype} {a.shape}.")
    if not np.all(np.isfinite(a)):
        raise ArtifactError(f"array {name!r} holds non-finite values.")
    return a


def check_invariants(artifact: Artifact, binding: dict[str, Any] | None) -> None:
    """Validate a loaded state against itself and against its (authenticated) binding.

    Generic here: the mechanism the state is for is the binding's; n is an integer >= 1. The rest is the family's
    own check, :meth:`lethe.curator.adapters.MechanismAdapter.check_artifact` of the adapter the registry
    (:mod:`lethe.families`) names for the mechanism — e.g. certified removal's β ≤ ε′ (Guo et al. 2020, Alg. 2),
    judged by the mechanism's own decision. A mechanism no registered family runs is refused: a state is never
    loaded unchecked. Raises :class:`ArtifactError` naming the rule and the value.
    """
    from lethe.families import family_of_mechanism

    meta = artifact.meta
    b = binding or {}
    mech = b.get("mechanism", meta.get("mechanism"))
    if b and meta.get("mechanism") != mech:
        raise ArtifactError(f"the state is for mechanism {meta.get('mechanism')!r}, the model uses {mech!r}.")
    n = meta.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArtifactError(f"the state's record count n must be an integer >= 1. Found {n!r}.")
    adapter: Any
    try:
        adapter = family_of_mechanism(str(mech)).adapter_class()
    except ValueError:
        adapter = None
    if adapter is None:
        raise ArtifactError(f"no registered family runs mechanism {mech!r}: its state cannot be checked.")
    try:
        adapter.check_artifact(artifact, b.get("n_features"), b.get("params"))
    except ArtifactError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise ArtifactError(f"the {mech} state is malformed: {exc}") from None


class ArtifactStore:
    """Reads, writes and destroys artifacts under ``<data_dir>/artifacts``; authenticates them (module docstring)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.root = self.data_dir / ARTIFACT_DIR
        self._key_path = self.data_dir / KEY_FILE
        self._key: bytes | None = None

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = _load_key(self._key_path)
        return self._key

    def _mac(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str:
        return hmac.new(self.key, canonical_bytes(arrays, meta), hashlib.sha256).hexdigest()

    def _dir(self) -> Path:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return self.root

    def save(self, artifact: Artifact, binding: dict[str, Any] | None = None) -> tuple[str, str]:
        """Write a new authenticated artifact file (a fresh name); return (path relative to the data directory,
        sha256). ``binding``: what the file is for (mechanism, params, model, n_features), covered by the HMAC."""
        for reserved in (MAC_FIELD, BINDING_FIELD):
            if reserved in artifact.meta:
                raise ValueError(f"artifact metadata key {reserved!r} is reserved. Found it in the metadata.")
        if binding is not None:
            check_invariants(artifact, binding)  # never write a state that would be refused on load
        meta = {**artifact.meta, BINDING_FIELD: binding}
        arrays = {k: np.asarray(a) for k, a in artifact.arrays.items()}
        meta[MAC_FIELD] = self._mac(arrays, meta)
        path = self._dir() / f"{uuid.uuid4().hex}.npz"
        _write_npz(path, arrays, meta)
        fsync_path(path.parent)
        return str(path.relative_to(self.data_dir)), _sha256(path)

    def load(self, relpath: str, sha256: str, binding: dict[str, Any] | None = None) -> Artifact:
        """Read an artifact and authenticate it: recorded checksum, HMAC, expected ``binding`` (when given), then
        :func:`check_invariants`. Raises :class:`ArtifactError` (its message is for operators: it names the file)."""
        path = self.resolve(relpath)
        if not path.is_file():
            raise ArtifactError(f"Artifact {relpath} is missing.")
        digest = _sha256(path)
        if digest != sha256:
            raise ArtifactError(f"Artifact {relpath} does not match its checksum (expected {sha256}, found {digest}).")
        try:
            arrays, meta = _read_npz(path)
        except Exception as exc:  # a damaged zip, bad JSON, a pickled array: all refused alike
            raise ArtifactError(f"Artifact {relpath} cannot be read: {type(exc).__name__}.") from None
        mac = meta.pop(MAC_FIELD, None)
        if not isinstance(mac, str):
            raise ArtifactError(f"Artifact {relpath} is not authenticated (no HMAC): it may have been edited; "
                                "refusing to certify from it. Repair: `lethe model retrain MODEL`.")
        if not hmac.compare_digest(mac, self._mac(arrays, meta)):
            raise ArtifactError(f"Artifact {relpath} failed authentication (HMAC mismatch): it was edited or "
                                "written with another key; refusing to certify from it. Repair: "
                                "`lethe model retrain MODEL`.")
        stored_binding = meta.pop(BINDING_FIELD, None)
        if binding is not None and _normal(stored_binding) != _normal(binding):
            raise ArtifactError(f"Artifact {relpath} was written for {stored_binding!r}, but the database now says "
                                f"{binding!r}: the parameters were changed; refusing to certify.")
        art = Artifact(arrays=arrays, meta=meta)
        try:
            check_invariants(art, stored_binding if stored_binding is not None else binding)
        except ArtifactError as exc:
            raise ArtifactError(f"Artifact {relpath} is inconsistent: {exc}") from None
        return art

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



def _normal(obj: Any) -> Any:
    """JSON round trip (tuples → lists, int/float keys → str) so that bindings compare as stored."""
    return None if obj is None else json.loads(json.dumps(obj, sort_keys=True, allow_nan=True))


def destroy_file(path: Path) -> bool:
    """Overwrite ``path`` with zeros (same length), fsync, unlink. Returns False if it did not exist.

    On copy-on-write or journaling file systems and SSDs the old blocks may survive on the device; the
    file system no longer exposes them. See ``docs/curator.md`` (operating guide) for disk-level measures.
    """
    if Path(path).is_dir():  # a Zarr store: every file of it, then the directories
        found = False
        for dirpath, _dirs, files in os.walk(path, topdown=False):
            for f in files:
                found = destroy_file(Path(dirpath) / f) or found
            os.rmdir(dirpath)
        return found
    try:
        write_zeros(path)
    except FileNotFoundError:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


__all__ = ["Artifact", "ArtifactError", "ArtifactStore", "canonical_bytes", "check_invariants", "destroy_file",
           "finite_array"]
