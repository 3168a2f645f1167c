"""The key that authenticates model files, created on first use, and the release counters kept beside it.

Foundation layer (no math, no state of its own beyond the two files below).

**The key** (:func:`key_file_path`, :func:`read_key_file`, :func:`create_key_file`). Where no key is configured
(``key=``, ``$LETHE_MODEL_KEY``), lethe uses the key file ``$LETHE_MODEL_KEY_FILE``, else
``$XDG_CONFIG_HOME/lethe/model.key``, else ``~/.config/lethe/model.key``. The first ``save`` without a key creates
it, as SSH creates a host key: 32 random bytes from the operating system, written in hexadecimal to an owner-only
file (0600) in an owner-only directory (0700, when lethe creates it), atomically: the key is written to a private
temporary file, then linked to its name, which fails if another process linked first (then that process's key is
used) — no reader ever sees a partial key, and two processes never use two keys. A key file that group or others
can read or write, or that belongs to another user, is refused (as ``ssh`` refuses such a private key).

**The release counters** (:func:`recorded_counts`, :func:`record_counts`; the check is
:func:`lethe.io.check_counts`). Beside the key file,
``<key file>.counts`` (owner-only JSON) maps the random id of each saved release stream
(:class:`lethe.release.ReleasedLogisticRegression`) to the highest counts it was saved or loaded with (releases
published, records removed), updated under an exclusive ``flock`` on ``<key file>.counts.lock`` that no exception
leaves held (:func:`record_counts`). A file whose counts are behind is refused at load: an older copy, even an authentic
one, would restart the ledger from an earlier point and publish releases the accountant already counted. Limits:
the counters live on this machine, under this key location; a copy of the file loaded on another machine, or under
another key location, or after the counts file was deleted, is checked against nothing (the service keeps its
count in its store instead).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

#: The environment variables of the model key: the key in hexadecimal, or the path of a file holding it.
KEY_ENV = "LETHE_MODEL_KEY"
KEY_FILE_ENV = "LETHE_MODEL_KEY_FILE"
#: Bytes of a key lethe creates.
NEW_KEY_BYTES = 32
#: seconds a save or load waits for the release counts file's lock before it refuses with a KeyFileError
COUNTS_LOCK_WAIT = 30.0
COUNTS_SUFFIX = ".counts"


class KeyFileError(ValueError):
    """The model key file (or the counts beside it) cannot be used: unreadable, not hexadecimal, or readable or
    writable by others."""


def key_file_path() -> Path:
    """The key file lethe reads (and creates on the first save) when no key is given and ``$LETHE_MODEL_KEY`` is
    unset: ``$LETHE_MODEL_KEY_FILE``, else ``$XDG_CONFIG_HOME/lethe/model.key``, else ``~/.config/lethe/model.key``."""
    if os.environ.get(KEY_FILE_ENV):
        return Path(os.environ[KEY_FILE_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lethe" / "model.key"


def _check_private(st: os.stat_result, path: Path, what: str, *, readable_by_others: bool = False) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"The {what} {path} is not a regular file.")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise KeyFileError(f"The {what} {path} belongs to user id {st.st_uid}, not to this user ({os.geteuid()}): "
                           "refused (whoever owns it can change it).")
    loose = st.st_mode & (0o022 if readable_by_others else 0o077)
    if loose:
        raise KeyFileError(f"The {what} {path} has permissions {stat.S_IMODE(st.st_mode):04o}: group or others can "
                           f"{'write' if readable_by_others else 'read or write'} it, so it is refused. Make it "
                           f"owner-only: chmod 600 {path}.")


def read_key_file(path: Path) -> str | None:
    """The text of the key file ``path`` (None if it does not exist), after checking that only its owner, this user,
    can read or write it (:class:`KeyFileError` otherwise; symbolic links are followed, the file itself is checked)."""
    try:  # opened and wrapped on one line: no line runs while the descriptor is bare (a fault there leaked it)
        f = os.fdopen(os.open(path, os.O_RDONLY), "r")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KeyFileError(f"The model key file {path} cannot be read: {e.strerror}.") from None
    with f:
        _check_private(os.fstat(f.fileno()), path, "model key file")
        return f.read()


def _private_dir(directory: Path) -> None:
    """Create ``directory`` (and parents) owner-only (0700) if it does not exist."""
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)


def create_key_file(path: Path) -> str:
    """Create the key file ``path`` with a new random key (hexadecimal text), atomically, unless it exists; return
    the text of the key file that exists afterwards (this process's or the one another process created first)."""
    _private_dir(path.parent)
    tmp = f = None
    try:  # the temporary is created inside the try: an exception right after its creation still removes it
        fd, tmp = tempfile.mkstemp(prefix=".model-key-", dir=path.parent)  # created 0600
        f = os.fdopen(fd, "w")  # the descriptor owned by a file object from here (closed if collected)
        with f:
            f.write(secrets.token_bytes(NEW_KEY_BYTES).hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another process created it first: use that one
            os.link(tmp, path)  # atomic, never replaces: the first key wins
    except BaseException:
        if f is None and tmp is not None:  # not yet handed to a file object: nothing else would close it
            os.close(fd)
        raise
    finally:
        if tmp is not None:
            os.unlink(tmp)
    text = read_key_file(path)
    if text is None:
        raise KeyFileError(f"The model key file {path} could not be created.")
    return text


# -- release counters -------------------------------------------------------------------------------------------------
def counts_path() -> Path:
    """The counts file: beside the key file (:func:`key_file_path`), named ``<key file>.counts``."""
    k = key_file_path()
    return k.with_name(k.name + COUNTS_SUFFIX)


def _read_counts(path: Path) -> dict[str, dict[str, int]]:
    try:  # opened and wrapped on one line (see read_key_file)
        f = os.fdopen(os.open(path, os.O_RDONLY), "r")
    except FileNotFoundError:
        return {}
    with f:
        _check_private(os.fstat(f.fileno()), path, "release counts file", readable_by_others=True)
        text = f.read()
    try:
        data = json.loads(text) if text.strip() else {}
        streams = data.get("streams", {})
        return {str(s): {str(k): int(v) for k, v in c.items()} for s, c in streams.items()}
    except (ValueError, AttributeError, TypeError):
        raise KeyFileError(f"The release counts file {path} is not valid JSON of lethe's counters: it is refused "
                           "(restore it, or delete it to forget every counter).") from None


def _owner_only(name: str, flags: int) -> int:
    return os.open(name, flags, 0o600)


def _take_counts_lock(lock: Path) -> io.FileIO:
    """Open the lock file ``lock`` and take its exclusive ``flock`` (waiting at most :data:`COUNTS_LOCK_WAIT`, then
    :class:`KeyFileError` naming it); return the open file, which holds the lock until it is closed or collected.

    The lock is taken on the line that returns the file, so no line of this function runs while it holds the lock
    (a tracer's line event, or an exception raised there, comes before it or after the return): whatever escapes
    from here leaves the lock free. Another process, and another thread of this one (each opens its own file, and
    ``flock`` locks of two open files exclude each other), waits for it."""
    import fcntl

    fh = open(lock, "a+b", buffering=0, opener=_owner_only)  # noqa: SIM115 - the caller's ``with`` closes it
    try:
        deadline = time.monotonic() + COUNTS_LOCK_WAIT
        while True:  # a bounded wait: a lock never released (a holder stopped) is an error that names it, not a hang
            try:
                return fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB) or fh  # type: ignore[func-returns-value]
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise KeyFileError(
                        f"The release counts file's lock {lock} has been held for {COUNTS_LOCK_WAIT:g} s by another "
                        "process or thread recording counts. Nothing was written; try again (the lock is released "
                        "when its holder finishes or exits).") from None
            time.sleep(0.01)
    except BaseException:  # an interrupt right after the lock was taken, inside the flock line: release it here
        fh.close()
        raise


def recorded_counts(stream: str) -> dict[str, int]:
    """The highest counts recorded for the release stream ``stream`` on this machine ({} if none)."""
    return _read_counts(counts_path()).get(stream, {})


def record_counts(stream: str, counts: Mapping[str, int]) -> None:
    """Raise the recorded counts of ``stream`` to at least ``counts`` (never lower them), under a file lock, written
    atomically to the owner-only counts file."""
    path = counts_path()
    _private_dir(path.parent)
    # The open lock file is bound to no name (no ``as``): it lives only on this frame's value stack, which Python
    # empties when an exception leaves the frame. So an exception at ANY line here (even one raised as the block
    # ends, which skips ``__exit__``) closes the file and releases the lock as it propagates, however long its
    # traceback (which keeps the frame's named locals, not its stack) is kept; a name would keep the lock held.
    with _take_counts_lock(path.with_name(path.name + ".lock")):
        data = _read_counts(path)
        cur = data.setdefault(stream, {})
        for k, v in counts.items():
            cur[k] = max(int(v), cur.get(k, 0))
        tmp = f = None
        try:  # created inside the try: an exception right after its creation still removes it
            fd, tmp = tempfile.mkstemp(prefix=".counts-", dir=path.parent)  # created 0600
            f = os.fdopen(fd, "w")  # the descriptor owned by a file object from here (closed if collected)
            with f:
                f.write(json.dumps({"streams": data}, sort_keys=True))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if f is None and tmp is not None:  # not yet handed to a file object: nothing else would close it
                os.close(fd)
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            raise


__all__ = ["KEY_ENV", "KEY_FILE_ENV", "NEW_KEY_BYTES", "KeyFileError", "counts_path", "create_key_file",
           "key_file_path", "read_key_file", "record_counts", "recorded_counts"]
