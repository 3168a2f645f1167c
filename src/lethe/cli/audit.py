"""``lethe audit``: the membership-inference audit of unlearning (see :mod:`lethe.audit`)."""

from __future__ import annotations

import argparse
from typing import Any


def _handler(args: argparse.Namespace) -> int:
    from lethe.experiments.audit import run_from_args

    return run_from_args(args)


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommand (heavy imports happen in the handler)."""
    from lethe.experiments.audit import build_parser

    p = subparsers.add_parser("audit", help="membership-inference audit of certified removal and Noisy-GD",
                              description="Loss-threshold and (offline and online) LiRA attacks telling removed and "
                                          "retained training points from never-seen ones, with confidence "
                                          "intervals, next to the guarantees' bounds.")
    build_parser(p)
    p.set_defaults(func=_handler)
