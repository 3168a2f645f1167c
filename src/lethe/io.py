"""Safe persistence without pickle: one ``.npz`` file (``allow_pickle=False``) holding arrays plus JSON metadata.

Model files (:func:`save_model_file`, :func:`open_model_file`) always carry an authentication tag (:func:`file_tag`,
HMAC-SHA256 of every array and the metadata) under a key given as an argument, ``$LETHE_MODEL_KEY``, or the key file
(``$LETHE_MODEL_KEY_FILE``, else ``~/.config/lethe/model.key``), created on the first save where none exists
(:mod:`lethe.model_keys`); a file without a valid tag is refused unless the caller trusts it explicitly, and the
certificates of a model loaded that way say so (:mod:`lethe.model_origin`). The policy is documented at
:func:`open_model_file` and in docs/estimators.md ("Model files").

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# where a model file's key comes from when no ``key=`` is given (:func:`model_key`): $LETHE_MODEL_KEY (hexadecimal),
# else the key file (:func:`lethe.model_keys.key_file_path`, created on the first save)
from lethe.model_keys import (
    KEY_ENV,
    KEY_FILE_ENV,
    counts_path,
    create_key_file,
    key_file_path,
    read_key_file,
    record_counts,
    recorded_counts,
)
from lethe.model_origin import ModelFileOrigin, origin_of

META_KEY = "__lethe_meta__"
TAG_KEY = "__lethe_tag__"
FORMAT_VERSION = 1

#: The shortest key accepted (128 bits).
MIN_KEY_BYTES = 16
#: Metadata entries lethe adds to a model file itself (covered by the tag, removed before a family reads the rest):
#: the origin of a model loaded without authentication, and a release stream's id and counts.
ORIGIN_META = "__lethe_origin__"
STREAM_META = "__lethe_stream__"


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


def model_key(key: bytes | str | None = None, *, create: bool = False) -> bytes | None:
    """The key that authenticates model files: ``key`` (bytes, or a hexadecimal string) if given, else the
    hexadecimal ``$LETHE_MODEL_KEY``, else the contents (hexadecimal) of the key file
    (:func:`lethe.model_keys.key_file_path`: ``$LETHE_MODEL_KEY_FILE``, else ``$XDG_CONFIG_HOME/lethe/model.key`` or
    ``~/.config/lethe/model.key``), which must be owner-only. When that file does not exist: None, or with
    ``create=True`` (what ``save`` does) a new random 32-byte key written there first (owner-only, atomically; see
    :mod:`lethe.model_keys`). A key must have at least :data:`MIN_KEY_BYTES` bytes (ValueError otherwise); the key
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
    else:
        kpath = key_file_path()
        text = read_key_file(kpath)
        if text is None:
            if not create:
                return None
            text = create_key_file(kpath)
        raw = _parse_hex_key(text, f"The key file {kpath}")
        source = f"the key file {kpath}"
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
    tmp = f = None
    try:  # the temporary is created inside the try: an exception right after its creation still removes it
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=path.parent)
        f = os.fdopen(fd, "wb")  # the descriptor owned by a file object from here (closed if collected)
        with f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if f is None and tmp is not None:  # not yet handed to a file object: nothing else would close it
            os.close(fd)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_counts(stream: str, counts: dict[str, int], where: str) -> None:
    """Refuse (:class:`ModelFileError`) a file of the release stream ``stream`` whose ``counts`` are behind the
    highest ones recorded for it on this machine (:func:`lethe.model_keys.record_counts`)."""
    recorded = recorded_counts(stream)
    behind = {k: (int(counts.get(k, 0)), v) for k, v in recorded.items() if int(counts.get(k, 0)) < v}
    if behind:
        said = ", ".join(f"{k} {got} < {v}" for k, (got, v) in sorted(behind.items()))
        raise ModelFileError(
            f"{where} is an older state of release stream {stream} than one already saved or loaded here ({said}; "
            f"counters in {counts_path()}): using it would roll the accountant back and publish releases it "
            "already counted. Load the newest file of this stream.")


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], bytes, bytes | None]:
    with np.load(path, allow_pickle=False) as z:
        if META_KEY not in z.files:
            raise ValueError(f"{path} is not a lethe file: no {META_KEY!r} entry.")
        meta_bytes = bytes(z[META_KEY])
        arrays = {k: z[k] for k in z.files if k not in (META_KEY, TAG_KEY)}
        tag = bytes(z[TAG_KEY]) if TAG_KEY in z.files else None
    return arrays, meta_bytes, tag


_TRUST_HINT = (" If you trust this file anyway (e.g. a copy from a machine whose key you do not have), load it with "
               "trust_unauthenticated=True: it is still checked, and every certificate of the loaded model says it "
               "was not authenticated.")


def _authentication_failure(path: Path, arrays: dict[str, np.ndarray], meta_bytes: bytes, tag: bytes | None,
                            key: bytes | None) -> str | None:
    """Why the file does not authenticate under ``key`` (None: its tag matches, compared in constant time)."""
    if tag is None:
        return (f"{path} has no authentication tag: it was not written by lethe's save with a key, or its tag was "
                "stripped. An unauthenticated file may have been edited (sigma, the noise, the record keys, the "
                "counts) in ways its checks cannot see, so it is refused.")
    if key is None:
        return (f"{path} carries an authentication tag (HMAC-SHA256) but no model key was given or configured: pass "
                f"key=, set ${KEY_ENV} (hexadecimal) or put the key in the key file ({key_file_path()}, or "
                f"${KEY_FILE_ENV}).")
    if not hmac.compare_digest(tag, file_tag(key, arrays, meta_bytes)):
        return (f"{path} failed authentication (HMAC-SHA256 tag mismatch): the file was modified after it was "
                "saved, or the key is not the one it was saved with.")
    return None


def _parse_meta(path: Path, meta_bytes: bytes) -> dict[str, Any]:
    meta = json.loads(meta_bytes.decode())
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported format_version "
                         f"{meta.get('format_version') if isinstance(meta, dict) else None!r}.")
    return meta


def load_npz(path: str | Path, *, key: bytes | None = None,
             authenticate: bool = False) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`save_npz`: (arrays, meta). Never unpickles.

    ``authenticate=True`` requires a valid tag under ``key`` (the policy of model files, :func:`open_model_file`,
    without its trust option); without it a given ``key`` is still checked against a tag, and a file without key
    and tag is read as it is (a cache, not a model). Failures raise :class:`ModelFileError`.
    """
    path = Path(path)
    arrays, meta_bytes, tag = _read_npz(path)
    if authenticate or (key is not None):
        why = _authentication_failure(path, arrays, meta_bytes, tag, key)
        if why is not None:
            raise ModelFileError(why)
    return arrays, _parse_meta(path, meta_bytes)


@dataclass(frozen=True)
class ModelFile:
    """A model file as :func:`open_model_file` read it: its arrays, its metadata (without the entries lethe adds,
    :data:`ORIGIN_META` and :data:`STREAM_META`), its origin, and the id and counts of the release stream it holds
    (or None)."""

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]
    origin: ModelFileOrigin
    stream: str | None = None
    counts: dict[str, int] | None = None


def open_model_file(path: str | Path, *, key: bytes | str | None = None,
                    trust_unauthenticated: bool = False) -> ModelFile:
    """Read and authenticate a model file (the policy of every lethe model's ``load``; docs/estimators.md).

    The key is :func:`model_key`'s (``key``, ``$LETHE_MODEL_KEY``, the key file). The file loads only with a tag
    that matches under that key (HMAC-SHA256 of every array and the metadata, compared in constant time); a file
    without a tag (never keyed, or stripped), with a tag but no key here, or with a tag that does not match (edited,
    or another key) raises :class:`ModelFileError` — unless ``trust_unauthenticated=True``: then it is read, its
    origin says ``authenticated=False`` with why, and the loaded model's certificates say so
    (:mod:`lethe.model_origin`). A file saved by such a model keeps that origin (under its own valid tag).

    A release stream's file (:data:`STREAM_META`) is also checked against the counters beside the key
    (:func:`lethe.model_keys.check_counts`): a file behind the counts already saved or loaded here is refused, with
    or without a tag; an authenticated one raises the counters to its own.
    """
    path = Path(path)
    arrays, meta_bytes, tag = _read_npz(path)
    why = _authentication_failure(path, arrays, meta_bytes, tag, model_key(key))
    if why is not None and not trust_unauthenticated:
        raise ModelFileError(why + _TRUST_HINT)
    meta = _parse_meta(path, meta_bytes)
    before = meta.pop(ORIGIN_META, None)
    stream_meta = meta.pop(STREAM_META, None)
    stream = None
    if stream_meta is not None:
        ok = isinstance(stream_meta, dict) and isinstance(stream_meta.get("id"), str) and isinstance(
            stream_meta.get("counts"), dict) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                     for v in stream_meta["counts"].values())
        if not ok:
            raise ModelFileError(f"{path}: its release stream entry {stream_meta!r} is malformed: the file was "
                                 "edited or corrupted; it is refused.")
        stream = stream_meta["id"]
        check_counts(stream, stream_meta["counts"], str(path))
        if why is None:
            record_counts(stream, stream_meta["counts"])
    if why is not None:
        origin = ModelFileOrigin(str(path), False, f"loaded from {path} with trust_unauthenticated=True: {why}")
    elif isinstance(before, dict):
        origin = ModelFileOrigin(str(path), False, str(before.get("note", "an earlier load was unauthenticated")))
    elif before is not None:
        raise ModelFileError(f"{path}: its origin entry {before!r} is malformed; it is refused.")
    else:
        origin = ModelFileOrigin(str(path), True)
    counts = None if stream_meta is None else {str(k): int(v) for k, v in stream_meta["counts"].items()}
    return ModelFile(arrays, meta, origin, stream, counts)


def save_model_file(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], *,
                    key: bytes | str | None = None, model: Any = None,
                    stream: tuple[str, dict[str, int]] | None = None) -> Path:
    """Write a model file: owner-only, atomic, tagged under :func:`model_key`'s key (created on first use when none
    is configured, :mod:`lethe.model_keys`). ``model``: the model saved (an unauthenticated origin, see
    :func:`open_model_file`, is carried into the file); ``stream``: (id, counts) of a release stream, recorded in
    the file and then in the counters beside the key (never lowered)."""
    secret_key = model_key(key, create=True)
    meta = dict(meta)
    origin = origin_of(model)
    if origin is not None and not origin.authenticated:
        meta[ORIGIN_META] = {"note": origin.note}
    if stream is not None:
        meta[STREAM_META] = {"id": stream[0], "counts": {k: int(v) for k, v in stream[1].items()}}
        check_counts(stream[0], stream[1], f"The state being saved to {path}")  # the counts file is usable, first
    out = save_npz(path, arrays, meta, secret=True, key=secret_key)
    if stream is not None:
        record_counts(stream[0], stream[1])
    return out
