"""Parameters read in place through torch (SemiCRF binds its parameters; CRF.bind_params on CUDA tensors):
the oracle is a handle whose parameters were copied in with set_param (test_bind.py holds the numpy tests,
which run without torch)."""
import pytest

import timitseg
from test_bind import NAMES, batch, copied, params

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); test_bind.py's numpy tests cover bind_params")
from timitseg.torch import SemiCRF  # noqa: E402
from torch_version import FUSED_ADAMW_CPU, skip_reason  # noqa: E402

cuda = pytest.mark.skipif(not (torch.cuda.is_available() and timitseg.has_cuda()),
                          reason="needs a CUDA device and a CUDA build of libtimitseg")
# AdamW(fused=True) on CPU tensors is newer than the package's minimum torch (docs/python.md)
_FUSED_CPU_SKIP = skip_reason(torch.__version__, FUSED_ADAMW_CPU, "AdamW(fused=True) on the CPU")
FUSED_CPU = [False, pytest.param(True, marks=pytest.mark.skipif(_FUSED_CPU_SKIP is not None,
                                                                reason=_FUSED_CPU_SKIP or ""))]


def training_steps(device, backend, eager_check=True, steps=3, fused=False, dtype=torch.float32):
    """SemiCRF trained with AdamW (fused: its fused kernel, which leaves torch's version counter as it
    was); after each step its loss equals a set_param handle's with the stepped values, bitwise. float32
    parameters are bound: no step after the first calls set_param or bind_params again. Others (float64)
    are copied on every call."""
    torch.manual_seed(0)
    B, T, C, K = 3, 12, 5, 4
    m = SemiCRF(C, K, backend=backend, init_scale=0.5, eager_check=eager_check).to(device=device, dtype=dtype)
    # `fused` only when asked for: torch 1.13's AdamW has no such argument
    opt = torch.optim.AdamW(m.parameters(), lr=0.05, **({"fused": True} if fused else {}))
    x = torch.randn(B, T, C, device=device, dtype=dtype)
    lengths = torch.tensor([T, 7, 1], device=device)
    labels = torch.randint(0, C, (B, T), device=device)
    calls = []
    for step in range(steps):
        opt.zero_grad()
        loss = m(x, lengths, labels=labels, reduction="mean")
        loss.backward()
        if step == 0:  # every later step reads the parameters in place
            for name in ("set_param", "bind_params"):
                real = getattr(m.handle, name)
                setattr(m.handle, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
        opt.step()
        oracle = timitseg.CRF(C, K, backend=backend)
        for n in NAMES:
            oracle.set_param(n, getattr(m, n).detach())
        with torch.no_grad():
            got = m(x, lengths, labels=labels)
        want = oracle.nll(x, lengths.to(torch.int32), labels=labels.to(torch.int32), grads=False)
        assert torch.equal(got, want.to(got.dtype)), step  # float32 NLL: the float64 value rounded once
    if dtype == torch.float32:
        assert calls == []
    else:
        assert calls and set(calls) == {"set_param"}


@pytest.mark.parametrize("fused", FUSED_CPU)
def test_semicrf_reads_optimizer_steps_in_place_cpu(fused):
    training_steps("cpu", "cpu", fused=fused)


@pytest.mark.parametrize("fused", FUSED_CPU)
def test_semicrf_copies_parameters_it_cannot_bind_on_every_call(fused):
    # float64 parameters are copied; a fused AdamW step does not move torch's version counter, and the
    # next forward must still see it
    training_steps("cpu", "cpu", fused=fused, dtype=torch.float64)


@cuda
@pytest.mark.parametrize("eager_check", [True, False])
def test_semicrf_reads_optimizer_steps_in_place_cuda(eager_check):
    training_steps("cuda", "cuda", eager_check)
    training_steps("cuda", "cuda", eager_check, fused=True)



@cuda
def test_segment_posteriors_read_the_bound_parameters_of_the_call_cuda():
    C, K = 4, 3
    p = {n: torch.from_numpy(v).cuda() for n, v in params(C, K, 3).items()}
    crf = timitseg.CRF(C, K, backend="cuda", reg=0.01)
    crf.bind_params(*(p[n] for n in NAMES))
    x, lengths, _ = batch(C=C)
    x, lengths = torch.from_numpy(x).cuda(), torch.from_numpy(lengths).cuda()
    for step in range(3):
        got = crf.marginals(x, lengths, boundaries=False, frames=False, segments=True)[2]
        want = copied(C, K, {n: v.cpu().numpy() for n, v in p.items()}, "cuda").marginals(
            x, lengths, boundaries=False, frames=False, segments=True)[2]
        assert torch.equal(got, want), step
        p["transition"] += 0.25  # in place, as an optimizer step
        p["duration_bias"][1] -= 0.5
