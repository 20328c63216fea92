#!/usr/bin/env python3
"""Tests of bench/accuracy/segment_stats.py on a hand-made WORKDIR whose
segment counts are known by hand: runs split at utterance boundaries, 61 ->
39 merging, "longer than K" strict at K, an empty split, the cross-check
against durations.json. Python 3 standard library only."""
import json
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "accuracy" / "segment_stats.py"


def write_safetensors(path: Path, tensors: dict) -> None:
    """tensors: name -> (dtype 'I32' | 'I64', list of ints); little-endian, as safetensors stores them."""
    header, blob = {"__metadata__": {"split": path.stem}}, b""
    for name, (dtype, values) in tensors.items():
        data = struct.pack("<" + ("i" if dtype == "I32" else "q") * len(values), *values)
        header[name] = {"dtype": dtype, "shape": [len(values)], "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + blob)


def split(path: Path, utterances: list[list[int]]) -> None:
    labels, offsets = [], [0]
    for u in utterances:
        labels += u
        offsets.append(len(labels))
    # features first, so the label tensors do not start at data offset 0
    write_safetensors(path, {"features": ("I32", [7] * 3), "labels": ("I32", labels),
                             "utt_frame_offsets": ("I64", offsets)})


A, B, C, D = 0, 1, 2, 3  # phones61 indices; in 39 phones B and C are one phone


def make_workdir(d: Path, durations: dict | None = None) -> None:
    (d / "phones.json").write_text(json.dumps({"phones61": ["a", "b", "c", "d"], "phones39": ["a", "bc", "d"],
                                               "map61to39": [0, 1, 1, 2], "map61to48": [0, 1, 2, 3]}))
    (d / "manifest.json").write_text(json.dumps({"feature_options": {"frame_shift_ms": 10.0}}))
    # train, utterance 0: a x31, b x30, c x11, d x61 -> 61 runs 31, 30, 11, 61; 39 runs 31, 41 (b+c), 61
    #        utterance 1: d x5 (same label as the end of utterance 0: a run of its own), a x40, b x40
    split(d / "train.safetensors", [[A] * 31 + [B] * 30 + [C] * 11 + [D] * 61, [D] * 5 + [A] * 40 + [B] * 40])
    split(d / "dev.safetensors", [[A] * 60])  # exactly 60 frames: longer than 30 and 40, not than 60
    split(d / "test.safetensors", [])         # no utterance; core-test.safetensors absent: no row
    if durations is not None:
        (d / "durations.json").write_text(json.dumps(durations))


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


class SegmentStats(unittest.TestCase):
    def test_39_phone_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            make_workdir(Path(tmp))
            p = run(tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            # train: lengths 31, 41, 61, 5, 40, 40 -> 6 segments; > 30: 31, 41, 61, 40, 40 = 5;
            # > 40: 41, 61 = 2; > 60: 61 = 1; shares of 6: 83.33, 33.33, 16.67 %
            self.assertIn("| split | utterances | segments | > 30 | > 40 | > 60 | longest |", p.stdout)
            self.assertIn("| train | 2 | 6 | 5 (83.33 %) | 2 (33.33 %) | 1 (16.67 %) | 61 |", p.stdout)
            self.assertIn("| dev | 1 | 1 | 1 (100.00 %) | 1 (100.00 %) | 0 (0.00 %) | 60 |", p.stdout)
            self.assertIn("| test | 0 | 0 | 0 (0.00 %) | 0 (0.00 %) | 0 (0.00 %) | 0 |", p.stdout)
            self.assertNotIn("core-test", p.stdout)
            self.assertIn("39-phone", p.stdout)
            self.assertIn("frames of 10 ms", p.stdout)

    def test_61_phone_runs_and_own_k(self):
        with tempfile.TemporaryDirectory() as tmp:
            make_workdir(Path(tmp))
            p = run(tmp, "--label-set", "61")
            self.assertEqual(p.returncode, 0, p.stderr)
            # train: lengths 31, 30, 11, 61, 5, 40, 40 -> 7; > 30: 31, 61, 40, 40 = 4; > 40: 1; > 60: 1
            self.assertIn("| train | 2 | 7 | 4 (57.14 %) | 1 (14.29 %) | 1 (14.29 %) | 61 |", p.stdout)
            p = run(tmp, "--label-set", "48", "--k", "4,11")
            self.assertEqual(p.returncode, 0, p.stderr)
            # 48 map is the identity here: > 4: all 7; > 11: 31, 30, 61, 40, 40 = 5 (11 is not longer than 11)
            self.assertIn("| train | 2 | 7 | 7 (100.00 %) | 5 (71.43 %) | 61 |", p.stdout)

    def test_checked_against_durations_json(self):
        good = {"train": {"61": {"a": {"count": 2}, "b": {"count": 2}, "c": {"count": 1}, "d": {"count": 2}},
                          "39": {"a": {"count": 2}, "bc": {"count": 2}, "d": {"count": 2}}}}
        with tempfile.TemporaryDirectory() as tmp:
            make_workdir(Path(tmp), good)
            for s in ("39", "61"):
                p = run(tmp, "--label-set", s)
                self.assertEqual(p.returncode, 0, p.stderr)
        bad = {"train": {"39": {"a": {"count": 2}, "bc": {"count": 2}, "d": {"count": 1}}}}  # says 5, not 6
        with tempfile.TemporaryDirectory() as tmp:
            make_workdir(Path(tmp), bad)
            p = run(tmp)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(p.stdout, "")
            self.assertRegex(p.stderr, r"^error: .*train\.safetensors: 6 segments in the 39-phone labels, but "
                                       r".*durations\.json counts 5\n$")

    def test_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run(tmp)
            self.assertEqual(p.returncode, 1)
            self.assertRegex(p.stderr, r"^error: .*phones\.json: cannot read the phone maps")
            make_workdir(Path(tmp))
            (Path(tmp) / "dev.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
            p = run(tmp)
            self.assertEqual(p.returncode, 1)
            self.assertRegex(p.stderr, r"^error: .*dev\.safetensors: the header length 16 runs past the end")
            p = run(tmp, "--k", "0")
            self.assertEqual(p.returncode, 2)
            self.assertIn("error: --k 0: expected comma-separated positive integers", p.stderr)


if __name__ == "__main__":
    unittest.main()
