#!/usr/bin/env python3
"""Gold segment lengths of a prepared WORKDIR against the semi-CRF's maximum duration K.

  python3 bench/accuracy/segment_stats.py WORKDIR [--label-set 39|48|61] [--k 30,40,60]

Prints a markdown table: per split (train, dev, core-test, test), the number of
gold segments and how many are longer than K frames (for K = 30, 40 and 60 by
default), with their share in %, and the longest segment. A segment is a
maximal run of equal frame labels inside one utterance (runs never cross
utterances), in the label set the CRF trains on (data.label_set, 39 by
default): the segments crf::gold_segments cuts into pieces of at most K
frames, where a semi-CRF with crf.max_duration K cannot model the run's
duration. Frames are the WORKDIR's (feature_options.frame_shift_ms in
manifest.json, 10 ms by default).

Reads the prepared files rather than the corpus's .PHN files, so the counts
are those of the frames training sees (after q is merged into a neighbour and
the 61 labels are mapped): WORKDIR/SPLIT.safetensors (an 8-byte little-endian
header length, a JSON header, raw little-endian data; tensors `labels` I32 [F]
= indices into phones61 of phones.json and `utt_frame_offsets` I64 [U+1]) and
WORKDIR/phones.json (map61to48, map61to39). Where WORKDIR/durations.json holds
the label set (61 and 39), the segment count of every split is checked against
the sum of its per-phone counts (prepare's own statistics): a mismatch is an
error. Python 3 standard library only. docs/training.md,
"Boundary metrics at 20 ms".
"""
from __future__ import annotations

import argparse
import array
import json
import struct
import sys
from pathlib import Path

SPLITS = ["train", "dev", "core-test", "test"]
DTYPES = {"I32": ("i", 4), "I64": ("q", 8)}


class Error(Exception):
    pass


def read_tensors(path: Path, names: list[str]) -> dict[str, array.array]:
    """The named tensors of a safetensors file as flat arrays (I32 or I64 only)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Error(f"{path}: cannot read ({e.strerror})")
    if len(data) < 8:
        raise Error(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise Error(f"{path}: the header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise Error(f"{path}: the safetensors header is not JSON")
    out = {}
    for name in names:
        t = header.get(name)
        if not isinstance(t, dict):
            raise Error(f"{path}: no tensor '{name}' (is this a WORKDIR that `timitseg prepare` wrote?)")
        if t.get("dtype") not in DTYPES:
            raise Error(f"{path}: tensor '{name}' has dtype {t.get('dtype')}, expected one of {sorted(DTYPES)}")
        code, size = DTYPES[t["dtype"]]
        b, e = t["data_offsets"]
        if not (0 <= b <= e <= len(data) - 8 - n) or (e - b) % size:
            raise Error(f"{path}: tensor '{name}' has data offsets [{b}, {e}) outside the file's data")
        a = array.array(code)
        a.frombytes(data[8 + n + b:8 + n + e])
        if sys.byteorder == "big":
            a.byteswap()
        out[name] = a
    return out


def segment_lengths(labels, offsets) -> list[int]:
    """Lengths of the maximal runs of equal labels, utterance by utterance ([U+1] frame offsets)."""
    lengths = []
    for u in range(len(offsets) - 1):
        b, e = offsets[u], offsets[u + 1]
        if not (0 <= b <= e <= len(labels)):
            raise Error(f"utterance {u}: frame offsets [{b}, {e}) outside the {len(labels)} labels")
        t = b
        while t < e:
            s = t
            while t < e and labels[t] == labels[s]:
                t += 1
            lengths.append(t - s)
    return lengths


def stats(workdir: Path, label_set: int, ks: list[int]) -> tuple[list[dict], float]:
    try:
        phones = json.loads((workdir / "phones.json").read_text())
    except OSError as e:
        raise Error(f"{workdir / 'phones.json'}: cannot read the phone maps ({e.strerror}; is {workdir} a WORKDIR "
                    f"that `timitseg prepare` wrote?)")
    except ValueError:
        raise Error(f"{workdir / 'phones.json'}: not JSON")
    mapping = None if label_set == 61 else phones[f"map61to{label_set}"]
    shift = 10.0
    try:
        shift = float(json.loads((workdir / "manifest.json").read_text())["feature_options"]["frame_shift_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # a hand-made WORKDIR without manifest: the default frame shift
    durations = None
    if (workdir / "durations.json").exists():
        durations = json.loads((workdir / "durations.json").read_text())
    rows = []
    for split in SPLITS:
        f = workdir / f"{split}.safetensors"
        if not f.exists():
            continue
        t = read_tensors(f, ["labels", "utt_frame_offsets"])
        labels = t["labels"]
        if mapping is not None:
            try:
                labels = [mapping[x] for x in labels]
            except IndexError:
                raise Error(f"{f}: a label outside phones61 of {workdir / 'phones.json'}")
            if any(x < 0 for x in labels):
                raise Error(f"{f}: a label without a {label_set}-phone target (q is merged by prepare)")
        try:
            lengths = segment_lengths(labels, t["utt_frame_offsets"])
        except Error as e:
            raise Error(f"{f}: {e}")
        per_phone = (durations or {}).get(split, {}).get(str(label_set))
        if per_phone is not None:
            want = sum(v["count"] for v in per_phone.values())
            if want != len(lengths):
                raise Error(f"{f}: {len(lengths)} segments in the {label_set}-phone labels, but "
                            f"{workdir / 'durations.json'} counts {want}")
        rows.append({"split": split, "utterances": len(t["utt_frame_offsets"]) - 1, "segments": len(lengths),
                     "longer": {k: sum(1 for x in lengths if x > k) for k in ks},
                     "max": max(lengths, default=0)})
    return rows, shift


def markdown(rows: list[dict], ks: list[int], label_set: int, shift: float, workdir: Path) -> str:
    lines = [f"Gold segments of {workdir} (maximal runs of {label_set}-phone frame labels within an utterance; "
             f"frames of {shift:g} ms); > K: segments longer than K frames, which a semi-CRF with "
             f"crf.max_duration K cuts into pieces.", "",
             "| split | utterances | segments | " + " | ".join(f"> {k}" for k in ks) + " | longest |",
             "|---|---|---|" + "---|" * len(ks) + "---|"]
    for r in rows:
        cells = []
        for k in ks:
            n = r["longer"][k]
            share = 100.0 * n / r["segments"] if r["segments"] else 0.0
            cells.append(f"{n} ({share:.2f} %)")
        lines.append(f"| {r['split']} | {r['utterances']} | {r['segments']} | " + " | ".join(cells) +
                     f" | {r['max']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", type=Path, help="a WORKDIR written by `timitseg prepare`")
    ap.add_argument("--label-set", type=int, choices=[39, 48, 61], default=39,
                    help="labels whose runs are the segments (data.label_set; default 39)")
    ap.add_argument("--k", default="30,40,60", help="comma-separated K values (frames; default 30,40,60)")
    a = ap.parse_args(argv)
    try:
        ks = [int(x) for x in a.k.split(",")]
        if not ks or any(k < 1 for k in ks):
            raise ValueError
    except ValueError:
        print(f"error: --k {a.k}: expected comma-separated positive integers, e.g. 30,40,60", file=sys.stderr)
        return 2
    try:
        rows, shift = stats(a.workdir, a.label_set, ks)
        if not rows:
            raise Error(f"{a.workdir}: no split file ({', '.join(s + '.safetensors' for s in SPLITS)})")
    except Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(markdown(rows, ks, a.label_set, shift, a.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
