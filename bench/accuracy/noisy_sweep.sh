#!/usr/bin/env bash
# Clean and babble dev and test of several arms (docs/training.md "Augmentation,
# decided on clean and noisy dev" and "Feature normalization, decided on dev"):
# for each corpus, synthesize it, write its augmented copy (`augment --speed
# 0.9,1.1 --noise babble --snr 0:20 --seed 1`) and a babble copy of its test
# speakers at 10 dB (`augment --noisy-test --noise babble --snr 10 --seed 2`),
# prepare both, then train each arm on the augmented WORKDIR for each seed and
# evaluate its best checkpoint (the dev-PER rule of every run) four times: dev
# clean (dev.json), dev in babble (dev_b10.json), test clean (test.json), test in
# babble with the forced alignment (test_b10.json). Then it prints
# bench/accuracy/noisy_table.py's table: S = (clean dev PER + babble dev PER) / 2
# and the test columns, mean and spread over the seeds, and the arm of lowest S.
# bench/accuracy/per_errors.py OUT then splits the test PER of two arms by error
# type and decodes each at the phone bonus its dev split chooses.
#
#   bench/accuracy/noisy_sweep.sh OUT [SEEDS] [CORPORA]
#
#   SEEDS    default "1 2 3"
#   CORPORA  default "demo es": demo (synth --voice flite --speakers 48
#            --utterances-per-speaker 8 --seed 7, configs/synth.yaml, scored on
#            core-test), large (flite, 96 x 10, --seed 11, the same), es (synth
#            --voice espeak --language es --format timit --speakers 32
#            --utterances-per-speaker 8 --noise-db -10 --seed 5, configs/espeak.yaml,
#            scored on test), LANGDB (espeak-ng language LANG, es de fr it nl or cmn, made as es
#            is but with --noise-db DB, e.g. es-5, de0)
#
# Environment: TIMITSEG (the binary, default build/bin/timitseg), JOBS (trainings
# at once, default 1; several share one GPU well), THREADS (synth's, augment's and
# prepare's workers, default all cores), ARMS (default "shipped:": NAME:KEY=VALUE,
# KEY=VALUE;... each arm's --set overrides; the first arm is the base the rule
# compares with), SET (--set overrides for every run, e.g. "train.device=cpu"),
# EPOCHS (default: the config's). An existing corpus, WORKDIR or finished run
# under OUT is reused; TABLE_ONLY=1 prints the table of the runs under OUT and
# runs nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: noisy_sweep.sh OUT [SEEDS] [CORPORA]}
SEEDS=${2:-1 2 3}
CORPORA=${3:-demo es}
BIN=${TIMITSEG:-build/bin/timitseg}
JOBS=${JOBS:-1}
THREADS=${THREADS:-0}
ARMS=${ARMS:-shipped:}
for c in $CORPORA; do  # checked before anything is written
  [[ $c =~ ^(demo|large|(es|de|fr|it|nl|cmn)(-?[0-9]+)?)$ ]] || {
    echo "noisy_sweep.sh: unknown corpus '$c' (demo, large, es, LANGDB as es-5 or de0)" >&2; exit 2; }
done
mkdir -p "$OUT"

. bench/accuracy/sweep_common.sh  # sets, jobs_file, CORPORA_RUN, run_jobs
for c in $CORPORA_RUN; do
  X="$OUT/$c"
  mkdir -p "$X"
  case $c in
    demo) synth=(--voice flite --speakers 48 --utterances-per-speaker 8 --seed 7) config=configs/synth.yaml split=core-test ;;
    large) synth=(--voice flite --speakers 96 --utterances-per-speaker 10 --seed 11) config=configs/synth.yaml split=core-test ;;
    *) lang=${c%%[-0-9]*} db=${c#"${c%%[-0-9]*}"}  # es-5 -> es, -5; es -> es, (the default -10)
       synth=(--voice espeak --language "$lang" --format timit --speakers 32 --utterances-per-speaker 8
         --noise-db "${db:--10}" --seed 5) config=configs/espeak.yaml split=test ;;
  esac
  [ -d "$X/corpus" ] || logged "$X/synth.log" "$BIN" synth "${synth[@]}" --out "$X/corpus" --threads "$THREADS"
  [ -d "$X/corpus_aug" ] || logged "$X/augment.log" "$BIN" augment --timit "$X/corpus" --out "$X/corpus_aug" \
    --speed 0.9,1.1 --noise babble --snr 0:20 --seed 1 --threads "$THREADS"
  [ -d "$X/corpus_b10" ] || logged "$X/augment_b10.log" "$BIN" augment --timit "$X/corpus" --out "$X/corpus_b10" \
    --noisy-test --noise babble --snr 10 --seed 2 --threads "$THREADS"
  for p in aug b10; do
    [ -f "$X/prep_$p/manifest.json" ] || logged "$X/prepare_$p.log" "$BIN" prepare --timit "$X/corpus_$p" \
      --out "$X/prep_$p" --threads "$THREADS" --no-progress
  done
  IFS=';' read -r -a arms <<< "$ARMS"
  for arm in "${arms[@]}"; do
    name=${arm%%:*} over=${arm#*:}
    for s in $SEEDS; do
      run="$X/$name/seed-$s" ck="$X/$name/seed-$s/checkpoints/best.safetensors"
      [ -f "$run/test_b10.json" ] && continue
      mkdir -p "$X/$name"
      ev() {  # WORKDIR SPLIT JSON [--align]
        printf '%s evaluate --checkpoint %s --workdir %s --split %s %s --no-progress --json %s/%s > %s.%s.log 2>&1' \
          "$BIN" "$ck" "$1" "$2" "${4:-}" "$run" "$3" "$run" "${3%.json}"
      }
      echo "$BIN train --config $config --set data.workdir=$X/prep_aug --set train.run_dir=$run --set train.seed=$s" \
        "${EPOCHS:+--set train.epochs=$EPOCHS} $(sets "$over") $(sets "${SET:-}") > $run.train.log 2>&1" \
        "&& $(ev "$X/prep_aug" dev dev.json) && $(ev "$X/prep_b10" dev dev_b10.json)" \
        "&& $(ev "$X/prep_aug" "$split" test.json) && $(ev "$X/prep_b10" "$split" test_b10.json --align)" >> "$jobs_file"
    done
  done
done
run_jobs
python3 bench/accuracy/noisy_table.py "$OUT" --corpora "$CORPORA" --arms "$ARMS" --seeds "$SEEDS"
exit $status
