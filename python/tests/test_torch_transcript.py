"""SemiCRF with phone sequences (the transcript NLL, docs/crf.md "Training from transcripts"): the value
against the Python brute-force oracle, torch.autograd.gradcheck in float64 (scores and every parameter; K = 1,
K < T, K > T; padded rows; optional phones; per-utterance weights), and torch.compile(fullgraph=True) with the
values and gradients of eager mode."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1); test_transcript.py covers the numpy path")
import oracle  # noqa: E402
from timitseg import _ops  # noqa: E402
from timitseg.torch import SemiCRF  # noqa: E402

C = 3
NAMES = ("transition", "duration_bias", "start", "end")


def setup(backend, K, lengths, seed=0):
    torch.manual_seed(seed)
    m = SemiCRF(C, K, backend=backend, init_scale=0.5).double()
    with torch.no_grad():
        m.start.normal_(0, 0.5)
        m.end.normal_(0, 0.5)
    B, T = len(lengths), max(lengths)
    x = torch.randn(B, T, C, dtype=torch.float64)
    lengths = torch.tensor(lengths)
    phones = torch.tensor([[0, 2, 1], [1, 1, 0], [2, 0, 2]][:B])
    num = torch.tensor([min(3, int(n)) if n else 0 for n in lengths])
    optional = torch.tensor([[0, 1, 0], [0, 0, 0], [0, 0, 0]][:B], dtype=torch.int32)
    return m, x, lengths, phones, num, optional


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_value_matches_brute_force(backend):
    m, x, lengths, phones, num, optional = setup(backend, 2, (5, 3, 2))
    nll = m(x, lengths, phones=phones, num_phones=num, optional=optional).detach()
    p = {n: getattr(m, n).detach().numpy() for n in NAMES}
    for b in range(3):
        n = int(num[b])
        want = oracle.transcript_nll(x[b].numpy(), int(lengths[b]), phones[b, :n].numpy(), p["transition"],
                                     p["duration_bias"], p["start"], p["end"], optional[b, :n].numpy())
        assert abs(float(nll[b]) - want) < 1e-9, (b, float(nll[b]), want)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("K,lengths", [(1, (5, 3, 0)), (2, (6, 4, 2)), (8, (5, 2, 3))])
def test_gradcheck_float64(backend, K, lengths):
    m, x, lengths, phones, num, optional = setup(backend, K, lengths)
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)

    def f(xx, *params):
        return _call(m, xx, lengths, phones, num, optional, params) * weights

    params = [getattr(m, n).detach().clone().requires_grad_(True) for n in NAMES]
    assert torch.autograd.gradcheck(f, (x.requires_grad_(True), *params))


def _call(m, x, lengths, phones, num, optional, params, links=None):
    """The module's transcript NLL with the parameters given as tensors (torch.func.functional_call)."""
    try:
        from torch.func import functional_call
    except ImportError:
        from torch.nn.utils.stateless import functional_call

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.crf = m

        def forward(self, xx):
            return self.crf(xx, lengths, phones=phones, num_phones=num, optional=optional, links=links)
    w = Wrap()
    return functional_call(w, {"crf." + n: p for n, p in zip(NAMES, params)}, (x,))


@pytest.mark.skipif(not _ops.AVAILABLE, reason="torch %s has no torch.library.custom_op (torch >= 2.4)"
                    % torch.__version__)
def test_compiled_fullgraph_matches_eager():
    torch.manual_seed(1)
    m = SemiCRF(C, 3, backend="cpu", init_scale=0.3)
    x = torch.randn(3, 9, C)
    lengths = torch.tensor([9, 6, 2])
    phones = torch.tensor([[0, 1, 2, 0], [2, 1, 0, 0], [1, 2, 0, 0]])
    num = torch.tensor([4, 3, 2])
    optional = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])

    def loss(s):
        nll = m(s, lengths, phones=phones, num_phones=num, optional=optional)
        return (nll * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum() + \
            m(s, lengths, phones=phones, num_phones=num, reduction="mean")

    _check_compiled_matches_eager(m, x, loss)


def _check_compiled_matches_eager(m, x, loss):
    """loss(x) under torch.compile(fullgraph=True): the eager value bitwise, its gradients (x and every
    parameter) to 1e-6."""
    torch.compiler.reset()
    f = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = loss(xe), f(xc)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    want.backward()
    ge = [xe.grad] + [getattr(m, n).grad.clone() for n in NAMES]
    m.zero_grad()
    got.backward()
    gc = [xc.grad] + [getattr(m, n).grad.clone() for n in NAMES]
    for a, b in zip(ge, gc):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


S_, E_ = 1 << 29, 1 << 30  # links' start and end bits (crf/phone_graph.h)
# {a b | c} then a: the word's two pronunciations as a graph (row 0), and a plain chain (row 1)
GRAPH_PHONES = torch.tensor([[0, 1, 2, 0], [2, 1, 0, 0]])
GRAPH_NUM = torch.tensor([4, 2])
GRAPH_LINKS = torch.tensor([[S_, 1, S_, 1 | 2 | E_], [S_, 1 | E_, 0, 0]], dtype=torch.int32)
GRAPH_PATHS = ([[0, 1, 0], [2, 0]], [[2, 1]])


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_phone_graph_value_is_the_sum_over_its_paths(backend):
    """links: exp(-nll) of the graph is the sum of exp(-nll) of its paths, each from the brute-force oracle."""
    m, x, _, _, _, _ = setup(backend, 3, (7, 5))
    lengths = torch.tensor([7, 5])
    nll = m(x, lengths, phones=GRAPH_PHONES, num_phones=GRAPH_NUM, links=GRAPH_LINKS).detach()
    p = {n: getattr(m, n).detach().numpy() for n in NAMES}
    for b, paths in enumerate(GRAPH_PATHS):
        each = [oracle.transcript_nll(x[b].numpy(), int(lengths[b]), torch.tensor(q).numpy(), p["transition"],
                                      p["duration_bias"], p["start"], p["end"], torch.zeros(len(q)).int().numpy())
                for q in paths]
        want = -torch.logsumexp(-torch.tensor(each, dtype=torch.float64), 0).item()
        assert abs(float(nll[b]) - want) < 1e-9 * (1 + abs(want)), (b, float(nll[b]), want, each)
    with pytest.raises(ValueError, match="not both"):
        m(x, lengths, phones=GRAPH_PHONES, num_phones=GRAPH_NUM, links=GRAPH_LINKS,
          optional=torch.zeros(2, 4, dtype=torch.int32))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("K", [1, 3, 9])
def test_phone_graph_gradcheck_float64(backend, K):
    """gradcheck of the graph's NLL in the scores and every parameter, with per-utterance weights."""
    m, x, _, _, _, _ = setup(backend, K, (7, 5))
    lengths = torch.tensor([7, 5])
    weights = torch.tensor([1.5, -0.5], dtype=torch.float64)

    def f(xx, *params):
        return _call(m, xx, lengths, GRAPH_PHONES, GRAPH_NUM, None, params, links=GRAPH_LINKS) * weights

    params = [getattr(m, n).detach().clone().requires_grad_(True) for n in NAMES]
    assert torch.autograd.gradcheck(f, (x.requires_grad_(True), *params))


@pytest.mark.skipif(not _ops.AVAILABLE, reason="torch %s has no torch.library.custom_op (torch >= 2.4)"
                    % torch.__version__)
def test_phone_graph_compiled_fullgraph_matches_eager():
    torch.manual_seed(3)
    m = SemiCRF(C, 3, backend="cpu", init_scale=0.3)
    x = torch.randn(2, 7, C)
    lengths = torch.tensor([7, 5])

    def loss(s):
        nll = m(s, lengths, phones=GRAPH_PHONES, num_phones=GRAPH_NUM, links=GRAPH_LINKS)
        return (nll * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum()

    _check_compiled_matches_eager(m, x, loss)
