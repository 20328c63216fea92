"""A SemiCRF training step with its parameters bound in place against the same step copying them in.

Paired A/B in one process (the host's speed drifts between minutes): a step is SemiCRF's mean NLL
(eager_check=False), its backward and an AdamW step on the CRF's parameters, which the next forward reads.
"bound": SemiCRF as it is (CRF.bind_params: the handle reads the parameters in place). "set_param": the same
module with SemiCRF._bindable forced False, so that it copies the four parameters in with set_param on every
call (a host round trip each on the cuda backend). The two alternate call by call (one step and a wait), then
per step of 20 queued steps; AdamW foreach (torch's default) and fused. B 32, T 200, K 30, C 39, cuda.

    PYTHONPATH=python TIMITSEG_LIBRARY=build/lib/libtimitseg.so python3 bench/python_param_bind.py
"""
import argparse
import statistics

import torch

from timitseg.torch import SemiCRF
from python_op_overhead import elapsed_ms  # bench/, the folder of this script


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="32,200,30,39", help="B,T,K,C")
    ap.add_argument("--repeats", type=int, default=300, help="pairs of single steps (queued runs: a tenth)")
    a = ap.parse_args()
    B, T, K, C = (int(v) for v in a.shape.split(","))
    torch.manual_seed(0)
    x = torch.randn(B, T, C, device="cuda", requires_grad=True)
    lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
    labels = torch.randint(0, C, (B, T), device="cuda", dtype=torch.int32)

    def make(bind, fused):
        m = SemiCRF(C, K, backend="cuda", eager_check=False).cuda()
        if not bind:
            m._bindable = lambda *args: False  # copies the parameters in with set_param on every call
        return m, torch.optim.AdamW(m.parameters(), lr=1e-4, fused=fused)

    def step(mo):
        m, opt = mo
        opt.zero_grad(set_to_none=True)
        x.grad = None
        m(x, lengths, labels=labels, reduction="mean").backward()
        opt.step()

    print("GPU: %s; B %d T %d K %d C %d" % (torch.cuda.get_device_name(), B, T, K, C))
    for fused in (False, True):
        bound, copied = make(True, fused), make(False, fused)
        for _ in range(30):
            step(bound)
            step(copied)
        torch.cuda.synchronize()
        for n, reps in ((1, a.repeats), (20, max(a.repeats // 10, 2))):
            tb, tc = [], []
            for i in range(reps):  # alternated, each first in every other pair
                order = ((tb, bound), (tc, copied)) if i % 2 else ((tc, copied), (tb, bound))
                for out, mo in order:
                    out.append(elapsed_ms(lambda: step(mo), n))
            d = sorted(c - b for b, c in zip(tb, tc))
            print("AdamW fused=%s, %s: bound %.3f ms, set_param %.3f ms (medians of %d); set_param - bound, paired: "
                  "median %.3f ms [p10 %.3f, p90 %.3f]"
                  % (fused, "one step and a wait" if n == 1 else "per step of %d queued" % n, statistics.median(tb),
                     statistics.median(tc), reps, statistics.median(d), d[len(d) // 10], d[len(d) * 9 // 10]))


if __name__ == "__main__":
    main()
