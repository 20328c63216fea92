#!/usr/bin/env bash
# timitseg's CPU encoder vs PyTorch on the CPU, same sizes, one table.
#
#   bench/cpu_vs_torch.sh [THREADS...]          (default: 1 2)
#
# Environment: BUILD (build folder, default build), PYTHON (default python3),
# REPEATS (timed steps per run, default 5), SIZE (extra size flags for both
# programs, default the recipe: --batch 32 --hidden 256 --layers 3
# --input-dim 39 --classes 39 --min-frames 150 --max-frames 600).
#
# Columns: encoder = bench/cpu_encoder_bench (forward + backward of the
# encoder, projection and cumsum; no CRF, no optimizer); torch =
# bench/torch_cpu_step.py (encoder + a stand-in loss + backward + AdamW step);
# train = `timitseg bench train` (see LEAD below); ratio = (train, else
# encoder) / torch. Each figure is the median of REPEATS steps; run
# on an otherwise idle machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${BUILD:-build}"
python="${PYTHON:-python3}"
repeats="${REPEATS:-5}"
size="${SIZE:---batch 32 --hidden 256 --layers 3 --input-dim 39 --classes 39 --min-frames 150 --max-frames 600}"
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)

enc="$build/bin/cpu_encoder_bench"
if [ ! -x "$enc" ]; then
  echo "cpu_vs_torch.sh: $enc not found (build the cpu_encoder_bench target, or set BUILD)" >&2
  exit 2
fi
timitseg="$build/bin/timitseg"

# frames/s from a program's output ("... frames/s N"), "-" when absent.
fps() { grep -o 'frames/s [0-9.]*' <<<"$1" | tail -1 | awk '{print $2}' || true; }

rows=()
for n in "${threads[@]}"; do
  # shellcheck disable=SC2086
  e_out="$("$enc" $size --threads "$n" --repeats "$repeats")"
  echo "$e_out" >&2
  # shellcheck disable=SC2086
  t_out="$("$python" "$here/torch_cpu_step.py" $size --threads "$n" --repeats "$repeats")"
  echo "$t_out" >&2
  e=$(fps "$e_out")
  t=$(fps "$t_out")

  # ---- whole training step: `timitseg bench train --device cpu` ------------
  # (encoder + CRF + optimizer through train(), TRAIN_UTTERANCES utterances,
  # the second epoch's frames/s); the ratio compares it with torch.
  w=""
  if [ -x "$timitseg" ]; then
    # shellcheck disable=SC2086
    w_out="$("$timitseg" bench train --device cpu --threads "$n" ${size/--classes 39/} --utterances "${TRAIN_UTTERANCES:-96}" \
             --epochs 2 --eval-utterances 0 --breakdown-steps 0 2>/dev/null)"
    echo "$w_out" >&2
    w=$(grep -o 'training throughput: [0-9.]*' <<<"$w_out" | awk '{print $3}' || true)
  fi
  # --------------------------------------------------------------------------

  ours="${w:-$e}"
  if [ -n "$ours" ] && [ -n "$t" ]; then
    ratio=$(awk -v a="$ours" -v b="$t" 'BEGIN { printf "%.2f", a / b }')
  else
    ratio="-"
  fi
  rows+=("$n ${e:--} ${w:--} ${t:--} $ratio")
done

printf '\n%8s %16s %16s %16s %8s\n' threads "encoder frames/s" "train frames/s" "torch frames/s" ratio
for r in "${rows[@]}"; do
  # shellcheck disable=SC2086
  printf '%8s %16s %16s %16s %8s\n' $r
done
