#!/usr/bin/env python3
"""Tests of bench/accuracy/noisy_table.py (the table and the rule of
bench/accuracy/noisy_sweep.sh) on run folders written here, whose figures are
worked out by hand; and noisy_sweep.sh's TABLE_ONLY path over the same folders
(Python 3 standard library and bash only; no timitseg run)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "accuracy"))
import noisy_table  # noqa: E402


def write_run(d: Path, dev, dev_b10, test=0.10, b10=0.30, w20=0.90, mae=9.0):
    d.mkdir(parents=True)
    bf = {"0": 0.6, "1": 0.9, "2": 0.95}
    json.dump({"per": dev, "boundary_f1": bf, "segment_f1": 0.4}, open(d / "dev.json", "w"))
    json.dump({"per": dev_b10, "boundary_f1": bf, "segment_f1": 0.3}, open(d / "dev_b10.json", "w"))
    json.dump({"per": test, "boundary_f1": bf, "segment_f1": 0.4}, open(d / "test.json", "w"))
    json.dump({"per": b10, "boundary_f1": bf, "segment_f1": 0.3,
               "align": {"samples": {"within_ms": {"20": w20}, "mean_abs_ms": mae}}}, open(d / "test_b10.json", "w"))


class Table(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        # base: S = (0.08 + 0.24) / 2 = 0.16 and (0.10 + 0.30) / 2 = 0.20 -> mean 0.18, std 0.02 * sqrt(2)
        write_run(self.root / "demo/base/seed-1", 0.08, 0.24)
        write_run(self.root / "demo/base/seed-2", 0.10, 0.30)
        # utt: S = 0.14 and 0.16 -> mean 0.15 (below the base)
        write_run(self.root / "demo/utt/seed-1", 0.08, 0.20, w20=0.80)
        write_run(self.root / "demo/utt/seed-2", 0.08, 0.24, w20=0.90)
        # spk: one seed only
        write_run(self.root / "demo/spk/seed-1", 0.01, 0.01)

    def tearDown(self):
        self.tmp.cleanup()

    def rows(self, arms):
        return {a: noisy_table.summarize([r for s in (1, 2) if (r := noisy_table.load_run(
            str(self.root / "demo" / a / f"seed-{s}")))]) for a in arms}

    def test_s_mean_and_sample_std(self):
        r = self.rows(["base"])["base"]
        self.assertEqual(r["n"], 2)
        self.assertAlmostEqual(r["S"][0], 0.18)
        self.assertAlmostEqual(r["S"][1], 0.02 * 2 ** 0.5)
        self.assertAlmostEqual(r["test_b10_within_20ms"][0], 0.90)

    def test_lower_s_is_chosen(self):
        choice, why = noisy_table.choose(self.rows(["base", "utt"]), ["base", "utt"], 2)
        self.assertEqual(choice, "utt")
        self.assertIn("15.00 against base's 18.00", why)

    def test_base_stays_when_no_arm_is_lower(self):
        choice, why = noisy_table.choose(self.rows(["utt", "base"]), ["utt", "base"], 2)
        self.assertEqual(choice, "utt")
        self.assertIn("stays", why)

    def test_equal_s_keeps_the_base(self):
        rows = self.rows(["base"])
        rows["same"] = dict(rows["base"])
        self.assertEqual(noisy_table.choose(rows, ["base", "same"], 2)[0], "base")

    def test_unfinished_arm_leaves_it_undecided(self):
        choice, why = noisy_table.choose(self.rows(["base", "spk"]), ["base", "spk"], 2)
        self.assertIsNone(choice)
        self.assertIn("spk", why)

    def test_a_run_missing_a_file_is_not_counted(self):
        os.remove(self.root / "demo/utt/seed-2/test_b10.json")
        self.assertEqual(self.rows(["utt"])["utt"]["n"], 1)

    def test_sweep_table_only(self):
        env = dict(os.environ, TABLE_ONLY="1", ARMS="base:;utt:data.cmvn=utterance")
        out = subprocess.run(["bash", str(REPO / "bench/accuracy/noisy_sweep.sh"), str(self.root), "1 2", "demo"],
                             env=env, capture_output=True, text=True, check=True).stdout
        self.assertIn("| base | 2 | 18.00 ± 2.83 | 9.00 ± 1.41 | 27.00 ± 4.24 |", out)
        self.assertIn("| utt | 2 | 15.00 ± 1.41 |", out)
        self.assertIn("85.00 ± 7.07", out)  # utt's babble alignment within 20 ms
        self.assertIn("choice (demo): utt: mean S 15.00 against base's 18.00", out)

    def test_espeak_corpus_at_a_noise_level(self):
        # es-5 (espeak-ng Spanish at --noise-db -5) is scored on its test split, as es is
        write_run(self.root / "es-5/base/seed-1", 0.08, 0.24)
        env = dict(os.environ, TABLE_ONLY="1", ARMS="base:")
        out = subprocess.run(["bash", str(REPO / "bench/accuracy/noisy_sweep.sh"), str(self.root), "1", "es-5 demo"],
                             env=env, capture_output=True, text=True, check=True).stdout
        self.assertIn("es-5 (test split: test;", out)
        self.assertIn("demo (test split: core-test;", out)
        self.assertIn("| base | 1 | 16.00 ± 0.00 | 8.00 ± 0.00 | 24.00 ± 0.00 |", out)


class BadInput(unittest.TestCase):
    def test_unknown_corpus_writes_nothing(self):
        with tempfile.TemporaryDirectory() as t:
            out = Path(t) / "o"
            r = subprocess.run(["bash", str(REPO / "bench/accuracy/noisy_sweep.sh"), str(out), "1", "demo nope"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("unknown corpus 'nope'", r.stderr)
            self.assertFalse(out.exists())

    def test_unknown_language_or_level_writes_nothing(self):
        for bad in ("pt-5", "es-5x", "es--5", "demo0"):
            with tempfile.TemporaryDirectory() as t:
                out = Path(t) / "o"
                r = subprocess.run(["bash", str(REPO / "bench/accuracy/noisy_sweep.sh"), str(out), "1", bad],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, bad)
                self.assertIn(f"unknown corpus '{bad}'", r.stderr)
                self.assertFalse(out.exists())

    def test_missing_out_folder(self):
        with tempfile.TemporaryDirectory() as t:
            r = subprocess.run([sys.executable, str(REPO / "bench/accuracy/noisy_table.py"), str(Path(t) / "none")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("none: no such folder", r.stderr)


if __name__ == "__main__":
    unittest.main()
