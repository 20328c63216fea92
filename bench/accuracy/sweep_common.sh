# Sourced by bench/accuracy/transcripts_sweep.sh and noisy_sweep.sh (bash):
# the arms' --set lists, the jobs file, and running its lines JOBS at once.
# Expects OUT, CORPORA, JOBS and (optional) TABLE_ONLY; sets jobs_file,
# CORPORA_RUN (empty with TABLE_ONLY: nothing is run) and, after run_jobs,
# status (xargs's: nonzero when a job failed; each failure is named on stderr).

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
