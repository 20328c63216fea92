#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang + libFuzzer, into build-fuzz/)
# and runs each for SECONDS (default 600) from its seed corpus
# tests/fuzz/corpus/TARGET/, with AddressSanitizer, UBSan and LeakSanitizer on.
# Prints one line per target: executions, coverage, result; exits non-zero if
# any target found something (the input is kept in build-fuzz/fuzz/TARGET/).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   targets: phn audio safetensors config cache manifest dict transcript
#   scripts/fuzz.sh --available             exit 0 if clang can link a libFuzzer target here
#
# Inputs found to be new during a run are kept in build-fuzz/fuzz/TARGET/corpus
# (not committed) and reused by the next run. docs/fuzzing.md explains how to
# reproduce a finding and add it as a regression test.
#   JOBS  build parallelism (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

all_targets=(phn audio safetensors config cache manifest dict transcript)
# -max_len per format: a .PHN of ~60 lines; a SPHERE (1024-byte header) or RIFF
# file with ~3000 samples; split and checkpoint files of a few KB; a config or
# manifest of a few KB; a dictionary excerpt or a transcript list of a few KB.
declare -A max_len=([phn]=4096 [audio]=8192 [safetensors]=8192 [config]=4096 [cache]=8192 [manifest]=8192 [dict]=4096
                   [transcript]=4096)

available() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local d
  d=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$d/t.cpp"
  local rc=0
  clang++ -fsanitize=fuzzer,address,undefined "$d/t.cpp" -o "$d/t" >/dev/null 2>&1 || rc=1
  rm -rf "$d"
  return $rc
}

if [ "${1:-}" = "--available" ]; then
  if available; then exit 0; else exit 1; fi
fi
if ! available; then
  echo "fuzz: clang++ with libFuzzer is needed (Debian packages clang and libclang-rt-14-dev; scripts/setup.sh)" >&2
  exit 1
fi

seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "fuzz: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DTIMITSEG_FUZZ=ON -DTIMITSEG_CUDA=OFF \
  -DTIMITSEG_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"${JOBS:-$(nproc)}" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:print_stacktrace=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

failed=0
summary=()
for t in "${targets[@]}"; do
  work="build-fuzz/fuzz/$t"
  mkdir -p "$work/corpus"
  log="$work/run.log"
  echo "fuzz: $t for ${seconds} s (log: $log)"
  rc=0
  "build-fuzz/bin/fuzz_$t" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ $rc -eq 0 ]; then
    result="ok"
  else
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    reason=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz oracle:' "$log" || true)
    result="FAILED (exit $rc: ${reason:-see $log}; input: ${artifact:-none})"
  fi
  line=$(printf '%-12s %10s runs  cov %6s  %s' "$t" "${runs:-?}" "${cov:-?}" "$result")
  echo "fuzz: $line"
  summary+=("$line")
done
echo "fuzz: summary (${seconds} s per target)"
printf '  %s\n' "${summary[@]}"
exit $failed
