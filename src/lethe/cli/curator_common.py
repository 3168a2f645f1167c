"""What the curator's subcommand modules (:mod:`lethe.cli.curator`, :mod:`lethe.cli.evidence`) share: the service a
command opens from its ``--data-dir`` / ``--database-url`` / processing options, JSON printing, and the guard that
turns storage failures into a clear ``lethe: error:``. Heavy imports happen inside the functions."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lethe.curator.service import Curator

__all__ = ["guard", "open_curator", "print_json"]


def open_curator(args: argparse.Namespace) -> Curator:
    from lethe.curator import dask_plane
    from lethe.curator.service import Curator, Settings

    if getattr(args, "dask_address", None):
        dask_plane.configure(args.dask_address)

    defaults = Settings()
    settings = Settings(batch_size=getattr(args, "batch_size", 256), max_delay=getattr(args, "max_delay", 0.0),
                        poll_interval=getattr(args, "poll_interval", 0.5),
                        max_attempts=getattr(args, "max_attempts", None) or defaults.max_attempts,
                        budget_share=getattr(args, "budget_share", None) or defaults.budget_share,
                        publish_within=getattr(args, "publish_within", defaults.publish_within))
    return Curator(args.data_dir, database_url=args.database_url, settings=settings)


def print_json(obj: Any) -> None:
    from lethe.curator.views import json_safe

    print(json.dumps(json_safe(obj), indent=2, sort_keys=False))


def guard(handler: Any) -> Any:
    """Turn storage failures (full disk, read-only file system, permissions) into a clear ``lethe: error:``."""
    import functools

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import OperationalError

        from lethe.curator.errors import StorageError, storage_message

        try:
            return int(handler(args) or 0)
        except BrokenPipeError:
            # the reader closed the pipe (`lethe ledger | head`): not a storage failure; exit quietly as Unix
            # tools do (128 + SIGPIPE), with stdout pointed at /dev/null so the exit's flush cannot fail again
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        except OperationalError as exc:
            raise StorageError(storage_message(exc, Path(args.data_dir).resolve())) from None
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | PermissionError):
                raise
            raise StorageError(storage_message(exc, Path(args.data_dir).resolve())) from None

    return run
