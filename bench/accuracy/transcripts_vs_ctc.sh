#!/usr/bin/env bash
# One run, one WORKDIR, one seed: timitseg trained from transcripts
# (crf.supervision=transcript) scored by `evaluate --align`, and the same
# encoder trained with torch.nn.CTCLoss (examples/ctc_align.py) force-aligned
# by Viterbi over its CTC posteriors and scored by `score --spans` (the same
# figures, eval/align_metrics.cpp); both printed side by side.
#
#   bench/accuracy/transcripts_vs_ctc.sh WORKDIR OUT [EPOCHS] [SEED] [SPLIT]
#
# Environment: TIMITSEG (the binary, default build/bin/timitseg), PYTHON (a
# python with torch and numpy, default python3; PYTHONPATH=python and
# TIMITSEG_LIBRARY are set from the binary's build folder when unset),
# CONFIG (default configs/synth.yaml), CTC_THREADS (torch's CPU threads for the
# example, default 0: torch's default; 1 is faster on a loaded machine),
# CTC_DEVICE (the example's --device: cpu, the default, cuda or auto). The
# two trainings run one after the other.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:?usage: transcripts_vs_ctc.sh WORKDIR OUT [EPOCHS] [SEED] [SPLIT]}
OUT=${2:?usage: transcripts_vs_ctc.sh WORKDIR OUT [EPOCHS] [SEED] [SPLIT]}
EPOCHS=${3:-30}
SEED=${4:-1}
SPLIT=${5:-core-test}
BIN=${TIMITSEG:-build/bin/timitseg}
PY=${PYTHON:-python3}
CONFIG=${CONFIG:-configs/synth.yaml}
export PYTHONPATH=${PYTHONPATH:-python}
export TIMITSEG_LIBRARY=${TIMITSEG_LIBRARY:-$(dirname "$(dirname "$BIN")")/lib/libtimitseg.so}
mkdir -p "$OUT"

"$BIN" train --config "$CONFIG" --set data.workdir="$W" --set train.run_dir="$OUT/transcript" \
  --set train.epochs="$EPOCHS" --set train.seed="$SEED" --set crf.supervision=transcript > "$OUT/transcript.log" 2>&1
"$BIN" evaluate --checkpoint "$OUT/transcript/checkpoints/best.safetensors" --workdir "$W" --split "$SPLIT" \
  --align --no-progress --json "$OUT/transcript_eval.json" > "$OUT/transcript_eval.txt" 2>&1

"$PY" examples/ctc_align.py --workdir "$W" --split "$SPLIT" --out "$OUT/ctc_spans.jsonl" --epochs "$EPOCHS" \
  --seed "$SEED" --threads "${CTC_THREADS:-0}" --device "${CTC_DEVICE:-cpu}" > "$OUT/ctc.log" 2>&1
"$BIN" score --spans "$OUT/ctc_spans.jsonl" --workdir "$W" --split "$SPLIT" --json "$OUT/ctc_score.json" \
  > "$OUT/ctc_score.txt" 2>&1

"$PY" - "$OUT/transcript_eval.json" "$OUT/ctc_score.json" "$SPLIT" "$EPOCHS" "$SEED" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))["align"]
c = json.load(open(sys.argv[2]))
print("split %s, %s epochs, seed %s: forced alignment of the reference phones" % tuple(sys.argv[3:6]))
print("%-40s %8s %7s %7s %7s %7s %8s %8s" % ("", "bounds", "<=10ms", "<=20ms", "<=25ms", "<=50ms", "mean ms", "median"))
for name, j in (("timitseg, transcripts (semi-CRF)", t), ("CTC (same encoder), Viterbi", c)):
    for ref, r in (("frame", j), ("sample", j["samples"])):
        w = r["within_ms"]
        print("%-40s %8d %7.2f %7.2f %7.2f %7.2f %8.2f %8.2f" % (name + " " + ref, r["boundaries"], 100 * w["10"],
              100 * w["20"], 100 * w["25"], 100 * w["50"], r["mean_abs_ms"], r["median_abs_ms"]))
PYEOF
