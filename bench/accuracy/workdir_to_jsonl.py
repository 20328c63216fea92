#!/usr/bin/env python3
"""Write the reference script's JSONL data files from a prepared timitseg WORKDIR.

The reference script (torch-semimarkov, benchmarking branch,
benchmarks/practical_demonstration/timit/timit_phoneme.py) trains on
DATA/train.jsonl and evaluates on DATA/test.jsonl, one JSON object per line:

    {"utterance_id": str, "speaker_id": str,
     "features": [[D floats] * T],          raw features (it z-scores them itself)
     "labels":   [T ints],                  indices into its PHONES_39 list
     "segments": [[start, end, label], ...]} maximal label runs, end exclusive

This program writes those files from WORKDIR/SPLIT.safetensors (features raw
F32 [F][D], labels I32 [F] indexing phones61 of WORKDIR/phones.json,
utt_frame_offsets I64 [U+1], metadata "utterances") so that both programs see
the same frames: the features are timitseg's own (before CMVN), and each 61-phone
frame label is folded to 39 phones with timitseg's map (phones.json map61to39)
and written as the index of that phone in the reference script's PHONES_39.

The reference script is not imported (it needs torch): its PHONES_39 list and
PHONE_61_TO_39 map are read from its source with `ast.literal_eval`, and the
61->39 maps of both programs are checked to agree on every phone that can occur
in prepared labels (q never does: prepare merges it into a neighbour).

Usage:
    workdir_to_jsonl.py --workdir W --torch-semimarkov DIR --out JSONLDIR \
        [--split train=train --split core-test=test]

Needs numpy (and the standard library). Every file is written to a temporary
name and renamed, so a failure never leaves a half-written file.
"""
from __future__ import annotations

import argparse
import ast
import json
import struct
import sys
from pathlib import Path

import numpy as np

from accuracy_io import atomic_output  # this folder (run as a file: it is on sys.path)

OLD_SCRIPT = Path("benchmarks/practical_demonstration/timit/timit_phoneme.py")
DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def fail(msg: str) -> None:
    raise SystemExit(f"error: {msg}")


def old_script_constants(tsm_dir: Path) -> tuple[list[str], dict[str, str]]:
    """PHONES_39 and PHONE_61_TO_39 of the reference script, read from its source."""
    path = tsm_dir / OLD_SCRIPT
    if not path.is_file():
        fail(f"{path}: not found (--torch-semimarkov must be a checkout of torch-semimarkov's benchmarking branch)")
    tree = ast.parse(path.read_text(), filename=str(path))
    found: dict[str, object] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("PHONES_39", "PHONE_61_TO_39")):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    for name in ("PHONES_39", "PHONE_61_TO_39"):
        if name not in found:
            fail(f"{path}: no top-level literal {name}")
    phones39 = list(found["PHONES_39"])  # type: ignore[arg-type]
    map61 = dict(found["PHONE_61_TO_39"])  # type: ignore[arg-type]
    if len(phones39) != 39 or len(set(phones39)) != 39:
        fail(f"{path}: PHONES_39 has {len(phones39)} entries ({len(set(phones39))} distinct), expected 39")
    return phones39, map61


def read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (numpy arrays, little endian) and the metadata of a safetensors file."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        fail(f"{path}: cannot read ({e.strerror}); run `timitseg prepare` first")
    if len(raw) < 8:
        fail(f"{path}: truncated (shorter than the 8-byte header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        fail(f"{path}: header length {n} runs past the end of the file ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + n])
    except json.JSONDecodeError as e:
        fail(f"{path}: header is not JSON ({e})")
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        dt = DTYPES.get(info.get("dtype"))
        if dt is None:
            fail(f"{path}: tensor '{name}' has dtype {info.get('dtype')}, not one of {sorted(DTYPES)}")
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        arr = np.frombuffer(data[b:e], dtype=np.dtype(dt).newbyteorder("<"))
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            fail(f"{path}: tensor '{name}' has {arr.size} values for shape {list(shape)}")
        tensors[name] = arr.reshape(shape)
    return tensors, meta


def label_map(workdir: Path, phones39: list[str], map61: dict[str, str]) -> tuple[np.ndarray, list[str]]:
    """[61] timitseg 61-phone index -> the reference script's 39-phone index (-1 for q)."""
    path = workdir / "phones.json"
    try:
        ph = json.loads(path.read_text())
        names61, names39, m = ph["phones61"], ph["phones39"], ph["map61to39"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        fail(f"{path}: cannot read phones61 / phones39 / map61to39 ({e})")
    if sorted(names39) != sorted(phones39):
        fail(f"{path}: phones39 {sorted(names39)} differ from the reference script's PHONES_39 {sorted(phones39)}")
    idx = {p: i for i, p in enumerate(phones39)}
    out = np.full(len(names61), -1, dtype=np.int64)
    for i, p in enumerate(names61):
        if m[i] < 0:
            continue  # q: never in prepared labels
        ours = names39[m[i]]
        theirs = map61.get(p)
        if theirs != ours:
            fail(f"61-phone '{p}': timitseg folds it to '{ours}', the reference script to '{theirs}'; "
                 "the labels would differ")
        out[i] = idx[ours]
    return out, names61


def segments_of(labels: np.ndarray) -> list[list[int]]:
    """Maximal runs [start, end (exclusive), label] of a frame label sequence."""
    T = len(labels)
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    ends = np.r_[starts[1:], T]
    return [[int(s), int(e), int(labels[s])] for s, e in zip(starts, ends)]


def float_rows(feats: np.ndarray) -> str:
    """JSON text of a [T][D] float32 array; 9 significant digits read back as the same float32."""
    txt = np.char.mod("%.9g", feats.astype(np.float64))
    return "[" + ",".join("[" + ",".join(row) + "]" for row in txt.tolist()) + "]"


def convert_split(workdir: Path, split: str, out_path: Path, lmap: np.ndarray, names61: list[str]) -> int:
    path = workdir / f"{split}.safetensors"
    t, meta = read_safetensors(path)
    for name in ("features", "labels", "utt_frame_offsets"):
        if name not in t:
            fail(f"{path}: no tensor '{name}'")
    try:
        utts = json.loads(meta["utterances"])
    except (KeyError, json.JSONDecodeError) as e:
        fail(f"{path}: metadata 'utterances' missing or not JSON ({e})")
    feats, labels, off = t["features"], t["labels"], t["utt_frame_offsets"]
    U = len(utts)
    if feats.ndim != 2 or labels.shape != (feats.shape[0],) or off.shape != (U + 1,):
        fail(f"{path}: shapes features {list(feats.shape)}, labels {list(labels.shape)}, "
             f"utt_frame_offsets {list(off.shape)} do not fit {U} utterances")
    if off[0] != 0 or off[-1] != feats.shape[0] or np.any(np.diff(off) < 1):
        fail(f"{path}: utt_frame_offsets do not cover the features with non-empty utterances")
    if labels.min() < 0 or labels.max() >= len(lmap) or np.any(lmap[labels] < 0):
        bad = int(np.flatnonzero((labels < 0) | (labels >= len(lmap)) | (lmap[np.clip(labels, 0, len(lmap) - 1)] < 0))[0])
        fail(f"{path}: labels[{bad}] = {int(labels[bad])} has no 39-phone target")
    lab39 = lmap[labels]
    with atomic_output(out_path) as f:
        for u in range(U):
            b, e = int(off[u]), int(off[u + 1])
            lab = lab39[b:e]
            # Field order as the reference script's preprocess writes them.
            f.write('{"utterance_id": ' + json.dumps(utts[u]["id"]) + ', "speaker_id": ' +
                    json.dumps(utts[u]["speaker"]) + ', "features": ' + float_rows(feats[b:e]) +
                    ', "labels": ' + json.dumps(lab.tolist()) + ', "segments": ' +
                    json.dumps(segments_of(lab)) + "}\n")
    return U


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, required=True, help="prepared WORKDIR (timitseg prepare)")
    ap.add_argument("--torch-semimarkov", type=Path, required=True,
                    help="torch-semimarkov checkout (benchmarking branch): PHONES_39 and PHONE_61_TO_39 are read from it")
    ap.add_argument("--out", type=Path, required=True, help="output folder for the JSONL files")
    ap.add_argument("--split", action="append", default=None, metavar="SPLIT=NAME",
                    help="WORKDIR split and the file it becomes, NAME.jsonl (repeatable; default: "
                         "train=train and core-test=test)")
    a = ap.parse_args(argv)
    pairs = a.split or ["train=train", "core-test=test"]
    phones39, map61 = old_script_constants(a.torch_semimarkov)
    lmap, names61 = label_map(a.workdir, phones39, map61)
    for p in pairs:
        split, sep, name = p.partition("=")
        if not sep or not split or not name:
            fail(f"--split {p}: expected SPLIT=NAME, e.g. core-test=test")
        n = convert_split(a.workdir, split, a.out / f"{name}.jsonl", lmap, names61)
        print(f"{a.workdir}/{split}.safetensors -> {a.out / (name + '.jsonl')}: {n} utterances")
    return 0


if __name__ == "__main__":
    sys.exit(main())
