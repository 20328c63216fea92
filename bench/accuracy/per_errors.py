#!/usr/bin/env python3
"""PER by error type, and the decoder's phone bonus tuned on dev per CRF, over
the runs of bench/accuracy/noisy_sweep.sh (docs/training.md "Where issue 53's
PER lead stands, and why").

For every run OUT/CORPUS/ARM/seed-S (its best checkpoint, noisy_sweep's
augmented WORKDIR OUT/CORPUS/prep_aug) and every bonus B of --bonuses, it runs
`timitseg evaluate --phone-bonus B` on the dev split and on the test split
(core-test for the flite corpora demo and large) into
OUT/CORPUS/ARM/seed-S/bonus/{dev,test}_B.json, unless that file is there.
Then, for each corpus and arm, mean and sample std over the seeds, in %:

- the test PER at --shipped-bonus (the configs' crf.phone_bonus), split into
  substitutions, deletions and insertions per 100 reference phones
  (`evaluate`'s phone_substitutions / _deletions / _insertions: the minimal
  alignment with the most substitutions), and the predicted phones per
  reference phone;
- the rule (written before any run, docs/training.md rule 21 b): the bonus of
  the lowest mean clean dev PER (a tie: the one nearer --shipped-bonus, then
  the smaller), and the test PER and its error types at that bonus;
- for each corpus, the first arm's test PER minus the second's (the linear
  CRF minus the semi-CRF, seeds paired) at the shipped and at the dev-chosen
  bonuses, and whether it exceeds the larger of the two arms' stds.

Test figures are printed, never used by the rule.

  per_errors.py OUT [--corpora "demo es-5 de"] [--arms "linear shipped"] [--seeds "1 2 3"]
      [--bonuses "0 0.5 1 1.5 2 3"] [--shipped-bonus 1] [--timitseg BIN] [--jobs N]
      [--table-only] [--json FILE]

Python 3 standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_io import write_atomic  # noqa: E402
from noisy_table import test_split  # noqa: E402  (the split noisy_sweep.sh scores a corpus on)
from targets import fmt, mean_std  # noqa: E402


def bonus_name(b: float) -> str:
    return f"{b:g}"


def result_path(run: Path, split: str, b: float) -> Path:
    return run / "bonus" / f"{'dev' if split == 'dev' else 'test'}_{bonus_name(b)}.json"


def evaluate_job(binary: str, run: Path, workdir: Path, split: str, b: float) -> tuple[Path, str | None]:
    """One evaluate into its JSON (written by evaluate itself, whole or not at all); the error text or None."""
    out = result_path(run, split, b)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [binary, "evaluate", "--checkpoint", str(run / "checkpoints" / "best.safetensors"), "--workdir",
           str(workdir), "--split", split, "--phone-bonus", bonus_name(b), "--no-progress", "--json", str(out)]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return out, (None if p.returncode == 0 and out.is_file() else
                 f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")


def figures(doc: dict) -> dict:
    """PER and its error types (fractions of the reference phones) of one evaluate JSON."""
    ref = doc["reference_phones"]
    sub, dele, ins = doc["phone_substitutions"], doc["phone_deletions"], doc["phone_insertions"]
    return {"per": doc["per"], "sub": sub / ref, "del": dele / ref, "ins": ins / ref,
            "hyp_per_ref": (ref - dele + ins) / ref}


def load(run: Path, split: str, b: float) -> dict | None:
    try:
        with open(result_path(run, split, b)) as f:
            return figures(json.load(f))
    except (OSError, ValueError, KeyError):
        return None


def choose_bonus(dev_mean: dict[float, float], shipped: float) -> float:
    """Rule 21 b: the lowest mean dev PER; a tie goes to the bonus nearer the shipped one, then the smaller."""
    return min(dev_mean, key=lambda b: (dev_mean[b], abs(b - shipped), b))


def summarize(per_seed: list[dict]) -> dict:
    return {k: mean_std([r[k] for r in per_seed]) for k in per_seed[0]}


def corpus_rows(out: Path, corpus: str, arms: list[str], seeds: list[str], bonuses: list[float],
                shipped: float) -> dict:
    rows = {}
    for arm in arms:
        runs = [out / corpus / arm / f"seed-{s}" for s in seeds]
        dev = {b: [load(r, "dev", b) for r in runs] for b in bonuses}
        test = {b: [load(r, test_split(corpus), b) for r in runs] for b in bonuses}
        if any(x is None for b in bonuses for x in dev[b] + test[b]):
            rows[arm] = None
            continue
        dev_mean = {b: mean_std([x["per"] for x in dev[b]])[0] for b in bonuses}
        chosen = choose_bonus(dev_mean, shipped)
        rows[arm] = {"chosen_bonus": chosen, "dev_per_by_bonus": {bonus_name(b): dev_mean[b] for b in bonuses},
                     "shipped": summarize(test[shipped]), "chosen": summarize(test[chosen]),
                     "shipped_dev": mean_std([x["per"] for x in dev[shipped]]),
                     "chosen_dev": mean_std([x["per"] for x in dev[chosen]]),
                     "test_per_seeds": {"shipped": [x["per"] for x in test[shipped]],
                                        "chosen": [x["per"] for x in test[chosen]]}}
    return rows


def lead(rows: dict, first: str, second: str, which: str) -> dict | None:
    """first's test PER minus second's (seeds paired), and whether it is more than the larger std."""
    a, b = rows.get(first), rows.get(second)
    if not a or not b:
        return None
    xa, xb = a["test_per_seeds"][which], b["test_per_seeds"][which]
    diff = sum(xa) / len(xa) - sum(xb) / len(xb)
    spread = max(a[which]["per"][1], b[which]["per"][1])
    return {"points": 100 * diff, "larger_std_points": 100 * spread, "beyond_spread": diff > spread,
            "seeds_ahead": sum(1 for u, v in zip(xa, xb) if u > v), "seeds": len(xa)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="noisy_sweep.sh's OUT")
    ap.add_argument("--corpora", default="demo es-5 de")
    ap.add_argument("--arms", default="linear shipped", help="the linear CRF's arm, then the semi-CRF's")
    ap.add_argument("--seeds", default="1 2 3")
    ap.add_argument("--bonuses", default="0 0.5 1 1.5 2 3")
    ap.add_argument("--shipped-bonus", type=float, default=1.0, help="the configs' crf.phone_bonus (default 1)")
    ap.add_argument("--timitseg", default="build/bin/timitseg")
    ap.add_argument("--jobs", type=int, default=1, help="evaluations at once (default 1)")
    ap.add_argument("--table-only", action="store_true", help="run nothing; tabulate the JSON files there")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.is_dir():
        print(f"per_errors.py: {out}: no such folder (the OUT of noisy_sweep.sh)", file=sys.stderr)
        return 2
    try:
        bonuses = sorted({float(x) for x in a.bonuses.split()})
    except ValueError:
        print(f"per_errors.py: --bonuses '{a.bonuses}': not a list of numbers", file=sys.stderr)
        return 2
    if a.shipped_bonus not in bonuses:
        print(f"per_errors.py: --shipped-bonus {a.shipped_bonus:g} is not one of --bonuses", file=sys.stderr)
        return 2
    corpora, arms, seeds = a.corpora.split(), a.arms.split(), a.seeds.split()
    if len(arms) != 2:
        print("per_errors.py: --arms names two arms: the linear CRF's, then the semi-CRF's", file=sys.stderr)
        return 2
    for c in corpora:
        for arm in arms:
            for s in seeds:
                ck = out / c / arm / f"seed-{s}" / "checkpoints" / "best.safetensors"
                if not ck.is_file():
                    print(f"per_errors.py: {ck}: no such checkpoint (run noisy_sweep.sh first)", file=sys.stderr)
                    return 2
    if not a.table_only:
        jobs = [(c, out / c / arm / f"seed-{s}", split, b) for c in corpora for arm in arms for s in seeds
                for split in ("dev", test_split(c)) for b in bonuses]
        jobs = [j for j in jobs if not result_path(j[1], j[2], j[3]).is_file()]
        errors = []
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            futs = [pool.submit(evaluate_job, a.timitseg, run, out / c / "prep_aug", split, b)
                    for c, run, split, b in jobs]
            for i, f in enumerate(futs, 1):
                _, err = f.result()
                if err:
                    errors.append(err)
                if i % max(1, len(futs) // 10) == 0 or i == len(futs):
                    print(f"per_errors.py: {i}/{len(futs)} evaluations", file=sys.stderr)
        if errors:
            print("per_errors.py: " + str(len(errors)) + " evaluation(s) failed; the first:\n" + errors[0],
                  file=sys.stderr)
            return 1
    result = {}
    for c in corpora:
        rows = corpus_rows(out, c, arms, seeds, bonuses, a.shipped_bonus)
        result[c] = {"rows": rows, "lead_shipped": lead(rows, arms[0], arms[1], "shipped"),
                     "lead_chosen": lead(rows, arms[0], arms[1], "chosen")}
        print(f"\n{c} ({test_split(c)}; % of the reference phones; bonus {a.shipped_bonus:g} is the configs')\n")
        print("| arm | bonus | dev PER | test PER | substitutions | deletions | insertions | predicted / reference phones |")
        print("|---|---|---|---|---|---|---|---|")
        for arm in arms:
            r = rows[arm]
            if r is None:
                print(f"| {arm} | (missing evaluations) |" + " |" * 6)
                continue
            for which, b, dev in (("shipped", a.shipped_bonus, r["shipped_dev"]),
                                  ("chosen", r["chosen_bonus"], r["chosen_dev"])):
                t = r[which]
                tag = f"{b:g}" + (" (dev's)" if which == "chosen" else "")
                print(f"| {arm} | {tag} | {fmt(dev, 100, 2)} | {fmt(t['per'], 100, 2)} | {fmt(t['sub'], 100, 2)} | "
                      f"{fmt(t['del'], 100, 2)} | {fmt(t['ins'], 100, 2)} | {fmt(t['hyp_per_ref'], 1, 3)} |")
        for which in ("shipped", "chosen"):
            ld = result[c]["lead_" + which]
            if ld:
                print(f"\n{arms[0]} minus {arms[1]}, test PER at the {which} bonus: {ld['points']:+.2f} points "
                      f"(larger std {ld['larger_std_points']:.2f}; {'beyond' if ld['beyond_spread'] else 'within'} "
                      f"one spread; {arms[1]} ahead on {ld['seeds_ahead']} of {ld['seeds']} seeds)")
    if a.json:
        write_atomic(Path(a.json), json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
