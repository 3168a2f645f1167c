"""Audit-evidence subcommands (issue 38): ``certificate`` (show one, or ``certificate verify FILE`` offline),
``ledger`` (the latest events, or ``ledger verify``: the hash chain) and ``export`` (requests, certificates or the
ledger as CSV or JSON). Registered by :func:`lethe.cli.curator.register` in the order ``lethe --help`` lists them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lethe.cli.curator_common import guard as _guard
from lethe.cli.curator_common import open_curator as _curator
from lethe.cli.curator_common import print_json as _print

__all__ = ["register"]


def _certificate(args: argparse.Namespace) -> int:
    from lethe.curator.errors import NotFoundError

    c = _curator(args)
    ref = args.reference
    if ref is not None and (not ref.strip() or len(ref) > 200 or any(ch in ref for ch in "\r\n")):
        raise ValueError(f"--reference must be one line of 1 to 200 characters (the organisation's ticket "
                         f"reference). Found {ref!r}.")

    def show(obj: Any) -> None:  # the reference is printed with the certificate, not stored (no schema change)
        if ref is None:
            _print(obj)
        elif isinstance(obj, list):
            _print([{"reference": ref, **o} if isinstance(o, dict) else o for o in obj])
        else:
            _print({"reference": ref, **obj} if isinstance(obj, dict) else obj)

    try:
        show(c.certificate(args.id))
    except NotFoundError:
        try:
            show(c.request_certificates(args.id))
        except NotFoundError:
            raise NotFoundError(f"{args.id!r} is neither a certificate id nor a request id.") from None
    return 0


def _ledger(args: argparse.Namespace) -> int:
    if args.action == "verify":
        return _ledger_verify(args)
    _print(_curator(args).ledger(args.limit))
    return 0


# -- audit evidence: signed certificates, the ledger's chain, exports (issue 38) ------------------------------------
def _certificate_verify(args: argparse.Namespace) -> int:
    """``lethe certificate verify FILE [--public-key KEY] [--ledger EXPORT.json]``: offline; exit 0 valid, 1 invalid
    (with the reason)."""
    from lethe.curator.certdoc import verify_certificate
    from lethe.curator.signing import parse_public_key

    if not args.file:
        raise ValueError("lethe certificate verify needs FILE: a certificate downloaded as JSON (or its HTML).")
    text = Path(args.file).read_text(encoding="utf-8", errors="replace")
    key = None
    if args.public_key:
        src = Path(args.public_key)
        key = parse_public_key(src.read_text() if src.is_file() else args.public_key)
    from lethe.curator.certdoc import load_document

    try:
        doc = load_document(text)
    except ValueError as exc:
        print(f"INVALID: {exc}")
        return 1
    ledger = None
    if args.ledger:
        ledger = json.loads(Path(args.ledger).read_text(encoding="utf-8"))
        if not isinstance(ledger, list):
            raise ValueError(f"--ledger must be a ledger export in JSON (a list of events). Found {type(ledger)}.")
    verdict = verify_certificate(doc, public_key=key, ledger=ledger)
    print(("VALID: " if verdict.valid else "INVALID: ") + verdict.reason)
    return 0 if verdict.valid else 1


def _ledger_verify(args: argparse.Namespace) -> int:
    """``lethe ledger verify [--file EXPORT.json] [--head HASH]``: exit 0 intact, 1 broken (naming where)."""
    from lethe.curator.chain import verify_events

    if args.file:
        events = json.loads(Path(args.file).read_text(encoding="utf-8"))
        if not isinstance(events, list):
            raise ValueError(f"--file must be a ledger export in JSON (a list of events). Found {type(events)}.")
        check = verify_events(events, head=args.head)
    else:
        from lethe.curator.certdoc import check_ledger

        check = check_ledger(_curator(args), head=args.head)
    if check.intact:
        print(f"INTACT: {check.events} events; chain head {check.head}")
        return 0
    print(f"BROKEN: {check.events} events checked")
    for p in check.problems:
        print(f"  - {p}")
    return 1


def _export(args: argparse.Namespace) -> int:
    """``lethe export requests|certificates|ledger``: CSV or JSON on stdout (or --output)."""
    from lethe.curator import exports

    flt = exports.ExportFilter(since=exports.parse_time(args.since, "--since"),
                               until=exports.parse_time(args.until, "--until"), status=args.status,
                               requester=args.requester)
    c = _curator(args)
    out = open(args.output, "w", encoding="utf-8", newline="") if args.output else sys.stdout  # noqa: SIM115
    try:
        with c.store.read() as s:
            for chunk in exports.render(args.kind, exports.rows(s, args.kind, flt), args.format):
                out.write(chunk)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """Add ``certificate``, ``ledger`` and ``export`` (``common``: the store options every subcommand takes)."""
    p = sub.add_parser("certificate", parents=[common], help="show a certificate (by certificate or request id); "
                       "`certificate verify FILE` checks a downloaded one offline")
    p.add_argument("id", help="a certificate or request id, or `verify`")
    p.add_argument("file", nargs="?", help="with `verify`: the downloaded certificate (JSON or HTML)")
    p.add_argument("--public-key", help="with `verify`: the service's public key (base64, hex, PEM, or a file "
                   "holding one; from GET /v1/keys); default: the key the certificate names")
    p.add_argument("--reference", metavar="TICKET", help="the organisation's own reference for the request (e.g. a "
                   "ticket number), printed with the certificate as \"reference\" (not stored by the curator)")
    p.add_argument("--ledger", help="with `verify`: a whole ledger export (JSON, `lethe export ledger --format "
                   "json`): its chain must be intact and hold the certificate's event")
    p.set_defaults(func=_guard(lambda a: _certificate_verify(a) if a.id == "verify" else _certificate(a)))
    p = sub.add_parser("ledger", parents=[common], help="show the latest ledger events; `ledger verify` checks the "
                       "hash chain")
    p.add_argument("action", nargs="?", choices=["verify"], help="verify: walk the chain (exit 1 if broken)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--file", help="with verify: check a ledger export (JSON) instead of the store")
    p.add_argument("--head", help="with verify: a chain head published earlier; the chain must pass through it")
    p.set_defaults(func=_guard(_ledger))
    p = sub.add_parser("export", parents=[common], help="export requests, certificates or the ledger (CSV, JSON)")
    p.add_argument("kind", choices=["requests", "certificates", "ledger"])
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.add_argument("--since", help="from this date or time (UTC), inclusive")
    p.add_argument("--until", help="to this date or time (UTC), exclusive")
    p.add_argument("--status", help="requests: pending, done, failed, removed, 'no record held' or refused; "
                   "certificates: their kind; ledger: the event kind")
    p.add_argument("--requester", help="only this requester's requests and certificates")
    p.add_argument("--output", "-o", help="write to this file (default: standard output)")
    p.set_defaults(func=_guard(_export))
