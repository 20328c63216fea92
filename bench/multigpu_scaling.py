#!/usr/bin/env python3
"""The scaling benchmark of several ranks (docs/multigpu.md "Scaling model"), one command:

  bench/multigpu_scaling.py --binary build/bin/timitseg [--ranks 1,2,4,8] [--per-rank-batch 32]
                            [--device cuda] [--share-gpu] [--json OUT.json] [-- BENCH-TRAIN-ARGS...]

For each rank count N (those above the GPUs that `nvidia-smi -L` lists are
left out, unless --share-gpu): `timitseg bench train --batch 32N` (recipe
size, fused kernel on the GPU; one process for N = 1, `mpirun -np N
--bind-to none` otherwise), then the same at the fixed global batch 32 (where
the latency floor stops the scaling). Prints training frames/s, the speedup
over one rank, the issue's target (1.9x on 2 GPUs), and the gradient
all-reduce that bench train times on its own for N > 1 (each waited for, as a
step waits, and 50 queued back to back with nccl-tests' bus bandwidth: the GPU
time). --share-gpu runs several ranks on one GPU with the host-staged
all-reduce (TIMITSEG_GPU_COLLECTIVES=mpi): that checks the machinery, it is
not a scaling figure, and the table says so. --device cpu runs CPU ranks
(one thread each).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def gpus():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    r = subprocess.run([exe, "-L"], capture_output=True, text=True)
    return sum(1 for l in r.stdout.splitlines() if l.startswith("GPU ")) if r.returncode == 0 else 0


def bench(binary, n, batch, device, extra, env):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [binary, "bench", "train", "--device", device, "--batch", str(batch), "--json", out, *extra]
        if device == "cuda":
            cmd += ["--rnn-algo", "fused"]
        else:
            cmd += ["--threads", "1"]
        if n > 1:
            cmd = ["mpirun", "-np", str(n), "--bind-to", "none", "--oversubscribe", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"multigpu_scaling: `{' '.join(cmd)}` failed ({r.returncode}):\n{r.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--per-rank-batch", type=int, default=32)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--share-gpu", action="store_true", help="several ranks on one GPU (host-staged; not scaling)")
    ap.add_argument("--json")
    ap.add_argument("extra", nargs="*", help="more `bench train` arguments (after --)")
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    ranks = [int(x) for x in a.ranks.split(",")]
    have = gpus() if a.device == "cuda" else 10**6
    if a.device == "cuda" and have == 0:
        sys.exit("multigpu_scaling: no GPU (`nvidia-smi -L` lists none); --device cpu runs CPU ranks")
    if a.share_gpu:
        env["TIMITSEG_GPU_COLLECTIVES"] = "mpi"
    else:
        left = [n for n in ranks if n > have]
        ranks = [n for n in ranks if n <= have]
        if left:
            print(f"multigpu_scaling: {have} GPU(s): left out N = {', '.join(map(str, left))}")
    if 1 not in ranks:
        ranks = [1] + ranks
    rows = []
    for n in ranks:
        for batch in sorted({a.per_rank_batch * n, a.per_rank_batch}):
            j = bench(a.binary, n, batch, a.device, a.extra, env)
            ar = j.get("allreduce", {})
            rows.append({"ranks": n, "global_batch": batch, "frames_per_sec": j["frames_per_sec"],
                         "allreduce_ms": ar.get("seconds", 0) * 1e3 if ar else None,
                         "allreduce_queued_ms": ar.get("seconds_queued", 0) * 1e3 if ar else None,
                         "busbw_gb_s": ar.get("busbw_gb_s_queued") if ar else None, "method": ar.get("method", "")})
    base = {r["global_batch"]: r["frames_per_sec"] for r in rows if r["ranks"] == 1}
    # speedup: over one rank at the per-rank batch (global batch G = 32 N for N ranks)
    # all-reduce: waited = each one waited for (a step's pattern); queued = 50 back to back (nccl-tests' loop),
    # whose bus bandwidth is printed
    print(f"{'ranks':>5} {'global batch':>12} {'frames/s':>12} {'speedup':>8} {'all-reduce waited':>18} "
          f"{'queued':>9} {'busbw':>10}  method")
    for r in rows:
        sp = r["frames_per_sec"] / base[a.per_rank_batch] if base.get(a.per_rank_batch) else float("nan")
        r["speedup"] = sp
        ar = f"{r['allreduce_ms']:.3f} ms" if r["allreduce_ms"] is not None else "-"
        aq = f"{r['allreduce_queued_ms']:.3f} ms" if r["allreduce_queued_ms"] is not None else "-"
        bw = f"{r['busbw_gb_s']:.1f} GB/s" if r["busbw_gb_s"] is not None else "-"
        print(f"{r['ranks']:>5} {r['global_batch']:>12} {r['frames_per_sec']:>12.0f} {sp:>7.3f}x {ar:>18} {aq:>9} "
              f"{bw:>10}  {r['method']}")
    two = [r for r in rows if r["ranks"] == 2 and r["global_batch"] == 2 * a.per_rank_batch]
    if two and not a.share_gpu and a.device == "cuda":
        ok = two[0]["speedup"] >= 1.9
        print(f"2 GPUs at global batch {2 * a.per_rank_batch}: {two[0]['speedup']:.3f}x one GPU at "
              f"{a.per_rank_batch} (target 1.9x: {'met' if ok else 'NOT met'})")
    if a.share_gpu:
        print("(--share-gpu: the ranks time-share one GPU; these rows test the machinery, they are not scaling figures)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "share_gpu": a.share_gpu, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
