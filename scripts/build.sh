#!/usr/bin/env bash
# Configures and builds timitseg into build/ (Release). Extra arguments go to
# cmake's configure step, e.g. -DTIMITSEG_CUDA=OFF (a CPU-only build: it skips
# the CUDA sources, most of a fresh build's time; configure says which it does).
# TIMITSEG_BUILD_TARGETS="timitseg ..." builds only those targets (scripts/demo.sh:
# the binary, without the tests, benchmarks and libtimitseg.so); default: all.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${TIMITSEG_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
