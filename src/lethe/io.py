"""Safe persistence without pickle: one ``.npz`` file (``allow_pickle=False``) holding arrays plus JSON metadata.

Files that contain secret state (the objective perturbation b, see :mod:`lethe.certified.mechanism`) are created
with owner-only permissions (0600) from the start (``os.open`` with the mode, not a later ``chmod``), and written
atomically (temporary file, then rename) so a crash never leaves a half-written model.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

META_KEY = "__lethe_meta__"
FORMAT_VERSION = 1


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


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], *, secret: bool = True) -> Path:
    """Write ``arrays`` and JSON-serialisable ``meta`` to ``path`` atomically; mode 0600 when ``secret``.

    Raises ``TypeError`` if ``meta`` is not JSON-serialisable or an array has dtype object (nothing is written).
    """
    path = Path(path)
    for key, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise TypeError(f"Array {key!r} has dtype object, which cannot be saved without pickle.")
    if META_KEY in arrays:
        raise ValueError(f"{META_KEY!r} is reserved.")
    meta_bytes = json.dumps({"format_version": FORMAT_VERSION, **meta}, sort_keys=True).encode()
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


def load_npz(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`save_npz`: (arrays, meta). Never unpickles."""
    path = Path(path)
    with np.load(path, allow_pickle=False) as z:
        if META_KEY not in z.files:
            raise ValueError(f"{path} is not a lethe file: no {META_KEY!r} entry.")
        meta = json.loads(bytes(z[META_KEY]).decode())
        arrays = {k: z[k] for k in z.files if k != META_KEY}
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported format_version {meta.get('format_version')!r}.")
    return arrays, meta
