"""``lethe audit``: the membership-inference audit of unlearning (see :mod:`lethe.audit`)."""

from __future__ import annotations

import argparse
from typing import Any


def _handler(args: argparse.Namespace) -> int:
    from lethe.experiments.audit import run_from_args

    return run_from_args(args)


class _LazyAuditParser(argparse.ArgumentParser):
    """The ``audit`` subcommand's parser, whose options are added when it is first used (parsing or help): they
    live in :mod:`lethe.experiments.audit`, whose import (SciPy, scikit-learn) took seconds from every other
    command — ``lethe worker`` and ``lethe dataset add`` included — when it happened while the parser was built."""

    _built = False

    def _build(self) -> None:
        if not self._built:
            self._built = True
            from lethe.cli import show_defaults
            from lethe.experiments.audit import build_parser

            build_parser(self)
            show_defaults(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._build()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._build()
        return super().format_help()

    def format_usage(self) -> str:
        self._build()
        return super().format_usage()


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommand (its options and heavy imports are loaded when it is used)."""
    parser_class = subparsers._parser_class
    subparsers._parser_class = _LazyAuditParser
    try:
        p = subparsers.add_parser("audit", help="membership-inference audit of a registered model's versions "
                                                "(--model), of your model files (--model-file), or of certified "
                                                "removal and Noisy-GD on MNIST (the papers' experiment)",
                                  description="With --model NAME: the audit of a model of the curator (every version "
                                              "whose artifact exists; the deleted records from --deleted FILE, "
                                              "since the curator erases them). With --model-file: the loss-threshold "
                                              "attack telling the deleted "
                                              "records from held-out ones on every published version of your model, "
                                              "with confidence intervals, next to the bound its (ε, δ) implies "
                                              "(exit 1 if a version exceeds it). Without: the papers' experiment "
                                              "(--experiment mnist), loss-threshold and LiRA attacks telling removed "
                                              "and retained training points from never-seen ones.")
    finally:
        subparsers._parser_class = parser_class
    p.set_defaults(func=_handler)
