"""examples/train_bilstm.py on a WORKDIR of `prepare --corpus` (README, "Your own corpus"):
it reads the phone set the WORKDIR records (no phones.json there) and trains one epoch."""
import glob
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_train_bilstm_runs_on_an_own_corpus_workdir(binary, tmp_path):
    synth = tmp_path / "synth"
    subprocess.run([binary, "synth", "--out", str(synth), "--speakers", "6", "--utterances-per-speaker", "2"],
                   check=True, capture_output=True)
    (tmp_path / "labels").mkdir()
    rows = ["audio,speaker,labels"]
    for phn in sorted(glob.glob(str(synth / "*" / "*" / "*" / "*.PHN"))):
        spk, utt = os.path.basename(os.path.dirname(phn)), os.path.basename(phn)[:-4]
        lab = tmp_path / "labels" / ("%s-%s.lab" % (spk, utt))
        with open(phn) as f, open(lab, "w") as out:
            for line in f:
                a, b, label = line.split()
                out.write("%.5f %.5f %s\n" % (int(a) / 16000, int(b) / 16000, label))
        rows.append("%s,%s,labels/%s" % (os.path.relpath(phn[:-4] + ".WAV", tmp_path), spk, lab.name))
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    prep = tmp_path / "prep"
    subprocess.run([binary, "prepare", "--corpus", str(tmp_path / "manifest.csv"), "--out", str(prep)], check=True,
                   capture_output=True)
    assert not (prep / "phones.json").exists()  # what the example used to need
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_bilstm.py"), "--workdir", str(prep),
                        "--epochs", "1", "--hidden", "8", "--layers", "1", "--max-duration", "8", "--device", "cpu",
                        "--backend", "cpu", "--threads", "1"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "epoch 1: train loss" in r.stdout and "dev PER" in r.stdout, r.stdout
