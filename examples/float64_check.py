#!/usr/bin/env python3
"""float64 end to end (docs/python.md "float64"): float64 scores and
parameters on the cpu backend are computed in float64 through the centering
and the CRF, so a 1e-9 change of one score moves log Z by that score's
gradient (its centered marginal) times 1e-9, and central differences at
eps 1e-6 agree with the NLL's gradients to ~1e-9, and with the gradient of
the marginals (CRF.marginals_backward). numpy only; torch, when installed,
runs torch.autograd.gradcheck at its default tolerances too (the NLL and the
marginals).

    python3 examples/float64_check.py
"""
import numpy as np

import timitseg

C, K, T = 3, 4, 6
rng = np.random.default_rng(0)
crf = timitseg.CRF(C, K, backend="cpu")
for name, shape in [("transition", (C, C)), ("duration_bias", (K, C)), ("start", (C,)), ("end", (C,))]:
    crf.set_param(name, rng.normal(0, 0.5, shape))  # float64 arrays: taken unrounded
x = rng.normal(0, 1, (2, T, C))
lengths = np.array([T, 4], dtype=np.int32)
labels = rng.integers(0, C, (2, T)).astype(np.int32)

lz, g = crf.log_partition(x, lengths, grads=True)
y = x.copy()
y[0, 2, 1] += 1e-9
moved = crf.log_partition(y, lengths)[0] - lz[0]
print("log Z moved by %.6e; marginal x 1e-9 = %.6e" % (moved, 1e-9 * g["scores"][0, 2, 1]))
assert abs(moved - 1e-9 * g["scores"][0, 2, 1]) < 1e-4 * abs(moved)

_, gn = crf.nll(x, lengths, labels=labels)
worst = 0.0
for idx in [(0, 0, 0), (1, 3, 2)]:
    hi, lo = x.copy(), x.copy()
    hi[idx] += 1e-6
    lo[idx] -= 1e-6
    fd = (crf.nll(hi, lengths, labels=labels, grads=False).sum() - crf.nll(lo, lengths, labels=labels,
                                                                           grads=False).sum()) / 2e-6
    worst = max(worst, abs(fd - gn["scores"][idx]))
print("NLL: central differences (eps 1e-6) against the gradient: max |difference| %.1e" % worst)
assert worst < 1e-7

# the gradient of the marginals: d sum(v * frame posteriors) / d x, against central differences
v = rng.normal(0, 1, (2, T, C))
gm = crf.marginals_backward(x, lengths, grad_frames=v)
worst = 0.0
for idx in [(0, 0, 0), (1, 3, 2)]:
    hi, lo = x.copy(), x.copy()
    hi[idx] += 1e-6
    lo[idx] -= 1e-6
    fd = ((crf.marginals(hi, lengths)[1] - crf.marginals(lo, lengths)[1]) * v).sum() / 2e-6
    worst = max(worst, abs(fd - gm["scores"][idx]))
print("marginals: central differences (eps 1e-6) against marginals_backward: max |difference| %.1e" % worst)
assert worst < 1e-7

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    from timitseg.torch import SemiCRF
    m = SemiCRF(C, K, backend="cpu").double()
    xt = torch.tensor(x, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda s: m(s, torch.tensor(lengths), labels=torch.tensor(labels)), (xt,))
    print("torch.autograd.gradcheck (default eps and tolerances):", ok)
    ok = torch.autograd.gradcheck(lambda s: m.marginals(s, torch.tensor(lengths), segments=True), (xt,))
    print("torch.autograd.gradcheck of the marginals (boundary, frame, segment posteriors):", ok)
