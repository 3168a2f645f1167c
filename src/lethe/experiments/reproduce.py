"""``lethe reproduce``: regenerate the papers' figures (PNG) and a Markdown report beside the papers' numbers.

Usage::

    python -m lethe.experiments.reproduce --quick --out /tmp/repro       # minutes: small subsets (run by the tests)
    python -m lethe.experiments.reproduce --out docs/reproduction        # full profile: the papers' sizes

Parts (``--parts``): ``guo`` (Guo et al. 2020 Fig. 1–3, Table 1 on MNIST 3 vs 8), ``noisygd`` (Chourasia & Shah:
Noisy-GD unlearning vs retraining over a stream of edits), ``audit`` (membership-inference audit); not run by
default, they need the optional torch dependencies: ``sst`` (Guo Fig. 4 right: MiniLM sentence features + certified
head) and ``dpfeat`` (Guo Fig. 5 on MNIST: DP-SGD CNN features + certified heads vs a fully DP CNN). Outputs in
``--out``: the PNGs, ``results.json`` (every measured number) and ``report.md``.

``--update`` merges instead of overwriting: it loads ``--out``/results.json (same profile and seed), replaces only
the parts run now (their results, deviations and run time; the deviations are stored per part) and re-renders
report.md from the merged results, e.g. ``lethe reproduce --parts guo --update --out docs/reproduction``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lethe.experiments._common import PROFILES, Profile, load_mnist38, write_json
from lethe.experiments.report import render

DEFAULT_PARTS = ("guo", "noisygd", "audit")
ALL_PARTS = (*DEFAULT_PARTS, "sst", "dpfeat")  # sst and dpfeat need torch (the 'deep' extra)
# the keys of results.json each part writes (everything else is run metadata)
PART_KEYS: dict[str, tuple[str, ...]] = {"guo": ("data", "fig1", "fig2", "table1"), "noisygd": ("noisygd",),
                                         "audit": ("audit",), "sst": ("sst",), "dpfeat": ("dp",)}
QUICK_NOTE = ("Quick profile: small stratified subsets, images average-pooled to 14 x 14 and short grids, so "
              "accuracies and removal counts are far from the paper's; only the full profile is comparable.")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line options (also used by the ``lethe reproduce`` subcommand)."""
    p = parser or argparse.ArgumentParser(prog="lethe reproduce", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small subsets, minutes (the default is the full profile)")
    p.add_argument("--out", default="reproduction", help="output directory (created)")
    p.add_argument("--data-dir", default=None, help="data cache (default $LETHE_DATA or ./data)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS),
                   help=f"comma-separated subset of {','.join(ALL_PARTS)} (default {','.join(DEFAULT_PARTS)})")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--update", action="store_true",
                   help="merge into an existing OUT/results.json: replace only the parts run now, keep the others, "
                        "and re-render report.md from the merged results (same profile and seed required)")
    return p


def _part_deviations(old: dict[str, Any]) -> dict[str, list[str]]:
    """Deviations per part of a stored results.json (older files stored only the concatenated list: re-derive)."""
    if isinstance(old.get("deviations_by_part"), dict):
        return {k: list(v) for k, v in old["deviations_by_part"].items()}
    out: dict[str, list[str]] = {}
    if "fig1" in old and "table1" in old and "fig2" in old:
        from lethe.experiments.guo_mnist import deviations as guo_deviations

        out["guo"] = guo_deviations(old)  # statements computed from the stored numbers
    for part, key in (("noisygd", "noisygd"), ("audit", "audit"), ("sst", "sst"), ("dpfeat", "dp")):
        if isinstance(old.get(key), dict):
            out[part] = list(old[key].get("deviations", []))
    return out


def load_previous(out: Path, profile: Profile, seed: int) -> dict[str, Any]:
    """The results.json in ``out`` to merge into (``--update``), checked to come from the same profile and seed."""
    path = out / "results.json"
    if not path.exists():
        return {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"--update: {path} is not valid JSON ({exc}).") from exc
    if not isinstance(old, dict) or "profile" not in old:
        raise ValueError(f"--update: {path} is not a results.json written by lethe reproduce (no 'profile').")
    old_profile = old["profile"].get("name") if isinstance(old["profile"], dict) else None
    if old_profile != profile.name:
        raise ValueError(f"--update: {path} holds the {old_profile!r} profile; cannot merge a {profile.name!r} run "
                         "into it. Use another --out or the same profile.")
    if old.get("seed") != seed:
        raise ValueError(f"--update: {path} was run with seed {old.get('seed')}; cannot merge a run with seed "
                         f"{seed} into it. Pass --seed {old.get('seed')}.")
    return old


def run(profile: Profile, out: Path, *, parts: Sequence[str] = DEFAULT_PARTS, data_dir: str | None = None,
        seed: int = 0, show_progress: bool = True, update: bool = False) -> dict[str, Any]:
    """Run the requested parts, write PNGs, ``results.json`` and ``report.md`` into ``out``; return the results.

    With ``update``, the results of ``out``/results.json (same profile and seed) are kept for the parts not run
    now, and the report is rendered from the merged results.
    """
    unknown = set(parts) - set(ALL_PARTS)
    if unknown:
        raise ValueError(f"parts must be among {ALL_PARTS}. Found {sorted(unknown)}.")
    if not parts:
        raise ValueError(f"parts must name at least one of {ALL_PARTS}. Found none.")
    if update:
        load_previous(out, profile, seed)  # refuse a mismatched file before running anything
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"profile": profile.to_dict(), "seed": seed}
    devs: dict[str, list[str]] = {}
    secs: dict[str, float | None] = {}
    for p in parts:
        t0 = time.perf_counter()
        devs[p] = _run_part(p, results, profile, out, data_dir, seed, show_progress)
        secs[p] = time.perf_counter() - t0
    # merge with the stored results as they are *now*, so that parts run in parallel with --update do not undo
    # each other's updates
    old = load_previous(out, profile, seed) if update else {}
    if old:
        old_devs = _part_deviations(old)
        old_parts = [p for p in old.get("parts", []) if p in ALL_PARTS and p not in parts]
        old_secs = dict(old.get("seconds_by_part") or {})
        for p in old_parts:
            devs[p] = old_devs.get(p, [])
            secs[p] = old_secs.get(p)
            for key in PART_KEYS[p]:
                if key in old:
                    results[key] = old[key]
    ran = [p for p in ALL_PARTS if p in secs]
    results["parts"] = ran
    results["updated_parts"] = list(parts) if old else []
    results["seconds_by_part"] = {p: secs[p] for p in ran}
    known = [v for v in results["seconds_by_part"].values() if v is not None]
    results["seconds"] = float(sum(known)) if len(known) == len(ran) else old.get("seconds", float(sum(known)))
    results["deviations_by_part"] = {p: devs.get(p, []) for p in ran}
    results["deviations"] = ([QUICK_NOTE] if profile.name == "quick" else []) + [
        d for p in ran for d in results["deviations_by_part"][p]]
    write_json(out / "results.json", results)
    (out / "report.md").write_text(render(results), encoding="utf-8")
    return results


def _run_part(part: str, results: dict[str, Any], profile: Profile, out: Path, data_dir: str | None, seed: int,
              show_progress: bool) -> list[str]:
    """Run one part, store its results in ``results``; return its deviations."""
    if part == "guo":
        from lethe.experiments import guo_mnist

        data = load_mnist38(profile, data_dir, seed)
        results["data"] = {"n_train": int(data[0].shape[0]), "n_test": int(data[2].shape[0]),
                           "d": int(data[0].shape[1])}
        results["fig1"] = guo_mnist.run_fig1(data, profile, out, seed, show_progress)
        results["fig2"] = guo_mnist.run_fig2_fig3(data, profile, out, seed, show_progress)
        results["table1"] = guo_mnist.run_table1(data, profile, seed, show_progress)
        return guo_mnist.deviations(results)
    if part == "noisygd":
        from lethe.experiments.noisygd_stream import run as run_noisygd

        results["noisygd"] = run_noisygd(profile, out, data_dir=data_dir, seed=seed, show_progress=show_progress)
        return list(results["noisygd"]["deviations"])
    if part == "audit":
        from lethe.experiments.audit import run_audit

        results["audit"] = run_audit(profile.audit, data_dir=data_dir, seed=seed, show_progress=show_progress)
        return list(results["audit"]["deviations"])
    if part == "sst":
        from lethe.experiments import public_extractor

        results["sst"] = public_extractor.run(profile, out, data_dir=data_dir, seed=seed, show_progress=show_progress)
        return list(results["sst"]["deviations"])
    from lethe.experiments import dp_extractor

    results["dp"] = dp_extractor.run(profile, out, data_dir=data_dir, seed=seed, show_progress=show_progress)
    return list(results["dp"]["deviations"])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_from_args(args)


def run_from_args(args: argparse.Namespace) -> int:
    """Run with parsed options (shared with the CLI subcommand)."""
    profile = PROFILES["quick" if args.quick else "full"]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    out = Path(args.out)
    try:
        res = run(profile, out, parts=parts, data_dir=args.data_dir, seed=args.seed,
                  show_progress=not args.no_progress, update=getattr(args, "update", False))
    except ValueError as exc:
        print(f"lethe reproduce: {exc}", file=sys.stderr)
        return 2
    merged = f" (updated {', '.join(res['updated_parts'])}; kept the others)" if res["updated_parts"] else ""
    print(f"wrote {out / 'report.md'}{merged} and {len(list(out.glob('*.png')))} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
