#!/usr/bin/env python3
"""bench/accuracy/realign.py end to end with the built binary (argv[1]) on a tiny tone corpus: a model trained one
epoch on the phone sequences alone aligns every train and dev utterance, and the WORKDIR made from the alignments
holds the same utterances, speakers, phone set and feature options, with times whose labels read, in the model's
39-phone classes, exactly the sequence each utterance was trained on; a model then trains on it. Python 3 standard
library only."""
import json
import struct
import subprocess
import sys
import tempfile
import unittest
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "accuracy" / "realign.py"
BIN = sys.argv.pop(1) if len(sys.argv) > 1 else str(REPO / "build" / "bin" / "timitseg")


def load(path: Path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        blob = f.read()
    t = {k: array({"I32": "i", "I64": "q"}[v["dtype"]], blob[v["data_offsets"][0]:v["data_offsets"][1]])
         for k, v in h.items() if k in ("labels", "utt_frame_offsets")}
    return t, json.loads(h["__metadata__"]["utterances"])


def sequences39(workdir: Path, split: str, pj: dict):
    """utterance id -> its frame labels' runs in the 39-phone classes of phones.json pj (what the model trains on);
    the labels index the WORKDIR's own table (manifest.json phone_set.labels: by name, as training reads them)."""
    names = json.loads((workdir / "manifest.json").read_text())["phone_set"]["labels"]
    to39 = [pj["map61to39"][pj["phones61"].index(n)] for n in names]
    t, utts = load(workdir / f"{split}.safetensors")
    off, lab, out = t["utt_frame_offsets"], t["labels"], {}
    for i, u in enumerate(utts):
        seq = []
        for x in lab[off[i]:off[i + 1]]:
            c = to39[x]
            if c >= 0 and (not seq or seq[-1] != c):
                seq.append(c)
        out[u["id"]] = (u["speaker"], off[i + 1] - off[i], seq)
    return out


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{args[:2]} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


class Realign(unittest.TestCase):
    def test_alignments_become_the_times_of_a_workdir(self):
        with tempfile.TemporaryDirectory(prefix="timitseg_realign_") as d:
            d = Path(d)
            run(BIN, "synth", "--out", d / "corpus", "--speakers", "6", "--utterances-per-speaker", "3", "--seed", "4")
            run(BIN, "prepare", "--timit", d / "corpus", "--out", d / "prep", "--no-progress")
            cfg = d / "tiny.yaml"
            cfg.write_text(f"data:\n  workdir: {d / 'prep'}\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                           "crf:\n  max_duration: 12\n  supervision: transcript\n"
                           "train:\n  epochs: 1\n  batch_size: 4\n  device: cpu\n  threads: 1\n")
            run(BIN, "train", "--config", cfg, "--set", f"train.run_dir={d / 'run'}")
            ck = d / "run" / "checkpoints" / "best.safetensors"
            r = run(sys.executable, SCRIPT, "--timitseg", BIN, "--checkpoint", ck, "--workdir", d / "prep",
                    "--out", d / "prep2", "--device", "cpu", "--threads", "1")
            man, man2 = (json.loads((d / w / "manifest.json").read_text()) for w in ("prep", "prep2"))
            self.assertEqual(man2["phone_set"]["sha256"], man["phone_set"]["sha256"])
            pj = json.loads((d / "prep" / "phones.json").read_text())
            # the same features (prepare --corpus may resample where --timit refuses to: not a feature option)
            drop = lambda o: {k: v for k, v in o.items() if k != "allow_resample"}
            self.assertEqual(drop(man2["feature_options"]), drop(man["feature_options"]))
            total = 0
            for split in ("train", "dev"):
                a, b = sequences39(d / "prep", split, pj), sequences39(d / "prep2", split, pj)
                self.assertEqual(sorted(a), sorted(b), split)
                for uid, (spk, frames, seq) in a.items():
                    spk2, frames2, seq2 = b[uid]
                    self.assertEqual((spk2, frames2), (spk, frames), uid)
                    self.assertEqual(seq2, seq, uid)  # the alignment reads the sequence trained on
                total += len(a)
            self.assertIn(f"realign: {total} of {total} utterances aligned", r.stderr)
            self.assertIn("--set data.phone_set=timit39", r.stderr)
            self.assertEqual(man2["splits"]["test"]["utterances"], 0)  # scored on the original WORKDIR
            # not the original times: the model of one epoch misplaces some boundaries
            la, lb = load(d / "prep" / "train.safetensors")[0]["labels"], load(d / "prep2" / "train.safetensors")[0]["labels"]
            self.assertEqual(len(la), len(lb))
            self.assertNotEqual(list(la), list(lb))
            t = run(BIN, "train", "--config", cfg, "--set", f"data.workdir={d / 'prep2'}", "--set",
                    f"train.run_dir={d / 'run2'}", "--set", "crf.supervision=segments", "--set", "data.phone_set=timit39")
            self.assertIn("39 classes", t.stdout + t.stderr)  # the classes the first model trained on
            self.assertTrue((d / "run2" / "checkpoints" / "best.safetensors").exists())

    def test_bad_input_is_one_line_and_writes_nothing(self):
        with tempfile.TemporaryDirectory(prefix="timitseg_realign_bad_") as d:
            d = Path(d)
            (d / "work").mkdir()
            (d / "work" / "manifest.json").write_text("{}")
            (d / "ck.safetensors").write_bytes(b"not a checkpoint")
            (d / "taken").mkdir()
            cases = [(["--checkpoint", d / "missing.safetensors", "--workdir", d / "work", "--out", d / "o1"],
                      f"realign: error: --checkpoint {d / 'missing.safetensors'}: no such file"),
                     (["--checkpoint", d / "ck.safetensors", "--workdir", d / "nowhere", "--out", d / "o2"],
                      f"realign: error: --workdir {d / 'nowhere'}: not a prepared WORKDIR (no manifest.json)"),
                     (["--checkpoint", d / "ck.safetensors", "--workdir", d / "work", "--out", d / "taken"],
                      f"realign: error: --out {d / 'taken'}: exists; choose a new folder (nothing is overwritten)")]
            for args, line in cases:
                r = subprocess.run([sys.executable, SCRIPT, "--timitseg", BIN] + [str(x) for x in args],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(r.stderr.strip(), line)
            self.assertEqual(sorted(p.name for p in d.iterdir()), ["ck.safetensors", "taken", "work"])


if __name__ == "__main__":
    unittest.main()
