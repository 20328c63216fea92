#!/usr/bin/env python3
"""Tests of bench/accuracy/decide.py: the dev decision rule of issue 20 on
cells whose verdicts are worked out by hand, and the command end to end on
results.json files written here (Python 3 standard library only)."""
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "accuracy"))
import decide  # noqa: E402


def m(per, bf20=0.80, bf2=0.90):
    return {"per": per, "f1_20ms": bf20, "boundary_f1_2": bf2, "segment_f1": 0.4, "duration_kl": 0.01}


class Rule(unittest.TestCase):
    def cells(self, semi_variant_pers, bf20=0.80):
        # two cells; the shipped semi-CRF at 20 % and 22 % PER
        base = [0.20, 0.22]
        return {f"c{i}": {"semicrf-shipped": m(base[i]), "linear-shipped": m(0.21),
                          "semicrf-x": m(semi_variant_pers[i], bf20)} for i in range(2)}

    def verdict(self, pers, bf20=0.80):
        return decide.decide(self.cells(pers, bf20))["crf"]["semicrf"]

    def test_adopted_when_mean_gain_reaches_0_2_points(self):
        r = self.verdict([0.198, 0.218])  # -0.2, -0.2 points: exactly the threshold
        self.assertEqual(r["adopted"], ["semicrf-x"])
        self.assertEqual(r["choice"], "semicrf-x")
        self.assertAlmostEqual(r["rows"][0]["mean_delta_per"], -0.002)

    def test_rejected_when_gain_is_small(self):
        r = self.verdict([0.199, 0.219])  # -0.1 points on average
        self.assertEqual(r["adopted"], [])
        self.assertEqual(r["choice"], "semicrf-shipped")
        self.assertIn("mean PER gain", r["rows"][0]["verdict"])

    def test_rejected_when_one_cell_is_much_worse(self):
        r = self.verdict([0.18, 0.226])  # mean -0.7 points, but +0.6 in one cell
        self.assertEqual(r["adopted"], [])
        self.assertIn("a cell worse", r["rows"][0]["verdict"])

    def test_rejected_when_boundary_f1_drops(self):
        r = self.verdict([0.19, 0.21], bf20=0.79)  # -1 point of boundary F1 at 20 ms
        self.assertEqual(r["adopted"], [])
        self.assertIn("boundary F1", r["rows"][0]["verdict"])

    def test_combined_wins_only_when_better(self):
        cells = self.cells([0.19, 0.21])
        for i, c in enumerate(cells.values()):
            c["semicrf-y"] = m([0.195, 0.215][i])
            c["semicrf-combined"] = m([0.192, 0.212][i])  # worse than x alone
        r = decide.decide(cells)["crf"]["semicrf"]
        self.assertEqual(r["adopted"], ["semicrf-x", "semicrf-y"])  # ranked by gain
        self.assertEqual(r["choice"], "semicrf-x")
        for c, per in zip(cells.values(), [0.185, 0.205]):
            c["semicrf-combined"] = m(per)
        self.assertEqual(decide.decide(cells)["crf"]["semicrf"]["choice"], "semicrf-combined")

    def test_variant_missing_in_a_cell_is_incomplete(self):
        cells = self.cells([0.1, 0.1])
        del cells["c1"]["semicrf-x"]
        r = decide.decide(cells)["crf"]["semicrf"]
        self.assertEqual(r["adopted"], [])
        self.assertTrue(r["rows"][0]["verdict"].startswith("incomplete"))

    def test_falls_back_to_two_frame_f1_without_the_20ms_metric(self):
        cells = self.cells([0.19, 0.21])
        for c in cells.values():
            for v in c.values():
                del v["f1_20ms"]
            c["semicrf-x"]["boundary_f1_2"] = 0.88  # -2 points
        self.assertEqual(decide.decide(cells)["crf"]["semicrf"]["adopted"], [])


class Command(unittest.TestCase):
    def write(self, d: Path, split: str, rows: dict, seeds=(1, 2, 3), failed=()):
        d.mkdir(parents=True)
        summary = [{"variant": v, "runs": len(seeds), "ok": len(seeds) - (v in failed), "failed": int(v in failed),
                    "pending": 0, **{k: {"mean": x, "std": 0.0} for k, x in mm.items()}} for v, mm in rows.items()]
        (d / "results.json").write_text(json.dumps({"plan": {"split": split, "seeds": list(seeds)},
                                                    "summary": summary}))

    def test_end_to_end_and_refuses_test_split(self):
        with tempfile.TemporaryDirectory() as t:
            t = Path(t)
            rows = {"semicrf-shipped": m(0.2), "semicrf-x": m(0.19), "linear-shipped": m(0.21),
                    "linear-x": m(0.209)}
            self.write(t / "a", "dev", rows)
            self.write(t / "b", "dev", rows, failed=("semicrf-x",))
            out = subprocess.run([sys.executable, str(REPO / "bench/accuracy/decide.py"), "--cell", f"a={t / 'a'}",
                                  "--cell", f"b={t / 'b'}", "--out", str(t / "o")], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            j = json.loads((t / "o" / "decision.json").read_text())
            # semicrf-x failed a seed in cell b: not complete, so not adopted
            self.assertEqual(j["crf"]["semicrf"]["choice"], "semicrf-shipped")
            self.assertEqual(j["crf"]["linear"]["choice"], "linear-shipped")  # -0.1 points only
            self.assertIn("Decision rule", (t / "o" / "decision.md").read_text())
            self.write(t / "c", "test", rows)
            out = subprocess.run([sys.executable, str(REPO / "bench/accuracy/decide.py"), "--cell", f"c={t / 'c'}",
                                  "--out", str(t / "o2")], capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("dev only", out.stderr)
            self.assertFalse((t / "o2").exists())


if __name__ == "__main__":
    unittest.main()
