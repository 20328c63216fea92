#!/usr/bin/env python3
"""The accuracy targets on a split: the semi-CRF against the linear CRF, per cell, paired by seed.

Reads the per-seed decodes that bench/accuracy/run.py's phone-bonus sweep wrote
(OUT/SIZE/runs/VARIANT/seed-N/sweep/SPLIT-bonus-B.json) for one linear and one
semi-CRF variant, each at its chosen crf.phone_bonus, and prints, per cell,
mean ± std over seeds of PER, boundary F1 at tolerance 0/1/2 frames, boundary
F1 at 20 ms, segment F1 and duration KL for both, and the paired difference
semi minus linear (mean ± std over seeds). A metric is WON when the mean
difference is better than 0 by more than both variants' seed standard
deviations (the target's "by more than the seeds' standard deviation"); lower
is better for PER and duration KL, higher for the rest.

  python3 bench/accuracy/targets.py --split test \\
      --cell synth/demo=A/demo,B/demo --linear linear-shipped@1 --semi semicrf-combined@1 --out targets.md

A cell's folders are searched in order for each variant's runs (the first
folder that has the variant wins), so baseline and candidate runs may live in
different run.py outputs.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_io import write_atomic  # noqa: E402

# (key, heading, scale, digits, lower_is_better)
METRICS = [("per", "PER %", 100, 2, True), ("bf1_0", "bF1 tol 0", 100, 1, False),
           ("bf1_1", "bF1 tol 1", 100, 1, False), ("bf1_2", "bF1 tol 2", 100, 1, False),
           ("f1_20ms", "bF1 20 ms", 100, 1, False), ("segment_f1", "seg F1", 100, 1, False),
           ("duration_kl", "dur KL", 1, 4, True)]


def metrics_of(doc: dict) -> dict:
    b = doc["boundary_f1"]
    out = {"per": doc["per"], "bf1_0": b["0"], "bf1_1": b["1"], "bf1_2": b["2"],
           "segment_f1": doc["segment_f1"], "duration_kl": doc["duration_kl"]}
    out["f1_20ms"] = doc["boundary_20ms"]["f1"] if "boundary_20ms" in doc else math.nan
    return out


def parse_choice(text: str) -> tuple[str, str]:
    name, _, bonus = text.partition("@")
    if not name or not bonus:
        raise SystemExit(f"error: '{text}': expected VARIANT@BONUS, e.g. semicrf-combined@1")
    return name, bonus


def load_seeds(folders: list[Path], variant: str, bonus: str, split: str) -> dict[int, dict]:
    for folder in folders:
        root = folder / "runs" / variant
        if not root.is_dir():
            continue
        seeds = {}
        for d in sorted(root.glob("seed-*")):
            f = d / "sweep" / f"{split}-bonus-{bonus}.json"
            if f.is_file():
                seeds[int(d.name[5:])] = metrics_of(json.loads(f.read_text()))
        if seeds:
            return seeds
    raise SystemExit(f"error: no {split}-bonus-{bonus}.json of {variant} under " + ", ".join(map(str, folders)))


def mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def cell_rows(lin: dict, semi: dict) -> list[dict]:
    seeds = sorted(set(lin) & set(semi))
    if len(seeds) < 3:
        raise SystemExit(f"error: {len(seeds)} seed(s) in common; the targets need at least 3")
    rows = []
    for key, _, _, _, lower in METRICS:
        a = [lin[s][key] for s in seeds]
        b = [semi[s][key] for s in seeds]
        if any(math.isnan(x) for x in a + b):
            rows.append(None)
            continue
        ma, sa = mean_std(a)
        mb, sb = mean_std(b)
        md, sd = mean_std([y - x for x, y in zip(a, b)])
        better = -md if lower else md
        rows.append({"linear": (ma, sa), "semi": (mb, sb), "diff": (md, sd), "won": better > max(sa, sb)})
    return rows


def fmt(v: tuple[float, float], scale: float, digits: int, sign: bool = False) -> str:
    m, s = v[0] * scale, v[1] * scale
    return f"{m:+.{digits}f} ± {s:.{digits}f}" if sign else f"{m:.{digits}f} ± {s:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cell", action="append", required=True, help="NAME=DIR[,DIR...]: run.py OUT/SIZE folders")
    ap.add_argument("--linear", required=True, help="VARIANT@BONUS of the linear CRF")
    ap.add_argument("--semi", required=True, help="VARIANT@BONUS of the semi-CRF")
    ap.add_argument("--split", default="test", help="the sweep split to read (default test)")
    ap.add_argument("--out", type=Path, help="also write the markdown here")
    a = ap.parse_args()
    lv, lb = parse_choice(a.linear)
    sv, sb = parse_choice(a.semi)
    lines = [f"{a.split} split: `{lv}` (phone_bonus {lb}) against `{sv}` (phone_bonus {sb}); mean ± std over "
             "seeds; Δ = semi minus linear, paired by seed; **won**: Δ better than 0 by more than both seed stds.", "",
             "| cell | | " + " | ".join(h for _, h, _, _, _ in METRICS) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    won_all = True
    for spec in a.cell:
        name, _, dirs = spec.partition("=")
        folders = [Path(d) for d in dirs.split(",")]
        rows = cell_rows(load_seeds(folders, lv, lb, a.split), load_seeds(folders, sv, sb, a.split))
        for label, key in (("linear", "linear"), ("semi-CRF", "semi"), ("Δ", "diff")):
            cells = []
            for r, (_, _, scale, digits, _) in zip(rows, METRICS):
                if r is None:
                    cells.append("—")
                    continue
                text = fmt(r[key], scale, digits, sign=(key == "diff"))
                if key == "diff":
                    text = f"**{text}**" if r["won"] else text
                    won_all &= r["won"]
                cells.append(text)
            lines.append(f"| {name if key == 'linear' else ''} | {label} | " + " | ".join(cells) + " |")
    lines += ["", "every target won" if won_all else "not every target won (unbolded Δ)"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        write_atomic(a.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
