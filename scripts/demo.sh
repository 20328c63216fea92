#!/usr/bin/env bash
# README command 1: set up, build, make a synthetic TIMIT-layout corpus, prepare
# features, train with configs/synth.yaml (train.device: auto, so the GPU when
# one is present, else the CPU), evaluate the best checkpoint on the dev and
# core-test splits, and write the HTML report (training curves, confusion
# matrix, durations, decoded utterances; docs/report.md).
# The corpus is the speech corpus (`synth --voice flite`, sentences spoken by
# libflite) when the binary has libflite built in (`timitseg --version` says
# "with libflite"), else the tone corpus (`synth --voice tones`).
# Everything lands under work/demo/: corpus-flite/ or corpus-tones/, its augmented
# copy corpus-flite-aug/ (or corpus-tones-aug/), prep/ (the
# prepared WORKDIR that README's later commands use), run/, dev.json,
# core-test.json, report.html.
# Re-running reuses the corpus and the prepared features (prepare is a no-op
# when nothing changed) and starts a fresh training run.
#
#   scripts/demo.sh             the whole demo (installs packages: root or sudo); builds
#                               only the binary (build/bin/timitseg), and on a machine
#                               without an NVIDIA GPU (nvidia-smi) whose build/ is not
#                               configured yet, for the CPU only (-DTIMITSEG_CUDA=OFF;
#                               scripts/build.sh -DTIMITSEG_CUDA=AUTO adds the CUDA parts)
#   scripts/demo.sh --no-build  without scripts/setup.sh and scripts/build.sh:
#                               uses the build/bin/timitseg already built
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "")
    scripts/setup.sh
    cuda=()
    if [ ! -f build/CMakeCache.txt ] && ! nvidia-smi -L >/dev/null 2>&1; then
      echo "demo: no NVIDIA GPU found (nvidia-smi): building for the CPU only (-DTIMITSEG_CUDA=OFF)"
      cuda=(-DTIMITSEG_CUDA=OFF)
    fi
    TIMITSEG_BUILD_TARGETS=timitseg scripts/build.sh "${cuda[@]}" ;;
  --no-build) ;;
  *) echo "usage: scripts/demo.sh [--no-build]" >&2; exit 2 ;;
esac
bin=build/bin/timitseg
[ -x "$bin" ] || { echo "demo: $bin is not built (run scripts/demo.sh without --no-build)" >&2; exit 1; }
out=work/demo
mkdir -p "$out"
if $bin --version | grep -q "with libflite"; then voice=flite; else voice=tones; fi
corpus="$out/corpus-$voice"
if [ ! -d "$corpus" ]; then
  echo "demo: making the $voice corpus in $corpus"
  $bin synth --voice "$voice" --out "$corpus" --speakers 48 --utterances-per-speaker 8
fi
# the augmented copies configs/synth.yaml trains on (augment.speed, augment.noise; chosen on dev,
# docs/training.md "Augmentation, decided on clean and noisy dev"): each train utterance at speed 0.9 and
# 1.1 and once in babble at an SNR drawn from 0-20 dB; dev and test stay as they are
if [ ! -d "$corpus-aug" ]; then
  echo "demo: writing the augmented copies of the train split into $corpus-aug"
  $bin augment --timit "$corpus" --out "$corpus-aug" --speed 0.9,1.1 --noise babble --snr 0:20 --seed 1
fi
$bin prepare --timit "$corpus-aug" --out "$out/prep" --threads "$(nproc)"
rm -rf "$out/run"
$bin train --config configs/synth.yaml --set data.workdir="$out/prep" --set train.run_dir="$out/run"
$bin evaluate --checkpoint "$out/run/checkpoints/best.safetensors" --split dev --json "$out/dev.json"
$bin evaluate --checkpoint "$out/run/checkpoints/best.safetensors" --split core-test --json "$out/core-test.json"
# the figures README quotes (tests/reproduce/demo_figures.json): the same, or what differs
python3 scripts/demo_figures.py --demo "$out" --check || true
echo "demo: done ($voice corpus). Metrics per epoch: $out/run/metrics.jsonl; evaluation: $out/dev.json, $out/core-test.json"
echo "demo: the report (open it in a browser; train also refreshes $out/run/report.html after every epoch):"
$bin report "$out/run" --out "$out/report.html"  # prints the report's absolute path
