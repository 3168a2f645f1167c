"""Hand-written inline SVG charts, rendered by the server (readable without JavaScript, allowed by a strict CSP:
colours are SVG presentation attributes, never ``style`` attributes).

Every chart has a ``<title>`` and a ``<desc>`` (referenced by ``aria-labelledby``) stating its data in words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

W, H = 520, 230
LEFT, RIGHT, TOP, BOTTOM = 60, 14, 14, 44
FONT = 15  # user units; the chart is drawn 340-620 px wide: about 10-18 px on screen
INK = "#1f2933"
GRID = "#cbd2d9"
LINE = "#0b5fae"
BAR = "#7b8794"
RETRAIN = "#b42318"
REMEASURE = "#8a5300"
#: the dash patterns of the two kinds of marks (also drawn in the legend)
DASH = {"retrain": "5 3", "remeasure": "2 3"}


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    t = math.floor(lo / step + 1e-9) * step  # the first tick is at or below lo: the axis starts there
    out = []
    while t <= hi + 1e-9 * step:
        out.append(round(t, 10))
        t += step
    return out


def _fmt(v: float, unit: str) -> str:
    if unit == "%":
        return f"{v:g} %"
    return f"{v:g}"


def chart(uid: str, title: str, desc: str, xs: Sequence[int], ys: Sequence[float | None], *, unit: str = "",
          y_min: float | None = 0.0, y_max: float | None = None, bars: bool = False,
          marks: Sequence[int] = (), mark_label: str = "retraining", remeasured: Sequence[int] = (),
          remeasured_label: str = "residual re-measured") -> str:
    """An SVG line (or bar) chart of ``ys`` over version numbers ``xs``; ``None`` values are gaps.

    ``marks``: version numbers drawn as dashed red vertical lines (retrainings). ``remeasured``: version numbers drawn
    as dotted brown lines (the residual bound measured afresh, lower than the accumulated one, without a retraining).
    :func:`legend` explains both.
    """
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y)]
    t_id, d_id = f"{uid}-title", f"{uid}-desc"
    head = (f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-labelledby="{t_id} {d_id}" '
            f'xmlns="http://www.w3.org/2000/svg"><title id="{t_id}">{escape(title)}</title>'
            f'<desc id="{d_id}">{escape(desc)}</desc>')
    if not pts:
        return (head + f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" fill="{INK}" font-size="{FONT}">'
                "No data yet</text></svg>")
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    vals = [y for _, y in pts]
    lo = min(vals) if y_min is None else min(y_min, min(vals))
    hi = max(vals) if y_max is None else max(y_max, max(vals))
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    y_ticks = _ticks(lo, hi)
    lo = min(lo, y_ticks[0])
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        return TOP + (1 - (y - lo) / (hi - lo)) * ph

    parts = [head]
    for t in y_ticks:
        y = sy(t)
        parts.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}" '
                     'stroke-width="1"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 5:.1f}" text-anchor="end" fill="{INK}" font-size="{FONT}">'
                     f"{escape(_fmt(t, unit))}</text>")
    for t in _ticks(x_lo, x_hi, 6):
        if float(t).is_integer() and t >= x_lo:
            x = sx(t)
            parts.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 18}" text-anchor="middle" fill="{INK}" '
                         f'font-size="{FONT}">{int(t)}</text>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{H - 8}" text-anchor="middle" fill="{INK}" font-size="{FONT}">'
                 "model version</text>")
    parts.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{TOP + ph}" y2="{TOP + ph}" stroke="{INK}"/>')
    for group, colour, dash, label in ((marks, RETRAIN, DASH["retrain"], mark_label),
                                       (remeasured, REMEASURE, DASH["remeasure"], remeasured_label)):
        for m in group:
            x = sx(m)
            parts.append(f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="{colour}" '
                         f'stroke-width="2" stroke-dasharray="{dash}"><title>{escape(label)} at version {m}</title>'
                         "</line>")
    if bars:
        bw = max(1.0, min(24.0, pw / max(len(pts), 1) * 0.7))
        base = sy(max(lo, 0.0))
        for x, y in pts:
            top = sy(y)
            parts.append(f'<rect x="{sx(x) - bw / 2:.1f}" y="{min(top, base):.1f}" width="{bw:.1f}" '
                         f'height="{abs(base - top):.1f}" fill="{BAR}"><title>version {x}: {_fmt(y, unit)}</title>'
                         "</rect>")
    else:
        # a polyline per run of consecutive known values (None breaks the line)
        run: list[str] = []
        runs: list[list[str]] = []
        for x, yv in zip(xs, ys, strict=True):
            if yv is None or not math.isfinite(yv):
                if run:
                    runs.append(run)
                run = []
            else:
                run.append(f"{sx(x):.1f},{sy(yv):.1f}")
        if run:
            runs.append(run)
        for r in runs:
            parts.append(f'<polyline points="{" ".join(r)}" fill="none" stroke="{LINE}" stroke-width="2"/>')
        if len(pts) <= 60:
            for x, y in pts:
                parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{LINE}">'
                             f"<title>version {x}: {_fmt(round(y, 4), unit)}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def legend(items: Sequence[tuple[str, str]]) -> str:
    """An HTML legend under a chart: ``(kind, text)`` with kind ``line`` (the series), ``retrain`` or ``remeasure``
    (the marks); each key a short line drawn by the console's stylesheet in the same colour and dash (``.key-*``:
    no style attribute, CSP)."""
    if any(kind not in ("line", "retrain", "remeasure") for kind, _ in items):
        raise ValueError(f"legend kinds must be line, retrain or remeasure. Found {[k for k, _ in items]}.")
    out = ['<ul class="chart-legend">']
    for kind, text in items:
        out.append(f'<li class="legend-{kind}"><span class="key key-{kind}" aria-hidden="true"></span>'
                   f"{escape(text)}</li>")
    out.append("</ul>")
    return "".join(out)


__all__ = ["chart", "legend"]
