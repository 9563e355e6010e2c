#!/usr/bin/env python3
"""Charts of the locality sweep (docs/results/stbe.md): insert throughput and write
amplification against the share of sequential inserts, one line per engine and log setting,
from the `bench.json` of each `woods bench --workloads fillmixed --sequential-percent P` run.

    scripts/sweep-chart.py DIR   (DIR holds wal-P/ and nowal-P/ run directories; writes
                                  DIR/sweep-throughput.svg and DIR/sweep-write-amp.svg)
"""
import json
import os
import sys

PS = [0, 50, 90, 99, 100]
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def series(d):
    """{(engine, log setting): {P: (inserts/s, WA)}} from DIR/{wal,nowal}-P/bench.json."""
    out = {}
    for kind, label in (("wal", "log on"), ("nowal", "no log")):
        for p in PS:
            f = os.path.join(d, f"{kind}-{p}", "bench.json")
            if not os.path.exists(f):
                continue
            for e in json.load(open(f))["results"]:
                ph = e["phases"][0]
                key = f"{e['spec']['engine']} ({label})"
                out.setdefault(key, {})[p] = (ph["ops_per_sec"], ph.get("write_amp") or 0.0)
    return out


def chart(path, title, ylabel, lines, fmt):
    w, h, left, right, top, bottom = 720, 420, 80, 230, 40, 50
    pw, ph = w - left - right, h - top - bottom
    ymax = max(v for pts in lines.values() for v in pts.values()) * 1.1 or 1.0
    xs = {p: left + pw * i / (len(PS) - 1) for i, p in enumerate(PS)}
    y = lambda v: top + ph * (1 - v / ymax)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>']
    for i in range(6):
        v = ymax * i / 5
        svg.append(f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{fmt(v)}</text>')
        svg.append(f'<line x1="{left}" y1="{y(v)}" x2="{left + pw}" y2="{y(v)}" stroke="#ddd"/>')
    for p, x in xs.items():
        svg.append(f'<text x="{x}" y="{top + ph + 18}" text-anchor="middle">{p}%</text>')
    svg.append(f'<text x="{left + pw / 2}" y="{h - 8}" text-anchor="middle">'
               'sequential share of the inserts (categories, not to scale)</text>')
    svg.append(f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    for i, (name, pts) in enumerate(sorted(lines.items())):
        c = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6 4"' if "no log" in name else ""
        pts_s = " ".join(f"{xs[p]},{y(v)}" for p, v in sorted(pts.items()))
        svg.append(f'<polyline points="{pts_s}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for p, v in pts.items():
            svg.append(f'<circle cx="{xs[p]}" cy="{y(v)}" r="3" fill="{c}"/>')
        ly = top + 10 + 18 * i
        svg.append(f'<line x1="{left + pw + 15}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" '
                   f'stroke="{c}" stroke-width="2"{dash}/>')
        svg.append(f'<text x="{left + pw + 45}" y="{ly + 4}">{name}</text>')
    svg.append("</svg>")
    open(path, "w").write("\n".join(svg) + "\n")


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    s = series(d)
    chart(os.path.join(d, "sweep-throughput.svg"), "Inserts per second (drain counted)",
          "inserts/s", {k: {p: v[0] for p, v in pts.items()} for k, pts in s.items()},
          lambda v: f"{v / 1e6:.1f}M")
    chart(os.path.join(d, "sweep-write-amp.svg"), "Write amplification (/proc)",
          "bytes written / user bytes", {k: {p: v[1] for p, v in pts.items()} for k, pts in s.items()},
          lambda v: f"{v:.1f}")


if __name__ == "__main__":
    main()
