#!/usr/bin/env python3
"""The figures of README's demo (scripts/demo.sh) and the check that README.md
and docs/training.md quote them as recorded.

  scripts/demo_figures.py --demo work/demo               print the figures of a demo run (JSON)
  scripts/demo_figures.py --demo work/demo --check       compare them with tests/reproduce/demo_figures.json
  scripts/demo_figures.py --demo work/demo --record      write tests/reproduce/demo_figures.json (with the
                                                         commit and machine they were measured on)
  scripts/demo_figures.py --docs                         check README.md and docs/training.md against
                                                         tests/reproduce/demo_figures.json (the ctest
                                                         docs.demo_figures)

The figures: dev PER after epoch 1 and after the last epoch, the best dev PER
and its epoch (the checkpoint best.safetensors), and the best checkpoint's
core-test PER, boundary F1 at tolerance 0 / 1 / 2 frames, segment F1 and
duration KL (`evaluate --json`). They depend on the config, the device and the
build (docs/training.md "What results depend on"), not on timing, the thread
count or the x86-64 CPU model, so `--check` says whether a demo run reproduced them; README's
sentences are made by `phrases()` below from the recorded file, and --docs
fails when a doc does not hold them (a figure changed without the docs).
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "tests", "reproduce", "demo_figures.json")
KEYS = ("dev_per_epoch1", "dev_per_last", "epochs", "best_dev_per", "best_epoch", "core_test_per",
        "core_test_boundary_f1_tol0", "core_test_boundary_f1_tol1", "core_test_boundary_f1_tol2",
        "core_test_segment_f1", "core_test_duration_kl")


def figures(demo):
    """The figures of the demo folder (run/metrics.jsonl, core-test.json), percentages as in the docs."""
    lines = [json.loads(l) for l in open(os.path.join(demo, "run", "metrics.jsonl")) if l.strip()]
    dev = [(l["epoch"], l["dev_per"]) for l in lines if l.get("dev_per") is not None]
    if not dev:
        raise SystemExit("demo_figures: %s/run/metrics.jsonl has no dev_per" % demo)
    best_epoch, best = min(dev, key=lambda e: (e[1], e[0]))
    ct = json.load(open(os.path.join(demo, "core-test.json")))
    return {"dev_per_epoch1": round(100 * dict(dev)[1], 2), "dev_per_last": round(100 * dev[-1][1], 2),
            "epochs": dev[-1][0], "best_dev_per": round(100 * best, 2), "best_epoch": best_epoch,
            "core_test_per": round(100 * ct["per"], 2),
            "core_test_boundary_f1_tol0": round(100 * ct["boundary_f1"]["0"], 2),
            "core_test_boundary_f1_tol1": round(100 * ct["boundary_f1"]["1"], 2),
            "core_test_boundary_f1_tol2": round(100 * ct["boundary_f1"]["2"], 2),
            "core_test_segment_f1": round(100 * ct["segment_f1"], 2),
            "core_test_duration_kl": round(ct["duration_kl"], 4)}


def machine():
    """The machine in words: CPU model, cores, GPU (none without nvidia-smi), OS."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = "no GPU"
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            gpu = r.stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    osname = platform.platform()
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "%d cores of %s, %s, %s" % (os.cpu_count() or 0, cpu, gpu, osname)


def commit(binary):
    """The commit the binary was built from, as its --version says (10 hex digits, "-dirty" kept)."""
    r = subprocess.run([binary, "--version"], capture_output=True, text=True)
    m = re.search(r"\(commit ([0-9a-f]+)(-dirty)?", r.stdout)
    if r.returncode != 0 or not m:
        raise SystemExit("demo_figures: %s --version names no commit" % binary)
    return m.group(1)[:10] + (m.group(2) or "")


def phrases(rec):
    """The sentences README.md and docs/training.md must hold, made from the record."""
    f = rec["figures"]
    per = ("dev PER %.2f%% after epoch 1, %.2f%% after epoch %d (best %.2f%% at epoch %d, the checkpoint "
           "`best.safetensors`), core-test PER %.2f%%" % (f["dev_per_epoch1"], f["dev_per_last"], f["epochs"],
                                                           f["best_dev_per"], f["best_epoch"], f["core_test_per"]))
    where = "measured at commit %s on %s (%s)" % (rec["commit"], rec["machine"], rec["date"])
    more = ("boundary F1 %.2f / %.2f / %.2f%% at tolerance 0 / 1 / 2 frames, segment F1 %.2f%%, duration KL %.4f"
            % (f["core_test_boundary_f1_tol0"], f["core_test_boundary_f1_tol1"], f["core_test_boundary_f1_tol2"],
               f["core_test_segment_f1"], f["core_test_duration_kl"]))
    return {"README.md": [per, where], os.path.join("docs", "training.md"): [per, where, more]}


def flat(text):
    return " ".join(text.split())  # line breaks of the markdown do not matter


def check_docs(rec, root=ROOT):
    """The problems (one line each) of README.md and docs/training.md against the record."""
    problems = []
    for doc, want in phrases(rec).items():
        text = flat(open(os.path.join(root, doc), encoding="utf-8").read())
        for p in want:
            if flat(p) not in text:
                problems.append("%s: does not say \"%s\" (tests/reproduce/demo_figures.json; "
                                "scripts/demo_figures.py --docs)" % (doc, p))
    return problems


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", help="the demo's folder (work/demo)")
    ap.add_argument("--check", action="store_true", help="compare the demo's figures with the record")
    ap.add_argument("--record", action="store_true", help="write the record from the demo's figures")
    ap.add_argument("--docs", action="store_true", help="check README.md and docs/training.md against the record")
    ap.add_argument("--date", help="the date of the record (default: today, UTC)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "timitseg"),
                    help="the binary that ran the demo (its --version names the commit)")
    ap.add_argument("--commit", help="the commit to record (default: the one --binary's --version names)")
    a = ap.parse_args(argv)
    if a.docs:
        problems = check_docs(json.load(open(RECORD)))
        for p in problems:
            print("error: " + p)
        if not problems:
            print("demo_figures: README.md and docs/training.md quote tests/reproduce/demo_figures.json")
        return 1 if problems else 0
    if not a.demo:
        ap.error("give --demo DIR or --docs")
    got = figures(a.demo)
    if a.record:
        import datetime
        date = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        rec = {"commit": a.commit or commit(a.binary), "machine": machine(), "date": date, "figures": got}
        with open(RECORD, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        print("demo_figures: wrote %s" % RECORD)
        return 0
    if a.check:
        rec = json.load(open(RECORD))
        if got["epochs"] != rec["figures"]["epochs"]:  # e.g. the doc test's TIMITSEG_DOCTEST_MAX_EPOCHS=1
            same = got["dev_per_epoch1"] == rec["figures"]["dev_per_epoch1"]
            print("demo: %d epoch(s), the recorded run %d: only the dev PER after epoch 1 compares: %.2f%% (%s)"
                  % (got["epochs"], rec["figures"]["epochs"], got["dev_per_epoch1"],
                     "as recorded" if same else "recorded %.2f%%" % rec["figures"]["dev_per_epoch1"]))
            return 0
        diff = ["%s %s (recorded %s)" % (k, got[k], rec["figures"].get(k)) for k in KEYS if got[k] != rec["figures"].get(k)]
        if diff:
            print("demo: the figures differ from tests/reproduce/demo_figures.json (commit %s, %s): %s; they depend "
                  "on the config, the device and the build (docs/training.md)" % (rec["commit"], rec["machine"],
                                                                                     "; ".join(diff)))
        else:
            print("demo: the figures equal README's (tests/reproduce/demo_figures.json, commit %s)" % rec["commit"])
        return 0
    print(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
