#!/usr/bin/env python3
"""The demo reproduced bitwise (issue 22): a tiny fixed CPU recipe, trained and
evaluated, against committed checkpoints (sha256 of the content) and metrics.

  reproduce_demo.py --binary BUILD/bin/timitseg --scratch DIR [--expected FILE] [--update] [--native]

Runs `timitseg synth` (8 speakers x 4 utterances), `prepare`, then for a linear
CRF (crf.max_duration=1) and a semi-CRF (K=8, onset features) `train` of
configs/synth.yaml cut to 2 epochs of a 16-unit, 1-layer encoder on the CPU
(train.device=cpu, crf.backend=cpu), `evaluate --json` and `decode`
(--device cpu): the CPU also on a machine with a GPU. Two checks:

1. threads: the semi-CRF trained with train.threads=1 and =2 gives bitwise
   identical checkpoints but for the config they record (the CPU encoder's fixed task partition,
   docs/training.md). This holds on every machine.
2. libm: the semi-CRF trained again with glibc's FMA variants of exp/log/pow/...
   turned off (GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-AVX2: the variants glibc
   picks at run time on a CPU without fma and avx2) gives bitwise identical
   checkpoints: what a CPU without them would compute. Runs where the CPU has
   both flags (elsewhere the run above already used the other variants).
3. committed: the checkpoints' sha256 without the config they record (a new
   config key changes that record, not a result), metrics.jsonl without its timing fields
   (epoch_seconds, frames_per_sec, utterances_per_sec, seconds, wall_clock),
   the evaluate --json output and the decoded .PHN files equal expected.json.
   They do not depend on the CPU's vendor, model or caches: Eigen's
   matrix-product blocking, which follows the cache sizes it reads from the
   CPU, is pinned (model/cpu/network.h, pin_product_blocking), and check 2
   covers libm's run-time choice. What they still depend on: the build (the
   default one; a TIMITSEG_NATIVE build, -march=native, skips this check with
   a message; another compiler or Eigen than Debian 12's, as CI builds, may
   round differently) and glibc's version, which expected.json records with the
   architecture as its machine: where they differ this check is skipped with
   a message (exit 77, ctest's SKIP_RETURN_CODE); checks 1 and 2 still run.

A change that is meant to change results regenerates the file with --update
(and says why in its commit); a refactoring must leave it as it is.
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
TIMING = {"epoch_seconds", "frames_per_sec", "utterances_per_sec", "seconds", "wall_clock"}
SKIP = 77


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def content_digest(path):
    """sha256 of a safetensors checkpoint without its config metadata (which
    names train.threads and train.run_dir): tensors, their header and the rest
    of the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    header.get("__metadata__", {}).pop("config", None)
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode() + blob[8 + n:]).hexdigest()


def machine():
    """What the committed bits depend on beside the build: the architecture and glibc's version
    (reproduce_demo's docstring, check 3)."""
    return {"arch": platform.machine(),
            "glibc": os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else ""}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def run(cmd, cwd, log, env=None):
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        r = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        sys.exit(f"reproduce_demo: `{' '.join(cmd)}` failed with exit {r.returncode} (log: {log})")


def train(binary, cwd, log, name, K, threads, env=None):
    run([binary, "train", "--config", os.path.join(SOURCE, "configs", "synth.yaml"), "--set", "data.workdir=work",
         "--set", f"train.run_dir=runs/{name}", "--set", "train.epochs=2", "--set", "model.hidden_dim=16",
         "--set", "model.num_layers=1", "--set", f"crf.max_duration={K}", "--set", f"train.threads={threads}",
         "--set", "train.batch_size=4",
         # the CPU even where a GPU is present (the shipped config says auto)
         "--set", "train.device=cpu", "--set", "crf.backend=cpu"], cwd, log, env)


def results(binary, cwd, log, name):
    """Trains nothing: evaluates and decodes runs/NAME and returns its fingerprint."""
    run_dir = os.path.join(cwd, "runs", name)
    best = os.path.join("runs", name, "checkpoints", "best.safetensors")  # relative: evaluate --json names it
    run([binary, "evaluate", "--checkpoint", best, "--split", "dev", "--json", f"eval_{name}.json",
         "--threads", "1", "--device", "cpu"], cwd, log)
    run([binary, "decode", "--checkpoint", best, "synth/TEST", "--out", f"decoded_{name}", "--threads", "1",
         "--device", "cpu"], cwd, log)
    out = {"checkpoints": {}, "metrics": [], "evaluate": None, "decoded_phn": {}}
    for f in sorted(os.listdir(os.path.join(run_dir, "checkpoints"))):
        out["checkpoints"][f] = content_digest(os.path.join(run_dir, "checkpoints", f))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            for k in TIMING:
                d.pop(k, None)
            out["metrics"].append(d)
    with open(os.path.join(cwd, f"eval_{name}.json")) as f:
        out["evaluate"] = json.load(f)
    dec = os.path.join(cwd, f"decoded_{name}")
    for dp, dn, fn in os.walk(dec):
        dn.sort()
        for f in sorted(fn):
            if f.endswith(".PHN"):
                out["decoded_phn"][os.path.relpath(os.path.join(dp, f), dec)] = sha256(os.path.join(dp, f))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--scratch", required=True, help="work folder (emptied first)")
    ap.add_argument("--expected", default=os.path.join(HERE, "expected.json"))
    ap.add_argument("--update", action="store_true", help="write --expected from this machine's results")
    ap.add_argument("--native", action="store_true", help="the binary was built with -march=native (skip check 2)")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    shutil.rmtree(a.scratch, ignore_errors=True)
    os.makedirs(a.scratch)
    cwd = os.path.abspath(a.scratch)
    log = os.path.join(cwd, "log.txt")
    env_note = "TIMITSEG_DOCTEST_MAX_EPOCHS"
    if env_note in os.environ:
        del os.environ[env_note]  # the recipe's 2 epochs, whatever the docs test sets
    run([binary, "synth", "--out", "synth", "--speakers", "8", "--utterances-per-speaker", "4", "--seed", "3"], cwd, log)
    run([binary, "prepare", "--timit", "synth", "--out", "work"], cwd, log)
    train(binary, cwd, log, "linear", 1, 1)
    train(binary, cwd, log, "semi", 8, 1)
    train(binary, cwd, log, "semi-2threads", 8, 2)
    has_fma = {"fma", "avx2"} <= cpu_flags()
    if has_fma:
        env = dict(os.environ)
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), "glibc.cpu.hwcaps=-FMA,-AVX2"]))
        train(binary, cwd, log, "semi-libm-no-fma", 8, 1, env)
    got = {"machine": machine(), "linear": results(binary, cwd, log, "linear"),
           "semi": results(binary, cwd, log, "semi")}

    # 1. thread count: bitwise the same checkpoints on any machine
    for f, h in got["semi"]["checkpoints"].items():
        h1 = content_digest(os.path.join(cwd, "runs", "semi", "checkpoints", f))
        h2 = content_digest(os.path.join(cwd, "runs", "semi-2threads", "checkpoints", f))
        if h2 != h1:
            sys.exit(f"reproduce_demo: checkpoints/{f} differs between train.threads=1 and 2 "
                     f"(tensors and metadata but the config: {h1} vs {h2}); results must not depend on the thread count")
    print("reproduce_demo: train.threads=1 and 2 give bitwise identical checkpoints")

    # 2. libm's variants: bitwise the same checkpoints with glibc's FMA variants off
    if has_fma:
        for f, h1 in got["semi"]["checkpoints"].items():
            h2 = content_digest(os.path.join(cwd, "runs", "semi-libm-no-fma", "checkpoints", f))
            if h2 != h1:
                sys.exit(f"reproduce_demo: checkpoints/{f} differs between glibc's FMA variants of exp/log/... and "
                         f"the others (GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-AVX2): {h1} vs {h2}; results must not "
                         "depend on the CPU's fma/avx2 flags")
        print("reproduce_demo: glibc's libm with and without its FMA variants gives bitwise identical checkpoints")
    else:
        print("reproduce_demo: this CPU lacks fma or avx2: glibc's libm runs its other variants already (check 2 not run)")

    if a.update:
        with open(a.expected + ".tmp", "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(a.expected + ".tmp", a.expected)
        print(f"reproduce_demo: wrote {a.expected}")
        return 0
    with open(a.expected) as f:
        want = json.load(f)
    if a.native:
        print("reproduce_demo: skipped: the committed results: a TIMITSEG_NATIVE build (-march=native) may round "
              "differently (the checks above passed)")
        return SKIP
    if want["machine"] != got["machine"]:
        print(f"reproduce_demo: skipped: the committed results: made on {want['machine']}, this machine is "
              f"{got['machine']} (another glibc may round differently; the checks above passed); regenerate with --update "
              "on such a machine")
        return SKIP
    bad = []
    for name in ("linear", "semi"):
        for part in ("checkpoints", "metrics", "evaluate", "decoded_phn"):
            if got[name][part] != want[name][part]:
                bad.append(f"{name}.{part}")
                if part == "metrics":
                    for i, (g, w) in enumerate(zip(got[name][part], want[name][part])):
                        diff = {k: (w.get(k), g.get(k)) for k in set(g) | set(w) if g.get(k) != w.get(k)}
                        if diff:
                            print(f"  {name} epoch {i + 1}: (expected, got) {diff}")
                elif part != "evaluate":
                    for k in sorted(set(got[name][part]) | set(want[name][part])):
                        if got[name][part].get(k) != want[name][part].get(k):
                            print(f"  {name}.{part}[{k}]: expected {want[name][part].get(k)}, got "
                                  f"{got[name][part].get(k)}")
    if bad:
        sys.exit(f"reproduce_demo: results differ from {a.expected}: {', '.join(bad)} (log and files: {cwd}); "
                 "a refactoring must reproduce them bitwise, a change meant to alter results runs --update")
    print(f"reproduce_demo: checkpoints, metrics, evaluate --json and decoded .PHN equal {a.expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
