#!/usr/bin/env python3
"""Decisions on dev splits, by a rule fixed before the sweep.

Reads the results.json (and, when present, sweep.json) of several cells: one
cell is one corpus at one size, e.g. synth/demo, synth/recipe, speech/demo,
speech/recipe, each the OUT/SIZE folder of a bench/accuracy/run.py invocation
with --split dev. Variant names follow `<crf>-<what>`, with crf one of
`linear`, `semicrf`, and `<crf>-shipped` the baseline of that CRF.

The rule (RULE below, written before any sweep ran; it never reads a test
split):

  For each CRF and each of its variants present in every cell with all seeds
  finished, d_cell(m) = mean over seeds of metric m of the variant minus that of
  `<crf>-shipped`, on dev. The variant is ADOPTED when
    (1) the mean over cells of d_cell(PER) <= -0.2 points, and
    (2) no cell has d_cell(PER) > +0.5 points, and
    (3) the mean over cells of d_cell(boundary F1 at 20 ms) >= -0.5 points
        (boundary F1 at tolerance 2 frames where the 20 ms metric is absent).
  Adopted variants are ranked by the mean d(PER). When a variant named
  `<crf>-combined` (all adopted knobs together) exists in every cell, the
  shipped choice is whichever of it and the best single adopted variant has
  the lower mean dev PER over the cells; otherwise the best single adopted
  variant; with none adopted, `<crf>-shipped` stays.
  crf.phone_bonus (from the cells' sweep.json): run.py's SWEEP_RULE on the
  mean over the cells, per variant.

Writes OUT/decision.json and OUT/decision.md (the table of d per cell and the
verdicts) and prints the markdown.

  python3 bench/accuracy/decide.py --cell synth/demo=A/demo --cell synth/recipe=A/recipe \\
      --cell speech/demo=B/demo --cell speech/recipe=B/recipe --out decision/
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from accuracy_io import write_atomic  # this folder

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402  (run.select_bonus, run.SWEEP_RULE)

RULE = ("adopt a variant when, on dev, its mean PER minus the shipped one's, averaged over the cells, is <= -0.2 "
        "points, no cell is worse by more than +0.5 PER points, and boundary F1 at 20 ms (else at 2 frames) drops "
        "by at most 0.5 points on average; rank by the mean PER difference; '<crf>-combined', when measured, "
        "replaces the best single variant if its mean dev PER is lower")
PER_GAIN = -0.002      # (1): 0.2 points, as fractions
PER_WORST_CELL = 0.005  # (2): 0.5 points
BF1_LOSS = -0.005      # (3): 0.5 points
CRFS = ("linear", "semicrf")
SHOWN = [("per", "PER", 100, 2), ("boundary_f1_0", "bF1 0", 100, 1), ("boundary_f1_2", "bF1 2", 100, 1),
         ("f1_20ms", "bF1 20ms", 100, 1), ("r_value_20ms", "R-val 20ms", 100, 1),
         ("segment_f1", "seg F1", 100, 1), ("duration_kl", "dur KL", 1, 4)]


def load_cell(path: Path) -> dict:
    """{variant: {metric: mean}} of the variants whose every seed finished."""
    j = json.loads((path / "results.json").read_text())
    split = j["plan"].get("split")
    if split != "dev":
        raise SystemExit(f"error: {path}/results.json: split {split!r}; decisions are made on dev only")
    seeds = j["plan"]["seeds"]
    out = {}
    for row in j["summary"]:
        if row["ok"] != len(seeds) or row["failed"] or row["pending"]:
            continue
        out[row["variant"]] = {k: v["mean"] for k, v in row.items() if isinstance(v, dict) and "mean" in v}
    return out


def merge_cells(parts: list[tuple[Path, dict]], renames: dict[str, str]) -> dict:
    """One cell from several run.py folders of the same corpus and size; a variant measured in two of them
    must have the same means there (the runs are deterministic), and RENAMES maps a variant's name in the
    folders to its name in the decision (the same settings measured under another name)."""
    out: dict = {}
    for path, cell in parts:
        for v, m in cell.items():
            v = renames.get(v, v)
            if v in out and any(abs(out[v][k] - m[k]) > 1e-12 for k in m if k in out[v]):
                raise SystemExit(f"error: {path}: variant {v} differs from its measurement in another folder")
            out[v] = m
    return out


def bf1_20(m: dict) -> float:
    return m["f1_20ms"] if "f1_20ms" in m else m["boundary_f1_2"]


def decide(cells: dict[str, dict]) -> dict:
    """cells: {name: {variant: {metric: mean}}} -> the decision per CRF (pure function: tested)."""
    result = {"rule": RULE, "cells": list(cells), "crf": {}}
    for crf in CRFS:
        base = f"{crf}-shipped"
        if not all(base in c for c in cells.values()):
            result["crf"][crf] = {"error": f"{base} is missing (or has failed/pending seeds) in some cell"}
            continue
        names = sorted({v for c in cells.values() for v in c if v.startswith(crf + "-") and v != base})
        rows = []
        for v in names:
            if not all(v in c for c in cells.values()):
                rows.append({"variant": v, "verdict": "incomplete (not finished in every cell)"})
                continue
            d = {cell: {k: c[v][k] - c[base][k] for k in c[v] if k in c[base]} for cell, c in cells.items()}
            d_per = [d[cell]["per"] for cell in cells]
            d_bf = [bf1_20(cells[cell][v]) - bf1_20(cells[cell][base]) for cell in cells]
            mean_per, worst, mean_bf = sum(d_per) / len(d_per), max(d_per), sum(d_bf) / len(d_bf)
            ok = [mean_per <= PER_GAIN + 1e-12, worst <= PER_WORST_CELL + 1e-12, mean_bf >= BF1_LOSS - 1e-12]
            why = [w for w, good in zip(("mean PER gain under 0.2 points", "a cell worse by more than 0.5 PER points",
                                         "boundary F1 at 20 ms down by more than 0.5 points"), ok) if not good]
            rows.append({"variant": v, "delta": d, "mean_delta_per": mean_per, "worst_cell_delta_per": worst,
                         "mean_delta_bf1_20ms": mean_bf, "adopted": all(ok) and not v.endswith("-combined"),
                         "verdict": "adopted" if all(ok) else "rejected: " + "; ".join(why)})
        adopted = sorted((r for r in rows if r.get("adopted")), key=lambda r: (r["mean_delta_per"], r["variant"]))
        combined = next((r for r in rows if r["variant"] == f"{crf}-combined" and "delta" in r), None)
        choice = adopted[0]["variant"] if adopted else base
        if combined and adopted and combined["mean_delta_per"] < adopted[0]["mean_delta_per"]:
            choice = combined["variant"]
        result["crf"][crf] = {"baseline": base, "rows": rows, "adopted": [r["variant"] for r in adopted],
                              "choice": choice}
    return result


def decide_bonus(sweeps: dict[str, dict]) -> dict:
    """run.SWEEP_RULE on the mean over cells of each variant's dev means, per variant."""
    chosen = {}
    variants = sorted({r["variant"] for sw in sweeps.values() for r in sw["rows"]})
    for v in variants:
        per_cell = [[r for r in sw["rows"] if r["variant"] == v] for sw in sweeps.values()]
        if any(not rows for rows in per_cell):
            continue
        bonuses = sorted(set.intersection(*[{r["bonus"] for r in rows} for rows in per_cell]))
        rows = []
        for b in bonuses:
            rs = [next(r for r in rows_ if r["bonus"] == b).get("dev") for rows_ in per_cell]
            if any(r is None or "per" not in r for r in rs):
                break
            rows.append({"variant": v, "bonus": b, "dev": {
                k: {"mean": sum(r[k]["mean"] for r in rs) / len(rs)} for k in ("per", "duration_kl")}})
        else:
            chosen[v] = run.select_bonus(rows, "dev")
    return chosen


def markdown(res: dict, cells: dict[str, dict]) -> str:
    lines = [f"Decision rule (fixed before the sweep): {RULE}.", ""]
    for crf, r in res["crf"].items():
        if "error" in r:
            lines += [f"**{crf}**: {r['error']}", ""]
            continue
        lines += [f"**{crf}** (baseline `{r['baseline']}`): choice `{r['choice']}`; adopted: "
                  f"{', '.join(r['adopted']) or 'none'}.", ""]
        head = "| variant | cell | " + " | ".join(f"Δ {h}" for _, h, _, _ in SHOWN) + " | verdict |"
        lines += [head, "|" + "---|" * (3 + len(SHOWN))]
        base = cells
        for cell, c in base.items():
            m = c[r["baseline"]]
            lines.append(f"| {r['baseline']} (absolute) | {cell} | " + " | ".join(
                f"{m[k] * s:.{dg}f}" if k in m else "—" for k, _, s, dg in SHOWN) + " | |")
        for row in r["rows"]:
            if "delta" not in row:
                lines.append(f"| {row['variant']} | all |" + " |" * len(SHOWN) + f" {row['verdict']} |")
                continue
            for cell, d in row["delta"].items():
                lines.append(f"| {row['variant']} | {cell} | " + " | ".join(
                    f"{d[k] * s:+.{dg}f}" if k in d else "—" for k, _, s, dg in SHOWN) + " | |")
            lines.append(f"| {row['variant']} | **mean** | {100 * row['mean_delta_per']:+.2f} | | | "
                         f"{100 * row['mean_delta_bf1_20ms']:+.1f} | | | | {row['verdict']} |")
        lines.append("")
    if res.get("phone_bonus"):
        lines += ["crf.phone_bonus (" + run.SWEEP_RULE + ", on the mean over the cells): " +
                  ", ".join(f"{v} {b:g}" for v, b in res["phone_bonus"].items() if b is not None), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog="Rule: " + RULE)
    ap.add_argument("--cell", action="append", required=True, metavar="NAME=DIR[,DIR...]",
                    help="a cell: NAME (e.g. speech/demo) = one or more OUT/SIZE folders of run.py --split dev of "
                         "that corpus and size (repeatable)")
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                    help="a variant measured as OLD is NEW in the decision (e.g. semicrf-onset-k60=semicrf-combined "
                         "when the combination of the adopted knobs was measured under its own name)")
    ap.add_argument("--out", type=Path, required=True, help="folder for decision.json and decision.md")
    a = ap.parse_args(argv)
    renames = dict(r.split("=", 1) for r in a.rename if "=" in r)
    paths: dict[str, list[Path]] = {}
    for c in a.cell:
        name, sep, ds = c.partition("=")
        if not sep or not name:
            raise SystemExit(f"error: --cell {c!r}: expected NAME=DIR[,DIR...]")
        for d in ds.split(","):
            if not (Path(d) / "results.json").is_file():
                raise SystemExit(f"error: --cell {c}: {d}/results.json is missing")
            paths.setdefault(name, []).append(Path(d))
    cells = {n: merge_cells([(p, load_cell(p)) for p in ps], renames) for n, ps in paths.items()}
    res = decide(cells)
    res["inputs"] = {n: [str(p) for p in ps] for n, ps in paths.items()}
    sweeps = {}
    for n, ps in paths.items():
        rows = [r for p in ps if (p / "sweep.json").is_file() for r in json.loads((p / "sweep.json").read_text())["rows"]]
        if rows:
            sweeps[n] = {"rows": [{**r, "variant": renames.get(r["variant"], r["variant"])} for r in rows]}
    if sweeps and len(sweeps) == len(paths):
        res["phone_bonus"] = decide_bonus(sweeps)
    md = markdown(res, cells)
    write_atomic(a.out / "decision.json", json.dumps(res, indent=2) + "\n")
    write_atomic(a.out / "decision.md", md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
