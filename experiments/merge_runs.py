"""Merge the outputs of several ``lethe reproduce --parts ...`` runs (e.g. run in parallel) into one report.

Usage: python experiments/merge_runs.py OUT RUN_DIR [RUN_DIR ...]
Copies the PNGs, unions the result sections, concatenates the deviations, sums the run times and renders report.md.
Every number still comes from the runs' results.json; nothing is recomputed or edited.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from lethe.experiments._common import write_json
from lethe.experiments.report import render


def main(argv: list[str]) -> int:
    out, runs = Path(argv[0]), [Path(a) for a in argv[1:]]
    out.mkdir(parents=True, exist_ok=True)
    merged: dict = {"deviations": [], "seconds": 0.0, "parts": []}
    for run in runs:
        res = json.loads((run / "results.json").read_text())
        for key, val in res.items():
            if key == "deviations":
                merged["deviations"] += [d for d in val if d not in merged["deviations"]]
            elif key == "seconds":
                merged["seconds"] += val
            elif key == "parts":
                merged["parts"] += val
            else:
                merged[key] = val
        for png in run.glob("*.png"):
            shutil.copy2(png, out / png.name)
    if "fig1" in merged:  # re-derive the Guo deviations (statements computed from the stored numbers)
        from lethe.experiments.guo_mnist import deviations

        merged["deviations"] += [d for d in deviations(merged) if d not in merged["deviations"]]
    write_json(out / "results.json", merged)
    (out / "report.md").write_text(render(merged), encoding="utf-8")
    print(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
