"""Safe persistence without pickle: one ``.npz`` file (``allow_pickle=False``) holding arrays plus JSON metadata.

Model files can carry an authentication tag (:func:`file_tag`, HMAC-SHA256 of every array and the metadata) under
a key given as an argument, ``$LETHE_MODEL_KEY`` or ``$LETHE_MODEL_KEY_FILE`` (:func:`model_key`); the policy that
:func:`load_npz` applies is documented there and in docs/estimators.md.

Files that contain secret state (the objective perturbation b, see :mod:`lethe.certified.mechanism`) are created
with owner-only permissions (0600) from the start (``os.open`` with the mode, not a later ``chmod``), and written
atomically (temporary file, then rename) so a crash never leaves a half-written model.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import struct
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

META_KEY = "__lethe_meta__"
TAG_KEY = "__lethe_tag__"
FORMAT_VERSION = 1

#: Where a model file's authentication key comes from when no ``key=`` is given (:func:`model_key`): the key in
#: hexadecimal, or the path of a file holding it in hexadecimal (e.g. written by ``openssl rand -hex 32``).
KEY_ENV = "LETHE_MODEL_KEY"
KEY_FILE_ENV = "LETHE_MODEL_KEY_FILE"
#: The shortest key accepted (128 bits).
MIN_KEY_BYTES = 16


class ModelFileError(ValueError):
    """A model file failed authentication or an invariant check at load: it was edited, corrupted, written under
    another key, or does not describe a state whose certificates hold. Nothing was loaded."""


def _parse_hex_key(text: str, source: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"{source} must hold the model key in hexadecimal (e.g. `openssl rand -hex 32`). "
                         "Found text that is not hexadecimal.") from None
    return key


def model_key(key: bytes | str | None = None) -> bytes | None:
    """The key that authenticates model files: ``key`` (bytes, or a hexadecimal string) if given, else the
    hexadecimal ``$LETHE_MODEL_KEY``, else the contents (hexadecimal) of the file ``$LETHE_MODEL_KEY_FILE``; None
    when none is configured. A key must have at least :data:`MIN_KEY_BYTES` bytes (ValueError otherwise); the key
    itself never appears in an error message."""
    if key is not None:
        if isinstance(key, str):
            raw = _parse_hex_key(key, "key")
        elif isinstance(key, bytes | bytearray):
            raw = bytes(key)
        else:
            raise TypeError(f"key must be bytes or a hexadecimal str. Found {type(key).__name__}.")
        source = "key"
    elif os.environ.get(KEY_ENV):
        raw = _parse_hex_key(os.environ[KEY_ENV], f"${KEY_ENV}")
        source = f"${KEY_ENV}"
    elif os.environ.get(KEY_FILE_ENV):
        kpath = Path(os.environ[KEY_FILE_ENV])
        try:
            text = kpath.read_text()
        except OSError as e:
            raise ValueError(f"${KEY_FILE_ENV} names {kpath}, which cannot be read: {e.strerror}.") from None
        raw = _parse_hex_key(text, f"The key file {kpath} (${KEY_FILE_ENV})")
        source = f"${KEY_FILE_ENV}"
    else:
        return None
    if len(raw) < MIN_KEY_BYTES:
        raise ValueError(f"The model key ({source}) must have at least {MIN_KEY_BYTES} bytes "
                         f"({2 * MIN_KEY_BYTES} hexadecimal digits). Found {len(raw)} bytes.")
    return raw


def file_tag(key: bytes, arrays: dict[str, np.ndarray], meta_bytes: bytes) -> bytes:
    """HMAC-SHA256 under ``key`` of a file's arrays and metadata, in one canonical encoding: a domain label, then
    per array in name order its name, dtype, shape and C-ordered bytes, then the metadata bytes, each item
    length-prefixed (so no two different files encode alike)."""
    mac = hmac.new(key, b"lethe-model-file-v1", hashlib.sha256)

    def item(data: bytes) -> None:
        mac.update(struct.pack(">Q", len(data)))
        mac.update(data)

    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        item(name.encode())
        item(arr.dtype.str.encode())
        item(json.dumps(list(arr.shape)).encode())
        item(arr.tobytes())
    item(meta_bytes)
    return mac.digest()


class JsonRecord:
    """Mixin for the dataclasses lethe publishes (schedules, certificates, audit results): ``to_dict()`` is
    :func:`dataclasses.asdict`, a JSON-serialisable dict of the fields (every field is a number, string, bool, None
    or a list/dict of them)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)  # type: ignore[call-overload]

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (keys sorted)."""
        return json.dumps(self.to_dict(), sort_keys=True)


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], *, secret: bool = True,
             key: bytes | None = None) -> Path:
    """Write ``arrays`` and JSON-serialisable ``meta`` to ``path`` atomically; mode 0600 when ``secret``. With a
    ``key`` (bytes, see :func:`model_key`) the file also holds its :func:`file_tag`, which :func:`load_npz` checks.

    Raises ``TypeError`` if ``meta`` is not JSON-serialisable or an array has dtype object (nothing is written).
    """
    path = Path(path)
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise TypeError(f"Array {name!r} has dtype object, which cannot be saved without pickle.")
    for reserved in (META_KEY, TAG_KEY):
        if reserved in arrays:
            raise ValueError(f"{reserved!r} is reserved.")
    meta_bytes = json.dumps({"format_version": FORMAT_VERSION, **meta}, sort_keys=True).encode()
    if key is not None:
        arrays = {**arrays, TAG_KEY: np.frombuffer(file_tag(key, arrays, meta_bytes), dtype=np.uint8)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_npz_atomic(path, arrays, meta_bytes, mode=0o600 if secret else 0o644)
    return path


def write_npz_atomic(path: Path, arrays: dict[str, np.ndarray], meta_bytes: bytes, *, mode: int) -> None:
    """Write ``arrays`` plus the already-encoded metadata ``meta_bytes`` (as ``META_KEY``) to ``path`` atomically.

    The file is a temporary in the same directory, given ``mode`` before any byte is written, fsynced, then renamed
    over ``path``; on any failure the temporary is removed and ``path`` is untouched. Never pickles (object arrays
    raise ``TypeError``). The caller chooses the metadata encoding (:func:`save_npz` adds ``format_version``; the
    curator's artifacts sign theirs with an HMAC, :mod:`lethe.curator.artifacts`).
    """
    for key, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise TypeError(f"Array {key!r} has dtype object, which cannot be saved without pickle.")
    buf = io.BytesIO()
    np.savez(buf, **{META_KEY: np.frombuffer(meta_bytes, dtype=np.uint8)}, **arrays)  # type: ignore[arg-type]
    write_bytes_atomic(path, buf.getvalue(), mode=mode, suffix=".npz")


def write_bytes_atomic(path: Path, data: bytes, *, mode: int, fsync: bool = True, suffix: str = "") -> None:
    """Replace ``path`` by a file holding ``data``, atomically: a new temporary in the same directory, given ``mode``
    before any byte is written, fsynced (unless ``fsync=False``), then renamed over ``path`` — so readers see the
    old file or the new one, never a part, and every write is a new inode. On any failure the temporary is removed
    and ``path`` is untouched."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_npz(path: str | Path, *, key: bytes | None = None,
             authenticate: bool = False) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`save_npz`: (arrays, meta). Never unpickles.

    ``authenticate=True`` applies the policy of authenticated model files (``key`` from :func:`model_key`):

    * a tagged file needs the key: without one it is refused (a file someone chose to protect is not read
      unchecked);
    * with a key, an untagged file is refused (an attacker could otherwise strip the tag), and a tagged file loads
      only if its tag matches (a constant-time comparison);
    * neither key nor tag: the file is read (the invariant checks of the caller still apply).

    Without ``authenticate`` a given ``key`` is still checked against the tag. Failures raise
    :class:`ModelFileError`.
    """
    path = Path(path)
    with np.load(path, allow_pickle=False) as z:
        if META_KEY not in z.files:
            raise ValueError(f"{path} is not a lethe file: no {META_KEY!r} entry.")
        meta_bytes = bytes(z[META_KEY])
        arrays = {k: z[k] for k in z.files if k not in (META_KEY, TAG_KEY)}
        tag = bytes(z[TAG_KEY]) if TAG_KEY in z.files else None
    if authenticate or key is not None:
        if tag is None and key is not None:
            raise ModelFileError(
                f"{path} has no authentication tag, but a model key is configured (key=, ${KEY_ENV} or "
                f"${KEY_FILE_ENV}): an unauthenticated file is refused. Re-save it from a trusted copy with the key.")
        if tag is not None and key is None:
            raise ModelFileError(
                f"{path} carries an authentication tag (HMAC-SHA256) but no model key was given: pass key= or set "
                f"${KEY_ENV} (hexadecimal) or ${KEY_FILE_ENV}.")
        if tag is not None and key is not None and not hmac.compare_digest(tag, file_tag(key, arrays, meta_bytes)):
            raise ModelFileError(f"{path} failed authentication (HMAC-SHA256 tag mismatch): the file was modified "
                                 "after it was saved, or the key is not the one it was saved with.")
    meta = json.loads(meta_bytes.decode())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported format_version {meta.get('format_version')!r}.")
    return arrays, meta
