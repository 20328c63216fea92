#!/usr/bin/env python3
"""The Python op's overhead over the bare kernels: `timitseg bench crf
--backend cuda --json` (the backend's forward and forward+backward on device
buffers, no C API, no torch) against, in the same process and on the same
GPU, timitseg's op from torch on CUDA tensors (the zero-copy path,
capi/crf_fast.h): the handle's log_partition and nll with all gradients
(timitseg.CRF; nll in two C calls, timitseg_crf_nll_begin / _end, and one
wait at the end), the deferred nll with its check (CRF._nll(deferred=...) +
CRF.check), and SemiCRF's forward + backward through autograd, with
reduction="mean" (the deferred check: the forward does not wait, the backward
queues its scaling and checks once the backward pass is queued; and the same
with eager_check=True: the forward waits, printed for comparison, outside the
limit) and as .mean() of the per-utterance NLL (its backward checks on the host
whether the weights are equal), each step dropping the last step's gradients as
zero_grad() does; beside them, outside the limit, torch's floor (a module of
SemiCRF's parameters whose autograd.Function does none of our work: what
PyTorch itself costs per step for such a loss), CRF.viterbi, and a training
step (SemiCRF's mean NLL, its backward and an AdamW step on its parameters,
which the next forward reads: timed alone, and per step of 20 queued with one
wait at the end). Inputs as bench
crf's: B utterances of full length T, C labels, durations up to K, float32
frame scores (the op adds the centered cumsum that bench crf's inputs already
have). Times: torch.cuda.Event median over --repeats calls; --rounds rounds of
`bench crf` then the op (the host's speed drifts between minutes), the limit
judged on the median of the rounds' overheads.

    PYTHONPATH=python TIMITSEG_LIBRARY=build/lib/libtimitseg.so \\
        python3 bench/python_op_overhead.py --timitseg build/bin/timitseg
"""
import argparse
import json
import statistics
import subprocess
import sys
import os


def bench_crf(binary, B, T, K, C, repeats):
    cmd = [binary, "bench", "crf", "--backend", "cuda", "-B", str(B), "-T", str(T), "-K", str(K), "-C", str(C),
           "--warmup", "5", "--repeats", str(repeats), "--check-utterances", "0", "--json"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    t = json.loads(out[out.index("{"):])["timings_ms"]
    return t["forward"]["median"], t["forward+backward"]["median"], t["viterbi"]["median"]


def elapsed_ms(fn, n=1):
    """GPU time per call of n calls of fn queued back to back, with one wait at the end (ms)."""
    import torch
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def median_ms(fn, repeats, warmup=10, n=1):
    """Median over repeats of elapsed_ms(fn, n): n = 1, one call and its wait; n > 1, per call of n queued
    (as a training loop that reads its loss only now and then)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(elapsed_ms(fn, n) for _ in range(repeats))


def profile(name, fn, folder):
    """5 calls of fn under torch.profiler: a Chrome trace FOLDER/NAME.json and the top entries."""
    import os
    import torch
    from torch.profiler import ProfilerActivity
    os.makedirs(folder, exist_ok=True)
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            with torch.profiler.record_function("step"):
                fn()
            torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(folder, name + ".json"))
    print("---- profile %s (5 calls)" % name)
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=48))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=48))


def TorchFloor(B, T, C, K):
    """An nn.Module with SemiCRF's parameters and forward signature whose autograd.Function does no work
    of ours: what PyTorch itself costs per step for such a loss (module call, Function.apply, the mean,
    the backward engine, the gradients' scaling and accumulation)."""
    import torch

    class _Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, module, scores, lengths, labels, *params):
            ctx.module = module
            return module.value.mean()

        @staticmethod
        def backward(ctx, grad_out):
            m = ctx.module
            w = grad_out / m.value.shape[0]
            gs, flat = m.g_scores * w, m.g_flat * w
            return (None, gs, None, None) + tuple(flat.split(m.sizes)[i].view(m.shapes[i]) for i in range(4))

    class Floor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transition = torch.nn.Parameter(torch.zeros(C, C))
            self.duration_bias = torch.nn.Parameter(torch.zeros(K, C))
            self.start = torch.nn.Parameter(torch.zeros(C))
            self.end = torch.nn.Parameter(torch.zeros(C))
            self.register_buffer("value", torch.ones(B, dtype=torch.float32))
            self.register_buffer("g_scores", torch.ones(B, T, C))
            self.register_buffer("g_flat", torch.ones(C * C + K * C + 2 * C))
            self.sizes = [C * C, K * C, C, C]
            self.shapes = [(C, C), (K, C), (C,), (C,)]

        def forward(self, scores, lengths, labels=None, reduction="mean"):
            return _Floor.apply(self, scores, lengths, labels, self.transition, self.duration_bias, self.start,
                                self.end)

    return Floor()


def floor_op():
    """A torch operator of timitseg::semicrf_nll's shape doing none of our work (torch.library.custom_op +
    register_autograd, the same inputs and outputs: a mean loss, the scores' gradient, the parameters' flat
    gradient, an empty onset gradient; its backward scales them as ours does): torch's own cost per call of
    such an operator, the floor of ratio (b) (overhead_ratios)."""
    import torch
    from typing import List, Optional, Tuple
    from torch import Tensor

    @torch.library.custom_op("timitseg_bench::floor", mutates_args=())
    def floor(scores: Tensor, lengths: Tensor, labels: Optional[Tensor], params: List[Tensor]) -> Tuple[
            Tensor, Tensor, Tensor, Tensor]:
        size = sum(p.numel() for p in params)
        return (scores.new_zeros(()), torch.empty_like(scores), scores.new_empty((size,)), scores.new_empty((0,)))

    @floor.register_fake
    def _(scores, lengths, labels, params):
        size = sum(p.numel() for p in params)
        return (scores.new_empty(()), torch.empty_like(scores), scores.new_empty((size,)), scores.new_empty((0,)))

    def setup(ctx, inputs, output):
        ctx.shapes = [p.shape for p in inputs[3]]
        ctx.save_for_backward(output[1], output[2])

    def backward(ctx, g, _a, _b, _c):
        gs, flat = ctx.saved_tensors
        w = g / gs.shape[0]
        pf = flat * w
        parts = pf.split([int(torch.Size(s).numel()) for s in ctx.shapes])
        return gs * w, None, None, [q.reshape(s) for q, s in zip(parts, ctx.shapes)]

    floor.register_autograd(backward, setup_context=setup)
    return floor


def capi_alone(binary, B, T, K, C, repeats):
    """The C API's nll with every gradient, timed from C++ (bench/cuda_capi_overhead.cpp, no Python): ms."""
    cmd = [binary, "-B", str(B), "-T", str(T), "-K", str(K), "-C", str(C), "--repeats", str(repeats)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out)["timings_ms"]


def alternated_ms(fns, repeats, warmup=10):
    """{name: median ms} of one call of each of fns ({name: fn}) timed as elapsed_ms does (torch.cuda.Event
    around the call, one wait after it), the calls alternated name by name in each of `repeats` rounds (the
    host's speed drifts between minutes: every figure sees the same minutes)."""
    import torch
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(elapsed_ms(fn))
    return {name: statistics.median(v) for name, v in times.items()}


def queued_ms(fns, rounds, n=20):
    """{name: median over rounds of the time per call of n calls queued with one wait at the end}, alternated
    name by name (a training loop that does not wait for each step)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(elapsed_ms(fn, n))
    return {name: statistics.median(v) for name, v in times.items()}


def example_steps(B, T, K, C):
    """Overhead ratio (c) of docs/python.md: the example's training step (Tagger of examples/train_bilstm.py at the recipe's
    shape, no onset, every utterance of full length; the loss, its backward, gradient clipping,
    AdamW(capturable=True)) with three losses, each on a model of its own: "ours", SemiCRF(check="deferred")
    mean NLL + its penalty; "stand-in", torch's floor operator of semicrf_nll's shape (floor_op(): none of our
    work, no penalty) on the same projection; "trivial", the projection's mean square. Returns ({kind: step},
    the SemiCRF module, its scores-only step: the op alone on a fixed [B][T][C] input, mean NLL + penalty)."""
    import os
    import torch
    from timitseg.torch import SemiCRF
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from train_bilstm import Tagger

    class Args:
        dropout, onset, max_duration, backend, reg, phone_bonus = 0.3, False, K, "cuda", 0.001, 1.0
    D = 39
    feats = torch.randn(B, T, D, device="cuda")
    lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
    labels = torch.randint(0, C, (B, T), device="cuda", dtype=torch.int32)
    floor = floor_op()
    steps, crf = {}, None
    for kind in ("ours", "stand-in", "trivial"):
        model = Tagger(D, 128, 2, C, Args).cuda()
        model.crf = SemiCRF(C, K, backend="cuda", reg=0.001, init_scale=0.1, check="deferred").cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5, capturable=True)
        params = [getattr(model.crf, n) for n in model.crf._param_names()]

        def step(model=model, opt=opt, params=params, kind=kind):
            opt.zero_grad(set_to_none=False)
            h, _ = model.lstm(model.drop(model.inp(feats)))
            s = model.proj(h)
            if kind == "ours":
                loss = model.crf(s, lengths, labels=labels, reduction="mean") + model.crf.penalty()
            elif kind == "stand-in":
                loss = floor(s, lengths, labels, params)[0]
            else:
                loss = s.square().mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
        steps[kind] = step
        if kind == "ours":
            crf = model.crf
    scores = torch.randn(B, T, C, device="cuda", requires_grad=True)

    def op_only():
        scores.grad = None
        (crf(scores, lengths, labels=labels, reduction="mean") + crf.penalty()).backward()
    return steps, crf, op_only


def overhead_ratios(B, T, K, C, repeats, fb_kernels, fb_capi, capi_ms=None):
    """The three overhead ratios: (a) the C API over bench crf (from C++: bench/cuda_capi_overhead.cpp, run in the
    same call; and from Python: CRF.nll), (b) SemiCRF(check="deferred") mean forward+backward minus torch's
    floor for an operator of its shape, the two alternated call by call (and the operator called directly, as
    torch.compile runs it), (c) the op's share of the example's training step (docs/python.md "Overhead on
    the host": the step with SemiCRF minus the same step with a stand-in loss, over the step with SemiCRF;
    alternated, medians), the op timed alone over the step beside it, and the step captured in a CUDA graph
    against eager."""
    import torch
    from timitseg import _ops
    from timitseg.torch import SemiCRF
    print("---- overhead ratios (B %d T %d K %d C %d)" % (B, T, K, C))
    if capi_ms is not None:
        for name in ("nll", "nll_deferred"):
            print("(a) the C API alone (C++, timitseg_crf_%s%s with every gradient) over bench crf: %.3f / %.3f ms "
                  "= %+.1f %% (limit 10 %%)" % (name, " + check" if name == "nll_deferred" else "", capi_ms[name],
                                               fb_kernels, 100 * (capi_ms[name] - fb_kernels) / fb_kernels))
    else:
        print("(a) the C API alone: not measured (no --capi-bench program; build target cuda_capi_overhead)")
    print("(a) CRF.nll from Python (C API + ctypes) over bench crf: %.3f / %.3f ms = %+.1f %%"
          % (fb_capi, fb_kernels, 100 * (fb_capi - fb_kernels) / fb_kernels))
    x = torch.randn(B, T, C, device="cuda", requires_grad=True)
    lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
    labels = torch.randint(0, C, (B, T), device="cuda", dtype=torch.int32)
    m = SemiCRF(C, K, backend="cuda", check="deferred").cuda()
    params = [getattr(m, n) for n in m._param_names()]
    floor = floor_op()

    def ours():
        x.grad = None
        m(x, lengths, labels=labels, reduction="mean").backward()

    def theirs():
        x.grad = None
        floor(x, lengths, labels, params)[0].backward()

    def operator():  # the operator timitseg::semicrf_nll through torch.library's dispatch, as torch.compile runs it
        x.grad = None
        _ops.NLL.operator(m._spec, "mean", x, lengths, labels, None, None, None, True, "deferred",
                          params)[0].backward()
    t = alternated_ms({"ours": ours, "floor": theirs, "operator": operator}, repeats)
    m.check()
    print("(b) SemiCRF(check=deferred) mean fwd+bwd %.3f ms, torch's floor for an operator of its shape %.3f ms "
          "(alternated call by call, medians of %d): %+.1f us (target <= 50 us); the operator called directly "
          "(torch.library's dispatch, the route torch.compile runs; eager SemiCRF skips it) %.3f ms, %+.1f us"
          % (t["ours"], t["floor"], repeats, 1000 * (t["ours"] - t["floor"]), t["operator"],
             1000 * (t["operator"] - t["floor"])))
    steps, crf, op_only = example_steps(B, T, K, C)
    fns = dict(steps)
    fns["op alone"] = op_only
    s = alternated_ms(fns, repeats)
    crf.check()
    q = queued_ms(steps, max(repeats // 10, 3))
    crf.check()
    share = 100 * (s["ours"] - s["stand-in"]) / s["ours"]
    print("(c) the op's share of the step (the step with SemiCRF minus the step with torch's floor operator as a "
          "stand-in loss, over the step with SemiCRF; alternated, medians of %d): (%.3f - %.3f) / %.3f ms = "
          "%.1f %% (target <= 5 %%)" % (repeats, s["ours"], s["stand-in"], s["ours"], share))
    print("(c) the same, 20 steps queued with one wait (per step): (%.3f - %.3f) / %.3f ms = %.1f %%"
          % (q["ours"], q["stand-in"], q["ours"], 100 * (q["ours"] - q["stand-in"]) / q["ours"]))
    print("(c) against a trivial loss (the projection's mean square) instead of the stand-in: (%.3f - %.3f) / "
          "%.3f ms = %.1f %%; queued %.1f %%" % (s["ours"], s["trivial"], s["ours"],
                                               100 * (s["ours"] - s["trivial"]) / s["ours"],
                                               100 * (q["ours"] - q["trivial"]) / q["ours"]))
    print("(c, the old figure) the op timed alone (SemiCRF mean + penalty, fwd+bwd, one wait) over the step: "
          "%.3f / %.3f ms = %.1f %%" % (s["op alone"], s["ours"], 100 * s["op alone"] / s["ours"]))
    step = steps["ours"]
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        crf.check()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        t_graph = median_ms(graph.replay, repeats)
        crf.check()
        print("(c) the step captured in a CUDA graph: %.3f ms per replay against %.3f ms eager (%.2fx)"
              % (t_graph, s["ours"], s["ours"] / t_graph))
    except Exception as e:  # noqa: BLE001 (reported, the other figures stand)
        print("(c) CUDA graph capture of the step failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timitseg", default="build/bin/timitseg", help="the timitseg binary of the same build")
    ap.add_argument("--capi-bench", default="build/bin/cuda_capi_overhead",
                    help="the C++ program that times the C API alone (ratio (a)); skipped when absent")
    ap.add_argument("--shape", default="32,200,30,39", help="B,T,K,C")
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--limit", type=float, default=10.0, help="the overhead (%%) that fails the run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of `bench crf` then the op (the median is judged)")
    ap.add_argument("--ratios-only", action="store_true", help="only the three overhead ratios of docs/python.md (one round of "
                                                                  "bench crf, then overhead_ratios)")
    ap.add_argument("--profile", help="also write torch.profiler traces (CPU, CUDA runtime calls, kernels) of 5 "
                                      "calls each to this folder and print where the time goes")
    a = ap.parse_args()
    B, T, K, C = (int(v) for v in a.shape.split(","))
    import torch
    import timitseg
    from timitseg.torch import SemiCRF
    torch.manual_seed(0)
    x = torch.randn(B, T, C, device="cuda")
    lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
    labels = torch.randint(0, C, (B, T), device="cuda", dtype=torch.int32)
    crf = timitseg.CRF(C, K, backend="cuda")
    rng = torch.Generator().manual_seed(1)
    for n in ("transition", "duration_bias"):
        crf.set_param(n, (torch.randn(crf.param_shape(n), generator=rng) * 0.1).numpy())
    try:  # the deferred check (eager_check=False): the forward does not wait for the GPU
        m = SemiCRF(C, K, backend="cuda", eager_check=False).cuda()
        eager = SemiCRF(C, K, backend="cuda", eager_check=True).cuda()
    except TypeError:  # older packages: no deferred check
        m, eager = SemiCRF(C, K, backend="cuda").cuda(), None
    xr = x.clone().requires_grad_()

    def module_step(mod=m, **kw):
        # as a training step does it: the gradients of the last step dropped (optimizer.zero_grad())
        mod.zero_grad(set_to_none=True)
        xr.grad = None
        if kw:
            mod(xr, lengths, labels=labels, **kw).backward()
        else:
            mod(xr, lengths, labels=labels).mean().backward()

    def deferred_nll():
        pending = []
        crf._nll(x, lengths, labels, None, None, None, False, 1.0 / B, True, "float64", deferred=pending)
        crf.check(pending[0][0])

    def measure():
        ours = {
            "forward (CRF.log_partition)": median_ms(lambda: crf.log_partition(x, lengths), a.repeats),
            "forward+backward (CRF.nll, all grads)": median_ms(
                lambda: crf.nll(x, lengths, labels=labels, scale=1.0 / B), a.repeats),
        }
        if hasattr(timitseg.CRF, "check"):
            ours["forward+backward (CRF.nll deferred+check)"] = median_ms(deferred_nll, a.repeats)
        try:  # reduction="mean": a backward without a host wait (older packages have no reduction)
            ours["forward+backward (SemiCRF reduction=mean)"] = median_ms(lambda: module_step(reduction="mean"),
                                                                        a.repeats)
        except TypeError:
            pass
        if eager is not None:
            ours["forward+backward (SemiCRF mean, eager_check)"] = median_ms(
                lambda: module_step(eager, reduction="mean"), a.repeats)
        ours["forward+backward (SemiCRF, .mean())"] = median_ms(module_step, a.repeats)
        # torch's own cost of a loss op of SemiCRF's shape (not in the limit): an nn.Module whose
        # autograd.Function takes the same inputs, returns the mean of a [B] value and gives back five
        # precomputed gradients scaled as ours are (one _foreach_mul), launching no kernel of ours
        ours["torch floor (a Function of SemiCRF's shape)"] = median_ms(
            lambda: module_step(floor, reduction="mean"), a.repeats)
        # Viterbi (not in the limit): the C call and the per-utterance split of its segments (one host wait)
        ours["viterbi (CRF.viterbi)"] = median_ms(lambda: crf.viterbi(x, lengths), a.repeats)
        # A training step (not in the limit): SemiCRF's loss, its backward and an AdamW step on the CRF's
        # parameters, which the next step's forward reads (bound in place, or copied in by set_param).
        ours["train step (SemiCRF mean + AdamW)"] = median_ms(train_step, a.repeats)
        ours["train step, 20 queued (per step)"] = median_ms(train_step, a.repeats // 10 or 1, 3, n=20)
        return ours

    floor = TorchFloor(B, T, C, K).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def train_step():
        opt.zero_grad(set_to_none=True)
        xr.grad = None
        m(xr, lengths, labels=labels, reduction="mean").backward()
        opt.step()
    if a.profile:
        steps = {"nll": lambda: crf.nll(x, lengths, labels=labels, scale=1.0 / B),
                 "log_partition": lambda: crf.log_partition(x, lengths)}
        steps["semicrf_mean"] = lambda: module_step(reduction="mean")
        if eager is not None:
            steps["semicrf_mean_eager"] = lambda: module_step(eager, reduction="mean")
        for name, fn in steps.items():
            profile(name, fn, a.profile)
    # Rounds: `bench crf` then the op, so that both of a round come from the same minutes of the host (whose
    # speed drifts between minutes); the limit is on the median of the rounds' overheads.
    if a.ratios_only:
        print("GPU: %s" % torch.cuda.get_device_name())
        _, fb, _ = bench_crf(a.timitseg, B, T, K, C, a.repeats)
        fb_capi = median_ms(lambda: crf.nll(x, lengths, labels=labels, scale=1.0 / B), a.repeats)
        capi_ms = capi_alone(a.capi_bench, B, T, K, C, a.repeats) if os.path.exists(a.capi_bench) else None
        overhead_ratios(B, T, K, C, a.repeats, fb, fb_capi, capi_ms)
        return 0
    overheads = {}
    print("GPU: %s; B %d T %d K %d C %d; median of %d calls (ms), %d rounds" % (
        torch.cuda.get_device_name(), B, T, K, C, a.repeats, a.rounds))
    for r in range(a.rounds):
        fwd, fb, vit = bench_crf(a.timitseg, B, T, K, C, a.repeats)
        ours = measure()
        print("round %d: %-37s %10s %10s %10s" % (r + 1, "", "op", "bench crf", "overhead"))
        for name, t in ours.items():
            base = fwd if name.startswith("forward (") else (vit if name.startswith("viterbi") else fb)
            # the training steps against bench crf's forward+backward too (they add an optimizer step)
            over = 100.0 * (t - base) / base
            overheads.setdefault(name, []).append(over)
            print("%-46s %10.3f %10.3f %9.1f%%" % (name, t, base, over))
    print("overhead over bench crf, median [min, max] of %d rounds:" % a.rounds)
    worst = 0.0
    for name, v in overheads.items():
        med = statistics.median(v)
        if "CRF." in name or "reduction=" in name:
            worst = max(worst, med)
        print("%-46s %9.1f%% [%.1f, %.1f]" % (name, med, min(v), max(v)))
    print("the op's overhead over bench crf (CRF calls, SemiCRF reduction=mean deferred): %.1f %% (limit %.0f %%)"
          % (worst, a.limit))
    fb, _ = statistics.median(bench_crf(a.timitseg, B, T, K, C, a.repeats)[1] for _ in range(1)), None
    capi_ms = capi_alone(a.capi_bench, B, T, K, C, a.repeats) if os.path.exists(a.capi_bench) else None
    overhead_ratios(B, T, K, C, a.repeats, fb, median_ms(lambda: crf.nll(x, lengths, labels=labels, scale=1.0 / B),
                                                        a.repeats), capi_ms)
    return 0 if worst <= a.limit else 1


if __name__ == "__main__":
    sys.exit(main())
