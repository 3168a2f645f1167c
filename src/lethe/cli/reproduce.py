"""``lethe reproduce``: regenerate the papers' figures and the Markdown report (see :mod:`lethe.experiments`)."""

from __future__ import annotations

import argparse
from typing import Any


def _handler(args: argparse.Namespace) -> int:
    from lethe.experiments.reproduce import run_from_args

    return run_from_args(args)


def register(subparsers: Any) -> None:
    """Add the ``reproduce`` subcommand (heavy imports happen in the handler)."""
    from lethe.experiments.reproduce import build_parser

    p = subparsers.add_parser("reproduce", help="reproduce the papers' experiments (figures + report)",
                              description="Regenerate the papers' figures as PNG files and a Markdown report placing "
                                          "the papers' numbers beside ours. --quick: minutes; default: full sizes.")
    build_parser(p)
    p.set_defaults(func=_handler)
