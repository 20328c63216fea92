#!/usr/bin/env bash
# The test command of README.md: setup + build + ctest (no GPU needed; GPU
# tests skip with a message when no CUDA device is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
