#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UBSan (docs/fuzzing.md).
# Configures build-asan/ with -DTIMITSEG_SANITIZE=ON, builds everything and runs
# every ctest test; any sanitizer report stops the test that made it (halt_on_error)
# and fails the run. Extra arguments go to cmake's configure step, e.g.
# -DTIMITSEG_CUDA=ON (the default here is OFF: CUDA device code is never
# instrumented, and without a GPU the CUDA tests skip anyway).
#   TIMITSEG_SANITIZE_TIMEOUT  seconds allowed per test (default 3000): tests run
#                              2-5x slower under ASan; none is skipped.
#   JOBS                       build and ctest parallelism (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-$(nproc)}
start=$(date +%s)

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DTIMITSEG_SANITIZE=ON -DTIMITSEG_CUDA=OFF \
      -DTIMITSEG_BUILD_TESTS=ON "${launcher[@]}" "$@"
cmake --build build-asan -j"$jobs"

# halt_on_error: the first report ends the process with a non-zero status.
# detect_leaks: LeakSanitizer at exit; scripts/lsan.supp lists the only
# suppressed leaks (third-party libraries, each entry says why).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:print_stacktrace=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
if grep -q '^TIMITSEG_CUDA:STRING=\(ON\|AUTO\)' build-asan/CMakeCache.txt && grep -q '^CMAKE_CUDA_COMPILER:' build-asan/CMakeCache.txt; then
  # The CUDA driver maps memory in ASan's shadow gap; without this cudaMalloc fails.
  ASAN_OPTIONS="$ASAN_OPTIONS:protect_shadow_gap=0"
fi
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

rc=0
ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout "${TIMITSEG_SANITIZE_TIMEOUT:-3000}" || rc=$?
echo "sanitize: ctest exit $rc, wall time $(( $(date +%s) - start )) s (build + tests)"
exit $rc
