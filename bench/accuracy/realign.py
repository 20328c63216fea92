#!/usr/bin/env python3
"""Viterbi re-estimation from transcripts, one round (docs/training.md "Training from transcripts").

A checkpoint trained on phone sequences alone (crf.supervision=transcript)
force-aligns the phone sequence of every train and dev utterance of WORKDIR
(`timitseg align`, the semi-CRF's constrained Viterbi); the alignments become the
times of a new WORKDIR OUT (`timitseg prepare --corpus` of a JSON-lines manifest
with inline segments, WORKDIR's phone set and feature options), on which the
next model trains with times. No reference time of WORKDIR is read: each
utterance's phone sequence is its transcript (`transcripts` tensor) where it has
one, else the maximal runs of its frame labels, which is the sequence
crf.supervision=transcript trains on (the times themselves are not used).
The test splits are left out of OUT: score the next model on WORKDIR.
OUT is a `prepare --corpus` WORKDIR, which train does not read as TIMIT's: from
a TIMIT-layout WORKDIR (TIMIT, synth --voice flite) train the next model with
`--set data.phone_set=timit39` (or the label set the checkpoint used), else it
trains on the 60 phones of timit61 (the script says so).

  realign.py --checkpoint CK --workdir WORKDIR --out OUT [--timitseg BIN] [--device auto] [--threads 0]

Python 3 standard library only. Tested by tests/bench/test_realign.py.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from array import array

TYPECODES = {"I32": "i", "I64": "q", "U8": "B"}  # the integer tensors read here (little-endian, as on x86 and ARM)


def read_safetensors(path: str, names: list[str]) -> tuple[dict, dict]:
    """The integer tensors `names` (those present, flat) and the metadata of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            if name not in header:
                continue
            info = header[name]
            a, b = info["data_offsets"]
            f.seek(base + a)
            out[name] = array(TYPECODES[info["dtype"]], f.read(b - a))
    return out, header.get("__metadata__", {})


def sequences(workdir: str, split: str, labels: list[str]):
    """(utterance, [phone names]) of every utterance of a split, without times."""
    path = os.path.join(workdir, f"{split}.safetensors")
    t, meta = read_safetensors(path, ["labels", "utt_frame_offsets", "transcripts", "utt_transcript_offsets"])
    utts = json.loads(meta["utterances"])
    off = t["utt_frame_offsets"]
    for i, u in enumerate(utts):
        if u.get("times", True) is False:
            toff = t["utt_transcript_offsets"]
            seq = [int(x) for x in t["transcripts"][toff[i]:toff[i + 1]]]
        else:
            lab = t["labels"][off[i]:off[i + 1]]
            seq = [int(x) for j, x in enumerate(lab) if j == 0 or x != lab[j - 1]]
        yield u, [labels[x] for x in seq]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timitseg", default="build/bin/timitseg")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", default="0")
    ap.add_argument("--splits", default="train,dev")
    a = ap.parse_args()

    def fail(msg: str) -> int:
        print(f"realign: error: {msg}", file=sys.stderr)
        return 1

    if not os.path.isfile(a.checkpoint):
        return fail(f"--checkpoint {a.checkpoint}: no such file")
    if not os.path.isfile(os.path.join(a.workdir, "manifest.json")):
        return fail(f"--workdir {a.workdir}: not a prepared WORKDIR (no manifest.json)")
    if os.path.exists(a.out):
        return fail(f"--out {a.out}: exists; choose a new folder (nothing is overwritten)")
    man = json.load(open(os.path.join(a.workdir, "manifest.json")))
    labels = man["phone_set"]["labels"]
    rate = 16000
    phone_set = set(labels)
    rep = {}  # a label of the model's set that is not a phone of the WORKDIR's set (TIMIT's 39) -> a 61 phone
    pj = os.path.join(a.workdir, "phones.json")
    if os.path.exists(pj):
        pm = json.load(open(pj))
        for i61, i39 in enumerate(pm["map61to39"]):
            if i39 >= 0:
                rep.setdefault(pm["phones39"][i39], pm["phones61"][i61])

    def to_phone_set(label: str, edge: bool) -> str:
        """The aligner's label (the checkpoint's label set) as a phone of the WORKDIR's set; TIMIT's 39-set
        `sil` becomes h# at the utterance's ends and pau inside, a 39 class its first 61 member."""
        if label in phone_set:
            return label
        if label == "sil" and "h#" in phone_set:
            return "h#" if edge else "pau"
        if label in rep:
            return rep[label]
        raise SystemExit(f"realign: label '{label}' of the alignment is not in {a.workdir}'s phone set")
    work = tempfile.mkdtemp(prefix="realign.", dir=os.path.dirname(os.path.abspath(a.out)) or ".")
    try:
        rows, key = [], {}
        with open(os.path.join(work, "wav.scp"), "w") as scp, open(os.path.join(work, "phones.txt"), "w") as ph:
            for split in a.splits.split(","):
                for u, seq in sequences(a.workdir, split, labels):
                    k = f"u{len(rows):06d}"
                    key[k] = len(rows)
                    rows.append(dict(id=u["id"], speaker=u["speaker"], audio=u["audio"], split=split, seq=seq))
                    scp.write(f"{k} {u['audio']}\n")
                    ph.write(f"{k} {' '.join(seq)}\n")
        ali = os.path.join(work, "ali")
        cmd = [a.timitseg, "align", "--checkpoint", a.checkpoint, "--wav-scp", os.path.join(work, "wav.scp"),
               "--phones", os.path.join(work, "phones.txt"), "--out", ali, "--format", "csv",
               "--device", a.device, "--threads", a.threads,
               # the constrained Viterbi's own frames, as the docstring says: `align`'s defaults for a
               # transcript-trained checkpoint (posterior boundaries, silence edges) would re-estimate from
               # another decision, and an edge moved into a 1-frame phone leaves it without a frame
               "--boundaries", "viterbi", "--silence-edges", "off"]
        with open(os.path.join(work, "align.log"), "w") as log:
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=log)
        if r.returncode != 0:
            print(f"realign: timitseg align exited with {r.returncode} (some utterances may be left out); its log:",
                  file=sys.stderr)
            sys.stderr.write("".join(l for l in open(os.path.join(work, "align.log")) if "[info]" not in l)[-4000:])
            if not os.path.isdir(ali) or not os.listdir(ali):
                return fail(f"no utterance was aligned by {a.checkpoint}; nothing written")
        kept = 0
        with open(os.path.join(work, "manifest.jsonl"), "w") as mf:
            for k, i in key.items():
                p = os.path.join(ali, k + ".csv")
                if not os.path.exists(p):
                    print(f"realign: no alignment for {rows[i]['id']}: left out", file=sys.stderr)
                    continue
                with open(p, newline="") as f:
                    spans = [(int(r["start_sample"]), int(r["end_sample"]), r["label"]) for r in csv.DictReader(f)
                             if r["tier"] == "phone"]
                row = dict(rows[i])
                row.pop("seq")
                segs = [[s / rate, e / rate, to_phone_set(lab, j == 0 or j == len(spans) - 1)]
                        for j, (s, e, lab) in enumerate(spans)]
                mf.write(json.dumps(dict(row, segments=segs)) + "\n")
                kept += 1
        cmd = [a.timitseg, "prepare", "--corpus", os.path.join(work, "manifest.jsonl"), "--format", "manifest",
               "--phone-set", os.path.join(a.workdir, "phone_set.yaml"), "--out", a.out, "--no-progress",
               "--threads", a.threads]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
            return fail(f"timitseg prepare of the alignments failed (its error above); {a.out} not written")
        print(f"realign: {kept} of {len(rows)} utterances aligned by {a.checkpoint} -> {a.out}", file=sys.stderr)
        if rep:
            print(f"realign: {a.out} holds TIMIT's 61 phones and is not read as TIMIT's WORKDIR: train on it with "
                  "--set data.phone_set=timit39 (or the label set the checkpoint trained on)", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
