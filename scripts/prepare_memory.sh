#!/bin/bash
# prepare's peak memory against the corpus size (issue 43, docs/data.md
# "Speed and memory against TIMIT's path"): espeak-ng corpora of several sizes
# (synth --voice espeak --language es, timit layout), each converted into every
# other layout by scripts/timit_to_layouts.py and prepared with
# `prepare --corpus` in each format, and with `prepare --corpus --format timit`;
# prints one line per run (wall seconds, peak RSS from getrusage) and, per
# format, the growth in MB per hour of audio between the smallest and the
# largest corpus.
#
# Usage: scripts/prepare_memory.sh TIMITSEG WORK [SPEAKERS ...]
#   TIMITSEG  the binary; WORK  a scratch folder (corpora and WORKDIRs, ~0.13 GB per hour)
#   SPEAKERS  corpus sizes in speakers of 28 utterances (~0.024 h each): default "24 96"
#             (about 0.6 and 2.3 hours); "48 480" is the 1 and 11 hour pair of docs/data.md
# Environment: THREADS (default: all cores), LANGUAGE_CODE (default es).
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,17p "$0"; exit 2; }
BIN=$(realpath "$1"); WORK=$2; shift 2
SIZES=("$@"); [ ${#SIZES[@]} -gt 0 ] || SIZES=(24 96)
THREADS=${THREADS:-$(nproc)}; LANG_CODE=${LANGUAGE_CODE:-es}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
# "wall_s peak_MB" of one command, its output in $WORK/last.log
measure() {
  python3 - "$WORK/last.log" "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time()
with open(sys.argv[1], "w") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
if rc != 0:
    sys.exit(f"failed ({rc}): {' '.join(sys.argv[2:])}; see {sys.argv[1]}")
print(f"{time.time() - t:.1f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f}")
PY
}
RESULTS=$WORK/results.tsv
: > "$RESULTS"
for spk in "${SIZES[@]}"; do
  c=$WORK/es$spk l=$WORK/l$spk
  if [ ! -f "$c/phone_set.yaml" ]; then
    measure "$BIN" synth --voice espeak --language "$LANG_CODE" --format timit --audio riff --out "$c" \
      --speakers "$spk" --utterances-per-speaker 28 --seed 1 --threads "$THREADS" > /dev/null
    rm -rf "$l"
  fi
  [ -d "$l" ] || python3 "$HERE/timit_to_layouts.py" "$c" "$l" > /dev/null
  for f in timit textgrid buckeye kaldi manifest.csv manifest.jsonl; do
    fmt=${f%%.*}
    if [ "$f" = timit ]; then src=$c split=(); else src=$l/$f split=(--split-file "$l/splits.txt"); fi
    read -r wall rss < <(measure "$BIN" prepare --corpus "$src" --format "$fmt" --phone-set "$c/phone_set.yaml" \
      "${split[@]}" --out "$WORK/p-$f-$spk" --threads "$THREADS" --no-progress --force)
    hours=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(round(sum(s['seconds'] for s in m['splits'].values())/3600, 3))" "$WORK/p-$f-$spk/manifest.json" 2>/dev/null || echo "?")
    printf '%s\t%s\t%s\t%s\t%s\n' "$f" "$spk" "$hours" "$wall" "$rss" | tee -a "$RESULTS"
  done
done
python3 - "$RESULTS" <<'PY'
import sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
print("\nformat          hours  wall_s  peak_MB   (growth per hour, smallest to largest corpus)")
by = {}
for f, spk, h, w, r in rows:
    print(f"{f:15s} {h:>6s} {w:>7s} {r:>8s}")
    by.setdefault(f, []).append((float(h) if h != "?" else 0.0, float(r)))
for f, v in by.items():
    v.sort()
    if len(v) > 1 and v[-1][0] > v[0][0]:
        print(f"{f:15s} growth {(v[-1][1] - v[0][1]) / (v[-1][0] - v[0][0]):.1f} MB per hour")
PY
