#!/usr/bin/env python3
"""bench/accuracy/pocketsphinx_align.py without PocketSphinx: its transcript and label maps
and its `score` rule on a hand-made corpus, against errors worked out by hand."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "accuracy" / "pocketsphinx_align.py"
sys.path.insert(0, str(SCRIPT.parent))
import pocketsphinx_align as pa  # noqa: E402

FAILURES = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-6


# data/transcripts.cpp arpabet_to_timit: AH0 -> ax, ER0 -> axr, stress on a consonant refused
check(pa.arpabet_to_timit("AH0") == "ax", "AH0 -> ax")
check(pa.arpabet_to_timit("AH1") == "ah", "AH1 -> ah")
check(pa.arpabet_to_timit("ER0") == "axr", "ER0 -> axr")
check(pa.arpabet_to_timit("T") == "t", "T -> t")
check(pa.arpabet_to_timit("T1") == "", "T1 refused")
check(pa.arpabet_to_timit("SIL") == "", "SIL is not ARPAbet")

# .PHN -> pseudo-words: closure+release one stop, a lone closure its stop, q dropped, split at pauses
phn = [(0, 10, "h#"), (10, 20, "dh"), (20, 30, "ix"), (30, 40, "kcl"), (40, 50, "k"), (50, 60, "q"), (60, 70, "pau"),
       (70, 80, "tcl"), (80, 90, "ch"), (90, 100, "dcl"), (100, 110, "dx"), (110, 120, "h#")]
check(pa.phn_pseudo_words(phn) == [["dh", "ih", "k"], ["ch", "d", "t"]],
      f"pseudo words {pa.phn_pseudo_words(phn)}")

# PocketSphinx phones -> TIMIT spans: SIL at the edges h#, inside pau; times of 10 ms frames, cut at the audio's end
spans = pa.to_timit_spans([(0, 10, "SIL"), (10, 20, "AH"), (20, 25, "SIL"), (25, 40, "T"), (40, 52, "SIL")], 0.01,
                          8000, 16000)
check([s[2] for s in spans] == ["h#", "ah", "pau", "t", "h#"], f"labels {spans}")
check(close(spans[3][0], 0.25) and close(spans[4][1], 0.5), f"times {spans}")


def write_wav(path: Path, n: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * n)


with tempfile.TemporaryDirectory() as tmp:
    corpus = Path(tmp) / "C" / "TEST" / "DR1" / "SPK0"
    corpus.mkdir(parents=True)
    # folded reference: sil [0, .1] ah [.1, .2] p [.2, .4] (pcl+p, then q) ih [.4, .5] sil [.5, 1]
    ref_phn = "0 1600 h#\n1600 3200 ah\n3200 4000 pcl\n4000 4400 p\n4400 6400 q\n6400 8000 ix\n8000 16000 h#\n"
    for name in ("U1", "U2"):
        write_wav(corpus / f"{name}.WAV", 16000)
        (corpus / f"{name}.PHN").write_text(ref_phn)
    spans_path = Path(tmp) / "spans.jsonl"
    # U1: same sequence, errors 10, 0, 30, 0 ms; U2: a pau between p and ih (that boundary unscored),
    # errors 0, 0 and 20 ms at ih|sil
    u1 = [[0, 0.11, "h#"], [0.11, 0.2, "ah"], [0.2, 0.43, "p"], [0.43, 0.5, "ih"], [0.5, 1.0, "h#"]]
    u2 = [[0, 0.1, "h#"], [0.1, 0.2, "ah"], [0.2, 0.38, "p"], [0.38, 0.4, "pau"], [0.4, 0.52, "ih"], [0.52, 1, "h#"]]
    spans_path.write_text(json.dumps({"utterance_id": "test/dr1/spk0/u1", "phones": u1}) + "\n" +
                          json.dumps({"utterance_id": "test/dr1/spk0/u2", "phones": u2}) + "\n")
    out = Path(tmp) / "score.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "score", "--spans", str(spans_path), "--corpus",
                        str(Path(tmp) / "C" / "TEST"), "--json", str(out)], capture_output=True, text=True)
    check(r.returncode == 0, f"score exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        j = json.loads(out.read_text())
        check(j["boundaries"] == 7, f"boundaries {j['boundaries']}")
        check(j["same_sequence"] == 1 and j["differing_sequence"] == 1, f"sequences {j}")
        check(j["reference_boundaries_not_scored"] == 1, f"not scored {j}")
        w = j["within_ms"]
        check(close(w["10"], 5 / 7) and close(w["20"], 6 / 7) and close(w["25"], 6 / 7) and close(w["50"], 1.0),
              f"within {w}")
        check(close(j["mean_abs_ms"], 60 / 7), f"mean {j['mean_abs_ms']}")
        check(close(j["median_abs_ms"], 0.0), f"median {j['median_abs_ms']}")
    # --keep-closures: the closure is its own sil phone, so U1's sequences differ (p's span starts at .2
    # in the hypothesis, .25 in the reference): boundaries sil|ah ah|sil(.2) are paired, ...
    r = subprocess.run([sys.executable, str(SCRIPT), "score", "--spans", str(spans_path), "--corpus",
                        str(Path(tmp) / "C" / "TEST"), "--keep-closures"], capture_output=True, text=True)
    check(r.returncode == 0, f"score --keep-closures exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        check(j["same_sequence"] == 0 and j["differing_sequence"] == 2, f"keep-closures sequences {j}")
    # --reference espeak-en: IPA labels to TIMIT's (ɑːɹ -> aa); PocketSphinx's aa + r differs, so aa|t is
    # not paired; sil|aa and t|sil are, both exact
    ecorpus = Path(tmp) / "E" / "TEST" / "DR1" / "SPK0"
    ecorpus.mkdir(parents=True)
    write_wav(ecorpus / "U1.WAV", 16000)
    (ecorpus / "U1.PHN").write_text("0 1600 sil\n1600 3200 ɑːɹ\n3200 4800 t\n4800 16000 sil\n", encoding="utf-8")
    e1 = [[0, 0.1, "h#"], [0.1, 0.15, "aa"], [0.15, 0.2, "r"], [0.2, 0.3, "t"], [0.3, 1.0, "h#"]]
    espans = Path(tmp) / "espans.jsonl"
    espans.write_text(json.dumps({"utterance_id": "test/dr1/spk0/u1", "phones": e1}) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "score", "--spans", str(espans), "--corpus",
                        str(Path(tmp) / "E" / "TEST"), "--reference", "espeak-en"], capture_output=True, text=True)
    check(r.returncode == 0, f"score --reference espeak-en exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        check(j["boundaries"] == 2 and j["reference_boundaries_not_scored"] == 1, f"espeak-en {j}")
        check(close(j["mean_abs_ms"], 0.0), f"espeak-en mean {j}")
    # an aligner that places closures (39 labels, closure = sil; timitseg align): U1's reference with
    # closures is sil ah sil(pcl) p ih sil; the hypothesis places pcl at .21 and p at .26: joined, p starts
    # at .21 (10 ms off .2), then errors 0 at sil|ah, 10 at ah|p, 0 at p|ih (.4), 0 at ih|sil
    c1 = [[0, 0.1, "sil"], [0.1, 0.21, "ah"], [0.21, 0.26, "sil"], [0.26, 0.4, "p"], [0.4, 0.5, "ih"],
          [0.5, 1.0, "sil"]]
    cspans = Path(tmp) / "cspans.jsonl"
    cspans.write_text(json.dumps({"utterance_id": "test/dr1/spk0/u1", "phones": c1}) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "score", "--spans", str(cspans), "--corpus",
                        str(Path(tmp) / "C" / "TEST")], capture_output=True, text=True)
    check(r.returncode == 0, f"score closures exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        check(j["same_sequence"] == 1 and j["boundaries"] == 4, f"closures {j}")
        check(close(j["mean_abs_ms"], 2.5) and close(j["within_ms"]["10"], 1.0), f"closures errors {j}")
    # an id with no reference is an error naming it
    bad = Path(tmp) / "bad.jsonl"
    bad.write_text(json.dumps({"utterance_id": "test/dr1/spk0/nope", "phones": u1}) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "score", "--spans", str(bad), "--corpus",
                        str(Path(tmp) / "C" / "TEST")], capture_output=True, text=True)
    check(r.returncode != 0 and "test/dr1/spk0/nope" in r.stderr, f"unknown id: {r.returncode} {r.stderr}")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("all checks passed")
