#!/usr/bin/env python3
"""Training on several processes (issue 24, docs/multigpu.md):
`mpirun -np N timitseg train --device cpu` against one process.

One ctest per case (tests/dist/CMakeLists.txt): `dist_runs.py CASE --binary
timitseg --scratch DIR`. Each case makes its own small synthetic corpus
(`timitseg synth`: 8 speakers x 4 utterances, 20 training utterances) and
trains a small recipe-shaped model (configs/synth.yaml with dropout 0.3, a
16-unit 2-layer encoder, K = 8, --check-numerics) with train.threads = 1.

Cases:
  match_one   2 ranks against 1 process at the same global batch: the loss of
              every step (debug.step_log, 17 digits) within 1e-6 relative over
              20 steps, every parameter tensor of the last checkpoint within
              1e-5 (relative, norm-wise); also frame normalization, frame CE +
              crf.reg, the log-normal duration model, an odd batch (shares of 3
              and 2) and a last batch of one utterance (an empty share)
  bitwise     two 2-rank runs: identical checkpoint tensors
  resume      2 ranks for 1 epoch, then --resume on 1 and on 3 ranks: both
              within the tolerances of an uninterrupted 2-rank run
  nan         a NaN planted on rank 1 only: every rank stops within 10 s, one
              report naming rank 1, the dump nonfinite-step-S-rank1
  throw, kill, hang
              rank 1 throws / SIGKILLs itself / stops answering (train.dist_timeout
              = 3) at step 3: the job ends within 10 s (hang: 15 s), non-zero
  stall       every rank stops answering outside a collective: the watchdog
              (2 x train.dist_timeout = 4 s) ends the job within 15 s
  interrupt   SIGINT to mpirun after epoch 1: every rank stops, the resume line
              is printed once, the resumed run equals an uninterrupted one (6
              epochs; on GPU ranks 40, within 1e-5 / 1e-4)
  refusals    a binary acting as a build without MPI refuses 2 ranks in one
              line on rank 0 and nothing on rank 1; `evaluate` under mpirun is refused
  gpu_match_one  (needs a GPU) 2 GPU ranks against 1 GPU process, loss within
              1e-5, parameters within 1e-4; two --deterministic 2-rank runs bitwise.
              With one GPU both ranks share it (host-staged all-reduce)
  gpu_nccl_two   the same on 2 GPUs through NCCL (skipped: needs 2 GPUs)
Exit 77 (skipped) when mpirun is not installed.
"""
import argparse
import array
import hashlib
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def fail(msg):
    print(f"dist_runs: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


DEVICE = ["--set", "train.device=cpu", "--set", "crf.backend=cpu"]  # gpu_* cases: cuda (main)


def base_args(binary, run_dir, extra=()):
    return [binary, "train", "--config", os.path.join(SOURCE, "configs", "synth.yaml"), "--set", "data.workdir=work",
            "--set", f"train.run_dir={run_dir}", "--set", "model.hidden_dim=16", "--set", "model.num_layers=2",
            "--set", "crf.max_duration=8", "--set", "train.threads=1", *DEVICE,
            "--set", "train.batch_size=5", "--set", "debug.step_log=true",
            "--set", "train.lr_schedule=constant", "--check-numerics", *extra]


def mpi(n, args):
    return ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", *args]


def run(cmd, cwd, expect=0, timeout=300):
    t0 = time.time()
    r = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if expect is not None and r.returncode != expect:
        fail(f"`{' '.join(cmd)}` exited {r.returncode} (expected {expect}); stderr:\n{r.stderr[-3000:]}")
    return r, time.time() - t0


def tensors(path):
    """name -> array('f') of a safetensors file (F32 tensors only)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = array.array("f", blob[8 + n + a:8 + n + b])
    return out


def steps(run_dir):
    with open(os.path.join(run_dir, "steps.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def last_checkpoint(run_dir):
    d = os.path.join(run_dir, "checkpoints")
    n = max(int(x[6:-12]) for x in os.listdir(d) if x.startswith("epoch-"))
    return os.path.join(d, f"epoch-{n}.safetensors")


def tensor_digest(run_dir):
    """SHA-256 of the last checkpoint's tensors (names and bytes; not the config it records)."""
    t = tensors(last_checkpoint(run_dir))
    h = hashlib.sha256()
    for k in sorted(t):
        h.update(k.encode() + t[k].tobytes())
    return h.hexdigest()


def compare_runs(a, b, what, loss_tol=1e-6, param_tol=1e-5, min_steps=1):
    sa, sb = steps(a), steps(b)
    if len(sa) != len(sb) or len(sa) < min_steps:
        fail(f"{what}: {len(sa)} against {len(sb)} steps (want at least {min_steps})")
    worst = 0.0
    for x, y in zip(sa, sb):
        if x["step"] != y["step"]:
            fail(f"{what}: step numbers differ: {x['step']} / {y['step']}")
        rel = abs(x["loss"] - y["loss"]) / max(1e-30, abs(y["loss"]))
        worst = max(worst, rel)
        if rel > loss_tol:
            fail(f"{what}: step {x['step']}: loss {x['loss']!r} against {y['loss']!r} (relative {rel:.3g} > {loss_tol})")
    ta, tb = tensors(last_checkpoint(a)), tensors(last_checkpoint(b))
    if set(ta) != set(tb):
        fail(f"{what}: the checkpoints hold different tensors")
    worst_p = 0.0
    for name in ta:
        # every tensor, crf.projection.bias included: without frame CE a step holds it
        # at its value (its gradient is rounding noise, docs/crf.md "Parameters that
        # are not trained"), with frame CE it has a real gradient
        d = math.sqrt(sum((float(p) - float(q)) ** 2 for p, q in zip(ta[name], tb[name])))
        r = math.sqrt(sum(float(q) ** 2 for q in tb[name]))
        rel = d / max(1e-30, r)
        worst_p = max(worst_p, rel)
        if rel > param_tol:
            fail(f"{what}: tensor {name}: relative difference {rel:.3g} > {param_tol}")
    print(f"  {what}: {len(sa)} steps, worst loss difference {worst:.2e} (relative), worst tensor {worst_p:.2e}")


def make_corpus(binary, scratch):
    if os.path.isdir(scratch):
        shutil.rmtree(scratch)
    os.makedirs(scratch)
    run([binary, "synth", "--out", "synth", "--speakers", "8", "--utterances-per-speaker", "4", "--seed", "3"], scratch)
    run([binary, "prepare", "--timit", "synth", "--out", "work"], scratch)


def gpu_count():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    r = subprocess.run([exe, "-L"], capture_output=True, text=True)
    return sum(1 for l in r.stdout.splitlines() if l.startswith("GPU ")) if r.returncode == 0 else 0


def case_gpu_match_one(binary, cwd):
    """2 GPU ranks against 1 GPU process (1e-5 / 1e-4), and two --deterministic 2-rank runs bitwise.
    On a machine with one GPU both ranks share it: their all-reduce goes through the host
    (TIMITSEG_GPU_COLLECTIVES=mpi), NCCL refusing two ranks on one GPU; with 2 GPUs it is NCCL."""
    n = gpu_count()
    shared = n < 2
    if shared:
        ENV["TIMITSEG_GPU_COLLECTIVES"] = "mpi"
    what = "2 ranks sharing one GPU (host-staged all-reduce)" if shared else "2 GPUs (NCCL)"
    # the fused LSTM kernel needs 64, 128 or 256 units per direction: 2 x 64
    extra = ["--set", "train.epochs=5", "--set", "model.hidden_dim=128", "--set", "train.rnn_algo=fused"]
    for algo in ("fused", "standard"):
        e = extra + ["--set", f"train.rnn_algo={algo}"]
        run(base_args(binary, f"runs/one_{algo}", e), cwd)
        run(mpi(2, base_args(binary, f"runs/two_{algo}", e)), cwd)
        compare_runs(f"{cwd}/runs/two_{algo}", f"{cwd}/runs/one_{algo}", f"{what}, {algo}", loss_tol=1e-5,
                     param_tol=1e-4, min_steps=20)
    sums = []
    for name in ("det_a", "det_b"):
        run(mpi(2, base_args(binary, f"runs/{name}", extra + ["--deterministic"])), cwd)
        sums.append(tensor_digest(f"{cwd}/runs/{name}"))
    if sums[0] != sums[1]:
        fail(f"two --deterministic 2-rank GPU runs differ: {sums}")
    print(f"  {what}, --deterministic twice: identical tensors ({sums[0][:16]})")


def case_gpu_nccl_two(binary, cwd):
    """The same on 2 GPUs through NCCL: needs a machine with 2 GPUs."""
    n = gpu_count()
    if n < 2:
        print(f"dist_runs: skipped: needs 2 GPUs (found {n})")
        sys.exit(77)
    case_gpu_match_one(binary, cwd)


def case_match_one(binary, cwd):
    variants = [("recipe", ["--set", "train.epochs=5"], 20),
                ("frame normalization", ["--set", "train.epochs=2", "--set", "crf.loss_normalization=frame"], 8),
                ("frame CE and crf.reg", ["--set", "train.epochs=2", "--set", "crf.frame_ce_weight=0.1",
                                          "--set", "crf.reg=0.01"], 8),
                ("log-normal durations", ["--set", "train.epochs=2", "--set", "crf.duration_model=lognormal"], 8),
                ("a last batch of one utterance (an empty share)",
                 ["--set", "train.epochs=2", "--set", "train.batch_size=19"], 4)]
    for i, (what, extra, n) in enumerate(variants):
        run(base_args(binary, f"runs/one{i}", extra), cwd)
        run(mpi(2, base_args(binary, f"runs/two{i}", extra)), cwd)
        compare_runs(f"{cwd}/runs/two{i}", f"{cwd}/runs/one{i}", what, min_steps=n)
    with open(f"{cwd}/runs/two0/metrics.jsonl") as f:
        line = json.loads(f.readline())
    if line.get("world_size") != 2:
        fail(f"metrics.jsonl of the 2-rank run has world_size {line.get('world_size')}")


def case_bitwise(binary, cwd):
    sums = []
    for name in ("a", "b"):
        run(mpi(2, base_args(binary, f"runs/{name}", ["--set", "train.epochs=2"])), cwd)
        sums.append(tensor_digest(f"{cwd}/runs/{name}"))
    if sums[0] != sums[1]:
        fail(f"two 2-rank runs differ: {sums}")
    print(f"  two 2-rank runs: identical tensors ({sums[0][:16]})")


def case_resume(binary, cwd):
    run(mpi(2, base_args(binary, "runs/full", ["--set", "train.epochs=3"])), cwd)
    run(mpi(2, base_args(binary, "runs/part", ["--set", "train.epochs=1"])), cwd)
    gpu = "train.device=cuda" in DEVICE
    for n in ((1,) if gpu else (1, 3)):  # one GPU per rank: 3 GPU ranks need 3 GPUs
        shutil.copytree(f"{cwd}/runs/part", f"{cwd}/runs/resumed{n}")
        cmd = [binary, "train", "--resume", f"runs/resumed{n}", "--set", "train.epochs=3"]
        run(mpi(n, cmd) if n > 1 else cmd, cwd)
        compare_runs(f"{cwd}/runs/resumed{n}", f"{cwd}/runs/full", f"2 ranks, then resumed on {n}", min_steps=12)
    if gpu:  # the 2-GPU run resumed on 3 CPU ranks (other masks on the CPU: it must run, not match)
        shutil.copytree(f"{cwd}/runs/part", f"{cwd}/runs/resumed3")
        run(mpi(3, [binary, "train", "--resume", "runs/resumed3", "--set", "train.epochs=3", "--set", "train.device=cpu",
                    "--set", "crf.backend=cpu", "--set", "train.threads=1"]), cwd)
        print(f"  2 GPU ranks, then resumed on 3 CPU ranks: {len(steps(cwd + '/runs/resumed3'))} steps")
    with open(f"{cwd}/runs/resumed3/run.json") as f:
        rj = json.load(f)
    if [e.get("world_size") for e in [rj] + rj.get("resumes", [])] != [2, 3]:
        fail(f"run.json's world_size entries: {rj.get('world_size')}, {[e.get('world_size') for e in rj.get('resumes', [])]}")


def error_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("error:")]


def case_nan(binary, cwd):
    args = base_args(binary, "runs/nan", ["--set", "train.epochs=2", "--inject-fault",
                                          "layer=lstm.0.fwd,pass=forward,step=3,value=nan", "--set", "debug.fault_rank=1"])
    r, secs = run(mpi(2, args), cwd, expect=None, timeout=60)
    errs = error_lines(r.stderr)
    if r.returncode == 0 or secs > 10:
        fail(f"exit {r.returncode} after {secs:.1f} s (want non-zero within 10 s)")
    if len(errs) != 1 or "rank 1 of 2" not in errs[0] or "step 3" not in errs[0] or "lstm.0.fwd" not in errs[0]:
        fail(f"want one report naming rank 1, step 3 and lstm.0.fwd; stderr:\n{r.stderr[-3000:]}")
    if not os.path.isdir(f"{cwd}/runs/nan/nonfinite-step-3-rank1"):
        fail(f"no dump runs/nan/nonfinite-step-3-rank1: {os.listdir(cwd + '/runs/nan')}")
    with open(f"{cwd}/runs/nan/train.log") as f:
        log = f.read()
    if "rank 1 of 2 failed" not in log:
        fail(f"rank 0's train.log does not record rank 1's failure:\n{log[-1500:]}")
    # replay-step re-runs rank 1's share in one process, with the run's masks and global normalization:
    # the same tensor with the same finite range as in training
    device = "cuda" if "train.device=cuda" in DEVICE else "cpu"
    rp, _ = run([binary, "replay-step", "runs/nan/nonfinite-step-3-rank1", "--device", device], cwd, expect=1)
    trained = re.search(r"finite min (\S+), max (\S+);", errs[0])
    replayed = re.search(r"finite values in \[(\S+), (\S+)\]", rp.stderr)
    if not trained or not replayed or trained.groups() != replayed.groups():
        fail(f"replay-step of the rank's dump does not reproduce the range: {errs[0][:300]} / {rp.stderr[-400:]}")
    print(f"  NaN on rank 1: exit {r.returncode} after {secs:.1f} s; {errs[0][:160]}")
    print(f"  replay-step of nonfinite-step-3-rank1: the same range [{replayed.group(1)}, {replayed.group(2)}]")


def case_exit(binary, cwd, action):
    extra = ["--set", "train.epochs=3", "--set", f"debug.inject_exit=1:3:{action}"]
    limit = 10
    if action == "hang":
        extra += ["--set", "train.dist_timeout=3"]
        limit = 15
    if action == "stall":  # every rank stuck outside a collective: only the watchdog (2 x dist_timeout) ends it
        extra = ["--set", "train.epochs=3", "--set", "debug.inject_exit=all:3:hang", "--set", "train.dist_timeout=2"]
        limit = 15
    r, secs = run(mpi(2, base_args(binary, f"runs/{action}", extra)), cwd, expect=None, timeout=120)
    if r.returncode == 0 or secs > limit:
        fail(f"{action}: exit {r.returncode} after {secs:.1f} s (want non-zero within {limit} s)")
    errs = error_lines(r.stderr)
    want = {"throw": "rank 1 of 2", "kill": None, "hang": "no progress in", "stall": "watchdog"}[action]
    if want and not any(want in e for e in errs):
        fail(f"{action}: no error line with '{want}'; stderr:\n{r.stderr[-3000:]}")
    if action in ("throw", "hang") and len(errs) != 1:
        fail(f"throw: {len(errs)} error lines (want one):\n{r.stderr[-3000:]}")
    left = subprocess.run(["pgrep", "-f", f"runs/{action} "], capture_output=True, text=True).stdout.split()
    if left:
        fail(f"{action}: processes left: {left}")
    print(f"  {action} on rank 1: exit {r.returncode} after {secs:.1f} s; {(errs or ['(the launcher reported it)'])[0][:160]}")


def case_interrupt(binary, cwd):
    # constant learning rate: the trajectory does not depend on train.epochs, so a long
    # run interrupted early and resumed with train.epochs = F must equal an F-epoch run.
    # GPU ranks run an epoch of this corpus in milliseconds: F = 40 there, so that the
    # signal (sent once epoch 1 is logged) lands before epoch F ends; their tolerances
    # are the GPU ones.
    gpu = "train.device=cuda" in DEVICE
    full, long = (40, 400) if gpu else (6, 60)
    tol = dict(loss_tol=1e-5, param_tol=1e-4) if gpu else {}
    extra = ["--set", "model.hidden_dim=256"]
    run(mpi(2, base_args(binary, "runs/full", extra + ["--set", f"train.epochs={full}"])), cwd)
    p = subprocess.Popen(mpi(2, base_args(binary, "runs/int", extra + ["--set", f"train.epochs={long}"])), cwd=cwd,
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = f"{cwd}/runs/int/metrics.jsonl"
    t0 = time.time()
    while time.time() - t0 < 120:
        if os.path.exists(metrics) and open(metrics).read().count("\n") >= 1:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    # Open MPI's mpirun sets its exit status to 1 when it receives SIGINT, before the
    # ranks stop (docs/reliability.md); srun and one process give 130
    if p.returncode != 1:
        fail(f"interrupted run under mpirun exited {p.returncode}, want 1 (mpirun's own status); stderr:\n{err[-2000:]}")
    # mpirun's own libevent race on abnormal termination (Open MPI issues 2004, 5520;
    # docs/reliability.md): "[warn] Epoll MOD(1) on fd N failed. ... Bad file descriptor",
    # printed by mpirun now and then; any other [warn] line is ours and fails the test
    libevent = re.compile(r"^\[warn\] Epoll (ADD|MOD|DEL)\(\d+\) on fd \d+ failed\..*Bad file descriptor$")
    noise = [l for l in err.splitlines() if ("Epoll" in l or l.startswith("[warn]")) and not libevent.match(l)]
    if noise:
        fail(f"lines other than the log and the error line: {noise}")
    mpirun_warnings = [l for l in err.splitlines() if libevent.match(l)]
    if mpirun_warnings:
        print(f"  note: mpirun printed {len(mpirun_warnings)} libevent line(s) of its own (Open MPI's teardown race)")
    lines = [l for l in err.splitlines() if "resume with:" in l]
    if len(lines) != 1 or "mpirun -np 2 timitseg train --resume runs/int" not in lines[0]:
        fail(f"want the resume line once; exit {p.returncode}, stderr:\n{err[-3000:]}")
    done = int(os.path.basename(last_checkpoint(f"{cwd}/runs/int"))[6:-12])
    if done >= full:
        fail(f"the interrupt came after epoch {done} (want before {full}: the machine is too slow for this test's timing)")
    run(mpi(2, [binary, "train", "--resume", "runs/int", "--set", f"train.epochs={full}"]), cwd)
    compare_runs(f"{cwd}/runs/int", f"{cwd}/runs/full", f"interrupted after epoch {done} and resumed",
                 min_steps=4 * full, **tol)
    print(f"  SIGINT: exit {p.returncode}; {lines[0][:160]}")


def case_refusals(binary, cwd):
    env = dict(ENV, TIMITSEG_ACT_WITHOUT_MPI="1", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="0")
    args = base_args(binary, "runs/nompi", ["--set", "train.epochs=1"])
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    errs = error_lines(r.stderr)
    if r.returncode != 1 or len(errs) != 1 or "built without MPI" not in errs[0]:
        fail(f"rank 0 without MPI: exit {r.returncode}, stderr:\n{r.stderr[-2000:]}")
    env["OMPI_COMM_WORLD_RANK"] = "1"
    r1 = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if r1.returncode != 1 or error_lines(r1.stderr):
        fail(f"rank 1 without MPI: exit {r1.returncode}, stderr:\n{r1.stderr[-2000:]}")
    env = dict(ENV, TIMITSEG_ACT_WITHOUT_MPI="1")  # one process under no launcher: trains as today
    run(args, cwd)
    r2, _ = run(mpi(2, [binary, "evaluate", "--checkpoint", "runs/nompi/checkpoints/best.safetensors",
                        "--split", "dev"]), cwd, expect=None)
    errs2 = error_lines(r2.stderr)
    if r2.returncode == 0 or len(errs2) != 1 or "runs in one process" not in errs2[0]:
        fail(f"evaluate under mpirun: exit {r2.returncode}, stderr:\n{r2.stderr[-2000:]}")
    # a set-up error seen by every rank: reported once
    r3, _ = run(mpi(3, base_args(binary, "runs/small", ["--set", "train.batch_size=2"])), cwd, expect=None)
    errs3 = error_lines(r3.stderr)
    if r3.returncode == 0 or len(errs3) != 1 or "at least the number of ranks" not in errs3[0]:
        fail(f"batch 2 on 3 ranks: exit {r3.returncode}, stderr:\n{r3.stderr[-2000:]}")
    print(f"  {errs[0][:150]}\n  {errs2[0][:150]}\n  {errs3[0][:150]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=["match_one", "bitwise", "resume", "nan", "throw", "kill", "hang", "stall",
                                     "interrupt", "refusals", "gpu_match_one", "gpu_nccl_two"])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="the fault and resume cases on GPU ranks (one GPU each, NCCL); gpu_* cases are always cuda")
    a = ap.parse_args()
    if not shutil.which("mpirun"):
        print("dist_runs: skipped: mpirun is not installed (Debian: openmpi-bin; scripts/setup.sh)")
        sys.exit(77)
    r = subprocess.run([a.binary, "--version"], capture_output=True, text=True)
    if "without MPI" in r.stdout:
        print(f"dist_runs: skipped: {a.binary} was built without MPI (-DTIMITSEG_MPI=OFF or no libopenmpi-dev)")
        sys.exit(77)
    if a.device == "cuda" or a.case.startswith("gpu_"):
        if gpu_count() < 1:
            print("dist_runs: skipped: needs a CUDA GPU (`nvidia-smi -L` lists none)")
            sys.exit(77)
        # 2 x 64 units: the fused LSTM kernel (train.rnn_algo auto on sm_90) needs 64, 128 or 256 per direction
        DEVICE[:] = ["--set", "train.device=cuda", "--set", "crf.backend=cuda", "--set", "model.hidden_dim=128"]
    cwd = os.path.join(a.scratch, a.case)
    make_corpus(a.binary, cwd)
    t0 = time.time()
    if a.case in ("throw", "kill", "hang", "stall"):
        case_exit(a.binary, cwd, a.case)
    else:
        globals()["case_" + a.case](a.binary, cwd)
    print(f"dist_runs {a.case}: passed in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
