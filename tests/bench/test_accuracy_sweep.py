#!/usr/bin/env python3
"""Tests of bench/accuracy/run.py's phone-bonus sweep (--phone-bonus-sweep):
the selection rule on rows whose answer is known by hand, the joint selection
over sizes, and the whole flow (train, evaluate, score, sweep, sweep.md /
sweep.json, a second invocation reusing what exists) with a fake `timitseg`
whose metrics are a known function of --phone-bonus; the columns of the
metrics at 20 ms in the summaries. Python 3 standard library only."""
import json
import math
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "accuracy"))
import run  # noqa: E402  (bench/accuracy/run.py)


def row(bonus, per, kl, split="dev"):
    return {"variant": "v", "bonus": bonus, split: {"per": {"mean": per}, "duration_kl": {"mean": kl}}}


# The fake binary: train writes the last checkpoint; evaluate and score write
# metrics where PER = 0.2 + 0.001 * bonus and KL = 0.02 / (1 + bonus), plus
# seed-dependent noise of +-0.0005 (so the std is not 0); evaluate also logs
# its arguments, so the test can count the decodes.
FAKE = textwrap.dedent('''\
    #!/usr/bin/env python3
    import json, os, sys
    a = sys.argv[1:]
    def opt(name, default=None):
        return a[a.index(name) + 1] if name in a else default
    sets = dict(a[i + 1].split("=", 1) for i, x in enumerate(a) if x == "--set")
    log = os.environ["FAKE_LOG"]
    with open(log, "a") as f:
        f.write(json.dumps(a) + "\\n")
    if a[0] == "train":
        d = os.path.join(sets["train.run_dir"], "checkpoints")
        os.makedirs(d, exist_ok=True)
        seed = int(sets["train.seed"])
        with open(os.path.join(d, "epoch-%s.safetensors" % sets["train.epochs"]), "w") as f:
            f.write(str(seed))
        sys.exit(0)
    def metrics(bonus, seed):
        noise = 0.0005 * (1 if seed % 2 else -1)
        return {"per": 0.2 + 0.001 * bonus + noise, "boundary_f1": {"0": 0.6, "1": 0.9, "2": 0.95},
                "segment_f1": 0.4, "duration_kl": 0.02 / (1 + bonus), "frame_accuracy": 0.8, "utterances": 10,
                "boundary_20ms": {"tolerance_ms": 20, "tolerance_frames": 2, "precision": 0.9 + noise,
                                  "recall": 0.8, "f1": 0.85, "r_value": 0.75, "matched": 8, "num_ref": 10,
                                  "num_pred": 9}}
    if a[0] == "evaluate":
        ckpt = opt("--checkpoint")
        seed = int(open(ckpt).read())
        m = metrics(float(opt("--phone-bonus", "0")), seed)
        with open(opt("--json"), "w") as f:
            json.dump(m, f)
        if opt("--dump-predictions"):
            with open(opt("--dump-predictions"), "w") as f:
                f.write(json.dumps({"seed": seed}) + "\\n")
        sys.exit(0)
    if a[0] == "score":
        seed = json.loads(open(opt("--predictions")).readline())["seed"]
        with open(opt("--json"), "w") as f:
            json.dump(metrics(0.0, seed), f)
        sys.exit(0)
    sys.exit("fake timitseg: unknown command " + a[0])
''')


class SelectBonus(unittest.TestCase):
    def test_lowest_kl_among_the_near_best_per(self):
        rows = [row(0, 0.200, 0.020), row(0.5, 0.199, 0.015), row(1, 0.2005, 0.010), row(2, 0.25, 0.001)]
        # best PER 0.199; within 0.2 points: bonuses 0, 0.5, 1; lowest KL among them: 1 (2 is too far on PER)
        self.assertEqual(run.select_bonus(rows, "dev"), 1)

    def test_exactly_at_the_margin_is_near(self):
        rows = [row(0, 0.200, 0.020), row(1, 0.202, 0.010)]
        self.assertEqual(run.select_bonus(rows, "dev"), 1)
        rows = [row(0, 0.200, 0.020), row(1, 0.2021, 0.010)]
        self.assertEqual(run.select_bonus(rows, "dev"), 0)

    def test_ties_in_kl_go_to_the_smaller_bonus(self):
        self.assertEqual(run.select_bonus([row(-1, 0.2, 0.01), row(2, 0.2, 0.01), row(1, 0.2, 0.01)], "dev"), -1)
        self.assertEqual(run.select_bonus([row(2, 0.2, 0.01), row(0.5, 0.2, 0.01)], "dev"), 0.5)

    def test_a_missing_run_selects_nothing(self):
        r = row(1, 0.2, 0.01)
        r["dev"] = None
        self.assertIsNone(run.select_bonus([row(0, 0.2, 0.02), r], "dev"))


class JointSelection(unittest.TestCase):
    def test_the_rule_on_the_mean_over_sizes(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            # size a alone selects 1 (PER 0.200 vs 0.201, KL lower at 1); size b alone selects 0
            # (PER at 1 is 0.205, too far); the mean: PER 0.2015 / 0.203 (within 0.2 points of
            # 0.2015), KL 0.015 / 0.0105 -> 1
            sizes = {"a": [row(0, 0.200, 0.02), row(1, 0.201, 0.011)],
                     "b": [row(0, 0.203, 0.01), row(1, 0.205, 0.010)]}
            for name, rows in sizes.items():
                (out / name).mkdir()
                (out / name / "sweep.json").write_text(json.dumps({"rows": rows}))
                self.assertEqual(run.select_bonus(rows, "dev"), {"a": 1, "b": 0}[name])
            run.joint_selection(out)
            j = json.loads((out / "sweep-joint.json").read_text())
            self.assertEqual(j["sizes"], ["a", "b"])
            self.assertEqual(j["selected"], {"v": 1})
            means = {r["bonus"]: r["dev"]["per"]["mean"] for r in j["rows"]["v"]}
            self.assertAlmostEqual(means[0], 0.2015)
            self.assertAlmostEqual(means[1], 0.203)

    def test_one_size_writes_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "a").mkdir()
            (out / "a" / "sweep.json").write_text(json.dumps({"rows": [row(0, 0.2, 0.01)]}))
            run.joint_selection(out)
            self.assertFalse((out / "sweep-joint.json").exists())


class Metrics20ms(unittest.TestCase):
    """The columns P@20ms, R@20ms, F1@20ms, R-val@20ms from score.json's "boundary_20ms"."""

    def score_json(self, tmp: Path, name: str, b20) -> Path:
        j = {"per": 0.25, "boundary_f1": {"0": 0.5, "1": 0.8, "2": 0.9}, "segment_f1": 0.4, "duration_kl": 0.01,
             "frame_accuracy": 0.7, "utterances": 3}
        if b20 is not None:
            j["boundary_20ms"] = b20
        p = tmp / name
        p.write_text(json.dumps(j))
        return p

    def test_scores_summary_and_markdown(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            b20 = lambda p, r, f, rv: {"tolerance_ms": 20, "tolerance_frames": 2, "precision": p, "recall": r,
                                       "f1": f, "r_value": rv, "matched": 1, "num_ref": 1, "num_pred": 1}
            s1 = run.scores_of(self.score_json(tmp, "a.json", b20(0.5, 0.6, 0.55, 0.4)))
            s2 = run.scores_of(self.score_json(tmp, "b.json", b20(0.7, 0.8, 0.75, 0.6)))
            old = run.scores_of(self.score_json(tmp, "c.json", None))  # a score.json from before the 20 ms metrics
            self.assertEqual((s1["precision_20ms"], s1["recall_20ms"], s1["f1_20ms"], s1["r_value_20ms"]),
                             (0.5, 0.6, 0.55, 0.4))
            self.assertNotIn("r_value_20ms", old)
            results = [{"variant": "v", "seed": 1, "ok": True, **s1}, {"variant": "v", "seed": 2, "ok": True, **s2},
                       {"variant": "w", "seed": 1, "ok": True, **old}]
            table = run.summarize(results, ["v", "w"])
            # v: means 0.6, 0.7, 0.65, 0.5; sample std of two values x, y is |x - y| / sqrt 2 = 0.2 / sqrt 2
            self.assertAlmostEqual(table[0]["precision_20ms"]["mean"], 0.6)
            self.assertAlmostEqual(table[0]["r_value_20ms"]["mean"], 0.5)
            self.assertAlmostEqual(table[0]["recall_20ms"]["std"], 0.2 / math.sqrt(2))
            self.assertEqual(table[0]["f1_20ms"]["values"], [0.55, 0.75])
            self.assertNotIn("precision_20ms", table[1])
            a = type("A", (), {"split": "test", "workdir": "wd", "seeds": "1,2"})()
            md = run.markdown(table, "demo", {"layers": 2, "hidden": 64, "batch": 8, "lr": 0.001, "crf_reg": 0.0,
                                              "epochs": 1}, a)
            self.assertIn("| P@20ms | R@20ms | F1@20ms | R-val@20ms | runs ok / failed |", md)
            # v: 60.0 ± 14.1 | 70.0 ± 14.1 | 65.0 ± 14.1 | 50.0 ± 14.1; w: no 20 ms values -> "—"
            self.assertIn("| 60.0 ± 14.1 | 70.0 ± 14.1 | 65.0 ± 14.1 | 50.0 ± 14.1 | 2 / 0 |", md)
            self.assertIn("| — | — | — | — | 1 / 0 |", md)


class SweepFlow(unittest.TestCase):
    def test_sweep_with_a_fake_binary(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            fake = tmp / "timitseg"
            fake.write_text(FAKE)
            fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
            wd = tmp / "wd"
            wd.mkdir()
            (wd / "manifest.json").write_text("{}")
            log = tmp / "calls.jsonl"
            env = dict(os.environ, FAKE_LOG=str(log))
            cmd = [sys.executable, str(REPO / "bench" / "accuracy" / "run.py"), "--workdir", str(wd),
                   "--timitseg", str(fake), "--preset", "ablation", "--only", "linear-shipped", "--seeds", "1,2",
                   "--epochs", "1", "--split", "test", "--jobs", "2", "--phone-bonus-sweep", "0,1,2,3",
                   "--out", str(tmp / "out")]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            sw = json.loads((tmp / "out" / "demo" / "sweep.json").read_text())
            # PER 0.200 / 0.201 / 0.202 / 0.203 (+- noise that cancels in the mean), KL falling with the
            # bonus: within 0.2 points of the best PER are 0, 1, 2; the lowest KL among them is at 2
            self.assertEqual(sw["selected"], {"linear-shipped": 2.0})
            by_bonus = {(r["bonus"]): r for r in sw["rows"]}
            self.assertEqual(sorted(by_bonus), [0.0, 1.0, 2.0, 3.0])
            for b, r in by_bonus.items():
                for split in ("dev", "test"):
                    s = r[split]
                    self.assertEqual(s["ok"], 2)
                    self.assertAlmostEqual(s["per"]["mean"], 0.2 + 0.001 * b)
                    self.assertAlmostEqual(s["per"]["std"], math.sqrt(2) * 0.0005)
                    self.assertAlmostEqual(s["duration_kl"]["mean"], 0.02 / (1 + b))
            res = (tmp / "out" / "demo" / "results.md").read_text()
            # the fake's 20 ms metrics: P 0.9 +- 0.0005 (mean 0.9 over seeds 1, 2), R 0.8, F1 0.85, R-value 0.75
            self.assertIn("| 90.0 ± 0.1 | 80.0 ± 0.0 | 85.0 ± 0.0 | 75.0 ± 0.0 |", res)
            md = (tmp / "out" / "demo" / "sweep.md").read_text()
            self.assertIn("| linear-shipped | 2 (selected) | 20.20 ± 0.07 |", md)
            calls = [json.loads(l) for l in log.read_text().splitlines()]
            sweeps = [c for c in calls if c[0] == "evaluate" and "--phone-bonus" in c]
            self.assertEqual(len(sweeps), 2 * 4 * 2)  # seeds x bonuses x splits
            self.assertEqual(sum(c[0] == "train" for c in calls), 2)
            # again: every run and every decode is reused, nothing runs but the summary
            n = len(calls)
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(len(log.read_text().splitlines()), n)
            self.assertEqual(json.loads((tmp / "out" / "demo" / "sweep.json").read_text())["selected"],
                             {"linear-shipped": 2.0})


if __name__ == "__main__":
    unittest.main()
