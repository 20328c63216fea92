#!/usr/bin/env python3
"""Tests of bench/accuracy/per_errors.py (PER by error type and rule 21 b, the
phone bonus tuned on dev per CRF) with a fake timitseg whose evaluate writes
error counts worked out by hand from the arm, the seed, the split and the
bonus (Python 3 standard library only; no real timitseg run)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "accuracy" / "per_errors.py"
sys.path.insert(0, str(REPO / "bench" / "accuracy"))
import per_errors  # noqa: E402

# 100 reference phones. Substitutions: linear 8, semi 6, plus (seed - 2), plus 1 on the test split.
# Deletions int(4 - bonus) for both; insertions int(2 * bonus) for linear, int(bonus) for semi.
# Dev PER by bonus 0 / 0.5 / 1 / 1.5 / 2 / 3 (seed 2): linear 12 12 13 13 14 15 -> 0 and 0.5 tie, 0.5
# is nearer the shipped 1; semi 10 9 10 9 10 10 -> 0.5 and 1.5 tie at the same distance, the smaller.
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
opt = {a[i]: a[i + 1] for i in range(1, len(a) - 1) if a[i].startswith("--") and not a[i + 1].startswith("--")}
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(" ".join(a) + "\n")
ck = opt["--checkpoint"].split("/")
arm, seed = ck[-4], int(ck[-3].split("-")[1])
if arm == "broken":
    sys.exit("evaluate: cannot read the checkpoint")
b = float(opt["--phone-bonus"])
s = (8 if arm == "linear" else 6) + seed - 2 + (0 if opt["--split"] == "dev" else 1)
d = int(4 - b)
i = int(2 * b) if arm == "linear" else int(b)
json.dump({"per": (s + d + i) / 100, "reference_phones": 100, "phone_edits": s + d + i,
           "phone_substitutions": s, "phone_deletions": d, "phone_insertions": i}, open(opt["--json"], "w"))
'''


class PerErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        self.out = self.root / "out"
        for arm in ("linear", "shipped"):
            for s in (1, 2, 3):
                ck = self.out / "es-5" / arm / f"seed-{s}" / "checkpoints"
                ck.mkdir(parents=True)
                (ck / "best.safetensors").write_text("x")
        self.fake = self.root / "timitseg"
        self.fake.write_text(FAKE)
        self.fake.chmod(0o755)
        self.log = self.root / "log"
        self.env = dict(os.environ, FAKE_LOG=str(self.log))

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, *extra, check=True):
        return subprocess.run([sys.executable, str(SCRIPT), str(self.out), "--corpora", "es-5", "--timitseg",
                               str(self.fake), "--jobs", "3", *extra], env=self.env, capture_output=True,
                              text=True, check=check)

    def test_table_rule_and_lead(self):
        out = self.run_script().stdout
        # linear at the shipped bonus 1: dev 12 13 14, test 13 14 15 (S 9 +- 1, D 3, I 2, 99 predicted phones)
        self.assertIn("| linear | 1 | 13.00 ± 1.00 | 14.00 ± 1.00 | 9.00 ± 1.00 | 3.00 ± 0.00 | 2.00 ± 0.00 | "
                      "0.990 ± 0.000 |", out)
        self.assertIn("| linear | 0.5 (dev's) | 12.00 ± 1.00 | 13.00 ± 1.00 | 9.00 ± 1.00 | 3.00 ± 0.00 | "
                      "1.00 ± 0.00 |", out)
        self.assertIn("| shipped | 1 | 10.00 ± 1.00 | 11.00 ± 1.00 | 7.00 ± 1.00 | 3.00 ± 0.00 | 1.00 ± 0.00 |", out)
        self.assertIn("| shipped | 0.5 (dev's) | 9.00 ± 1.00 | 10.00 ± 1.00 |", out)
        self.assertIn("test PER at the shipped bonus: +3.00 points (larger std 1.00; beyond one spread; "
                      "shipped ahead on 3 of 3 seeds)", out)
        self.assertIn("test PER at the chosen bonus: +3.00 points", out)
        # 2 arms x 3 seeds x 2 splits x 6 bonuses, each once; then nothing is run again
        self.assertEqual(len(self.log.read_text().splitlines()), 72)
        self.assertTrue((self.out / "es-5/linear/seed-1/bonus/test_0.5.json").is_file())
        again = self.run_script("--json", str(self.root / "r.json")).stdout
        self.assertEqual(len(self.log.read_text().splitlines()), 72)
        self.assertEqual(again, out)
        with open(self.root / "r.json") as f:
            r = json.load(f)
        self.assertEqual(r["es-5"]["rows"]["linear"]["chosen_bonus"], 0.5)
        self.assertEqual(r["es-5"]["rows"]["shipped"]["chosen_bonus"], 0.5)
        self.assertAlmostEqual(r["es-5"]["rows"]["linear"]["dev_per_by_bonus"]["3"], 0.15)

    def test_choose_bonus_ties(self):
        self.assertEqual(per_errors.choose_bonus({0.0: 0.1, 0.5: 0.1, 2.0: 0.2}, 1.0), 0.5)
        self.assertEqual(per_errors.choose_bonus({0.5: 0.1, 1.5: 0.1}, 1.0), 0.5)
        self.assertEqual(per_errors.choose_bonus({0.0: 0.3, 1.0: 0.2, 3.0: 0.1}, 1.0), 3.0)

    def test_test_split_of_the_flite_corpora(self):
        self.assertEqual(per_errors.test_split("demo"), "core-test")
        self.assertEqual(per_errors.test_split("large"), "core-test")
        self.assertEqual(per_errors.test_split("de"), "test")


class BadInput(unittest.TestCase):
    def test_missing_checkpoint_runs_nothing(self):
        with tempfile.TemporaryDirectory() as t:
            (Path(t) / "es-5").mkdir()
            r = subprocess.run([sys.executable, str(SCRIPT), t, "--corpora", "es-5"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("es-5/linear/seed-1/checkpoints/best.safetensors: no such checkpoint", r.stderr)
            self.assertEqual(sorted(os.listdir(t)), ["es-5"])

    def test_bad_options(self):
        with tempfile.TemporaryDirectory() as t:
            for args, msg in ((["--bonuses", "0 x"], "not a list of numbers"),
                              (["--bonuses", "0 2"], "--shipped-bonus 1 is not one of --bonuses"),
                              (["--arms", "a b c"], "names two arms")):
                r = subprocess.run([sys.executable, str(SCRIPT), t, *args], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, args)
                self.assertIn(msg, r.stderr)
            r = subprocess.run([sys.executable, str(SCRIPT), str(Path(t) / "none")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("none: no such folder", r.stderr)

    def test_failed_evaluation_is_named(self):
        with tempfile.TemporaryDirectory() as t:
            root = Path(t)
            for arm in ("linear", "broken"):
                ck = root / "out" / "de" / arm / "seed-1" / "checkpoints"
                ck.mkdir(parents=True)
                (ck / "best.safetensors").write_text("x")
            fake = root / "timitseg"
            fake.write_text(FAKE)
            fake.chmod(0o755)
            r = subprocess.run([sys.executable, str(SCRIPT), str(root / "out"), "--corpora", "de", "--arms",
                                "linear broken", "--seeds", "1", "--timitseg", str(fake)],
                               env=dict(os.environ, FAKE_LOG=str(root / "log")), capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("evaluation(s) failed", r.stderr)
            self.assertIn("cannot read the checkpoint", r.stderr)
            self.assertFalse((root / "out/de/broken/seed-1/bonus/dev_0.json").exists())


if __name__ == "__main__":
    unittest.main()
