"""SemiCRF as torch operators (timitseg/_ops.py, torch.library.custom_op):
torch.library.opcheck of each operator, a model (Conv1d encoder + SemiCRF,
loss = mean NLL + penalty) under torch.compile(fullgraph=True) (no graph
break) and torch.export with the values and gradients of eager mode, the
other calls (log partition, marginals, Viterbi) compiled, and autocast:
float16/bfloat16 scores give the float32 results of the same scores cast up.
CUDA variants run where a GPU and a CUDA build are present."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it with "
                                            "TIMITSEG_TORCH=1)")
import timitseg  # noqa: E402
from timitseg import _ops  # noqa: E402
from timitseg.torch import SemiCRF  # noqa: E402

pytestmark = pytest.mark.skipif(not _ops.AVAILABLE, reason="torch %s has no torch.library.custom_op / "
                                "register_autograd (torch >= 2.4): SemiCRF runs as an autograd.Function"
                                % torch.__version__)

C, K, D = 5, 4, 6


class Model(torch.nn.Module):
    def __init__(self, backend="cpu", check="eager"):
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Conv1d(D, C, 3, padding=1)
        self.crf = SemiCRF(C, K, backend=backend, init_scale=0.3, reg=0.01, check=check)

    def forward(self, feats, lengths, labels):
        scores = self.enc(feats.transpose(1, 2)).transpose(1, 2)  # [B][T][C]
        return self.crf(scores, lengths, labels=labels, reduction="mean") + self.crf.penalty()


def batch(device="cpu", B=3, T=9):
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(B, T, D, generator=g)
    lengths = torch.tensor([T, T - 3, 2][:B])
    labels = torch.randint(0, C, (B, T), generator=g)
    return feats.to(device), lengths.to(device), labels.to(device)


def loss_and_grads(model, fn, *args):
    model.zero_grad()
    loss = fn(*args)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def check_same(eager, other, rtol, atol):
    torch.testing.assert_close(other[0], eager[0], rtol=rtol, atol=atol)
    for n in eager[1]:
        torch.testing.assert_close(other[1][n], eager[1][n], rtol=rtol, atol=atol, msg=n)


def test_opcheck_every_operator():
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3, reg=0.1)
    feats, lengths, labels = batch()
    x = torch.randn(3, 9, C, requires_grad=True)
    params = [getattr(m, n) for n in m._param_names()]
    for reduction in ("none", "mean", "sum"):
        for check in ("eager", "deferred"):
            torch.library.opcheck(_ops.NLL.operator, (m._spec, reduction, x, lengths, labels, None, None, None, True,
                                                      check, params))
    torch.library.opcheck(_ops.LOG_PARTITION.operator, (m._spec, x, lengths, None, True, params))
    phones, num_phones = torch.tensor([[0, 1], [2, 0], [1, 1]]), torch.tensor([2, 1, 2])
    torch.library.opcheck(_ops.TRANSCRIPT_NLL.operator, (m._spec, x, lengths, phones, num_phones, None, None, None,
                                                         True, params))
    S, E = 1 << 29, 1 << 30  # the phone graph (docs/crf.md): {a | b} then c, and two chains
    graph = torch.tensor([[S, S, 1 | 2 | E], [S, 1 | E, 0], [S, 1 | E, 0]], dtype=torch.int32)
    torch.library.opcheck(_ops.TRANSCRIPT_NLL.operator, (m._spec, x, lengths, torch.tensor([[0, 1, 2], [2, 0, 0],
                                                         [1, 1, 0]]), torch.tensor([3, 2, 2]), None, graph, None,
                                                         True, params))
    fixed = [p.detach() for p in params]  # Viterbi is not differentiable (SemiCRF runs it under no_grad)
    for segments in (False, True):  # the marginals are (their backward: semicrf_marginals_backward)
        torch.library.opcheck(_ops.MARGINALS.operator, (m._spec, x, lengths, None, segments, params))
    ups = (torch.randn(3, 10, dtype=torch.float64), torch.randn(3, 9, C, dtype=torch.float64),
           torch.randn(3, 9, K, C, dtype=torch.float64))
    torch.library.opcheck(_ops.MARGINALS_BACKWARD.operator, (m._spec, x.detach(), lengths, None) + ups + (fixed,))
    torch.library.opcheck(_ops.VITERBI.operator, (m._spec, x.detach(), lengths, None, fixed))
    torch.library.opcheck(_ops.PENALTY.operator, (m._spec, 0.1, [m.transition, m.duration_bias]))
    w = torch.tensor([1.0, -2.0, 0.5])
    flat = torch.randn(sum(p.numel() for p in params))
    torch.library.opcheck(_ops.WEIGHTED.operator, (m._spec, "nll", x.detach(), lengths, labels, None, None, None, w,
                                                   flat, fixed))


def _op_and_eager(m, x, lengths, gold, onset, reduction, weights):
    """(loss, gradients of (loss * weights).sum() in x, onset and the parameters) through the operator called
    directly (what torch.compile runs) and through SemiCRF's eager route (_ops.NLL's autograd.Function)."""
    params = [getattr(m, n) for n in m._param_names()]
    out = []
    for route in ("operator", "eager"):
        for t in [x, onset] + params:
            if t is not None:
                t.grad = None
        if route == "operator":
            loss = _ops.NLL.operator(m._spec, reduction, x, lengths, gold.get("labels"), gold.get("segments"),
                                     gold.get("num_segments"), onset, True, "eager", params)[0]
        else:
            assert _ops.eager(x)
            loss = m(x, lengths, onset=onset, reduction=reduction, **gold)
        (loss * weights).sum().backward()
        out.append([loss.detach()] + [t.grad for t in [x, onset] + params if t is not None])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_eager_route_equals_the_operator_bitwise(dtype, reduction):
    g = torch.Generator().manual_seed(3)
    B, T = 3, 7
    lengths = torch.tensor([7, 4, 0])
    labels = torch.randint(0, C, (B, T), generator=g)
    segments = torch.tensor([[[0, 3, 1], [3, 4, 2]], [[0, 4, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]])  # K = 4
    golds = [{"labels": labels}, {"segments": segments, "num_segments": torch.tensor([2, 1, 0])}]
    for model, gold in [("table", golds[0]), ("lognormal", golds[1])]:
        m = SemiCRF(C, K, backend="cpu", init_scale=0.3, duration_model=model).to(
            torch.float64 if dtype == torch.float64 else torch.float32)
        x = torch.randn(B, T, C, generator=g).to(dtype).requires_grad_(True)
        odt = torch.float32 if dtype == torch.bfloat16 else dtype  # half onset: refused by the row-by-row path
        onset = torch.randn(B, T, C, generator=g).to(odt).requires_grad_(True) if model == "table" else None
        # per-utterance weights that differ (reduction "none"): the parameters' gradients row by row
        weights = torch.tensor([1.0, -2.0, 0.5]) if reduction == "none" else torch.tensor(3.0)
        # a row of length 0 without onset (with onset, reduction "none" and unequal weights, such a row is refused:
        # "grads.onset given, but the batch has no onset", on main before this round too)
        lens = lengths if onset is None else torch.tensor([7, 4, 2])
        op, eager = _op_and_eager(m, x, lens, gold, onset, reduction, weights.to(x.dtype))
        assert len(op) == len(eager)
        for a, b in zip(op, eager):
            assert a.dtype == b.dtype and torch.equal(a, b)


def test_eager_route_builds_the_operators_graph_under_create_graph():
    """create_graph=True: the eager route's gradient is differentiable exactly where the operator's is (its
    extra outputs are the operator's), with the same second-order result (the operators' backward reads only
    the loss's gradient: what flows back through the saved gradients contributes zeros)."""
    g = torch.Generator().manual_seed(6)
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3, reg=0.1)
    x = torch.randn(2, 6, C, generator=g, requires_grad=True)
    lengths, labels = torch.tensor([6, 3]), torch.randint(0, C, (2, 6), generator=g)
    params = [getattr(m, n) for n in m._param_names()]
    losses = {"operator": lambda: _ops.NLL.operator(m._spec, "mean", x, lengths, labels, None, None, None, True,
                                                    "eager", params)[0],
              "eager": lambda: m(x, lengths, labels=labels, reduction="mean")}
    got = {}
    for route, loss in losses.items():
        d, = torch.autograd.grad(loss(), x, create_graph=True)
        dd, = torch.autograd.grad((d * d).sum(), x)
        got[route] = (d.requires_grad, d.detach(), dd)
    assert got["eager"][0] and got["operator"][0]
    assert torch.equal(got["eager"][1], got["operator"][1]) and torch.equal(got["eager"][2], got["operator"][2])


@pytest.mark.parametrize("equal_weights", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_log_partition_equals_the_operator_bitwise(dtype, equal_weights):
    g = torch.Generator().manual_seed(4)
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3).to(dtype)
    x = torch.randn(3, 7, C, generator=g, dtype=dtype).requires_grad_(True)
    onset = torch.randn(3, 7, C, generator=g, dtype=dtype).requires_grad_(True)
    lengths = torch.tensor([7, 5, 2])
    w = torch.full((3,), 0.5, dtype=torch.float64) if equal_weights else torch.tensor([1.0, -2.0, 0.5],
                                                                                     dtype=torch.float64)
    params = [getattr(m, n) for n in m._param_names()]
    got = []
    for route in ("operator", "eager"):
        for t in [x, onset] + params:
            t.grad = None
        if route == "operator":
            lz = _ops.LOG_PARTITION.operator(m._spec, x, lengths, onset, True, params)[0]
        else:
            assert _ops.eager(x)
            lz = m.log_partition(x, lengths, onset=onset)
        (lz * w).sum().backward()
        got.append([lz.detach(), x.grad, onset.grad] + [p.grad for p in params])
    for a, b in zip(*got):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("model", ["table", "lognormal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_penalty_equals_the_operator_bitwise(model, dtype):
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3, reg=0.07, duration_model=model).to(dtype)
    d = None if model == "lognormal" else m.duration_bias
    got = []
    for route in ("operator", "eager"):
        m.zero_grad(set_to_none=True)
        if route == "operator":
            v = _ops.PENALTY.operator(m._spec, 0.07, [m.transition] + ([] if d is None else [d]))[0].to(dtype)
        else:
            assert _ops.eager(m.transition)
            v = m.penalty()
        (v * 3.0).backward()
        got.append([v.detach(), m.transition.grad] + ([] if d is None else [d.grad]))
    for a, b in zip(*got):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_training_step_equals_eager_without_a_graph_break(backend):
    model = Model()
    args = batch()
    eager = loss_and_grads(model, model, *args)
    torch.compiler.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # fullgraph: a graph break is an error
    got = loss_and_grads(model, compiled, *args)
    # the CRF's values are the C API's in both; the encoder's convolution may be fused differently by inductor
    check_same(eager, got, rtol=1e-5, atol=1e-6)
    again = loss_and_grads(model, compiled, *args)  # a second call reuses the graph
    check_same(got, again, rtol=0, atol=0)


def test_compiled_reductions_log_partition_marginals_and_viterbi():
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3)
    x = torch.randn(3, 9, C)
    lengths = torch.tensor([9, 6, 2])
    labels = torch.randint(0, C, (3, 9))

    def calls(s):
        nll = m(s, lengths, labels=labels)  # reduction "none": per-utterance weights below
        lz = m.log_partition(s, lengths)
        bo, fr = m.marginals(s, lengths)
        score, segs, counts = m.viterbi(s, lengths, padded=True)
        return (nll * torch.arange(1.0, 4.0)).sum() + lz.sum().float(), bo, fr, score, segs, counts

    torch.compiler.reset()
    f = torch.compile(calls, fullgraph=True, backend="aot_eager")
    xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = calls(xe), f(xc)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    want[0].backward()
    got[0].backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=0, atol=0)
    # the padded Viterbi is the list form's
    score, segs = m.viterbi(x, lengths)
    for b in range(3):
        assert torch.equal(got[4][b, :int(got[5][b])], segs[b])


def test_exported_model_equals_eager():
    model = Model()
    args = batch()
    with torch.no_grad():
        want = model(*args)
    ep = torch.export.export(model, args)
    assert any("timitseg.semicrf_nll" in str(n.target) for n in ep.graph.nodes)
    with torch.no_grad():
        got = ep.module()(*args)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_half_scores_give_the_float32_results_of_the_scores_cast_up(dtype):
    model = Model()
    feats, lengths, labels = batch()
    with torch.autocast("cpu", dtype=dtype):
        scores = model.enc(feats.transpose(1, 2)).transpose(1, 2)
        assert scores.dtype == dtype
        scores = scores.detach().requires_grad_(True)
        loss = model.crf(scores, lengths, labels=labels, reduction="mean")
        lz = model.crf.log_partition(scores, lengths)
    assert loss.dtype == torch.float32 and lz.dtype == torch.float64
    up = scores.detach().float().requires_grad_(True)
    want = model.crf(up, lengths, labels=labels, reduction="mean")
    assert torch.equal(loss, want)
    assert torch.equal(lz, model.crf.log_partition(up.detach(), lengths))
    loss.backward()
    want.backward()
    assert scores.grad.dtype == dtype
    assert torch.equal(scores.grad, up.grad.to(dtype))  # the float32 gradient rounded once


def test_operators_need_no_module():
    """The operators take the configuration and the parameters as arguments (nothing looked up by the
    module): an exported model runs after the module it was exported from is gone, with its loss bit for bit,
    and so does an operator called with a configuration that no module holds a handle of."""
    import gc
    model = Model()
    args = batch()
    want = model(*args).detach()
    ep = torch.export.export(model, args)
    spec, params = model.crf._spec, [p.detach().clone() for p in model.crf._params()]
    x, lens = torch.randn(2, 5, C), torch.tensor([5, 3])
    lz = model.crf.log_partition(x, lens).detach()
    del model
    gc.collect()
    assert torch.equal(ep.module()(*args), want)
    assert torch.equal(_ops.LOG_PARTITION.operator(spec, x, lens, None, False, params)[0], lz)


def cuda_ready():
    return timitseg.has_cuda() and torch.cuda.is_available()


@pytest.mark.skipif(not cuda_ready(), reason="needs a GPU and a CUDA build of libtimitseg")
def test_cuda_compiled_training_step_equals_eager():
    model = Model(backend="cuda").cuda()
    args = batch("cuda")
    eager = loss_and_grads(model, model, *args)
    torch.compiler.reset()
    compiled = torch.compile(model, fullgraph=True)
    got = loss_and_grads(model, compiled, *args)
    check_same(eager, got, rtol=1e-5, atol=1e-6)


def test_deferred_check_on_the_host_backends_raises_in_the_forward():
    m = SemiCRF(C, K, backend="cpu", check="deferred")
    x = torch.randn(2, 6, C, requires_grad=True)
    with pytest.raises(timitseg.TimitsegError, match=r"gold.labels\[1\]\[2\] = 9 is outside"):
        m(x, torch.tensor([6, 4]), labels=torch.tensor([[0] * 6, [0, 0, 9, 0, 0, 0]]))
    m.check()  # nothing pending


def train_step(model, opt, args):
    opt.zero_grad(set_to_none=False)
    loss = model(*args)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.skipif(not cuda_ready(), reason="needs a GPU and a CUDA build of libtimitseg")
def test_cuda_deferred_check_raises_at_the_next_call_naming_step_row_and_tensor():
    model = Model(backend="cuda", check="deferred").cuda()
    feats, lengths, labels = batch("cuda")
    model(feats, lengths, labels).backward()  # step 1: fine
    bad = labels.clone()
    bad[1, 2] = C + 2
    model(feats, lengths, bad).backward()  # step 2: queued, not checked; its backward does not wait either
    with pytest.raises(timitseg.TimitsegError, match=r"^SemiCRF step 2: timitseg_crf_nll: .*gold.labels\[1\]\[2\] = 7"):
        model(feats, lengths, labels)  # step 3 checks step 2 first
    model.crf.check()  # the failure is not kept
    model(feats, lengths, labels).backward()
    model.crf.check()


@pytest.mark.skipif(not cuda_ready(), reason="needs a GPU and a CUDA build of libtimitseg")
def test_cuda_graph_captures_a_training_step_equal_to_eager_and_check_reads_each_replay():
    """A whole step (Conv1d encoder, SemiCRF mean NLL + penalty, backward, AdamW(capturable=True)) captured
    in a CUDA graph and replayed: the parameters after 3 eager warm-up steps and 5 replays equal 8 eager
    steps of an identical model; a bad label written into the captured input is reported by check() after
    the replay (its step: one optimizer step on unspecified gradients), and a good one again passes."""
    model = Model(backend="cuda", check="deferred").cuda()
    ref = Model(backend="cuda", check="eager").cuda()
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, capturable=True)
    args = batch("cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step(model, opt, args)
    torch.cuda.current_stream().wait_stream(side)
    model.crf.check()  # nothing may be pending when the capture starts
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step(model, opt, args)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    model.crf.check()
    for _ in range(8):
        want = train_step(ref, ref_opt, args)
    torch.testing.assert_close(static_loss, want, rtol=1e-4, atol=1e-5)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=n)
    feats, lengths, labels = args
    before = [p.detach().clone() for p in model.parameters()]
    labels[2, 1] = C + 2  # the captured tensor: the next replay reads it
    graph.replay()
    torch.cuda.synchronize()
    with pytest.raises(timitseg.TimitsegError, match=r"^SemiCRF step 4 \(the last replay of the CUDA graph that "
                                                     r"captured it\): timitseg_crf_nll: .*gold.labels\[2\]\[1\] = 7"):
        model.crf.check()
    # what the bad replay did: its optimizer step ran (on unspecified gradients): the parameters moved
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    labels[2, 1] = 0
    graph.replay()
    torch.cuda.synchronize()
    model.crf.check()


def test_torch_before_2_4_runs_every_op_through_the_function_bit_for_bit(monkeypatch):
    """torch < 2.4 (no custom_op), simulated: no operator exists, every call of SemiCRF runs the ops' bodies
    and backwards through the autograd.Function, with the values and gradients of the operators called
    directly; check="deferred" is refused."""
    g = torch.Generator().manual_seed(8)
    m = SemiCRF(C, K, backend="cpu", init_scale=0.3, reg=0.05)
    x = torch.randn(3, 7, C, generator=g, requires_grad=True)
    lengths, labels = torch.tensor([7, 4, 2]), torch.randint(0, C, (3, 7), generator=g)
    phones, num_phones = torch.tensor([[0, 1, 2], [2, 0, 0], [1, 0, 0]]), torch.tensor([3, 2, 1])
    w = torch.tensor([1.0, -2.0, 0.5])
    params = m._params()
    calls = {  # (the module's call, the operator's): values whose (value * weights).sum() is differentiated
        "nll": (lambda: m(x, lengths, labels=labels),
                lambda: _ops.NLL.operator(m._spec, "none", x, lengths, labels, None, None, None, True, "eager",
                                          params)[0]),
        "log_z": (lambda: m.log_partition(x, lengths),
                  lambda: _ops.LOG_PARTITION.operator(m._spec, x, lengths, None, True, params)[0]),
        "transcript": (lambda: m(x, lengths, phones=phones, num_phones=num_phones),
                       lambda: _ops.TRANSCRIPT_NLL.operator(m._spec, x, lengths, phones, num_phones, None, None,
                                                            None, True, params)[0]),
        "frames": (lambda: m.marginals(x, lengths)[1].sum(-1).sum(-1),
                   lambda: _ops.MARGINALS.operator(m._spec, x, lengths, None, False, params)[1].sum(-1).sum(-1)),
        "penalty": (lambda: m.penalty().reshape(1).expand(3),
                    lambda: _ops.PENALTY.operator(m._spec, 0.05, [m.transition, m.duration_bias])[0].to(
                        torch.float32).reshape(1).expand(3)),
    }

    def run(f):
        for t in [x] + params:
            t.grad = None
        v = f()
        (v * w.to(v.dtype)).sum().backward()
        return [v.detach()] + [None if t.grad is None else t.grad.clone() for t in [x] + params]

    want = {k: run(op) for k, (_, op) in calls.items()}
    want_viterbi = _ops.VITERBI.operator(m._spec, x.detach(), lengths, None, [p.detach() for p in params])
    monkeypatch.setattr(_ops, "AVAILABLE", False)
    for op in (_ops.NLL, _ops.LOG_PARTITION, _ops.TRANSCRIPT_NLL, _ops.MARGINALS, _ops.MARGINALS_BACKWARD,
               _ops.VITERBI, _ops.PENALTY, _ops.WEIGHTED):
        monkeypatch.setattr(op, "operator", None)  # calling one would raise
    for k, (module_call, _) in calls.items():
        got = run(module_call)
        for a, b in zip(got, want[k]):
            assert (a is None and b is None) or torch.equal(a, b), k
    for a, b in zip(m.viterbi(x, lengths, padded=True), want_viterbi):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="needs torch >= 2.4"):
        SemiCRF(C, K, backend="cpu", check="deferred")
