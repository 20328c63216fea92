#!/usr/bin/env python3
"""Side by side: timitseg's semi-CRF op (python/, the C API) against
flash-semicrf 0.2.0 (its streaming Triton kernel and its PyTorch reference)
and torch-struct 0.5's SemiMarkovCRF: forward (log Z), forward+backward and
Viterbi; time (median), peak GPU memory, max |error| against float64 and the
NaN/Inf count over seeds (extreme scores |x| up to 1e4 and padded batches
included). Every cell runs in its own process with a time limit, so a peer's
failure (out of memory, an error, a crash, a timeout) is a table cell.

    pip install --no-deps --target work/pydeps work/wheels/flash_semicrf-0.2.0-py3-none-any.whl \\
        work/wheels/torch_struct-0.5-py3-none-any.whl                 # the two peers' wheels
    PYTHONPATH=python:work/pydeps TIMITSEG_LIBRARY=build/lib/libtimitseg.so \\
        python3 bench/python_semicrf.py --out work/bench_semicrf.md

Conventions: all methods get the same zero-centered cum_scores [B][T+1][C],
transition [C][C] (from, to), duration_bias [K][C] (duration d at row d-1),
start = end = 0 (flash-semicrf has no start vector: it adds a transition from
every label into the first segment; "vs ours" then compares with our start[c] =
logsumexp_c' transition[c'][c], the same function). torch-struct takes edge potentials [B][T][K+1][C][C] built
from them (its memory is O(T K C^2): it runs out of memory at long T by design).
"Error" is against the same method in float64 where it has one (flash-semicrf,
torch-struct), against timitseg's float64 reference backend for ours (fwd+bwd: at
T * K <= 200 * 30 only, the reference's CPU gradient pass being slow), and the
column "vs ours" is |log Z - timitseg's float64 log Z|: whether the peer
computes the same function.
"""
import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = [  # (name, B, T, K, C)
    ("timit", 32, 200, 30, 39), ("timit", 32, 400, 30, 39), ("timit", 32, 400, 60, 39),
    ("long", 4, 10000, 60, 39), ("long", 1, 100000, 60, 39), ("long", 1, 10000, 500, 8),
]
METHODS = ["timitseg", "flash-triton", "flash-pytorch", "torch-struct"]
OPS = ["forward", "fwd+bwd", "viterbi"]


def inputs(B, T, K, C, seed, dtype, device, extreme=False, padded=True):
    import torch
    g = torch.Generator().manual_seed(seed)
    scale = 1e4 if extreme else 1.0
    x = torch.randn(B, T, C, generator=g, dtype=torch.float64) * scale
    lengths = torch.full((B,), T, dtype=torch.int64)
    if padded and B > 1:
        lengths = torch.randint(max(1, T // 2), T + 1, (B,), generator=g)
        lengths[0] = T
    cum = torch.zeros(B, T + 1, C, dtype=torch.float64)
    for b in range(B):
        L = int(lengths[b])
        xc = x[b, :L] - x[b, :L].mean(0)
        cum[b, 1:L + 1] = torch.cumsum(xc, 0)
    A = torch.randn(C, C, generator=g, dtype=torch.float64) * 0.1
    D = torch.randn(K, C, generator=g, dtype=torch.float64) * 0.1
    return [t.to(device=device, dtype=dtype) for t in (cum, A, D)] + [lengths.to(device)]


def method_fn(method, op, K):
    """f(cum, A, D, lengths) -> tensor [B] (log Z or max score); fwd+bwd also backpropagates into cum."""
    import torch
    if method == "timitseg":
        import timitseg
        crfs = {}

        def f(cum, A, D, lengths, backend=None, start=None):
            be = backend or ("cuda" if cum.is_cuda else "cpu")
            key = (be, cum.shape[2])
            if key not in crfs:
                crfs[key] = timitseg.CRF(cum.shape[2], K, backend=be)
            crf = crfs[key]
            old = getattr(crf, "_bench_params", None)  # the timed calls reuse the parameters set once
            if old is None or old[0] is not A or old[1] is not D or old[2] is not start or \
                    old[3] != (A._version, D._version):
                crf.set_param("transition", A.float())
                crf.set_param("duration_bias", D.float())
                crf.set_param("start", (start if start is not None else torch.zeros(cum.shape[2])).float())
                crf._bench_params = (A, D, start, (A._version, D._version))  # held: no address reuse
            c32 = cum.float()
            if op == "forward":
                return crf.log_partition(c32, lengths, cumulative=True)
            if op == "viterbi":
                return crf.viterbi(c32, lengths, cumulative=True)[0]
            labels = torch.zeros(cum.shape[0], cum.shape[1] - 1, dtype=torch.int32, device=cum.device)
            nll, _ = crf.nll(c32, lengths, labels=labels, cumulative=True)  # log Z - gold, with every gradient
            return nll
        return f
    if method.startswith("flash"):
        from flash_semicrf import semi_crf_streaming_forward

        def f(cum, A, D, lengths, backend=None):
            c = cum.detach().requires_grad_(op == "fwd+bwd")
            out = semi_crf_streaming_forward(c, A, D, lengths, K, semiring="max" if op == "viterbi" else "log",
                                             use_triton=(method == "flash-triton"))
            if op == "fwd+bwd":
                out.sum().backward()
            return out.detach()
        return f
    if method == "torch-struct":
        from torch_struct import SemiMarkovCRF

        def f(cum, A, D, lengths, backend=None):
            B, T1, C = cum.shape
            T = T1 - 1
            c = cum.detach().requires_grad_(op == "fwd+bwd")
            neg = torch.finfo(cum.dtype).min / 4
            edge = torch.full((B, T, K + 1, C, C), neg, dtype=cum.dtype, device=cum.device)
            for d in range(1, K + 1):
                seg = c[:, d:, :] - c[:, :T1 - d, :] + D[d - 1]  # [B][T+1-d][C] segments (n, d)
                edge[:, :T + 1 - d, d] = seg.unsqueeze(-1) + A.t().unsqueeze(0).unsqueeze(0)
            first = torch.full((C,), neg, dtype=cum.dtype, device=cum.device)
            first[0] = 0.0
            edge[:, 0] = edge[:, 0] - A.t() + first  # the first segment: no transition (start = 0)
            n = torch.arange(T, device=cum.device).view(1, T, 1)
            d = torch.arange(K + 1, device=cum.device).view(1, 1, K + 1)
            past = (n + d) > lengths.view(-1, 1, 1)  # segments that end past the utterance
            edge = edge.masked_fill(past.unsqueeze(-1).unsqueeze(-1), neg)
            dist = SemiMarkovCRF(edge, lengths=lengths + 1)
            out = dist.max if op == "viterbi" else dist.partition
            if op == "fwd+bwd":
                out.sum().backward()
            return out.detach()
        return f
    raise ValueError(method)


def run_cell(a):
    """One (method, op, shape) in this process: prints one JSON line."""
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    B, T, K, C = a.cell_shape
    f = method_fn(a.method, a.op, K)
    res = {"method": a.method, "op": a.op, "shape": [B, T, K, C], "device": torch.cuda.get_device_name()
           if dev == "cuda" else "cpu"}
    cum, A, D, L = inputs(B, T, K, C, 0, torch.float32, dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    free0 = torch.cuda.mem_get_info()[0] if dev == "cuda" else 0
    f(cum, A, D, L)  # warm-up (Triton compiles, our session allocates)
    sync()
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        out = f(cum, A, D, L)
        sync()
        times.append(time.perf_counter() - t0)
        if sum(times) > a.budget:
            break
    times.sort()
    res["ms"] = 1e3 * times[len(times) // 2]
    if dev == "cuda":
        torch_peak = torch.cuda.max_memory_allocated()
        outside = max(0, free0 - torch.cuda.mem_get_info()[0] - torch.cuda.memory_reserved())
        res["peak_mib"] = (torch_peak + outside) / 2**20  # + memory the library holds outside torch's allocator
    # NaN/Inf over seeds: a third with extreme scores, all padded
    bad, done, t_seeds = 0, 0, time.perf_counter()
    for s in range(a.seeds):
        if done and time.perf_counter() - t_seeds > a.seed_budget:
            break  # the cell's time for seeds is spent: the count says how many ran
        c2, A2, D2, L2 = inputs(B, T, K, C, 1 + s, torch.float32, dev, extreme=(s % 3 == 2))
        o = f(c2, A2, D2, L2)
        bad += int((~torch.isfinite(o)).sum())
        done += 1
    res["nonfinite"], res["seeds"] = bad, done
    # errors against float64 on the TIMIT shapes; our fwd+bwd's oracle is the reference backend's float64
    # gradient pass on the CPU, which alone ran past a 30 s cell at B 32 T 400 K 60 (H100 machine, 2026-11-26)
    if T * K <= (200 * 30 if (a.method == "timitseg" and a.op == "fwd+bwd") else 400 * 60):
        c64, A64, D64, L64 = inputs(B, T, K, C, 0, torch.float64, "cpu" if a.method == "timitseg" else dev)
        if a.method == "timitseg":
            ref = method_fn("timitseg", a.op, K)(c64, A64, D64, L64, backend="reference")
        else:
            ref = f(c64, A64, D64, L64)
        res["max_err"] = float((out.double().cpu() - ref.double().cpu()).abs().max())
        if a.op == "forward":
            # flash-semicrf starts from alpha[0] = 0 for every label and adds a transition into the first
            # segment: ours with start[c] = logsumexp_c' A[c', c] is that function
            start = torch.logsumexp(A64.cpu(), 0) if a.method.startswith("flash") else None
            ours = method_fn("timitseg", "forward", K)(c64.cpu(), A64.cpu(), D64.cpu(), L64.cpu(), backend="reference",
                                                       start=start)
            res["vs_ours"] = float((out.double().cpu() - ours.double().cpu()).abs().max())
    print(json.dumps(res))


def cell_text(r):
    if "error" in r:
        return r["error"]
    s = "%.3g ms" % r["ms"]
    if "peak_mib" in r:
        s += ", %.0f MiB" % r["peak_mib"]
    if "max_err" in r:
        s += ", err %.1e" % r["max_err"]
    if "vs_ours" in r:
        s += ", vs ours %.1e" % r["vs_ours"]
    return s + ", %d non-finite/%d seeds" % (r["nonfinite"], r["seeds"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--shapes", default="all", help="all, timit, long, or B,T,K,C[;B,T,K,C...]")
    ap.add_argument("--seeds", type=int, default=100, help="seeds of the NaN/Inf count (TIMIT shapes; long: 3)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of timed repeats per cell")
    ap.add_argument("--seed-budget", type=float, default=15.0,
                    help="seconds of the NaN/Inf seeds per cell (at least one seed runs; the cell says how many)")
    ap.add_argument("--cell-timeout", type=float, default=120.0, help="seconds per cell process")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="seconds for the whole table (0: none); cells not started by then say so")
    ap.add_argument("--order", default="method", choices=("method", "shape"),
                    help="run the cells method by method (the first methods get the time first) or shape by shape")
    ap.add_argument("--out", help="also write the table (markdown) and the raw JSON lines here")
    ap.add_argument("--cell", nargs=4, type=int, dest="cell_shape", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--op", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell_shape:
        return run_cell(a)
    if a.shapes in ("all", "timit", "long"):
        shapes = [s[1:] for s in SHAPES if a.shapes in ("all", s[0])]
    else:
        shapes = [tuple(int(v) for v in s.split(",")) for s in a.shapes.split(";")]
    methods, ops = a.methods.split(","), a.ops.split(",")
    cells = [(m, sh, op) for m in methods for sh in shapes for op in ops]
    if a.order == "shape":
        cells = [(m, sh, op) for sh in shapes for op in ops for m in methods]
    results, raw, t0 = {}, [], time.monotonic()
    for m, (B, T, K, C), op in cells:
        left = a.deadline - (time.monotonic() - t0) if a.deadline > 0 else a.cell_timeout
        why = failed_before(results, m, op, (B, T, K, C))
        if why:
            r = {"error": "not run: " + why}
        elif left < 5:
            r = {"error": "not run (the call's time limit)"}
        else:
            r = run_one(a, m, op, (B, T, K, C), min(a.cell_timeout, left))
        r.update({"method": m, "op": op, "shape": [B, T, K, C]})
        results[(m, op, (B, T, K, C))] = r
        raw.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
        if a.out:
            write_atomic(a.out, table_text(results, methods, ops, shapes))
            write_atomic(a.out + ".jsonl", "".join(json.dumps(x) + "\n" for x in raw))
    print(table_text(results, methods, ops, shapes))


def run_one(a, m, op, shape, timeout):
    """One cell in its own process (a peer's crash, OOM or hang is the cell's text)."""
    B, T, K, C = shape
    seeds = a.seeds if T <= 400 else min(a.seeds, 3)
    cmd = [sys.executable, os.path.abspath(__file__), "--cell", str(B), str(T), str(K), str(C),
           "--method", m, "--op", op, "--seeds", str(seeds), "--repeats", str(a.repeats),
           "--budget", str(a.budget), "--seed-budget", str(a.seed_budget)]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timeout (> %.0f s)" % timeout}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode == 0 and lines:
        return json.loads(lines[-1])
    err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return {"error": "OOM" if "out of memory" in p.stderr.lower() else "failed: " + err[:80]}


def failed_before(results, m, op, shape):
    """Why a peer's cell is skipped: the same method and op ran out of memory or time at a shape no
    larger in T, K and C (the cell would too), or None. Ours always runs."""
    B, T, K, C = shape
    if m == "timitseg":
        return None
    for (m2, op2, (_, T2, K2, C2)), r in results.items():
        e = r.get("error", "")
        if m2 == m and op2 == op and T2 <= T and K2 <= K and C2 <= C and (e == "OOM" or e.startswith("timeout")):
            return "%s at T %d K %d C %d" % ("out of memory" if e == "OOM" else e, T2, K2, C2)
    return None


def table_text(results, methods, ops, shapes):
    head = "| shape | op | " + " | ".join(methods) + " |\n|" + "---|" * (2 + len(methods))
    rows = []
    for (B, T, K, C) in shapes:
        for op in ops:
            cells = [cell_text(results[(m, op, (B, T, K, C))]) if (m, op, (B, T, K, C)) in results else "not run"
                     for m in methods]
            rows.append("| B %d T %d K %d C %d | %s | %s |" % (B, T, K, C, op, " | ".join(cells)))
    return head + "\n" + "\n".join(rows) + "\n"


def write_atomic(path, text):
    """text into path through a temporary file and a rename: never half-written."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)

if __name__ == "__main__":
    sys.exit(main())
