"""Plot the frontier tables printed by ``bench_release_frontier.py --estimator`` (docs/release_drift.md §4).

Reads the printed Markdown tables (one or more files, or stdin) and draws, per data set, the accuracy loss of the
median and of the worst release against the exact centre, for fresh noise, the tree and the planner's choice (auto).

Run: ``python benchmarks/bench_release_frontier.py --estimator ... > out.txt;
python benchmarks/plot_release_frontier.py docs/img/release_frontier.png out.txt``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def parse(text: str) -> list[tuple[str, str, float, float]]:
    """(data set, mechanism, median − exact, worst − exact) per table row."""
    out, name = [], ""
    for line in text.splitlines():
        m = re.match(r"^(.+?) \(estimator\):", line)
        if m:
            name = m.group(1)
            continue
        if name and line.startswith("| ") and not line.startswith("| mechanism"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            label = re.sub(r" \([0-9.e+-]+\)$", "", cells[0])
            out.append((name, label, float(cells[4]), float(cells[5])))
    return out


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(sys.argv[1])
    text = "".join(Path(p).read_text() for p in sys.argv[2:]) if len(sys.argv) > 2 else sys.stdin.read()
    rows = parse(text)
    names = list(dict.fromkeys(r[0] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        mine = [r for r in rows if r[0] == name]
        x = range(len(mine))
        ax.bar([i - 0.2 for i in x], [r[2] for r in mine], width=0.4, label="median release")
        ax.bar([i + 0.2 for i in x], [r[3] for r in mine], width=0.4, label="worst release")
        ax.set_xticks(list(x), [r[1] for r in mine], fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("accuracy − exact centre (pp)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Releases at (1, 1e-5) for the whole sequence, 1,000 deletions, a release per 10 (T = 101)",
                 fontsize=9)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main()
