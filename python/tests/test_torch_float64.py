"""torch.autograd.gradcheck of SemiCRF in float64 at torch's default eps
(1e-6) and tolerances (atol 1e-5, rtol 1e-3): the NLL and the log partition,
with respect to the scores and each CRF parameter, at K = 1, K < T and K > T,
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
