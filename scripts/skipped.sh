#!/usr/bin/env bash
# Prints why tests were skipped in the last ctest run of BUILD_DIR (default
# build): ctest itself shows only "(Skipped)". Reads
# BUILD_DIR/Testing/Temporary/LastTest.log, where ctest keeps each test's
# output, and prints one line per reason with the number of tests and their
# names, e.g.
#   test: skipped 41 tests: no CUDA device was found (...): CudaBackend.Forward, ... (GTEST_SKIP)
# from gtest's SKIPPED messages and from the "SCRIPT: skipped: REASON" line a
# test script prints before exiting 77 (ctest's SKIP_RETURN_CODE).
# Nothing is printed when no test was skipped. scripts/test.sh calls it after ctest.
set -euo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  /^[0-9]+\/[0-9]+ Test: / { name = $3; next }
  # gtest: "FILE:LINE: Skipped", then the message up to "[  SKIPPED ] NAME"
  / Skipped$/ && name != "" { reading = 1; msg = ""; next }
  reading && /^\[  SKIPPED \]/ { reading = 0; add(name, msg); next }
  reading { if ($0 != "") msg = (msg == "" ? $0 : msg " " $0); next }
  # scripts (dist_runs.py, reproduce_demo.py, report_browser.py): one line
  # "SCRIPT: skipped: REASON" before their exit 77 (SKIP_RETURN_CODE)
  /^[A-Za-z0-9_.-]+: skipped: / && name != "" { m = $0; sub(/^[^:]*: skipped: /, "", m); add(name, m); next }
  function add(n, m) {
    if (m == "") m = "(no message)";
    if (!(m in count)) order[++k] = m;
    count[m]++;
    names[m] = (names[m] == "" ? n : names[m] ", " n);
  }
  END {
    for (i = 1; i <= k; i++) {
      m = order[i]; list = names[m];
      if (length(list) > 160) list = substr(list, 1, 157) "...";
      printf "test: skipped %d test%s: %s (%s)\n", count[m], count[m] == 1 ? "" : "s", m, list;
    }
  }
' "$log"
