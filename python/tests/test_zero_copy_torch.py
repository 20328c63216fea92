"""The zero-copy path through torch tensors (docs/python.md "Zero-copy"): SemiCRF reading parameters written in
place, and the CUDA tests (torch's current stream, a side stream, extreme scores), which skip without a GPU and a
CUDA build. test_zero_copy.py holds the numpy tests, which run without torch."""
import numpy as np
import pytest

import timitseg
from test_zero_copy import make, problem, both_paths, assert_same_bits

torch = pytest.importorskip("torch", reason="torch is not installed; test_zero_copy.py's numpy tests cover the C API")
from timitseg.torch import SemiCRF  # noqa: E402


def test_module_sees_parameters_written_in_place():
    torch.manual_seed(0)
    m = SemiCRF(4, 3, backend="cpu", init_scale=0.5)
    x, L, y = (torch.from_numpy(v) for v in problem(3, 9, 4, 4))
    n1 = m(x, L, labels=y).detach().clone()
    assert torch.equal(m(x, L, labels=y).detach(), n1)  # unchanged parameters: not set again, same result
    with torch.no_grad():
        m.transition.add_(0.25)  # what an optimizer step does
    n2 = m(x, L, labels=y).detach()
    fresh = SemiCRF(4, 3, backend="cpu")
    fresh.load_state_dict(m.state_dict())
    assert not torch.equal(n1, n2)
    assert torch.equal(n2, fresh(x, L, labels=y).detach())


cuda = pytest.mark.skipif(not (torch.cuda.is_available() and timitseg.has_cuda()),
                          reason="needs a CUDA device and a CUDA build of libtimitseg")


def on_cuda(x, L, y):
    return torch.from_numpy(x).cuda(), torch.from_numpy(L).cuda(), torch.from_numpy(y).cuda()


@cuda
def test_cuda_fast_equals_general_and_reference(monkeypatch):
    g, ref = make(39, 30, "cuda", 5), make(39, 30, "reference", 5)
    x, L, y = problem(8, 120, 39, 6)
    fast, general = both_paths(g, *on_cuda(x, L, y), monkeypatch)
    assert_same_bits(fast, general)
    again = g.nll(*on_cuda(x, L, y)[:2], labels=on_cuda(x, L, y)[2], scale=0.25), g.log_partition(*on_cuda(x, L, y)[:2])
    assert_same_bits(fast, again)  # bitwise reruns
    (n_ref, g_ref) = ref.nll(x, L, labels=y, scale=0.25)
    np.testing.assert_allclose(fast[0][0].cpu().numpy(), n_ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast[1].cpu().numpy(), ref.log_partition(x, L), rtol=1e-5)
    for k in g_ref:
        np.testing.assert_allclose(fast[0][1][k].cpu().numpy(), g_ref[k], rtol=1e-5, atol=1e-5, err_msg=k)


@cuda
def test_cuda_side_stream_and_extreme_scores():
    g = make(39, 30, "cuda", 7)
    x, L, y = problem(16, 200, 39, 8, scale=1e4)
    xs, Ls, ys = on_cuda(x, L, y)
    n0, g0 = g.nll(xs, Ls, labels=ys)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # torch's current stream is now s: the op runs on it
        n1, g1 = g.nll(xs, Ls, labels=ys)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(n0, n1) and torch.equal(g0["scores"], g1["scores"])
    assert torch.isfinite(n0).all() and torch.isfinite(g0["scores"]).all()
    assert all(torch.isfinite(v).all() for v in g0.values())


@cuda
def test_cuda_module_backward_stays_on_device_and_reruns_bitwise():
    torch.manual_seed(3)
    m = SemiCRF(39, 30, backend="cuda", init_scale=0.3).cuda()
    x, L, y = on_cuda(*problem(32, 200, 39, 9, lengths=[200] * 32))
    out = []
    for _ in range(2):
        xx = x.clone().requires_grad_()
        n = m(xx, L, labels=y)
        n.mean().backward()
        out.append((n.detach().clone(), xx.grad.clone(), m.transition.grad.clone()))
        m.zero_grad()
    assert out[0][1].is_cuda and all(torch.equal(a, b) for a, b in zip(out[0], out[1]))
    # reduction="mean" (no host wait in the backward) gives the bits of .mean()
    xx = x.clone().requires_grad_()
    loss = m(xx, L, labels=y, reduction="mean")
    loss.backward()
    assert torch.equal(loss.detach(), out[0][0].mean())
    assert torch.equal(xx.grad, out[0][1]) and torch.equal(m.transition.grad, out[0][2])


@cuda
def test_cuda_viterbi_stays_on_device_and_equals_general_path(monkeypatch):
    """cuda Viterbi with int32 lengths runs on the device (crf_fast.h fast_viterbi): the same score bits and
    segments as the general path (int64 lengths: host copies), with and without a phone bonus, a row of length
    0 falling back to the general path; the segments equal the reference backend's."""
    for bonus in (0.0, 1.5):
        g = timitseg.CRF(39, 30, backend="cuda", phone_bonus=bonus)
        r = timitseg.CRF(39, 30, backend="reference", phone_bonus=bonus)
        rng = np.random.default_rng(8)
        for n in ("transition", "duration_bias", "start", "end"):
            v = (rng.standard_normal(g.param_shape(n)) * 0.5).astype(np.float32)
            g.set_param(n, v)
            r.set_param(n, v)
        for lengths in ([120, 7, 1, 64, 120, 33], [120, 0, 5, 64, 1, 2]):
            x, L, _ = problem(6, 120, 39, 12, lengths=lengths)
            xs, Ls = torch.from_numpy(x).cuda(), torch.from_numpy(L).cuda()
            s_fast, seg_fast = g.viterbi(xs, Ls)
            with monkeypatch.context() as m:
                m.setattr(tcrf, "_int32", lambda v: v)
                s_gen, seg_gen = g.viterbi(xs, Ls)
            assert s_fast.is_cuda and s_fast.cpu().numpy().tobytes() == s_gen.cpu().numpy().tobytes()
            s_ref, seg_ref = r.viterbi(x, L)
            np.testing.assert_allclose(s_fast.cpu().numpy(), s_ref, rtol=1e-5, atol=1e-4)
            for a, b, c in zip(seg_fast, seg_gen, seg_ref):
                assert torch.equal(a, b) and np.array_equal(a.cpu().numpy(), c)
