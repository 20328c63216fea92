#!/usr/bin/env bash
# Several pronunciations of a word, measured (docs/training.md "Several
# pronunciations of a word, measured"): an espeak-ng corpus written twice with
# one seed (LibriSpeech layout, words only, for training; TextGrids with the
# times, for scoring), three dictionaries from bench/accuracy/variant_dict.py
# (true: the audio's pronunciations; first: a fraction of the words with a
# wrong one instead; graph: those words with the wrong one first and the
# audio's second, both offered to the loss), a transcripts-only WORKDIR per
# dictionary, then for each seed a run per dictionary (configs/espeak.yaml,
# best checkpoint by dev PER) scored on the test split of the timed WORKDIR
# (`evaluate --align`, sample-accurate). No choice is made from these figures.
#
#   bench/accuracy/pronunciation_variants.sh OUT [SEEDS] [LANGUAGE]
#
#   SEEDS     default "1 2 3"        LANGUAGE  default es
#
# Environment: TIMITSEG (default build/bin/timitseg), JOBS (trainings at once,
# default 1), SPEAKERS and UTTS (default 48 x 8), FRACTION (word types with a
# wrong first pronunciation, default 0.3), EPOCHS (default: the config's), SET
# (--set overrides for every run, e.g. "train.device=cpu"). Existing corpora,
# WORKDIRs and finished runs under OUT are reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: pronunciation_variants.sh OUT [SEEDS] [LANGUAGE]}
SEEDS=${2:-1 2 3}
LANG_=${3:-es}
BIN=${TIMITSEG:-build/bin/timitseg}
JOBS=${JOBS:-1}
SPEAKERS=${SPEAKERS:-48}
UTTS=${UTTS:-8}
FRACTION=${FRACTION:-0.3}
ARMS="true first graph"
mkdir -p "$OUT"
sets() { local IFS=,; for kv in $1; do [ -n "$kv" ] && printf -- '--set %s ' "$kv"; done; return 0; }

tg="$OUT/corpus_tg" ls="$OUT/corpus_ls"
[ -d "$tg" ] || "$BIN" synth --voice espeak --language "$LANG_" --format textgrid --out "$tg" --speakers "$SPEAKERS" \
  --utterances-per-speaker "$UTTS" --seed 1 > "$OUT/synth_tg.log" 2>&1
[ -d "$ls" ] || "$BIN" synth --voice espeak --language "$LANG_" --format librispeech --out "$ls" --speakers "$SPEAKERS" \
  --utterances-per-speaker "$UTTS" --seed 1 > "$OUT/synth_ls.log" 2>&1
[ -f "$OUT/prep_tg/manifest.json" ] || "$BIN" prepare --corpus "$tg" --format textgrid --phone-set "$tg/phone_set.yaml" \
  --split-file "$tg/splits.txt" --out "$OUT/prep_tg" --no-progress > "$OUT/prepare_tg.log" 2>&1
[ -f "$OUT/dicts/graph.dict" ] || python3 bench/accuracy/variant_dict.py "$tg" "$OUT/dicts" "$FRACTION" 1 | tee "$OUT/dicts.log"
for a in $ARMS; do
  [ -f "$OUT/prep_$a/manifest.json" ] || "$BIN" prepare --corpus "$ls" --format librispeech --dict "$OUT/dicts/$a.dict" \
    --phone-set "$tg/phone_set.yaml" --out "$OUT/prep_$a" --no-progress > "$OUT/prepare_$a.log" 2>&1
done
jobs_file="$OUT/jobs.txt"
: > "$jobs_file"
for a in $ARMS; do
  for s in $SEEDS; do
    run="$OUT/$a/seed-$s"
    [ -f "$run/eval.json" ] && continue
    mkdir -p "$OUT/$a"
    echo "$BIN train --config configs/espeak.yaml --set data.workdir=$OUT/prep_$a --set train.run_dir=$run" \
      "--set train.seed=$s ${EPOCHS:+--set train.epochs=$EPOCHS} $(sets "${SET:-}") > $run.train.log 2>&1 &&" \
      "$BIN evaluate --checkpoint $run/checkpoints/best.safetensors --workdir $OUT/prep_tg --split test --align" \
      "--no-progress --json $run/eval.json > $run.eval.log 2>&1" >> "$jobs_file"
  done
done
status=0
echo "$(wc -l < "$jobs_file") run(s), $JOBS at once: $jobs_file" >&2
tr '\n' '\0' < "$jobs_file" | xargs -0 -r -P "$JOBS" -I{} bash -c '{} || echo "failed: {}" >&2' || status=$?

python3 - "$OUT" "$ARMS" "$SEEDS" <<'PYEOF'
import json, os, statistics, sys
out, arms, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def ms(xs, scale=1.0, d=2):
    xs = [scale * x for x in xs]
    return "-" if not xs else f"{statistics.mean(xs):.{d}f} +- {statistics.stdev(xs) if len(xs) > 1 else 0.0:.{d}f}"
print("| dictionary | seeds | test PER % | within 20 ms % | mean abs error ms | bias ms | s per epoch |")
print("|---|---|---|---|---|---|---|")
for a in arms:
    per, w20, mae, bias, sec = [], [], [], [], []
    for s in seeds:
        f = os.path.join(out, a, f"seed-{s}", "eval.json")
        if not os.path.exists(f): continue
        j = json.load(open(f)); al = j["align"]["samples"]
        per.append(j["per"]); w20.append(al["within_ms"]["20"]); mae.append(al["mean_abs_ms"]); bias.append(al["mean_signed_ms"])
        m = [json.loads(l) for l in open(os.path.join(out, a, f"seed-{s}", "metrics.jsonl")) if l.strip()]
        sec.append(statistics.mean(x["epoch_seconds"] for x in m))
    if per:
        print(f"| {a} | {len(per)} | {ms(per, 100)} | {ms(w20, 100)} | {ms(mae)} | {ms(bias)} | {statistics.mean(sec):.2f} |")
PYEOF
exit $status
