#!/usr/bin/env python3
"""Compares the alignment of a joined recording (scripts/join_utterances.py)
with the alignments of its utterances aligned one by one: for every internal
boundary of every joined utterance (as aligned alone, shifted by the
utterance's offset), the nearest boundary of the joined alignment between the
same two labels, and the distance in ms. Prints the fraction within 10, 20 and
50 ms, the mean and the median; --json FILE writes them. Python standard
library only (docs/align.md, "Long recordings").

Usage: scripts/compare_long_alignment.py --utts LONG.utts --long OUT/LONG.PHN \\
           --per PER_OUT --root CORPUS_FOLDER [--rate 16000] [--json FILE]
(PER_OUT holds the per-utterance .PHN as `timitseg align CORPUS_FOLDER --out PER_OUT`
writes them: the audio's path under CORPUS_FOLDER, extension .PHN.)
"""
import argparse
import bisect
import json
import os
import statistics
import sys


def read_phn(path):
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                p = line.split()
                if not p:
                    continue
                if len(p) != 3:
                    sys.exit(f"error: {path}:{n}: expected 'START END LABEL'")
                out.append((int(p[0]), int(p[1]), p[2]))
    except OSError as e:
        sys.exit(f"error: {path}: {e.strerror}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utts", required=True, help="the .utts file of join_utterances.py")
    ap.add_argument("--long", required=True, help="the joined recording's aligned .PHN")
    ap.add_argument("--per", required=True, help="the --out folder of the per-utterance alignment")
    ap.add_argument("--root", required=True, help="the folder the per-utterance audio was given under")
    ap.add_argument("--rate", type=int, default=16000, help="sample rate of both .PHN (Hz)")
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args()
    joined = read_phn(a.long)
    # boundaries of the joined alignment by label pair: sorted sample times
    by_pair = {}
    for (s0, e0, l0), (s1, _, l1) in zip(joined, joined[1:]):
        by_pair.setdefault((l0, l1), []).append(s1)
    errors, missing = [], 0
    with open(a.utts) as f:
        utts = [line.split(maxsplit=2) for line in f if line.strip()]
    for start, _, audio in utts:
        rel = os.path.relpath(audio.strip(), a.root)
        per = read_phn(os.path.join(a.per, os.path.splitext(rel)[0] + ".PHN"))
        for (s0, e0, l0), (s1, _, l1) in zip(per, per[1:]):
            want = s1 + int(start)
            cand = by_pair.get((l0, l1), [])
            i = bisect.bisect_left(cand, want)
            near = [cand[j] for j in (i - 1, i) if 0 <= j < len(cand)]
            if not near:
                missing += 1
                continue
            errors.append(min(abs(c - want) for c in near) * 1000.0 / a.rate)
    if not errors:
        sys.exit("error: no boundary to compare")
    res = {"utterances": len(utts), "boundaries": len(errors), "without_match": missing,
           "within_ms": {str(t): sum(e <= t for e in errors) / len(errors) for t in (10, 20, 50)},
           "mean_abs_ms": statistics.fmean(errors), "median_abs_ms": statistics.median(errors)}
    print(f"{res['utterances']} utterances, {res['boundaries']} boundaries ({missing} without a match): "
          + ", ".join(f"{100 * v:.2f} % within {k} ms" for k, v in res["within_ms"].items())
          + f", mean {res['mean_abs_ms']:.2f} ms, median {res['median_abs_ms']:.2f} ms")
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
