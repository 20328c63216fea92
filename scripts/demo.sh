#!/usr/bin/env bash
# README command 1: set up, build, make the synthetic TIMIT-layout corpus,
# prepare features, train on the CPU with configs/synth.yaml, evaluate the best
# checkpoint on the dev and core-test splits, and writes the HTML report
# (training curves, confusion matrix, durations, decoded utterances; docs/report.md).
# Everything lands under work/demo/.
# Re-running reuses the corpus and the prepared features (prepare is a no-op
# when nothing changed) and starts a fresh training run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/timitseg
out=work/demo
mkdir -p "$out"
[ -d "$out/corpus" ] || $bin synth --out "$out/corpus" --speakers 48 --utterances-per-speaker 8
$bin prepare --timit "$out/corpus" --out "$out/prep" --threads "$(nproc)"
rm -rf "$out/run"
$bin train --config configs/synth.yaml --set data.workdir="$out/prep" --set train.run_dir="$out/run"
$bin evaluate --checkpoint "$out/run/checkpoints/best.safetensors" --split dev --json "$out/dev.json"
$bin evaluate --checkpoint "$out/run/checkpoints/best.safetensors" --split core-test --json "$out/core-test.json"
$bin report "$out/run" --out "$out/report.html"
echo "demo: done. Metrics per epoch: $out/run/metrics.jsonl; evaluation: $out/dev.json, $out/core-test.json"
echo "demo: report: $(realpath "$out/report.html") (open it in a browser; train also refreshes $out/run/report.html after every epoch)"
