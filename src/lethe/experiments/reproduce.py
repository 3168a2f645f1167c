"""``lethe reproduce``: regenerate the papers' figures (PNG) and a Markdown report beside the papers' numbers.

Usage::

    python -m lethe.experiments.reproduce --quick --out /tmp/repro       # minutes: small subsets (run by the tests)
    python -m lethe.experiments.reproduce --out docs/reproduction        # full profile: the papers' sizes

Parts (``--parts``): ``guo`` (Guo et al. 2020 Fig. 1–3, Table 1 on MNIST 3 vs 8), ``noisygd`` (Chourasia & Shah:
Noisy-GD unlearning vs retraining over a stream of edits), ``audit`` (membership-inference audit); not run by
default, they need the optional torch dependencies: ``sst`` (Guo Fig. 4 right: MiniLM sentence features + certified
head) and ``dpfeat`` (Guo Fig. 5 on MNIST: DP-SGD CNN features + certified heads vs a fully DP CNN). Outputs in
``--out``: the PNGs, ``results.json`` (every measured number) and ``report.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lethe.experiments._common import PROFILES, Profile, stratified_subset, write_json
from lethe.experiments.report import render

DEFAULT_PARTS = ("guo", "noisygd", "audit")
ALL_PARTS = (*DEFAULT_PARTS, "sst", "dpfeat")  # sst and dpfeat need torch (the 'deep' extra)


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
    return p


def pool_images(X: np.ndarray, k: int) -> np.ndarray:
    """Average-pool square images (rows of X) by k x k, then L2-normalise the rows again (‖x‖ = 1)."""
    side = int(round(np.sqrt(X.shape[1])))
    s2 = side // k
    img = X.reshape(-1, side, side)[:, :s2 * k, :s2 * k].reshape(-1, s2, k, s2, k).mean(axis=(2, 4))
    out = img.reshape(X.shape[0], -1)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def load_mnist38(profile: Profile, data_dir: str | None, seed: int) -> tuple[np.ndarray, ...]:
    """MNIST 3 vs 8 (Guo et al. §4.1), subsampled (stratified) to the profile's sizes."""
    from lethe.datasets import load_mnist_binary

    X, y, Xt, yt = load_mnist_binary(3, 8, data_dir=data_dir)
    if profile.downsample > 1:
        X, Xt = pool_images(X, profile.downsample), pool_images(Xt, profile.downsample)
    rng = np.random.default_rng(seed)
    i = stratified_subset(y, profile.n_train, rng)
    j = stratified_subset(yt, profile.n_test, rng)
    return X[i], y[i], Xt[j], yt[j]


def run(profile: Profile, out: Path, *, parts: Sequence[str] = DEFAULT_PARTS, data_dir: str | None = None,
        seed: int = 0, show_progress: bool = True) -> dict[str, Any]:
    """Run the requested parts, write PNGs, ``results.json`` and ``report.md`` into ``out``; return the results."""
    unknown = set(parts) - set(ALL_PARTS)
    if unknown:
        raise ValueError(f"parts must be among {ALL_PARTS}. Found {sorted(unknown)}.")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results: dict[str, Any] = {"profile": profile.to_dict(), "seed": seed, "parts": list(parts)}
    deviations: list[str] = []
    if profile.name == "quick":
        deviations.append("Quick profile: small stratified subsets, images average-pooled to 14 x 14 and short "
                          "grids, so accuracies and removal counts are far from the paper's; only the full profile "
                          "is comparable.")
    if "guo" in parts:
        from lethe.experiments import guo_mnist

        data = load_mnist38(profile, data_dir, seed)
        results["data"] = {"n_train": int(data[0].shape[0]), "n_test": int(data[2].shape[0]),
                           "d": int(data[0].shape[1])}
        results["fig1"] = guo_mnist.run_fig1(data, profile, out, seed, show_progress)
        results["fig2"] = guo_mnist.run_fig2_fig3(data, profile, out, seed, show_progress)
        results["table1"] = guo_mnist.run_table1(data, profile, seed, show_progress)
        deviations += guo_mnist.deviations(results)
    if "noisygd" in parts:
        from lethe.experiments.noisygd_stream import run as run_noisygd

        results["noisygd"] = run_noisygd(profile, out, data_dir=data_dir, seed=seed,
                                     show_progress=show_progress)
        deviations += results["noisygd"]["deviations"]
    if "audit" in parts:
        from lethe.audit.experiment import run_audit

        results["audit"] = run_audit(profile.audit, data_dir=data_dir, seed=seed, show_progress=show_progress)
        deviations += results["audit"]["deviations"]
    if "sst" in parts:
        from lethe.experiments import public_extractor

        results["sst"] = public_extractor.run(profile, out, data_dir=data_dir, seed=seed, show_progress=show_progress)
        deviations += results["sst"]["deviations"]
    if "dpfeat" in parts:
        from lethe.experiments import dp_extractor

        results["dp"] = dp_extractor.run(profile, out, data_dir=data_dir, seed=seed, show_progress=show_progress)
        deviations += results["dp"]["deviations"]
    results["seconds"] = time.perf_counter() - t0
    results["deviations"] = deviations
    write_json(out / "results.json", results)
    (out / "report.md").write_text(render(results), encoding="utf-8")
    return results


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
                  show_progress=not args.no_progress)
    except ValueError as exc:
        print(f"lethe reproduce: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'report.md'} and {len(list(out.glob('*.png')))} figures in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
