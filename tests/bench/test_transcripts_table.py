#!/usr/bin/env python3
"""Tests of bench/accuracy/transcripts_sweep.sh's table (its TABLE_ONLY path) on run
folders written here, whose figures are worked out by hand: mean and spread over the
seeds, each seed's value in the order of SEEDS, the dev column, and the phones that
miss most (Python 3 standard library and bash only; no timitseg run)."""
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_run(d: Path, w20, dev20=None, per=0.02, mae=9.0):
    d.mkdir(parents=True)
    by_phone = {  # 10 boundaries into l (4 off by more than 20 ms), 30 into a (w20 of the rest)
        "l": {"boundaries": 10, "mean_signed_ms": -25.0, "within_ms": {"20": 0.6}},
        "a": {"boundaries": 30, "mean_signed_ms": -2.0, "within_ms": {"20": 0.9}},
    }
    samples = {"within_ms": {"10": 0.5, "20": w20, "25": 0.95, "50": 0.99}, "mean_abs_ms": mae,
               "mean_signed_ms": -3.0, "by_phone": by_phone}
    (d / "eval.json").write_text(json.dumps({"per": per, "align": {"samples": samples}}))
    if dev20 is not None:
        (d / "dev.json").write_text(json.dumps({"align": {"samples": {"within_ms": {"20": dev20}}}}))
    with open(d / "metrics.jsonl", "w") as f:
        for s in (8.0, 10.0):
            f.write(json.dumps({"epoch_seconds": s}) + "\n")


class Table(unittest.TestCase):
    def test_mean_spread_and_each_seed(self):
        with tempfile.TemporaryDirectory() as t:
            root = Path(t)
            write_run(root / "it/shipped/seed-1", 0.8581, dev20=0.86)
            write_run(root / "it/shipped/seed-2", 0.9068, dev20=0.92)
            write_run(root / "it/shipped/seed-3", 0.9001, dev20=0.90)
            env = dict(os.environ, TABLE_ONLY="1", ARMS="shipped:crf.supervision=transcript")
            out = subprocess.run(["bash", str(REPO / "bench/accuracy/transcripts_sweep.sh"), str(root), "1 2 3", "it"],
                                 env=env, capture_output=True, text=True, check=True).stdout
            # mean 88.3333, sample std of (85.81, 90.68, 90.01) = 2.6406
            self.assertIn("| it | shipped | 3 | 89.33 +- 3.06 | 2.00 +- 0.00 | 88.83 +- 2.64 (85.81 / 90.68 / 90.01) |",
                          out)
            self.assertIn("| 9.00 +- 0.00 | -3.00 +- 0.00 |", out)
            self.assertIn("| 9.00 |", out)  # s per epoch: the mean of 8 and 10
            # per seed 4 + 3 = 7 boundaries off; l first (4 of 10, -25 ms)
            self.assertIn("| it | shipped | 7 | l 4 of 10 (-25.0 ms); a 3 of 30 (-2.0 ms) |", out)

    def test_a_seed_without_a_finished_run_is_left_out(self):
        with tempfile.TemporaryDirectory() as t:
            root = Path(t)
            write_run(root / "nl/shipped/seed-2", 0.8729)
            env = dict(os.environ, TABLE_ONLY="1", ARMS="shipped:")
            out = subprocess.run(["bash", str(REPO / "bench/accuracy/transcripts_sweep.sh"), str(root), "1 2", "nl"],
                                 env=env, capture_output=True, text=True, check=True).stdout
            self.assertIn("| nl | shipped | 1 | - | 2.00 +- 0.00 | 87.29 +- 0.00 (87.29) |", out)


if __name__ == "__main__":
    unittest.main()
