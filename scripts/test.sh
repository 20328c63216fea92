#!/usr/bin/env bash
# The test command of README.md: setup + build + ctest (no GPU needed; GPU
# tests skip when no CUDA device is present, and after ctest's summary one
# "test: skipped N tests: REASON (NAMES)" line per reason says why, from
# scripts/skipped.sh: ctest itself shows only "(Skipped)"), then, when clang
# and libFuzzer are installed, every fuzz target for TIMITSEG_FUZZ_SECONDS
# (default 30) each (scripts/fuzz.sh, docs/fuzzing.md; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
rc=0
ctest --test-dir build --output-on-failure -j"$(nproc)" || rc=$?
scripts/skipped.sh build  # the skip reasons (GTEST_SKIP messages) that ctest does not print
# pytest's skip reasons (python.pytest runs with -rs; e.g. the torch tests without torch)
grep -h "^SKIPPED \[" build/Testing/Temporary/LastTest.log 2>/dev/null | sed 's/^/test: python.pytest: /' || true
[ "$rc" -eq 0 ] || exit "$rc"
fuzz_seconds=${TIMITSEG_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ] && scripts/fuzz.sh --available; then
  scripts/fuzz.sh "$fuzz_seconds"
elif [ "$fuzz_seconds" -gt 0 ]; then
  echo "test: fuzzing skipped: clang with libFuzzer is not installed (scripts/setup.sh installs clang and libclang-rt-14-dev)"
fi
