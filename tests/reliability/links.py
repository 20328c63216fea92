#!/usr/bin/env python3
"""Inputs reached through links are read, never written; one writer per run folder (docs/reliability.md).

Python 3 standard library only; CTest runs it as `reliability.links`.

  links.py --binary build/bin/timitseg [--keep DIR] [--only NAME]

Every case snapshots its input trees before and after (the sha256 of every
file, each link's target and each folder's name, links not followed) and
requires them equal, then checks where the outputs went (every expected file
under the folder named, nothing anywhere else). The input trees are
`chmod -R a-w` (a user's read-only corpus; as root this protects nothing,
so the snapshot is the oracle).

align, decode  a tree of links to the audio (absolute) and to the .PHN beside
               it (relative), a tree with a linked speaker folder, a link
               cycle and a dangling link (one warning line each, the rest
               goes on); --out inside the input tree; --out equal to the input
               tree, and --out equal to the links' target folder (refused, one
               line naming both, no folder left); a decode that fails leaves no
               --out folder.
prepare        TRAIN/TEST trees of linked speaker folders and linked files:
               the prepared split files equal those prepared from the real
               files byte for byte; --out inside the tree; --out equal to it.
export         --out naming the input checkpoint, or a link to it: refused;
               export through a link writes only --out.
report         --out naming a file the report reads: refused; a report of a
               linked run folder writes only --out.
compare        a WORKDIR of linked files: runs land under train.run_dir;
               train.run_dir equal to the WORKDIR (through a link): refused.
train          two fresh `train` started together into one folder: one runs,
               the other exits 1 with one line naming the folder and the
               holder's pid; two `--resume` and a `report` into the folder while
               it runs: refused likewise; `report` of it into another folder
               and `evaluate` of its best checkpoint: allowed;
               kill -9 of the holder, then two `--resume` started together: one
               finishes, one is refused; the folder holds that run's files only.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

B = None


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def run(args, expect=0, what=None):
    p = subprocess.run([B] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect is not None and p.returncode != expect:
        fail("%s exited %d (expected %d):\n%s%s" % (what or " ".join(args[:2]), p.returncode, expect,
                                                     p.stdout[-2000:], p.stderr[-3000:]))
    return p


def error_line(p):
    """The one `error:` line of a failed command (fails unless there is exactly one)."""
    lines = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    if len(lines) != 1:
        fail("expected one error line, got:\n" + p.stderr)
    return lines[0]


def snapshot(*roots):
    """{path: ('dir',) | ('link', target) | ('file', sha256)} of everything under ROOTS, links not followed."""
    out = {}
    for root in roots:
        for d, dirs, files in os.walk(root):
            out[d] = ("dir",)
            for n in dirs + files:
                p = os.path.join(d, n)
                if os.path.islink(p):
                    out[p] = ("link", os.readlink(p))
                elif os.path.isfile(p):
                    with open(p, "rb") as fh:
                        out[p] = ("file", hashlib.sha256(fh.read()).hexdigest())
    return out


def same_snapshot(before, after, what):
    if before != after:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        fail("%s: the input tree changed: %s" % (what, changed[:10]))


def chmod_tree(root, writable):
    for d, dirs, files in os.walk(root):
        for n in [d] + [os.path.join(d, f) for f in files]:
            if os.path.islink(n):
                continue
            m = os.stat(n).st_mode
            os.chmod(n, (m | stat.S_IWUSR) if writable else (m & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)))


def files_under(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def utterances(corpus):
    """[(rel path without extension, wav path, phn path)] of a synth corpus's TEST part."""
    out = []
    for d, _, files in os.walk(os.path.join(corpus, "TEST")):
        for f in sorted(files):
            if f.endswith(".WAV"):
                stem = os.path.join(d, f[:-4])
                out.append((os.path.relpath(stem, os.path.join(corpus, "TEST")), stem + ".WAV", stem + ".PHN"))
    return sorted(out)[:4]


def build_link_trees(top, corpus):
    """orig/ (real files), files/ (a link per file: .WAV absolute, .PHN relative), folders/ (a linked speaker
    folder), bad/ (files/ plus a cycle and a dangling link)."""
    utts = utterances(corpus)
    orig = os.path.join(top, "orig")
    for rel, wav, phn in utts:
        os.makedirs(os.path.join(orig, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(wav, os.path.join(orig, rel + ".WAV"))
        shutil.copy(phn, os.path.join(orig, rel + ".PHN"))
    files = os.path.join(top, "files")
    for rel, _, _ in utts:
        d = os.path.join(files, os.path.dirname(rel))
        os.makedirs(d, exist_ok=True)
        os.symlink(os.path.join(orig, rel + ".WAV"), os.path.join(files, rel + ".WAV"))
        os.symlink(os.path.relpath(os.path.join(orig, rel + ".PHN"), d), os.path.join(files, rel + ".PHN"))
    folders = os.path.join(top, "folders")
    for rel, _, _ in utts:
        spk = os.path.dirname(rel)  # DR1/SPK
        link = os.path.join(folders, spk)
        if not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.join(orig, spk), link)
    bad = os.path.join(top, "bad")
    shutil.copytree(files, bad, symlinks=True)
    os.symlink("..", os.path.join(bad, os.path.dirname(utts[0][0]), "up"))
    os.symlink("missing.WAV", os.path.join(bad, os.path.dirname(utts[0][0]), "gone.WAV"))
    return utts, [orig, files, folders, bad]


def case_align_decode(top, ck, corpus):
    utts, roots = build_link_trees(os.path.join(top, "ad"), corpus)
    orig, files, folders, bad = roots
    expected = set()
    for rel, _, _ in utts:
        expected |= {rel + ".PHN", rel + ".TextGrid"}
    chmod_tree(os.path.join(top, "ad"), False)
    before = snapshot(*roots)
    n = 0
    for cmd in ("align", "decode"):
        for tree in (files, folders, bad):
            out = os.path.join(top, "out-%s-%s" % (cmd, os.path.basename(tree)))
            args = [cmd, "--checkpoint", ck, "--threads", "1", "--out", out]
            args += ["--timit", tree] if cmd == "align" else [tree]
            p = run(args, what="%s of %s" % (cmd, tree))
            if files_under(out) != expected:
                fail("%s of %s: --out holds %s, expected %s" % (cmd, tree, sorted(files_under(out)), sorted(expected)))
            if tree == bad:
                for needle in ("gone.WAV: dangling link (-> missing.WAV): ignored",
                               "up: link to .., a folder above it (a cycle): not followed"):
                    if sum(needle in l for l in p.stderr.splitlines()) != 1:
                        fail("%s of %s: no one warning line with %r:\n%s" % (cmd, tree, needle, p.stderr))
            same_snapshot(before, snapshot(*roots), "%s of %s" % (cmd, tree))
            n += 1
        # --out inside the input tree: outputs under it, the rest of the tree unchanged
        chmod_tree(files, True)
        inside = os.path.join(files, "out-" + cmd)
        args = [cmd, "--checkpoint", ck, "--threads", "1", "--out", inside]
        run(args + (["--timit", files] if cmd == "align" else [files]), what="%s --out inside the tree" % cmd)
        if files_under(inside) != expected:
            fail("%s --out inside the tree: it holds %s" % (cmd, sorted(files_under(inside))))
        shutil.rmtree(inside)
        chmod_tree(files, False)
        same_snapshot(before, snapshot(*roots), "%s --out inside the tree" % cmd)
        # --out equal to the input tree, or to the folder its links point into: refused before any work
        for out, tree in ((files, files), (folders, folders), (orig, files), (orig, folders)):
            args = [cmd, "--checkpoint", ck, "--threads", "1", "--out", out]
            p = run(args + (["--timit", tree] if cmd == "align" else [tree]), expect=1,
                    what="%s of %s --out %s" % (cmd, tree, out))
            line = error_line(p)
            if "--out " + out not in line or "input" not in line or (out == orig and tree not in line):
                fail("%s of %s --out %s: the line names not both: %s" % (cmd, tree, out, line))
            same_snapshot(before, snapshot(*roots), "%s --out %s" % (cmd, out))
            n += 1
    # a decode that fails before writing anything leaves no --out folder
    junk = os.path.join(top, "junk.wav")
    with open(junk, "wb") as fh:
        fh.write(b"not audio at all")
    out = os.path.join(top, "never", "made")
    run(["decode", "--checkpoint", ck, junk, "--out", out], expect=1, what="decode of a bad file")
    if os.path.exists(os.path.join(top, "never")):
        fail("a failed decode left its --out folder %s" % out)
    print("links: align/decode: %d cases, inputs unchanged byte for byte, outputs under --out" % (n + 1), flush=True)


def safetensors_parts(path):
    """(header JSON text, data bytes) of a safetensors file."""
    with open(path, "rb") as fh:
        data = fh.read()
    n = int.from_bytes(data[:8], "little")
    return data[8:8 + n].decode(), data[8 + n:]


def case_prepare(top, corpus):
    base = os.path.join(top, "prep")
    orig = os.path.join(base, "orig")
    shutil.copytree(corpus, orig)
    tree = os.path.join(base, "tree")
    for part in ("TRAIN", "TEST"):
        for dr in sorted(os.listdir(os.path.join(orig, part))):
            spks = sorted(os.listdir(os.path.join(orig, part, dr)))
            for i, spk in enumerate(spks):
                src, dst = os.path.join(orig, part, dr, spk), os.path.join(tree, part, dr, spk)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if i % 2 == 0:
                    os.symlink(src, dst)  # a linked speaker folder
                else:
                    os.makedirs(dst)
                    for f in sorted(os.listdir(src)):  # linked files, relative
                        os.symlink(os.path.relpath(os.path.join(src, f), dst), os.path.join(dst, f))
    ref = os.path.join(top, "prep-ref")
    run(["prepare", "--timit", orig, "--out", ref, "--no-progress"], what="prepare of the real files")
    chmod_tree(base, False)
    before = snapshot(orig, tree)
    for out in (os.path.join(top, "prep-links"), os.path.join(tree, "work")):
        if out.startswith(tree):
            chmod_tree(tree, True)
            before = snapshot(orig, tree)
        run(["prepare", "--timit", tree, "--out", out, "--no-progress"], what="prepare of the linked tree")
        for f in sorted(os.listdir(ref)):
            if f.endswith(".safetensors"):  # equal, but for the audio paths: the links' own (tree/...)
                a, b = safetensors_parts(os.path.join(ref, f)), safetensors_parts(os.path.join(out, f))
                if a != (b[0].replace(tree, orig), b[1]) or (orig in a[0]) != (tree in b[0]):
                    fail("prepare of the linked tree: %s differs from the real files' prepare" % f)
        if out.startswith(tree):
            shutil.rmtree(out)
            chmod_tree(tree, False)
        same_snapshot(before, snapshot(orig, tree), "prepare --out " + out)
    for out in (tree, os.path.join(tree, "TRAIN")):
        p = run(["prepare", "--timit", tree, "--out", out, "--no-progress"], expect=1, what="prepare --out " + out)
        line = error_line(p)
        if "--out " + out not in line or "--timit " + tree not in line:
            fail("prepare --out %s: the line names not both: %s" % (out, line))
        same_snapshot(before, snapshot(orig, tree), "prepare --out " + out)
    print("links: prepare: linked folders and files read, split files equal the real files' byte for byte; "
          "--out inside the tree works, --out the tree refused", flush=True)


def case_export_report(top, run_dir):
    base = os.path.join(top, "er")
    os.makedirs(base)
    runs = os.path.join(base, "runs")
    shutil.copytree(run_dir, os.path.join(runs, "r"))
    os.symlink(os.path.join(runs, "r"), os.path.join(base, "linked-run"))
    ck = os.path.join(runs, "r", "checkpoints", "best.safetensors")
    os.symlink(ck, os.path.join(base, "ck-link.safetensors"))
    chmod_tree(runs, False)
    roots = [runs, os.path.join(base, "linked-run"), os.path.join(base, "ck-link.safetensors")]
    before = snapshot(runs)
    link = os.path.join(base, "ck-link.safetensors")
    for src, out in ((ck, ck), (link, ck), (ck, link), (link, link)):
        p = run(["export", src, "--out", out], expect=1, what="export %s --out %s" % (src, out))
        line = error_line(p)
        if "--out " + out not in line or src not in line:
            fail("export %s --out %s: the line names not both: %s" % (src, out, line))
        same_snapshot(before, snapshot(runs), "export --out its input")
    out = os.path.join(base, "exported", "model.safetensors")
    os.makedirs(os.path.dirname(out))
    run(["export", link, "--out", out], what="export through a link")
    if files_under(os.path.dirname(out)) != {"model.safetensors"}:
        fail("export: %s holds %s" % (os.path.dirname(out), files_under(os.path.dirname(out))))
    linked = os.path.join(base, "linked-run")
    for out in (os.path.join(linked, "metrics.jsonl"), os.path.join(runs, "r", "config.yaml")):
        p = run(["report", linked, "--out", out, "--threads", "1"], expect=1, what="report --out " + out)
        if "--out " + out not in error_line(p):
            fail("report --out %s: %s" % (out, error_line(p)))
    same_snapshot(before, snapshot(runs), "report --out an input")
    out = os.path.join(base, "html", "r.html")
    os.makedirs(os.path.dirname(out))
    run(["report", linked, "--out", out, "--threads", "1"], what="report of a linked run")
    if files_under(os.path.dirname(out)) != {"r.html"}:
        fail("report: %s holds %s" % (os.path.dirname(out), files_under(os.path.dirname(out))))
    same_snapshot(before, snapshot(runs), "report of a linked run")
    # --out inside the input tree (the run folder): that one file is added, nothing else changes
    chmod_tree(runs, True)
    before = snapshot(runs)
    for args, out in ((["export", link], os.path.join(runs, "r", "model.safetensors")),
                      (["report", linked, "--threads", "1"], os.path.join(runs, "r", "again.html"))):
        run(args + ["--out", out], what="%s --out inside the run folder" % args[0])
        after = snapshot(runs)
        lock = os.path.join(runs, "r", ".timitseg.lock")  # report into a run folder holds its lock: its pid
        after[lock] = before[lock]
        if set(after) - set(before) != {out} or any(after[k] != v for k, v in before.items()):
            fail("%s --out %s: the run folder changed otherwise: %s" % (args[0], out, sorted(set(after) ^ set(before))))
        os.remove(out)
        del after[out]
        same_snapshot(before, after, "%s --out inside the run folder" % args[0])
    print("links: export/report: --out an input (through links) refused; outputs only under --out", flush=True)


def case_compare(top, workdir, cfg_text):
    base = os.path.join(top, "cmp")
    wd = os.path.join(base, "wd")
    os.makedirs(wd)
    for f in sorted(os.listdir(workdir)):  # a WORKDIR of linked files
        os.symlink(os.path.join(workdir, f), os.path.join(wd, f))
    chmod_tree(workdir, False)
    before = snapshot(workdir, wd)
    cfg = os.path.join(base, "c.yaml")
    with open(cfg, "w") as fh:
        fh.write(cfg_text.replace("@WD@", wd).replace("@RUN@", os.path.join(base, "runs")).replace("@EPOCHS@", "1"))
    run(["compare", "--config", cfg], what="compare on a linked WORKDIR")
    for v in ("linear", "semicrf"):
        if not os.path.exists(os.path.join(base, "runs", v, "checkpoints", "best.safetensors")):
            fail("compare: no %s run under train.run_dir" % v)
    same_snapshot(before, snapshot(workdir, wd), "compare")
    os.symlink(wd, os.path.join(base, "wd-alias"))
    for run_dir in (wd, os.path.join(base, "wd-alias")):
        p = run(["compare", "--config", cfg, "--set", "train.run_dir=" + run_dir], expect=1,
                what="compare into its WORKDIR")
        line = error_line(p)
        if "train.run_dir " + run_dir not in line or "data.workdir" not in line:
            fail("compare into its WORKDIR: %s" % line)
    same_snapshot(before, snapshot(workdir, wd), "compare into its WORKDIR")
    chmod_tree(workdir, True)
    print("links: compare: a linked WORKDIR read, runs under train.run_dir, train.run_dir = WORKDIR refused",
          flush=True)


def lock_line(p, run_dir, holder):
    want = "error: %s: another timitseg (pid %d) is writing this run folder" % (run_dir, holder)
    if p.returncode != 1 or not error_line(p).startswith(want):
        fail("expected exit 1 and %r, got %d:\n%s" % (want, p.returncode, p.stderr[-2000:]))


def start(args):
    return subprocess.Popen([B] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def case_train_lock(top, cfg_text):
    base = os.path.join(top, "lock")
    os.makedirs(base)
    run_dir = os.path.join(base, "run")
    cfg = os.path.join(base, "t.yaml")
    with open(cfg, "w") as fh:
        fh.write(cfg_text.replace("@RUN@", run_dir).replace("@EPOCHS@", "40"))
    # epochs of about a second (2 cores): the second process reaches the lock long before the first's
    # epoch-1 line, whatever the load
    slow = ["--set", "model.hidden_dim=128", "--set", "model.num_layers=2"]
    a = start(["train", "--config", cfg, "--set", "train.seed=1"] + slow)
    b = start(["train", "--config", cfg, "--set", "train.seed=2"] + slow)
    # the first to end is the refused one; the other holds the folder
    while a.poll() is None and b.poll() is None:
        time.sleep(0.05)
    loser, holder, seed = (a, b, 2) if a.poll() is not None else (b, a, 1)
    lock_line(finish(loser), run_dir, holder.pid)
    if holder.poll() is not None:
        fail("both fresh runs ended: %s" % finish(holder).stderr[-2000:])
    ck1 = os.path.join(run_dir, "checkpoints", "epoch-1.safetensors")
    t0 = time.time()
    while not os.path.exists(ck1):
        if holder.poll() is not None or time.time() - t0 > 120:
            fail("the holder wrote no epoch-1 checkpoint: %s" % finish(holder).stderr[-2000:])
        time.sleep(0.05)
    r1, r2 = start(["train", "--resume", run_dir]), start(["train", "--resume", run_dir])
    for r in (r1, r2):
        lock_line(finish(r), run_dir, holder.pid)
    # a report into the run folder writes it: refused; reading the running run stays allowed
    lock_line(run(["report", run_dir, "--out", os.path.join(run_dir, "r.html")], expect=1), run_dir, holder.pid)
    run(["report", run_dir, "--out", os.path.join(base, "reader.html"), "--threads", "1"], what="report of a running run")
    best = os.path.join(run_dir, "checkpoints", "best.safetensors")  # replaced atomically, never pruned
    run(["evaluate", "--checkpoint", best, "--threads", "1"], what="evaluate of a running run's checkpoint")
    if holder.poll() is not None:
        fail("the holder ended before the readers were done: %s" % finish(holder).stderr[-2000:])
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # the finished checkpoints only: SIGKILL may leave an atomic write's temporary file (epoch-N.safetensors.XXXX)
    epochs_done = max(int(m.group(1)) for m in (re.fullmatch(r"epoch-(\d+)\.safetensors", f)
                                                 for f in os.listdir(os.path.join(run_dir, "checkpoints"))) if m)
    target = "train.epochs=%d" % (epochs_done + 2)
    r1, r2 = start(["train", "--resume", run_dir, "--set", target]), start(["train", "--resume", run_dir, "--set", target])
    # the loser is the one refused: the winner's run of two epochs can end before the loser is refused, so
    # the order in which they end does not say which is which
    f1, f2 = finish(r1), finish(r2)
    (lost, won, winner) = (f1, f2, r2) if f1.returncode != 0 else (f2, f1, r1)
    lock_line(lost, run_dir, winner.pid)
    if won.returncode != 0:
        fail("the --resume after kill -9 exited %d:\n%s" % (won.returncode, won.stderr[-2000:]))
    with open(os.path.join(run_dir, "run.json")) as fh:
        rj = json.load(fh)
    if rj["config"]["train"]["seed"] != seed:
        fail("run.json holds seed %r, the holder's was %d" % (rj["config"]["train"]["seed"], seed))
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        epochs = [json.loads(l)["epoch"] for l in fh if l.strip()]
    if epochs != list(range(1, epochs_done + 3)):
        fail("metrics.jsonl epochs %s, expected 1..%d once each" % (epochs, epochs_done + 2))
    with open(os.path.join(run_dir, "train.log")) as fh:
        log = fh.read()
    # the refused processes never opened it: one start line each for the holder (unless kill -9 caught it still
    # in the log's buffer) and for the --resume that ran
    if log.count(": training " + run_dir) > 1 or log.count(": resuming " + run_dir) != 1:
        fail("train.log holds other runs' lines:\n" + log[-3000:])
    print("links: train: of two fresh runs and of two --resume one ran, the other exited 1 naming the folder and the "
          "holder's pid, report and evaluate read it meanwhile; after kill -9 of the holder --resume finished epochs 1..%d" % (epochs_done + 2), flush=True)


TINY = ("data:\n  workdir: @WD@\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n  dropout: 0.1\n"
        "crf:\n  max_duration: 8\n  reg: 0.001\n"
        "train:\n  epochs: @EPOCHS@\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 1\n  run_dir: @RUN@\n")


def main():
    global B
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--only", help="run one case: align, prepare, export, compare, train")
    a = ap.parse_args()
    B = os.path.abspath(a.binary)
    top = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(prefix="timitseg_links_")
    if a.keep:
        shutil.rmtree(top, ignore_errors=True)
        os.makedirs(top)
    t0 = time.time()
    try:
        corpus = os.path.join(top, "synth")
        run(["synth", "--out", corpus, "--speakers", "9", "--utterances-per-speaker", "4", "--seed", "7"])
        wd = os.path.join(top, "work")
        run(["prepare", "--timit", corpus, "--out", wd, "--no-progress"])
        cfg = os.path.join(top, "tiny.yaml")
        run_dir = os.path.join(top, "run")
        with open(cfg, "w") as fh:
            fh.write(TINY.replace("@WD@", wd).replace("@RUN@", run_dir).replace("@EPOCHS@", "1"))
        run(["train", "--config", cfg])
        ck = os.path.join(run_dir, "checkpoints", "best.safetensors")
        tiny = TINY.replace("@WD@", wd)
        if a.only in (None, "align"):
            case_align_decode(top, ck, corpus)
        if a.only in (None, "prepare"):
            case_prepare(top, corpus)
        if a.only in (None, "export"):
            case_export_report(top, run_dir)
        if a.only in (None, "compare"):
            case_compare(top, wd, TINY)
        if a.only in (None, "train"):
            case_train_lock(top, tiny)
        print("links: PASS (%.1f s)" % (time.time() - t0), flush=True)
    finally:
        if not a.keep:
            chmod_tree(top, True)
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
