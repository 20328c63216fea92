"""The deferred check of the op (docs/python.md "Deferred check"): SemiCRF's forward queues the whole
call without waiting (timitseg_crf_nll_deferred) and its backward checks it. Oracle: the eager module
(eager_check=True) and the synchronous CRF.nll on the same inputs: the same bits, the same exception
and message. Host backends report in the forward either way; the CUDA half needs a GPU."""
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); the numpy tests cover the C API")
import timitseg  # noqa: E402
from timitseg.torch import SemiCRF  # noqa: E402

NAMES = ("transition", "duration_bias", "start", "end")


def module(C, K, backend, eager, seed=3):
    torch.manual_seed(seed)
    m = SemiCRF(C, K, backend=backend, init_scale=0.5, eager_check=eager)
    with torch.no_grad():
        m.start.normal_(0, 0.5)
        m.end.normal_(0, 0.5)
    return m.cuda() if backend == "cuda" else m


def step(m, x0, lengths, labels, reduction="mean"):
    """One forward + backward from zeroed gradients: [the loss, grad of the scores, the parameters' grads]."""
    m.zero_grad(set_to_none=True)
    x = x0.clone().requires_grad_()
    loss = m(x, lengths, labels=labels, reduction=reduction)
    (loss if loss.dim() == 0 else loss.sum()).backward()
    return [loss.detach().cpu(), x.grad.cpu()] + [getattr(m, n).grad.cpu() for n in NAMES]


def same_bits(a, b):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert u.dtype == v.dtype and torch.equal(u, v), "output %d differs" % i


def raised(fn):
    with pytest.raises(timitseg.TimitsegError) as e:
        fn()
    return type(e.value), str(e.value)


def test_cpu_deferred_module_equals_eager_bitwise():
    x, lengths = torch.randn(3, 9, 4), torch.tensor([9, 0, 5])
    labels = torch.randint(0, 4, (3, 9))
    for red in ("mean", "none"):
        same_bits(step(module(4, 4, "cpu", False), x, lengths, labels, red),
                  step(module(4, 4, "cpu", True), x, lengths, labels, red))


def test_cpu_errors_raise_in_the_forward_as_before():
    x, lengths = torch.randn(2, 6, 3, requires_grad=True), torch.tensor([6, 4])
    labels = torch.zeros(2, 6, dtype=torch.long)
    labels[1, 2] = 7
    want = raised(lambda: module(3, 3, "cpu", True)(x, lengths, labels=labels))
    assert "gold.labels[1][2] = 7" in want[1]
    assert raised(lambda: module(3, 3, "cpu", False)(x, lengths, labels=labels)) == want


def test_crf_deferred_call_and_check_on_the_host():
    crf = timitseg.CRF(3, 3, backend="cpu")
    x, lengths, labels = torch.randn(2, 6, 3), torch.tensor([6, 4]), torch.randint(0, 3, (2, 6))
    want, gw = crf.nll(x, lengths, labels=labels)
    pending = []
    out, g, _ = crf._nll(x, lengths, labels, None, None, None, False, 1.0, True, "float64", deferred=pending)
    (ticket, _tensors), = pending
    assert ticket >= 1 and crf.check(ticket) is False
    assert torch.equal(out, want) and all(torch.equal(g[n], gw[n]) for n in gw)
    err = raised(lambda: crf.check(ticket + 1))
    assert err[1] == "timitseg_crf_nll: ticket %d was not issued by this handle (last: %d)" % (ticket + 1, ticket)


cuda = pytest.mark.skipif(not (torch.cuda.is_available() and timitseg.has_cuda()),
                          reason="needs a CUDA device and a CUDA build of libtimitseg")


def cuda_problem(B=6, T=40, C=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, C, generator=g).cuda()
    lengths = torch.randint(1, T + 1, (B,), generator=g).cuda()
    labels = torch.randint(0, C, (B, T), generator=g).cuda()
    return x, lengths, labels


@cuda
def test_cuda_deferred_equals_eager_bitwise():
    x, lengths, labels = cuda_problem()
    for red in ("mean", "sum", "none"):
        d = module(5, 6, "cuda", False)
        got = step(d, x, lengths, labels, red)
        same_bits(got, step(module(5, 6, "cuda", True), x, lengths, labels, red))
        same_bits(got, step(d, x, lengths, labels, red))  # a rerun of the same module: the same bits
    crf = module(5, 6, "cuda", True)
    crf._sync()
    want, gw = crf.handle.nll(x, lengths, labels=labels)
    pending = []
    out, g, _ = crf.handle._nll(x, lengths, labels, None, None, None, False, 1.0, True, "float64", deferred=pending)
    assert crf.handle.check(pending[0][0]) is False
    assert torch.equal(out, want) and all(torch.equal(g[n], gw[n]) for n in gw)


@cuda
@pytest.mark.parametrize("bad", ["label", "length", "score"])
def test_cuda_bad_input_raises_in_backward_with_the_eager_message(bad):
    x, lengths, labels = cuda_problem(seed=1)
    if bad == "label":
        labels[2, 1] = 9
    elif bad == "length":
        lengths[3] = x.shape[1] + 1
    else:
        x[1, 0, 2] = float("nan")
    xe = x.clone().requires_grad_()
    want = raised(lambda: module(5, 6, "cuda", True)(xe, lengths, labels=labels, reduction="mean"))
    d = module(5, 6, "cuda", False)
    xd = x.clone().requires_grad_()
    loss = d(xd, lengths, labels=labels, reduction="mean")  # queued: no error yet
    assert raised(loss.backward) == want
    # the failed call leaves nothing behind: the next batch equals the eager module's bits
    x2, lengths2, labels2 = cuda_problem(seed=2)
    same_bits(step(d, x2, lengths2, labels2), step(module(5, 6, "cuda", True), x2, lengths2, labels2))


@cuda
def test_cuda_without_gradients_checks_in_the_forward():
    x, lengths, labels = cuda_problem(seed=3)
    labels[0, 0] = -1
    d = module(5, 6, "cuda", False)
    with torch.no_grad():
        err = raised(lambda: d(x, lengths, labels=labels))
    assert "gold.labels[0][0] = -1" in err[1]


@cuda
def test_cuda_row_of_length_zero_deferred_is_one_clear_error():
    x, lengths, labels = cuda_problem(seed=4)
    lengths[1] = 0
    xx = x.clone().requires_grad_()
    loss = module(5, 6, "cuda", False)(xx, lengths, labels=labels, reduction="mean")
    with pytest.raises(timitseg.LengthError, match="row of length 0.*eager_check=True"):
        loss.backward()
    got = step(module(5, 6, "cuda", True), x, lengths, labels)  # eager: computed, row 1 contributes 0
    want = step(module(5, 6, "cpu", True), x.cpu(), lengths.cpu(), labels.cpu())
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert float(got[1][1].abs().sum()) == 0.0


@cuda
def test_cuda_modules_in_threads_keep_their_own_pending_state():
    """Two modules (two handles), one thread each, forward + backward in turns on their own streams:
    each gives the bits it gives alone."""
    probs = [cuda_problem(seed=10 + i) for i in range(2)]
    alone = [step(module(5, 6, "cuda", False, seed=i), *probs[i]) for i in range(2)]
    mods = [module(5, 6, "cuda", False, seed=i) for i in range(2)]
    got, errors = [None, None], []

    def work(i):
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                for _ in range(5):
                    r = step(mods[i], *probs[i])
                torch.cuda.current_stream().synchronize()
            got[i] = r
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        same_bits(got[i], alone[i])
