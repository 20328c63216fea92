"""torch.autograd.gradcheck of SemiCRF in float64 at torch's default eps
(1e-6) and tolerances (atol 1e-5, rtol 1e-3): the NLL, the log partition and
the marginals (boundary, frame and segment posteriors; their gradient by
timitseg_crf_marginals_backward), with respect to the scores (and onset for
the marginals) and each CRF parameter, at K = 1, K < T and K > T,
on padded batches, on the reference and cpu backends (float64 end to end:
docs/python.md "float64")."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); test_float64.py covers the numpy path")
try:  # torch >= 2.0
    from torch.func import functional_call  # noqa: E402
except ImportError:  # torch 1.13 (Debian 12's python3-torch): the same function, its older home
    from torch.nn.utils.stateless import functional_call  # noqa: E402

from timitseg.torch import SemiCRF  # noqa: E402

# (K, T, lengths): K = 1, K < T, K > T; every batch padded, one with a row of length 0
CASES = [(1, 5, (5, 3, 0)), (3, 6, (6, 4, 1)), (8, 5, (5, 2, 3))]
NAMES = ("transition", "duration_bias", "start", "end")


class LogZ(torch.nn.Module):
    """SemiCRF.log_partition as a module's forward (for torch.func.functional_call)."""

    def __init__(self, crf):
        super().__init__()
        self.crf = crf

    def forward(self, x, lengths):
        return self.crf.log_partition(x, lengths)


def setup(backend, K, T, lengths, seed=0, reg=0.0):
    torch.manual_seed(seed)
    C = 3
    m = SemiCRF(C, K, backend=backend, init_scale=0.5, reg=reg).double()
    with torch.no_grad():
        m.start.normal_(0, 0.5)
        m.end.normal_(0, 0.5)
    x = torch.randn(len(lengths), T, C, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor(lengths)
    labels = torch.randint(0, C, (len(lengths), T))
    params = tuple(getattr(m, n).detach().clone().requires_grad_(True) for n in NAMES)
    return m, x, lens, labels, params


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("K,T,lengths", CASES)
def test_gradcheck_nll_scores_and_every_parameter(backend, K, T, lengths):
    m, x, lens, labels, params = setup(backend, K, T, lengths)

    def nll(xx, *ps):
        return functional_call(m, dict(zip(NAMES, ps)), (xx, lens), {"labels": labels})

    assert torch.autograd.gradcheck(nll, (x,) + params)  # torch's defaults: eps 1e-6, atol 1e-5, rtol 1e-3


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("K,T,lengths", CASES)
def test_gradcheck_log_partition_scores_and_every_parameter(backend, K, T, lengths):
    m, x, lens, _, params = setup(backend, K, T, lengths, seed=1)

    wrapper = LogZ(m)

    def log_z(xx, *ps):
        return functional_call(wrapper, {"crf." + n: p for n, p in zip(NAMES, ps)}, (xx, lens))

    assert torch.autograd.gradcheck(log_z, (x,) + params)


class MeanLoss(torch.nn.Module):
    """The example's loss: mean NLL + the penalty (computed by the C API)."""

    def __init__(self, crf):
        super().__init__()
        self.crf = crf

    def forward(self, x, lengths, labels):
        return self.crf(x, lengths, labels=labels, reduction="mean") + self.crf.penalty()


def test_gradcheck_mean_nll_plus_the_penalty():
    m, x, lens, labels, params = setup("cpu", 3, 6, (6, 4, 1), seed=2, reg=0.1)
    wrapper = MeanLoss(m)

    def loss(xx, *ps):
        return functional_call(wrapper, {"crf." + n: p for n, p in zip(NAMES, ps)}, (xx, lens, labels))

    assert torch.autograd.gradcheck(loss, (x,) + params)
    # the penalty's value: the C API's, as the definition
    with torch.no_grad():
        want = 0.1 * (m.transition.pow(2).sum() + m.duration_bias.pow(2).sum())
    assert float(m.penalty().detach()) == pytest.approx(float(want), rel=1e-14)


def test_a_1e9_change_of_one_score_moves_log_z_by_the_marginal_times_1e9():
    m, x, lens, _, _ = setup("cpu", 3, 6, (6,), seed=3)
    x = x.detach().requires_grad_(True)
    lz = m.log_partition(x, lens)
    (g,) = torch.autograd.grad(lz.sum(), x)
    with torch.no_grad():
        y = x.detach().clone()
        y[0, 2, 1] += 1e-9
        moved = float(m.log_partition(y, lens)[0] - lz[0])
    assert moved != 0.0
    assert moved == pytest.approx(1e-9 * float(g[0, 2, 1]), rel=1e-4)


class Marginals(torch.nn.Module):
    """SemiCRF.marginals as a module's forward: the boundary, frame (and segment) posteriors."""

    def __init__(self, crf, segments):
        super().__init__()
        self.crf, self.segments = crf, segments

    def forward(self, x, lengths, onset):
        return self.crf.marginals(x, lengths, onset=onset, segments=self.segments)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("K,T,lengths", CASES)
@pytest.mark.parametrize("segments", [False, True])
def test_gradcheck_marginals_scores_onset_and_every_parameter(backend, K, T, lengths, segments):
    """The gradient of the marginals (timitseg_crf_marginals_backward: docs/crf.md "Gradient of the
    marginals") at torch's default eps and tolerances, w.r.t. the scores, onset and each parameter."""
    m, x, lens, _, params = setup(backend, K, T, lengths, seed=4)
    onset = (0.5 * torch.randn(x.shape, dtype=torch.float64)).requires_grad_(True)
    wrapper = Marginals(m, segments)

    def marginals(xx, oo, *ps):
        return functional_call(wrapper, {"crf." + n: p for n, p in zip(NAMES, ps)}, (xx, lens, oo))

    assert torch.autograd.gradcheck(marginals, (x, onset) + params)


def test_gradcheck_marginals_lognormal():
    torch.manual_seed(5)
    m = SemiCRF(3, 3, backend="cpu", duration_model="lognormal").double()
    names = ("transition", "duration_lognormal", "start", "end")
    with torch.no_grad():
        m.duration_lognormal.add_(0.3 * torch.randn(3, 3, dtype=torch.float64))
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([5, 2])
    params = tuple(getattr(m, n).detach().clone().requires_grad_(True) for n in names)
    wrapper = Marginals(m, True)

    def marginals(xx, *ps):
        return functional_call(wrapper, {"crf." + n: p for n, p in zip(names, ps)}, (xx, lens, None))

    assert torch.autograd.gradcheck(marginals, (x,) + params)


def test_the_frame_marginals_gradient_equals_central_differences():
    """The backward of the frame marginals alone (the others' upstream None: no zeros made) against
    central differences of sum(v * frames) at eps 1e-5, float64 end to end; padding frames get 0."""
    m, x, lens, _, _ = setup("reference", 3, 6, (6, 4), seed=6)
    v = torch.randn(2, 6, 3, dtype=torch.float64)
    _, fr = m.marginals(x, lens)
    (got,) = torch.autograd.grad((fr * v).sum(), x)
    base, eps = x.detach().clone(), 1e-5
    with torch.no_grad():
        for idx in [(0, 0, 0), (0, 3, 1), (1, 2, 2), (1, 0, 1), (1, 5, 0)]:
            up, down = base.clone(), base.clone()
            up[idx] += eps
            down[idx] -= eps
            fd = float(((m.marginals(up, lens)[1] - m.marginals(down, lens)[1]) * v).sum()) / (2 * eps)
            assert float(got[idx]) == pytest.approx(fd, rel=1e-6, abs=1e-9)
    assert not got[1, 4:].any()  # padding frames: no gradient


def test_marginals_operator_gradcheck_and_equal_to_the_eager_route():
    """torch >= 2.4: the operator semicrf_marginals (torch.compile's and torch.export's route) has the
    eager route's values and gradients, and passes gradcheck through its register_autograd."""
    from timitseg import _ops
    if not _ops.AVAILABLE:
        pytest.skip("torch %s has no torch.library.custom_op (torch >= 2.4)" % torch.__version__)
    m, x, lens, _, params = setup("cpu", 3, 6, (6, 4, 0), seed=7)

    def op(xx, *ps):
        return _ops.MARGINALS.operator(m._spec, xx, lens, None, True, list(ps))

    assert torch.autograd.gradcheck(op, (x,) + params)
    ups = [torch.randn(o.shape, dtype=torch.float64) for o in op(x, *params)]
    got = torch.autograd.grad(sum((u * o).sum() for u, o in zip(ups, op(x, *params))), (x,) + params)
    wrapper = Marginals(m, True)
    eager = functional_call(wrapper, {"crf." + n: p for n, p in zip(NAMES, params)}, (x, lens, None))
    want = torch.autograd.grad(sum((u * o).sum() for u, o in zip(ups, eager)), (x,) + params)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
