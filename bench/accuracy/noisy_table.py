#!/usr/bin/env python3
"""The table of bench/accuracy/noisy_sweep.sh, and its rule's choice.

For each corpus and arm, over the seeds: S = (clean dev PER + babble-10 dB dev
PER) / 2 (docs/training.md "Augmentation, decided on clean and noisy dev"), the
clean and babble dev PER, dev boundary F1 at 0 frames, and the test columns
(PER, boundary F1 at 0/1/2 frames, segment F1; in babble: PER, forced alignment
within 20 ms of the sample-accurate reference and its mean error), mean +-
sample standard deviation in %. Then the choice: the arm of lowest mean S,
chosen iff that S is below the first arm's (the base), every arm with all its
seeds. Test figures are printed, never used by the choice.

  noisy_table.py OUT [--corpora "demo es"] [--arms "a:;b:k=v"] [--seeds "1 2 3"] [--json FILE]

Python 3 standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_io import write_atomic  # noqa: E402
from targets import fmt, mean_std  # noqa: E402


def test_split(corpus: str) -> str:
    """The split a corpus is scored on: core-test for the flite corpora (demo, large), else test."""
    return "core-test" if corpus in ("demo", "large") else "test"


def load_run(run_dir: str) -> dict | None:
    """The figures of one finished run (its four evaluate --json files), or None."""
    def read(name):
        with open(os.path.join(run_dir, name + ".json")) as f:
            return json.load(f)
    try:
        j = {n: read(n) for n in ("dev", "dev_b10", "test", "test_b10")}
    except (OSError, ValueError):
        return None
    a = j["test_b10"]["align"]["samples"]
    return {
        "S": (j["dev"]["per"] + j["dev_b10"]["per"]) / 2,
        "dev_per": j["dev"]["per"], "dev_b10_per": j["dev_b10"]["per"],
        "dev_bf1_0": j["dev"]["boundary_f1"]["0"],
        "test_per": j["test"]["per"],
        "test_bf1_0": j["test"]["boundary_f1"]["0"], "test_bf1_1": j["test"]["boundary_f1"]["1"],
        "test_bf1_2": j["test"]["boundary_f1"]["2"], "test_segment_f1": j["test"]["segment_f1"],
        "test_b10_per": j["test_b10"]["per"], "test_b10_within_20ms": a["within_ms"]["20"],
        "test_b10_mean_abs_ms": a["mean_abs_ms"],
    }


def summarize(runs: list[dict]) -> dict:
    """Mean and sample std (0 for one run) of every figure over the runs."""
    out = {"n": len(runs)}
    for k in runs[0] if runs else []:
        out[k] = mean_std([r[k] for r in runs])
    return out


def choose(rows: dict[str, dict], arms: list[str], seeds: int) -> tuple[str | None, str]:
    """The rule: lowest mean S, if below the base's (arms[0]). None when runs are missing."""
    missing = [a for a in arms if rows.get(a, {}).get("n", 0) < seeds]
    if missing:
        return None, "undecided: unfinished runs in " + ", ".join(missing)
    base = arms[0]
    best = min(arms, key=lambda a: (rows[a]["S"][0], arms.index(a)))
    if best == base or rows[best]["S"][0] >= rows[base]["S"][0]:
        return base, f"{base} stays (lowest mean S {100 * rows[base]['S'][0]:.2f})"
    return best, (f"{best}: mean S {100 * rows[best]['S'][0]:.2f} against {base}'s "
                  f"{100 * rows[base]['S'][0]:.2f}")


def cell(row: dict, key: str, scale: float = 100.0, digits: int = 2) -> str:
    return fmt(row[key], scale, digits)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--corpora", default="demo es")
    ap.add_argument("--arms", default="shipped:")
    ap.add_argument("--seeds", default="1 2 3")
    ap.add_argument("--json", help="also write the rows and choices here")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.out):
        print(f"noisy_table.py: {a.out}: no such folder (the OUT of noisy_sweep.sh)", file=sys.stderr)
        return 2
    arms = [x.split(":")[0] for x in a.arms.split(";") if x]
    seeds = a.seeds.split()
    result = {}
    for c in a.corpora.split():
        rows = {}
        for arm in arms:
            runs = [r for s in seeds if (r := load_run(os.path.join(a.out, c, arm, f"seed-{s}")))]
            rows[arm] = summarize(runs)
        choice, why = choose(rows, arms, len(seeds))
        result[c] = {"rows": rows, "choice": choice, "why": why}
        print(f"\n{c} (test split: {test_split(c)}; %; babble: 10 dB)\n")
        print("| arm | seeds | S | clean dev PER | babble dev PER | dev boundary F1 0 | test PER | boundary F1 0 / 1 / 2 "
              "| segment F1 | babble test PER | babble align within 20 ms | babble mean error ms |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for arm in arms:
            r = rows[arm]
            if not r["n"]:
                print(f"| {arm} | 0 | (no finished run) |" + " |" * 9)
                continue
            f = " / ".join(f"{100 * r[k][0]:.1f}" for k in ("test_bf1_0", "test_bf1_1", "test_bf1_2"))
            print(f"| {arm} | {r['n']} | {cell(r, 'S')} | {cell(r, 'dev_per')} | {cell(r, 'dev_b10_per')} | "
                  f"{cell(r, 'dev_bf1_0', digits=1)} | {cell(r, 'test_per')} | {f} | {cell(r, 'test_segment_f1')} | "
                  f"{cell(r, 'test_b10_per')} | {cell(r, 'test_b10_within_20ms')} | "
                  f"{cell(r, 'test_b10_mean_abs_ms', 1.0)} |")
        print(f"\nchoice ({c}): {why}")
    if a.json:
        write_atomic(Path(a.json), json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
