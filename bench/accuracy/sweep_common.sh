# Sourced by bench/accuracy/transcripts_sweep.sh and noisy_sweep.sh (bash):
# the arms' --set lists, the jobs file, and running its lines JOBS at once.
# Expects OUT, CORPORA, JOBS and (optional) TABLE_ONLY; defines logged (a
# corpus step with its log, failing with one line) and sets jobs_file,
# CORPORA_RUN (empty with TABLE_ONLY: nothing is run) and, after run_jobs,
# status (xargs's: nonzero when a job failed; each failure is named on stderr).

logged() {  # LOG BIN SUBCOMMAND ARGS...: run it with its output in LOG; on failure one line naming
  # the step, the log and its last line, then exit with its status (set -e alone would stop silently)
  local log=$1 rc=0; shift
  "$@" > "$log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] && return 0
  echo "${0##*/}: $2 failed (exit $rc; $log): $(tail -n 1 "$log")" >&2
  exit "$rc"
}

sets() {  # "k=v,k=v" -> --set k=v --set k=v
  local IFS=,
  for kv in $1; do [ -n "$kv" ] && printf -- '--set %s ' "$kv"; done
  return 0
}

jobs_file="$OUT/jobs.txt"
: > "$jobs_file"
[ -n "${TABLE_ONLY:-}" ] && CORPORA_RUN= || CORPORA_RUN=$CORPORA

run_jobs() {  # one line of $jobs_file per run, JOBS at once
  status=0
  [ -z "${TABLE_ONLY:-}" ] && echo "$(wc -l < "$jobs_file") run(s), $JOBS at once: $jobs_file" >&2
  tr '\n' '\0' < "$jobs_file" | xargs -0 -r -P "$JOBS" -I{} bash -c '{} || echo "failed: {}" >&2' || status=$?
}
