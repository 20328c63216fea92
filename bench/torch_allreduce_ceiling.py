#!/usr/bin/env python3
"""The gradient all-reduce through PyTorch's NCCL on this machine: the reference
that timitseg's own all-reduce (`bench train` under mpirun, "allreduce" in its
JSON) is compared with in docs/multigpu.md. Not part of the build or the tests;
needs PyTorch with CUDA and one GPU per process.

  torchrun --nproc_per_node 2 bench/torch_allreduce_ceiling.py [--floats 1208824] [--reps 200]

Prints, on rank 0, two figures for a float32 sum of --floats elements (the
recipe's gradient buffer by default: 3 x 256 BiLSTM, K = 30, 39 features):
  back to back   --reps all-reduces queued on one stream, timed by CUDA events
                 (the GPU time per all-reduce, as nccl-tests' out-of-place loop)
  synchronized   each all-reduce followed by a stream synchronize, timed on the
                 host (what a training step that waits for its reduction pays)
with the bus bandwidth as nccl-tests reports it: algbw x 2 (N - 1) / N.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--floats", type=int, default=1208824)
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    n = dist.get_world_size()
    x = torch.ones(a.floats, dtype=torch.float32, device="cuda")
    for _ in range(10):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.reps):
        dist.all_reduce(x)
    stop.record()
    torch.cuda.synchronize()
    b2b = start.elapsed_time(stop) / 1e3 / a.reps
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.reps):
        dist.all_reduce(x)
        torch.cuda.synchronize()
    sync = (time.perf_counter() - t0) / a.reps
    if dist.get_rank() == 0:
        nbytes = 4 * a.floats
        factor = 2 * (n - 1) / n
        for name, s in (("back to back", b2b), ("synchronized", sync)):
            print(f"torch NCCL all-reduce, {n} ranks, {nbytes / 1e6:.2f} MB, {name}: {s * 1e3:.3f} ms, "
                  f"busbw {nbytes / s * factor / 1e9:.1f} GB/s ({torch.cuda.get_device_name()})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
