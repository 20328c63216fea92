#!/usr/bin/env python3
"""kill -9 at random moments during `prepare` and `train` (docs/reliability.md).

Python 3 standard library only; CTest runs it as `reliability.kill9`.

  kill9.py --binary build/bin/timitseg [--seed S] [--kills 20] [--keep DIR]

The oracle is an uninterrupted run of the same command on the same inputs:

prepare  Each trial kills `prepare` with SIGKILL after a random delay (uniform
         over 0..1.2x the uninterrupted run's time), into an empty WORKDIR or,
         every other trial, while `--force` rebuilds a complete one; then reruns
         `prepare` (no --force) to the end, which must exit 0, and the WORKDIR
         must equal the uninterrupted one file for file, byte for byte (no
         leftover temporary, no stale cache reused).
train    Each trial is a chain: a fresh `train` killed at a random moment, then
         one or two more kills of the rerun, then a rerun to the end, which must
         exit 0 (`train --resume RUN` once an epoch-N checkpoint exists, else the
         same fresh command). After every kill, metrics.jsonl holds epochs
         1..k in order, each once, and at most one epoch past the newest
         checkpoint; every checkpoint on disk is a complete safetensors file.
         At the end, epochs 1..N each appear exactly once with the uninterrupted
         run's train_loss, dev_per and optimizer_step, and the tensors of every
         checkpoint (epoch-N and best) equal the uninterrupted run's bit for bit.

Each category needs at least --kills kills that land while the process runs
(a process that ends before its kill must have exited 0 and does not count).
The seed is printed; rerun with --seed S to repeat the same schedule (kill
times are wall-clock, so the exact moments vary a little).
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

EPOCHS = 8


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        fail("%s exited %d:\n%s" % (what, p.returncode, p.stdout[-3000:]))
    return p.stdout


def run_and_kill(cmd, delay):
    """Starts CMD, SIGKILLs it after DELAY seconds. Returns (killed, rc, output)."""
    log = tempfile.TemporaryFile()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        p.wait(timeout=delay)
        killed = False
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        killed = True
    log.seek(0)
    return killed, p.returncode, log.read().decode(errors="replace")


def tree(root):
    """{relative path: bytes} of every file under ROOT (hidden ones included)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def safetensors(path):
    """(tensors {name: (dtype, shape, bytes)}, metadata); fails unless the file is complete."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < 8:
        fail("%s: %d bytes, not a safetensors file" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail("%s: header of %d bytes runs past the end (%d bytes): half-written" % (path, n, len(data)))
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, t in header.items():
        b, e = t["data_offsets"]
        end = max(end, e)
        tensors[name] = (t["dtype"], tuple(t["shape"]), body[b:e])
    if end != len(body):
        fail("%s: data section %d bytes, tensors cover %d: half-written" % (path, len(body), end))
    return tensors, meta


def same_tensors(a_path, b_path):
    a, _ = safetensors(a_path)
    b, _ = safetensors(b_path)
    if sorted(a) != sorted(b):
        fail("%s and %s hold different tensors" % (a_path, b_path))
    for name in a:
        if a[name] != b[name]:
            fail("%s: tensor %s differs from the uninterrupted run's (%s)" % (b_path, name, a_path))


def metrics_epochs(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    lines = []
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                lines.append(json.loads(line))
            except ValueError:
                fail("%s:%d: not a JSON line (half-written?): %r" % (path, i, line[:80]))
    return lines


def checkpoint_epochs(run_dir):
    d = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(d):
        return []
    out = []
    for f in os.listdir(d):
        if f.startswith("epoch-") and f.endswith(".safetensors"):
            out.append(int(f[len("epoch-"):-len(".safetensors")]))
    return sorted(out)


def check_after_kill(run_dir, what):
    lines = metrics_epochs(run_dir)
    epochs = [l["epoch"] for l in lines]
    if epochs != list(range(1, len(epochs) + 1)):
        fail("%s: metrics.jsonl epochs %s, not 1..k each once in order" % (what, epochs))
    ckpts = checkpoint_epochs(run_dir)
    newest = ckpts[-1] if ckpts else 0
    if len(epochs) < newest or len(epochs) > newest + 1:
        fail("%s: metrics.jsonl has epochs 1..%d, the newest checkpoint is epoch %d" % (what, len(epochs), newest))
    d = os.path.join(run_dir, "checkpoints")
    for f in os.listdir(d) if os.path.isdir(d) else []:
        if f.endswith(".safetensors"):
            safetensors(os.path.join(d, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary one)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(os.environ.get("TIMITSEG_KILL_SEED", time.time_ns() % 1000000))
    print("kill9: seed %d (rerun with --seed %d)" % (seed, seed), flush=True)
    rng = random.Random(seed)
    B = os.path.abspath(a.binary)
    top = a.keep or tempfile.mkdtemp(prefix="timitseg_kill9_")
    os.makedirs(top, exist_ok=True)
    t_start = time.time()
    try:
        corpus = os.path.join(top, "synth")
        shutil.rmtree(corpus, ignore_errors=True)
        run([B, "synth", "--out", corpus, "--speakers", "9", "--utterances-per-speaker", "4", "--seed", "7"], "synth")

        # ---- prepare ----
        ref = os.path.join(top, "work_ref")
        shutil.rmtree(ref, ignore_errors=True)
        prep = lambda out, *extra: [B, "prepare", "--timit", corpus, "--out", out, "--no-progress"] + list(extra)
        t0 = time.time()
        run(prep(ref), "uninterrupted prepare")
        t_prep = time.time() - t0
        ref_tree = tree(ref)
        print("kill9: uninterrupted prepare %.2f s, %d files" % (t_prep, len(ref_tree)), flush=True)
        kills = trials = 0
        work = os.path.join(top, "work")
        while kills < a.kills:
            trials += 1
            if trials > 6 * a.kills:
                fail("prepare: only %d of %d kills landed while it ran" % (kills, a.kills))
            force = trials % 2 == 0 and os.path.isdir(work)
            if not force:
                shutil.rmtree(work, ignore_errors=True)
            delay = rng.uniform(0, 1.2 * t_prep)
            killed, rc, out = run_and_kill(prep(work, *(["--force"] if force else [])), delay)
            if not killed:
                if rc != 0:
                    fail("prepare (not killed) exited %d:\n%s" % (rc, out[-3000:]))
                continue
            kills += 1
            print("kill9: prepare kill %d at %.3f s (%s)" % (kills, delay, "--force over a complete WORKDIR"
                                                             if force else "into an empty WORKDIR"), flush=True)
            run(prep(work), "prepare after kill %d" % kills)
            got = tree(work)
            if sorted(got) != sorted(ref_tree):
                fail("prepare after kill %d: files %s, uninterrupted: %s" % (kills, sorted(got), sorted(ref_tree)))
            for name, data in ref_tree.items():
                if got[name] != data:
                    fail("prepare after kill %d: %s differs from the uninterrupted prepare's" % (kills, name))
        print("kill9: prepare: %d kills, every rerun succeeded and matched byte for byte" % kills, flush=True)

        # ---- train ----
        cfg = os.path.join(top, "tiny.yaml")

        def write_cfg(run_dir):
            with open(cfg, "w") as fh:
                fh.write("data:\n  workdir: %s\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n  dropout: 0.1\n"
                         "crf:\n  max_duration: 8\n  reg: 0.001\n"
                         "train:\n  epochs: %d\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 1\n"
                         "  run_dir: %s\n" % (ref, EPOCHS, run_dir))

        ref_run = os.path.join(top, "run_ref")
        shutil.rmtree(ref_run, ignore_errors=True)
        write_cfg(ref_run)
        t0 = time.time()
        run([B, "train", "--config", cfg], "uninterrupted train")
        t_train = time.time() - t0
        ref_lines = metrics_epochs(ref_run)
        if [l["epoch"] for l in ref_lines] != list(range(1, EPOCHS + 1)):
            fail("uninterrupted train: metrics.jsonl epochs %s" % [l["epoch"] for l in ref_lines])
        ref_files = sorted(tree(ref_run))
        print("kill9: uninterrupted train %.2f s, %d epochs" % (t_train, EPOCHS), flush=True)

        run_dir = os.path.join(top, "run")
        write_cfg(run_dir)
        kills = chains = 0
        while kills < a.kills:
            chains += 1
            if chains > 6 * a.kills:
                fail("train: only %d of %d kills landed while it ran" % (kills, a.kills))
            shutil.rmtree(run_dir, ignore_errors=True)
            planned = rng.randint(1, 3)
            done = False
            for k in range(planned + 1):
                resume = bool(checkpoint_epochs(run_dir))
                cmd = [B, "train", "--resume", run_dir] if resume else [B, "train", "--config", cfg]
                what = "train --resume" if resume else "fresh train"
                if k == planned:  # the rerun after the last kill runs to the end
                    run(cmd, "%s after kill %d" % (what, kills))
                    done = True
                    break
                # over the time the rest of the run takes (a resumed run has fewer epochs left)
                left = EPOCHS - (checkpoint_epochs(run_dir) or [0])[-1]
                delay = rng.uniform(0, 0.1 + 1.1 * t_train * left / EPOCHS)
                killed, rc, out = run_and_kill(cmd, delay)
                if not killed:
                    if rc != 0:
                        fail("%s (not killed) exited %d:\n%s" % (what, rc, out[-3000:]))
                    done = True
                    break
                kills += 1
                check_after_kill(run_dir, "train kill %d" % kills)
                print("kill9: train kill %d at %.3f s into %s (then: %d epoch lines, checkpoints %s)"
                      % (kills, delay, what, len(metrics_epochs(run_dir)), checkpoint_epochs(run_dir)), flush=True)
            if not done:
                fail("internal: chain did not finish")
            lines = metrics_epochs(run_dir)
            if [l["epoch"] for l in lines] != list(range(1, EPOCHS + 1)):
                fail("after the kills: metrics.jsonl epochs %s, expected 1..%d once each"
                     % ([l["epoch"] for l in lines], EPOCHS))
            for got, want in zip(lines, ref_lines):
                for key in ("train_loss", "dev_per", "optimizer_step", "best"):
                    if got.get(key) != want.get(key):
                        fail("after the kills: epoch %d %s = %r, uninterrupted %r"
                             % (got["epoch"], key, got.get(key), want.get(key)))
            files = sorted(tree(run_dir))
            if files != ref_files:
                fail("after the kills: run folder holds %s, the uninterrupted run %s" % (files, ref_files))
            for f in files:
                if f.endswith(".safetensors"):
                    same_tensors(os.path.join(ref_run, f), os.path.join(run_dir, f))
        print("kill9: train: %d kills in %d chains; every final run succeeded, epochs 1..%d once each, checkpoint "
              "tensors bitwise equal" % (kills, chains, EPOCHS), flush=True)
        print("kill9: PASS (seed %d, %.1f s)" % (seed, time.time() - t_start), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
