#!/bin/bash
# prepare's peak memory against the corpus size (docs/data.md
# "Speed and memory against TIMIT's path"): espeak-ng corpora of several sizes
# (synth --voice espeak --language es, timit layout), each converted into every
# other layout by scripts/timit_to_layouts.py and prepared with
# `prepare --corpus` in each format, and with `prepare --corpus --format timit`;
# and TIMIT's own path, `prepare --timit`, on a tone corpus of the same shape
# (synth --voice tones: TIMIT's 61 phones, which that path reads); prints one
# line per run (wall seconds, peak RSS from getrusage) and, per format, the
# growth in MB per hour of audio between the smallest and the largest corpus.
#
# Usage: scripts/prepare_memory.sh TIMITSEG WORK [SPEAKERS ...]
#   TIMITSEG  the binary; WORK  a scratch folder (corpora and WORKDIRs, ~0.3 GB per hour)
#   SPEAKERS  corpus sizes in speakers of 28 utterances (~0.024 h each): default "24 96"
#             (about 0.6 and 2.3 hours); "48 480" is the 1 and 11 hour pair of docs/data.md
# Environment: THREADS (default: all cores), LANGUAGE_CODE (default es), FORMATS (default
#   "timit-path timit textgrid buckeye kaldi manifest.csv manifest.jsonl"; timit-path is
#   `prepare --timit` on the tone corpus, and needs no libespeak-ng when it is the only one).
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,20p "$0"; exit 2; }
BIN=$(realpath "$1"); WORK=$2; shift 2
SIZES=("$@"); [ ${#SIZES[@]} -gt 0 ] || SIZES=(24 96)
THREADS=${THREADS:-$(nproc)}; LANG_CODE=${LANGUAGE_CODE:-es}
read -r -a FORMAT_LIST <<< "${FORMATS:-timit-path timit textgrid buckeye kaldi manifest.csv manifest.jsonl}"
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
# hours prepared: train, dev and test (core-test is a part of test on TIMIT's path, empty on the others)
hours_of() {
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['splits']; print(round(sum(s[k]['seconds'] for k in ('train','dev','test'))/3600, 3))" "$1" 2>/dev/null || echo "?"
}
for spk in "${SIZES[@]}"; do
  c=$WORK/es$spk l=$WORK/l$spk t=$WORK/tones$spk
  for f in "${FORMAT_LIST[@]}"; do
    fmt=${f%%.*}
    if [ "$f" = timit-path ]; then
      [ -d "$t" ] || measure "$BIN" synth --out "$t" --speakers "$spk" --utterances-per-speaker 28 --seed 1 \
        --threads "$THREADS" > /dev/null
      read -r wall rss < <(measure "$BIN" prepare --timit "$t" --out "$WORK/p-$f-$spk" --threads "$THREADS" \
        --no-progress --force)
    else
      if [ ! -f "$c/phone_set.yaml" ]; then
        measure "$BIN" synth --voice espeak --language "$LANG_CODE" --format timit --audio riff --out "$c" \
          --speakers "$spk" --utterances-per-speaker 28 --seed 1 --threads "$THREADS" > /dev/null
        rm -rf "$l"
      fi
      [ -d "$l" ] || python3 "$HERE/timit_to_layouts.py" "$c" "$l" > /dev/null
      if [ "$f" = timit ]; then src=$c split=(); else src=$l/$f split=(--split-file "$l/splits.txt"); fi
      read -r wall rss < <(measure "$BIN" prepare --corpus "$src" --format "$fmt" --phone-set "$c/phone_set.yaml" \
        "${split[@]}" --out "$WORK/p-$f-$spk" --threads "$THREADS" --no-progress --force)
    fi
    hours=$(hours_of "$WORK/p-$f-$spk/manifest.json")
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
