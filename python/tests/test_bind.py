"""Parameters read in place (CRF.bind_params, and SemiCRF, which binds its
parameters): the oracle is a handle whose parameters were copied in with
set_param; with the same values every output has the same bits, an in-place
write (an optimizer step) is what the next call reads, and a training loop
makes no set_param call after its first step."""
import numpy as np
import pytest

import timitseg

NAMES = ("transition", "duration_bias", "start", "end")


def params(C, K, seed):
    rng = np.random.default_rng(seed)
    shapes = {"transition": (C, C), "duration_bias": (K, C), "start": (C,), "end": (C,)}
    return {n: (rng.standard_normal(shapes[n]) * 0.5).astype(np.float32) for n in NAMES}


def copied(C, K, p, backend="cpu"):
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    for n in NAMES:
        crf.set_param(n, p[n])
    return crf


def batch(B=3, T=9, C=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    lengths = np.array([T, 4, 1][:B], dtype=np.int32)
    labels = rng.integers(0, 2, (B, T)).astype(np.int32)  # labels 0 and 1 (the test forbids ending in 2)
    return x, lengths, labels


def same_bits(a, b):
    nll_a, g_a = a
    nll_b, g_b = b
    assert np.array_equal(nll_a, nll_b)
    for k in g_b:
        assert np.array_equal(np.asarray(g_a[k]), np.asarray(g_b[k])), k


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bound_numpy_parameters_equal_copied_ones_and_writes_are_read(backend):
    C, K = 4, 3
    p = params(C, K, 1)
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    crf.bind_params(*(p[n] for n in NAMES))
    x, lengths, labels = batch(C=C)
    same_bits(crf.nll(x, lengths, labels=labels), copied(C, K, p, backend).nll(x, lengths, labels=labels))
    assert crf.penalty() == copied(C, K, p, backend).penalty() > 0
    p["transition"] *= 1.5  # in place, as an optimizer step
    p["end"][2] = -np.inf   # a forbidden end label
    want = copied(C, K, p, backend)
    same_bits(crf.nll(x, lengths, labels=labels), want.nll(x, lengths, labels=labels))
    assert np.array_equal(crf.log_partition(x, lengths), want.log_partition(x, lengths))
    assert np.array_equal(crf.get_param("transition"), p["transition"])
    p["start"][1] = np.nan
    with pytest.raises(timitseg.TimitsegError, match=r"start\[1\]"):
        crf.nll(x, lengths, labels=labels)
    p["start"][1] = 0.0
    crf.unbind_params()
    kept = {n: v.copy() for n, v in p.items()}
    p["duration_bias"][:] = 9.0  # no longer bound
    same_bits(crf.nll(x, lengths, labels=labels), copied(C, K, kept, backend).nll(x, lengths, labels=labels))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_segment_posteriors_read_the_bound_parameters_of_the_call(backend):
    # The segment posteriors alone (no other call between the write and it) read what the bound arrays hold now.
    C, K = 4, 3
    p = params(C, K, 3)
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    crf.bind_params(*(p[n] for n in NAMES))
    x, lengths, _ = batch(C=C)
    for step in range(3):
        got = crf.marginals(x, lengths, boundaries=False, frames=False, segments=True)[2]
        want = copied(C, K, p, backend).marginals(x, lengths, boundaries=False, frames=False, segments=True)[2]
        assert np.array_equal(got, want), step
        p["transition"] += 0.25  # in place, as an optimizer step
        p["duration_bias"][1] -= 0.5


def test_bad_bindings_name_the_parameter():
    C, K = 4, 3
    p = params(C, K, 2)
    crf = timitseg.CRF(C, K, backend="cpu")
    with pytest.raises(timitseg.DTypeError, match="parameter transition"):
        crf.bind_params(p["transition"].astype(np.float64), p["duration_bias"], p["start"], p["end"])
    with pytest.raises(timitseg.ShapeError, match="parameter duration_bias"):
        crf.bind_params(p["transition"], p["duration_bias"].T.copy(), p["start"], p["end"])
    with pytest.raises(timitseg.ShapeError, match="contiguous"):
        crf.bind_params(p["transition"].T, p["duration_bias"], p["start"], p["end"])


torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); the numpy tests above cover bind_params")
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
