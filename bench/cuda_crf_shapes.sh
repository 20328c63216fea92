#!/bin/bash
# Times `timitseg bench crf --backend cuda` at the kernels' benchmark shapes (the
# semi-CRF kernels' speed and memory) for one or more timitseg binaries, on the
# same GPU in one call, so that the figures compare (docs/cuda.md "Measured").
#
# usage: bench/cuda_crf_shapes.sh [--quick] TIMITSEG...
#   Each TIMITSEG is a binary (e.g. a build before and after a change). Prints,
#   per binary and shape, bench crf's table, its workspace and device-memory
#   lines and its check against the float64 reference, then a summary table
#   (medians in ms). --quick: fewer repeats and no T = 100000 shape.
set -euo pipefail
quick=0
if [[ "${1:-}" == "--quick" ]]; then quick=1; shift; fi
if [[ $# -lt 1 ]]; then
  echo "usage: $0 [--quick] TIMITSEG..." >&2
  exit 2
fi
# name B T K C warmup repeats check-utterances
shapes=("timit 32 200 30 39 5 50 4"
        "timit400 32 400 60 39 3 20 2"
        "long10k 4 10000 60 39 1 5 1")
[[ $quick == 1 ]] || shapes+=("long100k 1 100000 60 39 1 3 0")
summary=()
for bin in "$@"; do
  [[ -x "$bin" ]] || { echo "$0: $bin is not an executable" >&2; exit 2; }
  for s in "${shapes[@]}"; do
    read -r name B T K C warm rep chk <<<"$s"
    echo "== $(basename "$bin") $name: B=$B T=$T K=$K C=$C"
    out=$("$bin" bench crf --backend cuda -B "$B" -T "$T" -K "$K" -C "$C" --warmup "$warm" --repeats "$rep" \
      --check-utterances "$chk" 2>&1) || { echo "$out"; echo "$0: $bin failed at $name" >&2; exit 1; }
    echo "$out"
    fwd=$(awk '$1 == "forward" {print $2}' <<<"$out")
    fb=$(awk '$1 == "forward+backward" {print $2}' <<<"$out")
    vit=$(awk '$1 == "viterbi" {print $2}' <<<"$out")
    mem=$(sed -n 's/.*forward (inputs, log Z, workspace) \([0-9.]*\); all operations \([0-9.]*\)/\1 \2/p' <<<"$out")
    summary+=("$(printf '%-22s %-9s %10s %10s %10s %9s %9s' "$(basename "$bin")" "$name" "$fwd" "$fb" "$vit" $mem)")
  done
done
echo
printf '%-22s %-9s %10s %10s %10s %9s %9s\n' binary shape fwd_ms fwd+bwd_ms viterbi_ms fwd_MiB all_MiB
printf '%s\n' "${summary[@]}"
