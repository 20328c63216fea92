"""The zero-copy path (capi/crf_fast.h, docs/python.md "Zero-copy"): float32
scores and int32 lengths/labels, contiguous, in the backend's memory space,
go to the kernels in place; everything else takes the general path. Both
must give the same bits on the same backend. The general path is reached by
keeping int64 lengths and labels (timitseg.crf._int32 patched out). The CUDA
tests (torch's current stream, a side stream, extreme scores) skip without a
GPU and a CUDA build."""
import numpy as np
import pytest

import timitseg
import timitseg.crf as tcrf


def make(C, K, backend, seed, reg=0.01):
    rng = np.random.default_rng(seed)
    crf = timitseg.CRF(C, K, backend=backend, threads=2, reg=reg)
    for n in ("transition", "duration_bias", "start", "end"):
        crf.set_param(n, (rng.standard_normal(crf.param_shape(n)) * 0.5).astype(np.float32))
    return crf


def problem(B, T, C, seed, scale=1.0, lengths=None):
    rng = np.random.default_rng(seed + 100)
    x = (rng.standard_normal((B, T, C)) * scale).astype(np.float32)
    L = np.array(lengths if lengths is not None else rng.integers(1, T + 1, B), dtype=np.int64)
    y = rng.integers(0, C, (B, T)).astype(np.int64)
    return x, L, y


def both_paths(crf, x, L, y, monkeypatch):
    """(zero-copy, general) results of nll with every gradient and log_partition."""
    fast = crf.nll(x, L, labels=y, scale=0.25), crf.log_partition(x, L)
    with monkeypatch.context() as m:
        m.setattr(tcrf, "_int32", lambda v: v)
        general = crf.nll(x, L, labels=y, scale=0.25), crf.log_partition(x, L)
    return fast, general


def assert_same_bits(a, b):
    (na, ga), lza = a
    (nb, gb), lzb = b
    as_np = (lambda v: v.detach().cpu().numpy()) if not isinstance(na, np.ndarray) else (lambda v: v)
    assert as_np(na).tobytes() == as_np(nb).tobytes()
    assert as_np(lza).tobytes() == as_np(lzb).tobytes()
    for k in ga:
        assert as_np(ga[k]).tobytes() == as_np(gb[k]).tobytes(), k


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_numpy_float32_fast_equals_general_bitwise(backend, monkeypatch):
    crf = make(5, 4, backend, 1)
    for seed, scale in ((1, 1.0), (2, 1e4)):
        x, L, y = problem(6, 17, 5, seed, scale)
        fast, general = both_paths(crf, x, L, y, monkeypatch)
        assert_same_bits(fast, general)
        assert np.all(np.isfinite(fast[0][0]))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_numpy_cumulative_fast_equals_general_bitwise(backend, monkeypatch):
    crf = make(4, 3, backend, 3)
    x, L, y = problem(5, 11, 4, 4)
    cum = np.cumsum(np.concatenate([np.zeros((5, 1, 4), np.float32), x], axis=1), axis=1, dtype=np.float32)
    fast = crf.nll(cum, L, labels=y, cumulative=True), crf.log_partition(cum, L, cumulative=True)
    with monkeypatch.context() as m:
        m.setattr(tcrf, "_int32", lambda v: v)
        general = crf.nll(cum, L, labels=y, cumulative=True), crf.log_partition(cum, L, cumulative=True)
    assert_same_bits(fast, general)


def test_int64_values_outside_int32_are_still_rejected():
    crf = make(3, 3, "cpu", 2)
    x, L, y = problem(2, 5, 3, 3, lengths=[5, 4])
    y[1, 0] = 2 ** 32 + 1  # 1 after a plain int32 cast
    with pytest.raises(timitseg.TimitsegError, match="labels"):
        crf.nll(x, L, labels=y)
    L[0] = 2 ** 32 + 5
    with pytest.raises(timitseg.LengthError, match=r"lengths\[0\]"):
        crf.nll(x, L, labels=y)


torch = pytest.importorskip("torch", reason="torch is not installed; the numpy tests above cover the C API")
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
