#!/usr/bin/env bash
# Transcripts against times on several corpora and seeds (docs/training.md
# "Training from transcripts"): for each corpus, synthesize it with times,
# prepare one WORKDIR, then train each arm (by default: on the times, and on the
# phone sequences alone, crf.supervision=transcript) for each seed, pick each
# run's checkpoint by dev PER (the rule of every run: best.safetensors), score
# its alignment of the test split against the hidden times (`evaluate --align`,
# sample-accurate; bias: the mean signed error, > 0 late) and print mean and
# spread over the seeds, then the phones whose boundaries miss most (by_phone).
#
#   bench/accuracy/transcripts_sweep.sh OUT [SEEDS] [CORPORA]
#
#   SEEDS    default "1 2 3"
#   CORPORA  default "flite es de cmn": flite (synth --voice flite, TIMIT layout,
#            configs/synth.yaml, scored on core-test) and espeak-ng languages
#            (synth --voice espeak --language L, TextGrid layout,
#            configs/espeak.yaml, scored on test)
#
# Environment: TIMITSEG (the binary, default build/bin/timitseg), JOBS (trainings
# at once, default 1; several share one GPU well), SPEAKERS and UTTS (corpus size,
# default 48 x 8: the demo's), EPOCHS (default: the config's), THREADS (synth's
# and prepare's workers, default all cores), ARMS (default
# "times:;transcript:crf.supervision=transcript": NAME:KEY=VALUE,KEY=VALUE;...
# each arm's --set overrides), SET (--set overrides for every run, e.g.
# "train.device=cpu"), PREPARE_ARGS (extra `prepare` options for every corpus,
# e.g. "--frame-shift-ms 5"), DEV (1: also align the dev split, dev.json, and add its
# within-20-ms column: the figure a rule decides on; test is only reported), SHIFTS
# (1 or "phone": also fit each phone's boundary shift on dev, `evaluate --align
# --fit-shifts`, and score test with it, eval_shifted.json: the columns "with dev's
# shifts"; "pair" or "phone pair": with --shift-context pair too, eval_shifted_pair.json;
# it uses dev's times, docs/align.md "Calibrating to a labelling convention"). An existing corpus, WORKDIR or finished run under OUT is
# reused, so a sweep can be resumed or extended by seeds; TABLE_ONLY=1 prints
# the table of the runs under OUT and runs nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: transcripts_sweep.sh OUT [SEEDS] [CORPORA]}
SEEDS=${2:-1 2 3}
CORPORA=${3:-flite es de cmn}
BIN=${TIMITSEG:-build/bin/timitseg}
JOBS=${JOBS:-1}
SPEAKERS=${SPEAKERS:-48}
UTTS=${UTTS:-8}
THREADS=${THREADS:-0}
ARMS=${ARMS:-times:;transcript:crf.supervision=transcript}
read -r -a prepare_args <<< "${PREPARE_ARGS:-}"
mkdir -p "$OUT"

case "${SHIFTS:-}" in "") shift_contexts= ;; 1) shift_contexts=phone ;; *) shift_contexts=$SHIFTS ;; esac
. bench/accuracy/sweep_common.sh  # sets, jobs_file, CORPORA_RUN, run_jobs
for c in $CORPORA_RUN; do
  corpus="$OUT/$c/corpus" prep="$OUT/$c/prep"
  mkdir -p "$OUT/$c"
  if [ "$c" = flite ]; then
    config=configs/synth.yaml split=core-test
    [ -d "$corpus" ] || logged "$OUT/$c/synth.log" "$BIN" synth --voice flite --out "$corpus" --speakers "$SPEAKERS" \
      --utterances-per-speaker "$UTTS" --threads "$THREADS"
    [ -f "$prep/manifest.json" ] || logged "$OUT/$c/prepare.log" "$BIN" prepare --timit "$corpus" --out "$prep" \
      --threads "$THREADS" ${prepare_args[@]+"${prepare_args[@]}"} --no-progress
  else
    config=configs/espeak.yaml split=test
    [ -d "$corpus" ] || logged "$OUT/$c/synth.log" "$BIN" synth --voice espeak --language "$c" --format textgrid \
      --out "$corpus" --speakers "$SPEAKERS" --utterances-per-speaker "$UTTS" --threads "$THREADS"
    [ -f "$prep/manifest.json" ] || logged "$OUT/$c/prepare.log" "$BIN" prepare --corpus "$corpus" --format textgrid \
      --phone-set "$corpus/phone_set.yaml" --split-file "$corpus/splits.txt" --out "$prep" \
      --threads "$THREADS" ${prepare_args[@]+"${prepare_args[@]}"} --no-progress
  fi
  IFS=';' read -r -a arms <<< "$ARMS"
  for arm in "${arms[@]}"; do
    name=${arm%%:*} over=${arm#*:}
    for s in $SEEDS; do
      run="$OUT/$c/$name/seed-$s"
      ck="$run/checkpoints/best.safetensors" steps=()
      [ -f "$run/eval.json" ] || steps+=("$BIN train --config $config --set data.workdir=$prep --set train.run_dir=$run"\
" --set train.seed=$s ${EPOCHS:+--set train.epochs=$EPOCHS} $(sets "$over") $(sets "${SET:-}") > $run.train.log 2>&1"
        "$BIN evaluate --checkpoint $ck --workdir $prep --split $split --align --no-progress --json $run/eval.json"\
" > $run.eval.log 2>&1")
      if [ -n "${DEV:-}${SHIFTS:-}" ] && [ ! -f "$run/dev.json" ]; then
        steps+=("$BIN evaluate --checkpoint $ck --workdir $prep --split dev --align --no-progress --json $run/dev.json"\
" > $run.dev.log 2>&1")
      fi
      for ctx in $shift_contexts; do  # shifts.json / eval_shifted.json (phone), shifts_pair.json / eval_shifted_pair.json
        sfx=${ctx/#phone/} sfx=${sfx:+_$sfx}
        [ -f "$run/eval_shifted$sfx.json" ] && continue
        steps+=("$BIN evaluate --checkpoint $ck --workdir $prep --split dev --align --no-progress --fit-shifts"\
" $run/shifts$sfx.json --shift-context $ctx > $run.fit$sfx.log 2>&1"
          "$BIN evaluate --checkpoint $ck --workdir $prep --split $split --align --shifts $run/shifts$sfx.json"\
" --no-progress --json $run/eval_shifted$sfx.json > $run.shifted$sfx.log 2>&1")
      done
      [ ${#steps[@]} -eq 0 ] && continue
      joined=$(printf ' && %s' "${steps[@]}")
      echo "${joined# && }" >> "$jobs_file"
      mkdir -p "$(dirname "$run")"
    done
  done
done
run_jobs

python3 - "$OUT" "$CORPORA" "$ARMS" "$SEEDS" <<'PYEOF'
import glob, json, os, statistics, sys
out, corpora, arms, seeds = sys.argv[1], sys.argv[2].split(), [a.split(":")[0] for a in sys.argv[3].split(";")], sys.argv[4].split()

def ms(xs, scale=1.0, digits=2):
    xs = [scale * x for x in xs]
    if not xs: return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.{digits}f} +- {sd:.{digits}f}"

def per_seed(xs, scale=1.0):  # each seed's value, in the order of SEEDS: "90.49 / 90.20 / 90.31"
    return " / ".join(f"{scale * x:.2f}" for x in xs)

shifted = [(sfx, name) for sfx, name in (("", "dev's shifts"), ("_pair", "dev's pair shifts"))
           if glob.glob(os.path.join(out, "*", "*", "seed-*", f"eval_shifted{sfx}.json"))]
extra_head = "".join(f" with {name}: within 20 ms % | mean abs error ms |" for _, name in shifted)
print("| corpus | trained on | seeds | dev within 20 ms % | test PER % | within 20 ms % (sample; per seed) | mean abs error ms | bias ms | within 10 / 25 / 50 ms % | s per epoch (mean) |" + extra_head)
print("|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(shifted))
for c in corpora:
    for a in arms:
        per, w20, mae, bias, w10, w25, w50, sec, dev20 = [], [], [], [], [], [], [], [], []
        sw20 = {sfx: [] for sfx, _ in shifted}; smae = {sfx: [] for sfx, _ in shifted}
        for s in seeds:
            f = os.path.join(out, c, a, f"seed-{s}", "eval.json")
            if not os.path.exists(f): continue
            j = json.load(open(f)); al = j["align"]["samples"]
            per.append(j["per"]); w20.append(al["within_ms"]["20"]); mae.append(al["mean_abs_ms"])
            bias.append(al.get("mean_signed_ms", float("nan")))
            w10.append(al["within_ms"]["10"]); w25.append(al["within_ms"]["25"]); w50.append(al["within_ms"]["50"])
            m = [json.loads(l) for l in open(os.path.join(out, c, a, f"seed-{s}", "metrics.jsonl")) if l.strip()]
            sec.append(statistics.mean(x["epoch_seconds"] for x in m))
            d = os.path.join(out, c, a, f"seed-{s}", "dev.json")
            if os.path.exists(d): dev20.append(json.load(open(d))["align"]["samples"]["within_ms"]["20"])
            for sfx, _ in shifted:
                e = os.path.join(out, c, a, f"seed-{s}", f"eval_shifted{sfx}.json")
                if os.path.exists(e):
                    se = json.load(open(e))["align"]["samples"]
                    sw20[sfx].append(se["within_ms"]["20"]); smae[sfx].append(se["mean_abs_ms"])
        if not per:
            print(f"| {c} | {a} | 0 | | (no finished run) | | | | | |"); continue
        print(f"| {c} | {a} | {len(per)} | {ms(dev20, 100)} | {ms(per, 100)} | {ms(w20, 100)} ({per_seed(w20, 100)}) | {ms(mae)} | {ms(bias)} | "
              f"{ms(w10, 100, 1)} / {ms(w25, 100, 1)} / {ms(w50, 100, 1)} | {statistics.mean(sec):.2f} |" +
              "".join(f" {ms(sw20[sfx], 100)} | {ms(smae[sfx])} |" for sfx, _ in shifted))

# Where the misses are: per corpus and arm, the phones with the most test boundaries off by
# more than 20 ms (mean over the seeds; `evaluate --align`'s by_phone, docs/align.md).
rows = []
for c in corpora:
    for a in arms:
        bp = []
        for s in seeds:
            f = os.path.join(out, c, a, f"seed-{s}", "eval.json")
            if os.path.exists(f): bp.append(json.load(open(f))["align"]["samples"].get("by_phone"))
        if not bp or any(b is None for b in bp): continue
        miss = {}
        for p in bp[0]:
            if bp[0][p]["boundaries"] == 0 or any(p not in b for b in bp): continue
            m = statistics.mean(b[p]["boundaries"] * (1 - b[p]["within_ms"]["20"]) for b in bp)
            miss[p] = (m, bp[0][p]["boundaries"], statistics.mean(b[p]["mean_signed_ms"] for b in bp))
        total = statistics.mean(sum(b[p]["boundaries"] * (1 - b[p]["within_ms"]["20"]) for p in b if b[p]["boundaries"]) for b in bp)
        top = sorted(miss.items(), key=lambda kv: -kv[1][0])[:5]
        rows.append(f"| {c} | {a} | {total:.0f} | " + "; ".join(f"{p} {m:.0f} of {n} ({b:+.1f} ms)" for p, (m, n, b) in top) + " |")
if rows:
    print()
    print("| corpus | trained on | test boundaries off > 20 ms (per seed) | the phones with the most: missed of boundaries into it (bias) |")
    print("|---|---|---|---|")
    print("\n".join(rows))
PYEOF
exit $status
