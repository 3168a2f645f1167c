"""The ``lethe`` command line: argparse subcommands registered by modules.

Each module named in :data:`COMMAND_MODULES` defines ``register(subparsers)``, which adds its subcommands with
``subparsers.add_parser(...)`` and sets a handler with ``parser.set_defaults(func=handler)``; a handler takes the
parsed ``argparse.Namespace`` and returns the exit status. To add commands, write such a module and append its
name to :data:`COMMAND_MODULES` (or call :func:`register_module` before :func:`main`).

Handlers report refusals (``ValueError``, ``TypeError``, ``FileNotFoundError``, :class:`lethe.LetheError`) as
``lethe: error: <message>`` on stderr with exit status 1; usage errors exit with status 2 (argparse).

>>> build_parser().prog
'lethe'
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import lethe

COMMAND_MODULES: list[str] = ["lethe.cli.curator", "lethe.cli.reproduce", "lethe.cli.audit"]


def register_module(name: str) -> None:
    """Add a command module (by import name) to the registry, once."""
    if name not in COMMAND_MODULES:
        COMMAND_MODULES.append(name)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered module's subcommands."""
    parser = argparse.ArgumentParser(prog="lethe", description="Certified machine unlearning: train models that "
                                     "can forget, and prove it.")
    parser.add_argument("--version", action="version", version=f"lethe {lethe.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except (lethe.LetheError, ValueError, TypeError, FileNotFoundError, PermissionError) as exc:
        print(f"lethe: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `lethe status | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("lethe: interrupted", file=sys.stderr)
        return 130


__all__ = ["COMMAND_MODULES", "build_parser", "main", "register_module"]
