#!/usr/bin/env python3
"""Device memory of SemiCRF on one long input (the target: "SemiCRF at B 1 T 100k on
the GPU keeps the forward's memory bounded and the backward's memory reported"):
for each T, a fresh process-wide reading of

  - the device memory in use (torch.cuda.mem_get_info: every allocation of the
    process, the library's own workspaces included, in the driver's 2 MiB pages)
    before the call, after the forward (the loss computed, the graph kept), and
    after the backward (the gradients written);
  - torch's own peak (torch.cuda.max_memory_allocated) during the forward and
    during the backward (the tensors torch allocates: scores, their gradient,
    the op's outputs), which the first reading includes;

and, beside it, `timitseg bench crf --backend cuda --json` at the same shape (the
kernels alone: their forward's and all operations' workspaces and device memory).
SemiCRF(C, K, backend="cuda") with reduction="sum", frame labels in runs of 1..12.

    PYTHONPATH=python TIMITSEG_LIBRARY=build/lib/libtimitseg.so \\
        python3 bench/python_long_memory.py --timitseg build/bin/timitseg [--frames 10000,100000]
"""
import argparse
import json
import subprocess
import sys

MIB = 1.0 / (1 << 20)


def bench_crf(binary, T, K, C):
    cmd = [binary, "bench", "crf", "--backend", "cuda", "-B", "1", "-T", str(T), "-K", str(K), "-C", str(C),
           "--warmup", "1", "--repeats", "3", "--check-utterances", "0", "--json"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def used_mib(torch):
    free, total = torch.cuda.mem_get_info()
    return (total - free) * MIB


def measure(T, K, C):
    import torch
    from timitseg.torch import SemiCRF
    torch.manual_seed(0)
    crf = SemiCRF(C, K, backend="cuda", init_scale=0.1).cuda()
    x = torch.randn(1, T, C, device="cuda", requires_grad=True)
    lengths = torch.tensor([T], device="cuda", dtype=torch.int32)
    runs = torch.randint(1, 13, (T,))
    labels = torch.repeat_interleave(torch.randint(0, C, (T,)), runs)[:T].reshape(1, T).to("cuda", torch.int32)
    torch.cuda.synchronize()
    base = used_mib(torch)
    torch.cuda.reset_peak_memory_stats()
    a0 = torch.cuda.memory_allocated() * MIB
    loss = crf(x, lengths, labels=labels, reduction="sum")
    torch.cuda.synchronize()
    fwd = used_mib(torch)
    peak_fwd = torch.cuda.max_memory_allocated() * MIB - a0
    torch.cuda.reset_peak_memory_stats()
    a1 = torch.cuda.memory_allocated() * MIB
    loss.backward()
    torch.cuda.synchronize()
    bwd = used_mib(torch)
    peak_bwd = torch.cuda.max_memory_allocated() * MIB - a1
    assert torch.isfinite(loss).item() and torch.isfinite(x.grad).all().item()
    return {"T": T, "loss": loss.item(), "in_use_before_mib": base, "forward_mib": fwd - base,
            "forward_and_backward_mib": bwd - base, "torch_peak_forward_mib": peak_fwd,
            "torch_peak_backward_mib": peak_bwd}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timitseg", default="build/bin/timitseg", help="the timitseg binary of the same build")
    ap.add_argument("--frames", default="10000,100000", help="the lengths T, comma-separated")
    ap.add_argument("-K", type=int, default=60)
    ap.add_argument("-C", type=int, default=39)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one T in this process (a fresh reading)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.K, a.C)))
        return 0
    import torch
    print("GPU: %s; SemiCRF B 1 K %d C %d, reduction sum; MiB of device memory in use above the process's "
          "before the call (mem_get_info) / torch's own peak" % (torch.cuda.get_device_name(), a.K, a.C))
    print("%8s %12s %12s %10s %14s %14s %12s %12s" % ("T", "op fwd", "op fwd+bwd", "bwd/fwd", "torch pk fwd",
                                                      "torch pk bwd", "kernels fwd", "kernels all"))
    for T in (int(t) for t in a.frames.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(T), "-K", str(a.K), "-C", str(a.C)],
                             stdout=subprocess.PIPE, check=True, text=True).stdout
        m = json.loads(out.strip().splitlines()[-1])
        k = bench_crf(a.timitseg, T, a.K, a.C)
        dm = k.get("device_memory_mib", {})
        print("%8d %12.1f %12.1f %10.2f %14.1f %14.1f %12s %12s" % (
            T, m["forward_mib"], m["forward_and_backward_mib"],
            m["forward_and_backward_mib"] / max(m["forward_mib"], 1e-9), m["torch_peak_forward_mib"],
            m["torch_peak_backward_mib"], dm.get("forward", "n/a"), dm.get("all", "n/a")))
        print("  json:", json.dumps({"op": m, "bench_crf": {key: k[key] for key in k if "mib" in key}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
