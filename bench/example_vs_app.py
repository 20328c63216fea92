#!/usr/bin/env python3
"""The PyTorch example against the app on the same prepared WORKDIR and
config: `timitseg train --config CONFIG` and examples/train_bilstm.py (whose
defaults are configs/synth.yaml's values) for each seed, all runs at once
(one GPU holds them all at the synth sizes), then a table of the dev PER
(best over the epochs, and the last epoch's) per seed, the mean and the
spread (sample standard deviation, min-max) of each, and the difference of
the means. Exits 1 when the best-epoch means differ by more than --limit
points (the target: the example within 1 point of the app, 3 seeds).

    PYTHONPATH=python TIMITSEG_LIBRARY=build/lib/libtimitseg.so \\
        python3 bench/example_vs_app.py --workdir work/cmp_prep --timitseg build/bin/timitseg --out work/cmp

Each run's log is OUT/app-SEED.log / OUT/example-SEED.log; the app's
per-epoch values come from its RUN_DIR/metrics.jsonl, the example's from its
--metrics file (the same fields).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def read_per(path):
    """dev PER (%) per epoch of a metrics.jsonl."""
    with open(path) as f:
        return [100.0 * json.loads(line)["dev_per"] for line in f if line.strip()]


def spread(v):
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return "%.2f ± %.2f (%.2f-%.2f)" % (statistics.mean(v), sd, min(v), max(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True, help="a prepared WORKDIR (timitseg prepare)")
    ap.add_argument("--timitseg", default="build/bin/timitseg", help="the timitseg binary")
    ap.add_argument("--config", default="configs/synth.yaml", help="the app's config (the example's defaults)")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    ap.add_argument("--epochs", type=int, default=30, help="train.epochs for both")
    ap.add_argument("--out", required=True, help="a new folder for the runs and logs")
    ap.add_argument("--example", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "examples", "train_bilstm.py"))
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per run (train.threads, torch threads)")
    ap.add_argument("--limit", type=float, default=1.0, help="the difference of means (points) that fails the run")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit("--out %s: the folder exists and is not empty (the runs need fresh folders)" % a.out)
    os.makedirs(a.out, exist_ok=True)
    procs = []
    for s in seeds:
        app = [a.timitseg, "train", "--config", a.config, "--set", "data.workdir=" + a.workdir,
               "--set", "train.run_dir=" + os.path.join(a.out, "app-%d" % s), "--set", "train.seed=%d" % s,
               "--set", "train.epochs=%d" % a.epochs, "--set", "train.threads=%d" % a.threads]
        ex = [sys.executable, a.example, "--workdir", a.workdir, "--epochs", str(a.epochs), "--seed", str(s),
              "--threads", str(a.threads), "--metrics", os.path.join(a.out, "example-%d.jsonl" % s)]
        for name, cmd in (("app-%d" % s, app), ("example-%d" % s, ex)):
            log = open(os.path.join(a.out, name + ".log"), "w")
            procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log, time.time()))
    failed, running = [], list(procs)
    while running:  # each run reported when it ends (its own wall time)
        for item in list(running):
            name, p, log, t0 = item
            rc = p.poll()
            if rc is None:
                continue
            running.remove(item)
            log.close()
            print("%s: exit %d, %.0f s" % (name, rc, time.time() - t0), flush=True)
            if rc != 0:
                failed.append(name)
        time.sleep(0.5)
    if failed:
        for name in failed:
            with open(os.path.join(a.out, name + ".log")) as f:
                print("---- %s (last lines)\n%s" % (name, "".join(f.readlines()[-15:])))
        sys.exit("runs failed: %s" % ", ".join(failed))
    rows = []
    for s in seeds:
        app = read_per(os.path.join(a.out, "app-%d" % s, "metrics.jsonl"))
        ex = read_per(os.path.join(a.out, "example-%d.jsonl" % s))
        rows.append((s, min(app), app[-1], min(ex), ex[-1]))
    print("\ndev PER (%%), %d epochs, WORKDIR %s, config %s" % (a.epochs, a.workdir, a.config))
    print("| seed | app best | app last | example best | example last |")
    print("|---|---|---|---|---|")
    for s, ab, al, eb, el in rows:
        print("| %d | %.2f | %.2f | %.2f | %.2f |" % (s, ab, al, eb, el))
    cols = list(zip(*rows))[1:]
    print("| mean ± sd (min-max) | %s |" % " | ".join(spread(list(c)) for c in cols))
    diff_best = statistics.mean(cols[2]) - statistics.mean(cols[0])
    diff_last = statistics.mean(cols[3]) - statistics.mean(cols[1])
    print("\nexample - app: best %+.2f points, last %+.2f points (limit %.1f)" % (diff_best, diff_last, a.limit))
    return 0 if abs(diff_best) <= a.limit else 1


if __name__ == "__main__":
    sys.exit(main())
