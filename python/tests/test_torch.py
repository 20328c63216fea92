"""timitseg.torch.SemiCRF: gradcheck, float64 agreement with the numpy path,
half precision, mixed lengths, errors; CUDA (with torch's current stream)
when a GPU and a CUDA build are present."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); the numpy tests cover the C API")
import timitseg  # noqa: E402
from timitseg.torch import SemiCRF  # noqa: E402


def module(C=3, K=3, backend="reference", seed=0, **kw):
    torch.manual_seed(seed)
    m = SemiCRF(C, K, backend=backend, init_scale=0.5, **kw)
    with torch.no_grad():
        m.start.normal_(0, 0.5)
        m.end.normal_(0, 0.5)
    return m


def test_parameters_carry_the_checkpoint_names():
    m = module()
    assert sorted(n for n, _ in m.named_parameters()) == ["duration_bias", "end", "start", "transition"]
    ln = module(duration_model="lognormal")
    assert sorted(n for n, _ in ln.named_parameters()) == ["duration_lognormal", "end", "start", "transition"]
    assert "duration_bias" in dict(ln.named_buffers())


def test_gradcheck_float64():
    m = module(backend="reference")
    B, T, C = 2, 5, 3
    x = torch.randn(B, T, C, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    labels = torch.randint(0, C, (B, T))
    weights = torch.tensor([0.3, 1.7], dtype=torch.float64)  # unequal: the per-utterance parameter path too

    # The kernels compute in float32: differences of 1e-3 resolve gradients to about 1e-3.
    assert torch.autograd.gradcheck(lambda xx: (m(xx, lengths, labels=labels) * weights).sum(), (x,),
                                    eps=1e-3, atol=2e-3, rtol=1e-2)
    loss = (m(x, lengths, labels=labels) * weights).sum()
    loss.backward()
    for name in ["transition", "duration_bias", "start", "end"]:
        p = getattr(m, name)
        g = p.grad.clone()
        base = p.detach().clone()
        for idx in [(0,) * p.dim(), tuple(s - 1 for s in p.shape)]:
            vals = []
            for sgn in (1, -1):
                with torch.no_grad():
                    p.copy_(base)
                    p[idx] += sgn * 1e-2
                with torch.no_grad():
                    vals.append(float((m(x.detach(), lengths, labels=labels) * weights).sum()))
            with torch.no_grad():
                p.copy_(base)
            assert float(g[idx]) == pytest.approx((vals[0] - vals[1]) / 2e-2, abs=3e-3), (name, idx)


def test_float64_agrees_with_numpy_and_float32():
    m = module(backend="cpu")
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    lengths = torch.tensor([6, 0, 2])
    labels = torch.randint(0, 3, (3, 6))
    nll = m(x, lengths, labels=labels)
    crf = m.handle
    want = crf.nll(x.numpy(), lengths.numpy(), labels=labels.numpy(), grads=False)
    np.testing.assert_array_equal(nll.detach().numpy(), want)
    n32 = m(x.float(), lengths, labels=labels)
    np.testing.assert_allclose(n32.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    assert nll[1] == 0.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(dtype):
    m = module(backend="cpu")
    x = torch.randn(2, 5, 3).to(dtype).requires_grad_()
    lengths = torch.tensor([5, 4])
    labels = torch.randint(0, 3, (2, 5))
    nll = m(x, lengths, labels=labels)
    want = m(x.detach().float(), lengths, labels=labels)
    torch.testing.assert_close(nll, want)
    nll.sum().backward()
    assert x.grad.dtype == dtype


def test_viterbi_marginals_align_and_lognormal():
    m = module(backend="cpu")
    x = torch.randn(2, 6, 3)
    lengths = torch.tensor([6, 4])
    score, segs = m.viterbi(x, lengths)
    assert [int(s[:, 1].sum()) for s in segs] == [6, 4]
    bo, fr = m.marginals(x, lengths)
    torch.testing.assert_close(fr[0].sum(1), torch.ones(6, dtype=torch.float64))
    s, spans = m.align(x, lengths, torch.tensor([[0, 1, 2], [2, 1, 0]]), torch.tensor([3, 3]))
    assert int(spans[0, :, 1].sum()) == 6 and int(spans[1, :, 1].sum()) == 4
    ln = module(duration_model="lognormal", backend="cpu")
    nll = ln(x, lengths, labels=torch.randint(0, 3, (2, 6))).sum()
    nll.backward()
    assert ln.duration_lognormal.grad is not None and torch.all(torch.isfinite(ln.duration_lognormal.grad))
    assert float(ln.duration_table().abs().sum()) > 0  # the derived table (refreshed when read: duration_table)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reductions_equal_mean_and_sum_bitwise(dtype):
    """reduction="mean"/"sum" (a backward without a host wait) gives the bits of .mean()/.sum() of the
    per-utterance NLL, in the value and in every gradient; per-utterance weights still match one by one."""
    B, T, C = 3, 9, 4
    x0 = torch.randn(B, T, C).to(dtype)
    lengths, labels = torch.tensor([9, 0, 5]), torch.randint(0, C, (B, T))
    names = ["transition", "duration_bias", "start", "end"]

    def run(reduce):
        m = module(C, 4, backend="cpu", seed=7)
        x = x0.clone().requires_grad_()
        loss = reduce(m, x)
        loss.backward()
        return [loss.detach()] + [x.grad] + [getattr(m, n).grad for n in names]

    for red in ("mean", "sum"):
        want = run(lambda m, x: getattr(m(x, lengths, labels=labels), red)())
        got = run(lambda m, x: m(x, lengths, labels=labels, reduction=red))
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and torch.equal(w, g), red
        # against the handle's own gradients of scale * sum(nll) (no autograd): the module's weights are right
        m = module(C, 4, backend="cpu", seed=7)
        m._sync()
        _, gh = m.handle.nll(x0.float() if dtype != torch.float64 else x0, lengths, labels=labels,
                             scale=1.0 / B if red == "mean" else 1.0)
        for n, g in zip(names, got[2:]):
            # (float64 scores: the handle's gradients are float64, the module's float32 parameters' cast to float32)
            torch.testing.assert_close(g, gh[n].to(g.dtype), rtol=1e-6, atol=1e-7,
                                       msg=lambda s, n=n: "%s %s: %s" % (red, n, s))
        torch.testing.assert_close(got[1].double(), gh["scores"].double(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-6,
                                   atol=1e-2 if dtype == torch.bfloat16 else 1e-7)
    w = torch.tensor([0.5, 2.0, -1.25], dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    weighted = run(lambda m, x: (m(x, lengths, labels=labels) * w).sum())
    parts = [run(lambda m, x, b=b: m(x, lengths, labels=labels)[b] * w[b]) for b in range(B)]
    for i in range(2, len(weighted)):  # the parameters' gradients: the sum of the utterances' within rounding
        torch.testing.assert_close(weighted[i], sum(p[i] for p in parts), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reduction must be one of none, mean, sum"):
        module()(x0.float(), lengths, labels=labels, reduction="avg")


def test_bad_device_and_dtype_are_one_exception():
    m = module(backend="cpu")
    with pytest.raises(timitseg.DTypeError, match="lengths has dtype"):
        m(torch.randn(2, 4, 3), torch.tensor([4.0, 2.0]), labels=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(timitseg.ShapeError, match="scores has shape"):
        m(torch.randn(2, 4, 5), torch.tensor([4, 2]), labels=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(timitseg.LengthError, match=r"lengths\[0\] = 9"):
        m(torch.randn(2, 4, 3), torch.tensor([9, 2]), labels=torch.zeros(2, 4, dtype=torch.long))


cuda = pytest.mark.skipif(not (torch.cuda.is_available() and timitseg.has_cuda()),
                          reason="needs a CUDA device and a CUDA build of libtimitseg")


@cuda
def test_cuda_equals_cpu_backend_and_reruns_bitwise():
    x = torch.randn(4, 50, 5, device="cuda")
    lengths = torch.tensor([50, 1, 0, 33], device="cuda")
    labels = torch.randint(0, 5, (4, 50), device="cuda")
    # a row of length 0 on CUDA: the eager check (the deferred one raises, test_deferred.py)
    g = module(5, 6, backend="cuda", eager_check=True).cuda()
    c = module(5, 6, backend="reference")
    out = []
    for _ in range(2):
        xx = x.clone().requires_grad_()
        n = g(xx, lengths, labels=labels)
        n.sum().backward()
        out.append((n.detach().cpu(), xx.grad.cpu(), g.transition.grad.cpu().clone()))
        g.zero_grad()
    assert all(torch.equal(a, b) for a, b in zip(out[0], out[1]))  # --deterministic-style reruns
    n_ref = c(x.cpu(), lengths.cpu(), labels=labels.cpu())
    torch.testing.assert_close(out[0][0], n_ref.detach(), rtol=1e-5, atol=1e-4)
    with pytest.raises(timitseg.DeviceError, match="on the CPU"):
        g(x, lengths.cpu(), labels=labels)


two_gpus = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2 and timitseg.has_cuda()),
                              reason="needs two CUDA devices and a CUDA build of libtimitseg")


@two_gpus
def test_module_moved_to_another_gpu_follows_it():
    # made on device 0, moved to device 1: a new handle there, the same bits, the current device untouched;
    # a CRF handle made on device 0 refuses device 1's tensors (before: kernels read another device's memory)
    torch.cuda.set_device(0)
    m = module(5, 6, backend="cuda", eager_check=False).cuda(0)
    x = torch.randn(3, 30, 5)
    lengths, labels = torch.tensor([30, 7, 1]), torch.randint(0, 5, (3, 30))

    def run(dev):
        xx = x.to(dev).requires_grad_()
        n = m(xx, lengths.to(dev), labels=labels.to(dev), reduction="mean")
        n.backward()
        out = (n.detach().cpu(), xx.grad.cpu(), m.transition.grad.cpu().clone())
        m.zero_grad()
        return out

    on0 = run("cuda:0")
    m.to("cuda:1")
    on1 = run("cuda:1")
    assert torch.cuda.current_device() == 0
    assert all(torch.equal(a, b) for a, b in zip(on0, on1))
    assert torch.equal(m.viterbi(x.to("cuda:1"), lengths.to("cuda:1"))[0].cpu(),
                       m.to("cuda:0").viterbi(x.to("cuda:0"), lengths.to("cuda:0"))[0].cpu())
    crf = timitseg.CRF(5, 6, backend="cuda")
    with pytest.raises(timitseg.DeviceError, match="scores is on CUDA device 1, the handle's cuda backend runs on "
                                                   "CUDA device 0"):
        crf.log_partition(x.to("cuda:1"), lengths.to("cuda:1"))


def test_module_segment_posteriors_sum_to_boundary_posteriors():
    m = module(3, 4, backend="cpu")
    x, lengths = torch.randn(2, 6, 3), torch.tensor([6, 4])
    bo, fr, sg = m.marginals(x, lengths, segments=True)
    assert sg.shape == (2, 6, 4, 3) and sg.dtype == torch.float64
    torch.testing.assert_close(sg.sum(dim=(2, 3)), bo[:, 1:], rtol=0, atol=1e-6)
    # frame posteriors: P(frame t in a segment of label c) = sum of the segments covering t
    cover = torch.zeros(2, 6, 3, dtype=torch.float64)
    for t in range(6):
        for d in range(1, 5):
            for f in range(max(0, t - d + 1), t + 1):
                cover[:, f] += sg[:, t, d - 1]
    torch.testing.assert_close(cover, fr, rtol=0, atol=1e-6)


@cuda
def test_cuda_segment_posteriors_equal_reference():
    x = torch.randn(3, 20, 5, device="cuda")
    lengths = torch.tensor([20, 0, 7], device="cuda")
    g, r = module(5, 6, backend="cuda").cuda(), module(5, 6, backend="reference")
    _, _, sg = g.marginals(x, lengths, segments=True)
    _, _, sr = r.marginals(x.cpu(), lengths.cpu(), segments=True)
    assert sg.is_cuda
    torch.testing.assert_close(sg.cpu(), sr, rtol=0, atol=1e-12)


@cuda
def test_cuda_marginals_gradient_equals_reference():
    """The gradient of the marginals on a cuda module (float32 scores: computed on the host in float64 from
    the float32 values, CUDA tensors copied) against the reference module's on the same values."""
    x = torch.randn(3, 20, 5, device="cuda")
    lengths = torch.tensor([20, 0, 7], device="cuda")
    g, r = module(5, 6, backend="cuda").cuda(), module(5, 6, backend="reference")
    ups = [torch.randn(3, 21, dtype=torch.float64), torch.randn(3, 20, 5, dtype=torch.float64),
           torch.randn(3, 20, 6, 5, dtype=torch.float64)]
    grads = []
    for m, xx, uu in ((g, x, [u.cuda() for u in ups]), (r, x.cpu(), ups)):
        xx = xx.detach().requires_grad_(True)
        out = m.marginals(xx, lengths if xx.is_cuda else lengths.cpu(), segments=True)
        loss = sum((u * o).sum() for u, o in zip(uu, out))
        grads.append(torch.autograd.grad(loss, [xx] + [getattr(m, n) for n in m._param_names()]))
    for a, b in zip(*grads):
        assert a.is_cuda
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("check", ["eager", "backward"])
def test_reused_output_descriptors_follow_shape_and_dtype_changes(check):
    """SemiCRF's calls re-aim the last layout's output descriptors (CRF._outputs_cached): calls alternating
    shapes and dtypes on one module give, bit for bit, the values and gradients of a fresh handle's CRF.nll
    (the descriptors built anew), scaled as the module's mean reduction scales them."""
    C, K = 4, 3
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3, check=check)
    g = torch.Generator().manual_seed(5)
    shapes = [(2, 6, torch.float32), (3, 4, torch.float32), (2, 6, torch.float64), (2, 6, torch.float32)]
    for B, T, dt in shapes + shapes:
        x = torch.randn(B, T, C, generator=g, dtype=dt).requires_grad_(True)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        labels = torch.randint(0, C, (B, T), generator=g)
        m.zero_grad(set_to_none=True)
        loss = m(x, lengths, labels=labels, reduction="sum")
        loss.backward()
        ref = timitseg.CRF(C, K, backend="cpu")
        for n in ("transition", "duration_bias", "start", "end"):
            ref.set_param(n, getattr(m, n).detach().to(dt).numpy())
        nll, grads = ref.nll(x.detach(), lengths, labels=labels)
        assert torch.equal(loss.detach(), nll.sum().to(dt)) or torch.equal(loss.detach(), nll.to(dt).sum())
        assert torch.equal(x.grad, grads["scores"])
        for n in ("transition", "duration_bias", "start", "end"):
            assert torch.equal(getattr(m, n).grad, grads[n].to(getattr(m, n).grad.dtype)), n


@pytest.mark.parametrize("model", ["table", "lognormal"])
def test_modules_of_one_configuration_share_a_handle_and_each_computes_with_its_own_parameters(model):
    """Two modules of one configuration in one thread compute with one C handle (timitseg/_session.py); calls
    alternating between them (forward + backward, per-utterance weights, log Z, Viterbi, the log-normal
    table) give, bit for bit, what a fresh handle given each module's parameters gives. A module used in
    another thread computes with that thread's handle, with the same bits."""
    import threading
    C, K = 4, 3
    torch.manual_seed(2)
    mods = [SemiCRF(C, K, backend="cpu", init_scale=0.4, duration_model=model) for _ in range(2)]
    assert mods[0].handle is mods[1].handle
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 6, C, generator=g)
    lengths, labels = torch.tensor([6, 4, 2]), torch.randint(0, C, (3, 6), generator=g)
    w = torch.tensor([1.0, -2.0, 0.5])

    def oracle(m):
        ref = timitseg.CRF(C, K, backend="cpu", duration_model=model)
        for n in m._param_names():
            ref.set_param(n, getattr(m, n).detach())
        weighted = {n: torch.zeros(getattr(m, n).shape, dtype=torch.float64) for n in m._param_names()}
        for r in range(3):  # the gradients of sum_b w[b] * nll[b], row by row in float64 as the module sums them
            _, gr = ref.nll(x[r:r + 1], lengths[r:r + 1], labels=labels[r:r + 1])
            for n in weighted:
                weighted[n] += gr[n].to(torch.float64) * w[r].to(torch.float64)
        return [ref.nll(x, lengths, labels=labels, grads=False).float(), ref.log_partition(x, lengths),
                ref.viterbi(x, lengths, padded=True)[1], torch.from_numpy(ref.get_param("duration_bias"))] + \
            [weighted[n].float() for n in m._param_names()]

    def run(m):
        m.zero_grad(set_to_none=True)
        nll = m(x, lengths, labels=labels)
        (nll * w).sum().backward()
        return [nll.detach(), m.log_partition(x, lengths), m.viterbi(x, lengths, padded=True)[1],
                m.duration_table().clone()] + [getattr(m, n).grad for n in m._param_names()]

    for i in (0, 1, 0, 1):
        got, want = run(mods[i]), oracle(mods[i])
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
        assert torch.equal(got[3], want[3])
        for a, b in zip(got[4:], want[4:]):  # weights not all equal: the parameters' gradients row by row
            assert torch.equal(a, b)
    ref_grads = run(mods[0])[4:]
    other = []
    t = threading.Thread(target=lambda: other.append((run(mods[0]), mods[0].handle)))
    t.start()
    t.join()
    assert other[0][1] is not mods[1].handle
    for a, b in zip(other[0][0][4:], ref_grads):
        assert torch.equal(a, b)
