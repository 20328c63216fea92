#!/usr/bin/env python3
"""A CPU proxy of python_op_overhead.py's ratio (b): the host-side cost (Python, ctypes, torch's dispatch and autograd)
of SemiCRF(reduction="mean") forward+backward against torch's floor for a custom_op of its shape
(floor_op() of bench/python_op_overhead.py), at a tiny shape on the cpu backend (B 2 T 8 K 3 C 3 by default)
so that the CRF's arithmetic is a few microseconds and what is timed is the work around it. No GPU: on
the device the kernels run beside this host work (the GPU figure still has to be measured there).

Timed (time.perf_counter_ns, median of --calls calls after a warm-up; --rounds rounds alternating the
variants, the median of the rounds' medians printed), each step dropping the last step's gradients as
zero_grad() does:
  floor            floor_op(): torch.library.custom_op + register_autograd doing none of our work
  semicrf          SemiCRF(check="eager") mean NLL, forward + backward (the default module)
  semicrf_backward SemiCRF(check="backward") (eager_check=False: its check in the backward)
  semicrf_deferred SemiCRF(check="deferred") (on the host backends it checks in the forward)
  operator         the torch operator timitseg::semicrf_nll called directly (what torch.compile and
                   torch.export run; before this round eager SemiCRF ran it too)
  penalty          SemiCRF.penalty() forward + backward
  c_calls          CRF._nll alone (no autograd): the C calls plus our ctypes work

    PYTHONPATH=python TIMITSEG_LIBRARY=build/lib/libtimitseg.so \\
        python3 bench/python_op_host_overhead.py [--shape 2,8,3,3] [--rounds 5] [--profile]
"""
import argparse
import os
import statistics
import sys
import time


def median_us(fn, calls, warmup=200):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t)
    return statistics.median(ts) / 1000.0


def variants(B, T, K, C):
    import torch
    from timitseg import _ops
    from timitseg.torch import SemiCRF
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from python_op_overhead import floor_op
    torch.manual_seed(0)
    x = torch.randn(B, T, C, requires_grad=True)
    lengths = torch.full((B,), T, dtype=torch.int32)
    labels = torch.randint(0, C, (B, T), dtype=torch.int32)
    mods = {c: SemiCRF(C, K, backend="cpu", threads=1, reg=0.01, check=c) for c in ("eager", "backward", "deferred")}
    m = mods["eager"]
    params = [getattr(m, n) for n in m._param_names()]
    floor = floor_op()

    def step(mod, loss):
        def run():
            x.grad = None
            mod.zero_grad(set_to_none=True)
            loss().backward()
        return run
    xd = x.detach()
    out = {
        "floor": step(m, lambda: floor(x, lengths, labels, params)[0]),
        "semicrf": step(m, lambda: m(x, lengths, labels=labels, reduction="mean")),
        "semicrf_backward": step(mods["backward"], lambda: mods["backward"](x, lengths, labels=labels,
                                                                             reduction="mean")),
        "semicrf_deferred": step(mods["deferred"], lambda: mods["deferred"](x, lengths, labels=labels,
                                                                             reduction="mean")),
        "operator": step(m, lambda: _ops.NLL.operator(m._spec, "mean", x, lengths, labels, None, None, None, True,
                                                      "eager", params)[0]),
        "penalty": step(m, lambda: m.penalty()),
        "c_calls": lambda: m.handle._nll(xd, lengths, labels, None, None, None, False, 1.0, True, "float32",
                                         views=False),
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2,8,3,3", help="B,T,K,C")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also cProfile 3000 SemiCRF steps (top 25 by own time)")
    a = ap.parse_args()
    B, T, K, C = (int(v) for v in a.shape.split(","))
    import torch
    torch.set_num_threads(1)
    fns = variants(B, T, K, C)
    print("torch %s, B %d T %d K %d C %d, cpu backend (1 thread); median of %d calls (us), %d rounds"
          % (torch.__version__, B, T, K, C, a.calls, a.rounds))
    got = {n: [] for n in fns}
    for r in range(a.rounds):
        row = {n: median_us(fn, a.calls) for n, fn in fns.items()}
        for n, v in row.items():
            got[n].append(v)
        print("round %d: " % (r + 1) + "  ".join("%s %.1f" % (n, v) for n, v in row.items()))
    med = {n: statistics.median(v) for n, v in got.items()}
    print("median of rounds: " + "  ".join("%s %.1f" % (n, v) for n, v in med.items()))
    over = [s - f for s, f in zip(got["semicrf"], got["floor"])]
    print("(b) proxy: SemiCRF mean fwd+bwd over the floor: %+.1f us (median of the rounds' differences; "
          "range %+.1f..%+.1f); the C calls alone %.1f us" % (statistics.median(over), min(over), max(over),
                                                               med["c_calls"]))
    if a.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            fns["semicrf"]()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
