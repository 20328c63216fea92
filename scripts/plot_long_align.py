#!/usr/bin/env python3
"""Draws docs/align_long.svg from docs/align_long.json: the wall time and the
peak memory of `timitseg align` against the recording's length (docs/align.md,
"Long recordings"). Two panels, one polyline per series, the issue's targets
dashed. Python standard library only; the output is written atomically.

Usage: scripts/plot_long_align.py docs/align_long.json docs/align_long.svg
"""
import json
import os
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
          "#bcbd22"]  # one color a series (up to 10 a panel)


def nice_max(v):
    """The smallest of 1, 2, 2.5, 5 x 10^e that is >= v."""
    for e in range(-1, 7):
        for m in (1, 2, 2.5, 5):
            if m * 10 ** e >= v:
                return m * 10 ** e
    return v


def panel(x0, title, ylabel, series, targets, xmax):
    w, h, left, bottom, top = 420, 300, 60, 40, 30
    pw, ph = w - left - 20, h - bottom - top
    ymax = nice_max(max([p[1] for s in series for p in s["points"]] + [t["value"] for t in targets]) * 1.05)
    sx = lambda x: x0 + left + pw * x / xmax
    sy = lambda y: top + ph * (1 - y / ymax)
    out = [f'<text x="{x0 + left + pw / 2}" y="18" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(xmax)}" y2="{sy(0)}" stroke="black"/>',
           f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(0)}" y2="{sy(ymax)}" stroke="black"/>',
           f'<text x="{x0 + left + pw / 2}" y="{h - 5}" text-anchor="middle">recording length (minutes)</text>',
           f'<text x="{x0 + 14}" y="{top + ph / 2}" text-anchor="middle" '
           f'transform="rotate(-90 {x0 + 14} {top + ph / 2})">{escape(ylabel)}</text>']
    for i in range(5):
        yv, xv = ymax * i / 4, xmax * i / 4
        out.append(f'<text x="{sx(0) - 5}" y="{sy(yv) + 4}" text-anchor="end" font-size="11">{yv:g}</text>')
        out.append(f'<text x="{sx(xv)}" y="{sy(0) + 15}" text-anchor="middle" font-size="11">{xv:g}</text>')
    for t in targets:
        out.append(f'<line x1="{sx(0)}" y1="{sy(t["value"])}" x2="{sx(xmax)}" y2="{sy(t["value"])}" '
                   f'stroke="gray" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{sx(xmax) - 4}" y="{sy(t["value"]) - 4}" text-anchor="end" font-size="11" '
                   f'fill="gray">{escape(t["label"])}</text>')
    for k, s in enumerate(series):
        c = COLORS[k % len(COLORS)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s["points"])
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in s["points"]:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{sx(0) + 8}" y="{top + 14 + 15 * k}" font-size="12" fill="{c}">{escape(s["label"])}</text>')
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_long_align.py IN.json OUT.svg")
    try:
        with open(sys.argv[1]) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"error: {sys.argv[1]}: {e}")
    xmax = max(p[0] for panel_ in ("time", "memory") for s in d[panel_]["series"] for p in s["points"])
    body = panel(0, d["time"]["title"], d["time"]["ylabel"], d["time"]["series"], d["time"]["targets"], xmax)
    body += panel(440, d["memory"]["title"], d["memory"]["ylabel"], d["memory"]["series"], d["memory"]["targets"], xmax)
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="880" height="300" font-family="sans-serif" font-size="13">\n'
           '<rect width="880" height="300" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
