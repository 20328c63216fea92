"""timitseg's semi-CRF ops for timitseg.torch.SemiCRF: the NLL, the log partition, the transcript NLL, the
marginals, Viterbi and the L2 penalty, each written once as an Op: its forward body, its fake (shapes only),
and where differentiable its context setup and backward. Two thin routes run them:

- the operator (torch >= 2.4): torch.library.custom_op "timitseg::semicrf_<name>" whose implementation is
  the body, with register_fake and register_autograd(backward, setup_context=setup), so that a model using
  SemiCRF runs under torch.compile(fullgraph=True) and torch.export with the values and gradients of eager
  mode (the public APIs only: torch.library.custom_op, register_fake, register_autograd);
- the Function: a torch.autograd.Function (_function) that runs the Op's body, setup and backward, for
  eager calls (not under torch.compile / torch.export: torch.library's dispatch of an operator of this many
  arguments costs more per call than our whole forward, docs/python.md "Overhead on the host"), for
  SemiCRF(check="backward") (its check queued by the backward) and for everything on torch < 2.4 (no
  custom_op). Both routes give the same bits (tested).

An op's inputs: the spec (one string: num_labels, max_duration, backend, threads, duration_model,
phone_bonus; timitseg/_session.py), then its own, the parameters (a list of tensors) last. Nothing else is
looked up: the body finds a C handle of the spec (a Session) and pushes the parameters into it. Still pure Python
over the C API (outputs made by torch on the inputs' device, CUDA work queued on torch's current stream).
The forward computes every gradient in the same C call and returns it as extra outputs; the backward scales
the saved gradients by the incoming one with torch ops (which torch.compile traces into its backward graph);
per-utterance weights that differ (reduction "none" with weights not all equal) go through one more op that
computes the parameters' gradients one utterance at a time.
"""
import torch

from ._session import check_ticket, parse, session

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")

SPEC_SCHEMA = "str spec"
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a FakeTensor, FunctionalTensor or another tracer's subclass


def eager(x):
    """The Function route: torch < 2.4, or not under torch.compile / torch.export (which see the operators)
    with x (scores, or transition) an ordinary tensor or parameter."""
    return not AVAILABLE or (not torch.compiler.is_compiling() and type(x) in _PLAIN)


def _compute(x):
    """Scores as the C API computes them: float16/bfloat16 as float32; CUDA tensors contiguous (the C API
    reads CUDA memory only contiguous: an encoder's transposed output is copied on the device, no host
    wait; host arrays are read in place whatever their strides)."""
    x = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return x.contiguous() if x.is_cuda else x


def _cdtype(scores):
    return torch.float64 if scores.dtype == torch.float64 else torch.float32


def _empty(like):
    return like.new_empty((0,), dtype=_cdtype(like))


def _to(t, dtype):
    """t.to(dtype) without the call when t has that dtype already (t.to returns t itself then)."""
    return t if t.dtype == dtype else t.to(dtype)


def _opt(t):
    return None if t is None else _compute(t)


def _grad_outputs(scores, onset, g, flat):
    """The gradient outputs of nll / log_partition / transcript_nll (empty [0] tensors when not computed)."""
    if g is None:
        return _empty(scores), _empty(scores), _empty(scores)
    return g["scores"], flat, g["onset"] if onset is not None else _empty(scores)


def _fake_grads(scores, onset, params, grads):
    if not grads:
        return _empty(scores), _empty(scores), _empty(scores)
    dt = _cdtype(scores)
    size = sum(p.numel() for p in params)
    go = scores.new_empty(onset.shape, dtype=dt) if onset is not None else _empty(scores)
    return scores.new_empty(scores.shape, dtype=dt), scores.new_empty((size,), dtype=dt), go


def _flat_of(sess, g):
    return torch.cat([g[n].reshape(-1) for n in sess.names])


def _param_meta(spec, x, params):
    """What the backward needs of the parameters (kept on ctx, not saved tensors): (their views in a flat
    buffer, their dtypes)."""
    return session(spec, x).views, [p.dtype for p in params]


def _param_grads(flat, meta):
    """Views of one flat gradient buffer shaped as the parameters (meta: _param_meta), in their dtypes."""
    return [_to(flat.as_strided(*v), dt) for v, dt in zip(*meta)]


def _scaled(grad, w, dtype):
    return _to(grad * _to(w, grad.dtype), dtype)


class Op:
    """One op: name, schema (its inputs after the spec, the parameters last), forward(inputs, ctx) (ctx: the
    Function's context on the eager route, None in the operator), fake(*inputs), setup(ctx, inputs, outputs)
    and backward(ctx, *output_grads) (None for ops without gradients). fill: the Function passes zeros for a
    missing gradient of the first output (what the operator's autograd passes). Its two routes: function
    (the autograd.Function, _function) and operator (the custom_op, torch >= 2.4)."""

    def __init__(self, name, schema, forward, fake, setup=None, backward=None, fill=True):
        self.name, self.forward, self.fake, self.setup, self.backward, self.fill = name, forward, fake, setup, \
            backward, fill
        self.n = schema.split(") ->")[0].count(",") + 1  # its inputs before the parameters: the spec's included
        self.function = _function(self) if backward is not None else None
        self.operator = None
        if AVAILABLE:
            self.operator = torch.library.custom_op("timitseg::" + name, lambda *inputs: forward(inputs),
                                                    mutates_args=(), schema="(%s, %s" % (SPEC_SCHEMA, schema))
            self.operator.register_fake(fake)
            if backward is not None:
                self.operator.register_autograd(backward, setup_context=setup)

    def __call__(self, lead, *inputs, function=False):
        """The op's outputs: through the Function where eager(lead) (lead: the scores, or transition) or
        function=True, else through the operator."""
        if function or eager(lead):
            if self.backward is None:
                with torch.no_grad():
                    return self.forward(inputs, None)
            return self.function.apply(*inputs[:-1], *inputs[-1])
        return self.operator(*inputs)


def _function(op):
    """The autograd.Function of op outside torch.compile / torch.export: its body, setup and backward, so
    that values and gradients are the operator's bit for bit. Its inputs are the op's, the parameters' list
    spread at the end; its outputs the operator's (the same autograd graph: under create_graph the gradients
    it returns are differentiable as the operator's are); the gradients of the outputs are not materialized
    (no zero fills) but for the first one where op.fill."""
    n = op.n

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            inputs = args[:n] + (list(args[n:]),)
            out = op.forward(inputs, ctx)
            op.setup(ctx, inputs, out)
            ctx.set_materialize_grads(False)
            ctx.first = (out[0].shape, out[0].dtype, out[0].device)
            return out

        @staticmethod
        def backward(ctx, g, *rest):
            if g is None and op.fill:
                shape, dtype, device = ctx.first
                g = torch.zeros(shape, dtype=dtype, device=device)
            grads = op.backward(ctx, g, *rest)
            return grads[:-1] + tuple(grads[-1])

    Function.__name__ = Function.__qualname__ = "Function_" + op.name
    return Function


# ---- nll -------------------------------------------------------------------------------------------------
def _nll_forward(inputs, ctx=None):
    """(loss: NLL [B] or its mean / sum, d sum(NLL) / d scores, the parameters' gradients as one flat buffer,
    d sum(NLL) / d onset); the gradients empty without grads. check "deferred" (SemiCRF(check="deferred")):
    the C call does not wait for the GPU (timitseg_crf_nll_end with a check ticket, kept by the Session for
    its check(); the previous call's check runs first, unless a CUDA graph is being captured). check
    "backward" (the Function only): the ticket is checked by this call's backward."""
    spec, (reduction, scores, lengths, labels, segments, num_segments, onset, grads, check, params) = \
        inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    onset = _opt(onset)
    out_dtype = "float64" if scores.dtype == torch.float64 else "float32"
    pending = captured = None
    if check == "deferred":
        captured = scores.is_cuda and torch.cuda.is_current_stream_capturing()
        if not captured:
            sess.check()  # the previous deferred call's status (at the next eager call)
        pending = []
    elif check == "backward" and grads:
        if ctx is None:
            raise ValueError('check="backward" runs on the autograd.Function route only')
        pending = []
    nll, g, flat = sess.crf._nll(_compute(scores), lengths, labels, segments, num_segments, onset, False, 1.0,
                                 grads, out_dtype, views=False, deferred=pending)
    sess.steps += 1
    if pending and check == "deferred":
        sess.pending.append((sess.steps, captured, pending[0]))
    elif pending:
        ctx.pending = (sess.crf, pending[0])
    loss = nll.mean() if reduction == "mean" else nll.sum() if reduction == "sum" else nll
    return (loss,) + _grad_outputs(scores, onset, g if grads else None, sess.flat(flat) if grads else None)


def _nll_fake(*inputs):
    reduction, scores, onset, grads, params = inputs[1], inputs[2], inputs[7], inputs[8], inputs[10]
    shape = (scores.shape[0],) if reduction == "none" else ()
    return (scores.new_empty(shape, dtype=_cdtype(scores)),) + _fake_grads(scores, onset, params, grads)


def _nll_setup(ctx, inputs, output):
    spec, (reduction, scores, lengths, labels, segments, num_segments, onset, _, _, params) = inputs[0], inputs[1:]
    _, gs, flat, go = output
    ctx.spec, ctx.reduction, ctx.B, ctx.score_dtype = spec, reduction, scores.shape[0], scores.dtype
    ctx.has_onset, ctx.onset_dtype, ctx.params = onset is not None, onset is not None and onset.dtype, \
        _param_meta(spec, scores, params)
    if reduction == "none":  # the inputs again for the per-utterance weights (semicrf_weighted_param_grads)
        ctx.save_for_backward(gs, flat, go, scores, lengths, labels, segments, num_segments, onset, *params)
    else:
        ctx.save_for_backward(gs, flat, go)


def _nll_backward(ctx, g_loss, _gs=None, _flat=None, _go=None):
    pending = getattr(ctx, "pending", None)
    if ctx.reduction == "none":
        if pending is not None and g_loss.numel() > 1 and g_loss.stride(0) != 0:
            ctx.pending = None  # per-utterance weights may call the handle again: the check first
            check_ticket(*pending)
        gs, flat, go, scores, lengths, labels, segments, num_segments, onset, *params = ctx.saved_tensors
        w = g_loss.reshape(-1, 1, 1)
        pflat = _weighted(scores, ctx.spec, "nll", _compute(scores), lengths, labels, segments, num_segments, onset,
                          g_loss, flat, params)
    else:
        gs, flat, go = ctx.saved_tensors
        w = g_loss / ctx.B if ctx.reduction == "mean" else g_loss  # as torch's mean backward
        pflat = flat * _to(w, flat.dtype)
    d_scores = _scaled(gs, w, ctx.score_dtype)
    d_onset = _scaled(go, w, ctx.onset_dtype) if ctx.has_onset else None
    if getattr(ctx, "pending", None) is not None:
        # check="backward": the one wait, once the whole backward pass is queued (the gradients' accumulation
        # into .grad included, which runs on the host while the GPU computes): autograd runs the callback
        # before backward() returns and raises its error from there
        pending, ctx.pending = ctx.pending, None
        torch.autograd.Variable._execution_engine.queue_callback(lambda: check_ticket(*pending))
    return None, None, d_scores, None, None, None, None, d_onset, None, None, _param_grads(pflat, ctx.params)


NLL = Op("semicrf_nll", "str reduction, Tensor scores, Tensor lengths, Tensor? labels, Tensor? segments, "
         "Tensor? num_segments, Tensor? onset, bool grads, str check, Tensor[] params) -> (Tensor, Tensor, Tensor, "
         "Tensor)", _nll_forward, _nll_fake, _nll_setup, _nll_backward)


# ---- per-utterance weights ---------------------------------------------------------------------------------
def _weighted_forward(inputs, ctx=None):
    """sum_b weights[b] * d value_b / d parameters (value: NLL, transcript NLL or log Z), flat: the forward's
    sum over b. One weight for every utterance (read on the host: a wait on CUDA) scales flat; else one call
    per utterance with the forward's parameters (pushed again: the handle may have served other calls)."""
    spec, (kind, scores, lengths, labels, segments, num_segments, onset, weights, flat, params) = \
        inputs[0], inputs[1:]
    w = weights.detach().reshape(-1)
    if w.numel() == 0:
        return torch.zeros_like(flat)
    if w.numel() == 1 or w.stride(0) == 0 or bool(torch.all(w == w[0])):  # stride 0: sum()'s, no wait
        return flat * w[0].to(flat.dtype)
    sess = session(spec, scores)
    sess.push(params)
    out = torch.zeros(flat.shape, dtype=torch.float64, device=flat.device)
    for b in range(w.shape[0]):
        sl = slice(b, b + 1)
        o = None if onset is None else onset[sl]
        if kind == "nll":
            _, _, fb = sess.crf._nll(scores[sl], lengths[sl], None if labels is None else labels[sl],
                                     None if segments is None else segments[sl],
                                     None if num_segments is None else num_segments[sl], o, False, 1.0, True,
                                     "float64", views=False)
            fb = sess.flat(fb)
        elif kind in ("transcript", "transcript_graph"):
            # labels, segments, num_segments carry phones, num_phones, and optional ("transcript") or the
            # phone graph's links ("transcript_graph")
            third = None if num_segments is None else num_segments[sl]
            graph = kind == "transcript_graph"
            _, gb = sess.crf.transcript_nll(scores[sl], lengths[sl], labels[sl], segments[sl],
                                            optional=None if graph else third, links=third if graph else None,
                                            onset=o, grads=True)
            fb = _flat_of(sess, gb)
        else:
            _, gb = sess.crf.log_partition(scores[sl], lengths[sl], onset=o, grads=True)
            fb = _flat_of(sess, gb)
        out += fb.to(torch.float64) * w[b].to(torch.float64)
    return out.to(flat.dtype)


WEIGHTED = Op("semicrf_weighted_param_grads", "str kind, Tensor scores, Tensor lengths, Tensor? labels, "
              "Tensor? segments, Tensor? num_segments, Tensor? onset, Tensor weights, Tensor flat, Tensor[] params) "
              "-> Tensor", _weighted_forward, lambda *inputs: torch.empty_like(inputs[9]))


def _weighted(scores, spec, *rest):
    """The per-utterance weights' op: its body called directly on the eager route (no dispatch), else the
    operator (which torch.compile's backward graph records)."""
    inputs = (spec,) + rest
    return _weighted_forward(inputs) if eager(scores) else WEIGHTED.operator(*inputs)


# ---- log Z and the transcript NLL -------------------------------------------------------------------------
def _lz_forward(inputs, ctx=None):
    """(log Z [B] float64, d sum(log Z) / d scores, the parameters' flat gradient, d / d onset)."""
    spec, (scores, lengths, onset, grads, params) = inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    onset = _opt(onset)
    if not grads:
        return (sess.crf.log_partition(_compute(scores), lengths, onset=onset),) + _grad_outputs(scores, onset,
                                                                                                 None, None)
    lz, g = sess.crf.log_partition(_compute(scores), lengths, onset=onset, grads=True)
    return (lz,) + _grad_outputs(scores, onset, g, _flat_of(sess, g))


def _tr_forward(inputs, ctx=None):
    """(transcript NLL [B] float64 (docs/crf.md "Training from transcripts"), the gradients of its sum as
    _lz_forward's)."""
    spec, (scores, lengths, phones, num_phones, optional, links, onset, grads, params) = inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    onset, x = _opt(onset), _compute(scores)
    if not grads:
        nll = sess.crf.transcript_nll(x, lengths, phones, num_phones, optional=optional, onset=onset, links=links)
        return (nll,) + _grad_outputs(scores, onset, None, None)
    nll, g = sess.crf.transcript_nll(x, lengths, phones, num_phones, optional=optional, onset=onset, grads=True,
                                     links=links)
    return (nll,) + _grad_outputs(scores, onset, g, _flat_of(sess, g))


def _rows_fake(*inputs):
    """log Z's and the transcript NLL's outputs: [B] float64 and the gradients (their onset at inputs[-3])."""
    scores, onset, grads, params = inputs[1], inputs[-3], inputs[-2], inputs[-1]
    return (scores.new_empty((scores.shape[0],), dtype=torch.float64),) + _fake_grads(scores, onset, params, grads)


def _rows_setup(ctx, inputs, output):
    """log Z's and the transcript NLL's: per-row values, so the inputs kept for per-utterance weights."""
    spec, scores, onset, params = inputs[0], inputs[1], inputs[-3], inputs[-1]
    _, gs, flat, go = output
    ctx.spec, ctx.score_dtype, ctx.has_onset, ctx.params = spec, scores.dtype, onset is not None, \
        _param_meta(spec, scores, params)
    ctx.n = len(inputs) - 2  # the op's inputs after the spec and before the parameters
    ctx.save_for_backward(gs, flat, go, *inputs[1:-1][:ctx.n - 1], *params)


def _rows_backward(ctx, g_rows, _gs=None, _flat=None, _go=None):
    gs, flat, go, *rest = ctx.saved_tensors
    scores, lengths = rest[0], rest[1]
    if ctx.n == 4:  # log Z: scores, lengths, onset
        onset, params, kind, gold = rest[2], rest[3:], "log_z", (None, None, None)
    else:  # transcript: scores, lengths, phones, num_phones, optional, links, onset
        optional, links = rest[4], rest[5]
        onset, params = rest[6], rest[7:]
        kind = "transcript" if links is None else "transcript_graph"
        gold = (rest[2], rest[3], optional if links is None else links)
    w = g_rows.reshape(-1, 1, 1)
    pflat = _weighted(scores, ctx.spec, kind, _compute(scores), lengths, *gold, onset, g_rows, flat, list(params))
    d_scores = _scaled(gs, w, ctx.score_dtype)
    d_onset = _scaled(go, w, onset.dtype) if ctx.has_onset else None
    mid = (None,) * (ctx.n - 3)  # lengths, the transcript's phones, num_phones, optional, links
    return (None, d_scores) + mid + (d_onset, None, _param_grads(pflat, ctx.params))


LOG_PARTITION = Op("semicrf_log_partition", "Tensor scores, Tensor lengths, Tensor? onset, bool grads, "
                   "Tensor[] params) -> (Tensor, Tensor, Tensor, Tensor)", _lz_forward, _rows_fake, _rows_setup,
                   _rows_backward)
TRANSCRIPT_NLL = Op("semicrf_transcript_nll", "Tensor scores, Tensor lengths, Tensor phones, Tensor num_phones, "
                    "Tensor? optional, Tensor? links, Tensor? onset, bool grads, Tensor[] params) -> (Tensor, "
                    "Tensor, Tensor, Tensor)", _tr_forward, _rows_fake, _rows_setup, _rows_backward)


# ---- marginals ----------------------------------------------------------------------------------------------
def _marg_forward(inputs, ctx=None):
    """(boundary posteriors [B][T+1], frame label posteriors [B][T][C], segment posteriors [B][T][K][C] with
    segments, else empty [0]), float64."""
    spec, (scores, lengths, onset, segments, params) = inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    out = sess.crf.marginals(_compute(scores), lengths, onset=_opt(onset), segments=segments)
    return tuple(out) if segments else tuple(out) + (scores.new_empty((0,), dtype=torch.float64),)


def _marg_fake(*inputs):
    K, (scores, _, _, segments, _) = parse(inputs[0]).max_duration, inputs[1:]
    B, T, C = scores.shape
    third = (B, T, K, C) if segments else (0,)
    return (scores.new_empty((B, T + 1), dtype=torch.float64), scores.new_empty((B, T, C), dtype=torch.float64),
            scores.new_empty(third, dtype=torch.float64))


def _marg_setup(ctx, inputs, output):
    spec, (scores, lengths, onset, segments, params) = inputs[0], inputs[1:]
    ctx.spec, ctx.score_dtype, ctx.segments = spec, scores.dtype, segments
    ctx.onset_dtype = None if onset is None else onset.dtype
    ctx.params = _param_meta(spec, scores, params)
    ctx.save_for_backward(scores, lengths, onset, *params)


def _marg_backward(ctx, g_b, g_f, g_s):
    scores, lengths, onset, *params = ctx.saved_tensors
    g_s = g_s if ctx.segments else None
    if g_b is None and g_f is None and g_s is None:
        return (None,) * 5 + ([None] * len(params),)
    inputs = (ctx.spec,) + (_compute(scores), lengths, onset, g_b, g_f, g_s, list(params))
    gs, flat, go = _marg_backward_forward(inputs) if eager(scores) else MARGINALS_BACKWARD.operator(*inputs)
    d_onset = _to(go, ctx.onset_dtype) if onset is not None else None
    return (None, _to(gs, ctx.score_dtype), None, d_onset, None, _param_grads(flat, ctx.params))


def _marg_backward_forward(inputs, ctx=None):
    """(d / d scores, the parameters' flat gradient, d / d onset (empty without onset)) of sum(grad_boundaries *
    boundaries + grad_frames * frames + grad_segments * segments) (timitseg_crf_marginals_backward; docs/crf.md
    "Gradient of the marginals"), with the forward's parameters (pushed again)."""
    spec, (scores, lengths, onset, *ups, params) = inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    ups = [None if g is None else _to(g.contiguous() if g.is_cuda else g, torch.float64) for g in ups]
    g = sess.crf.marginals_backward(_compute(scores), lengths, *ups, onset=_opt(onset))
    return g["scores"], _flat_of(sess, g), g["onset"] if onset is not None else _empty(scores)


MARGINALS = Op("semicrf_marginals", "Tensor scores, Tensor lengths, Tensor? onset, bool segments, Tensor[] params) "
               "-> (Tensor, Tensor, Tensor)", _marg_forward, _marg_fake, _marg_setup, _marg_backward, fill=False)
MARGINALS_BACKWARD = Op("semicrf_marginals_backward", "Tensor scores, Tensor lengths, Tensor? onset, "
                        "Tensor? grad_boundaries, Tensor? grad_frames, Tensor? grad_segments, Tensor[] params) -> "
                        "(Tensor, Tensor, Tensor)", _marg_backward_forward,
                        lambda *inputs: _fake_grads(inputs[1], inputs[3], inputs[-1], True))


# ---- Viterbi and the penalty ------------------------------------------------------------------------------
def _viterbi_forward(inputs, ctx=None):
    """(score [B] float64, segments [B][T][3] int32 (start, duration, label; rows past a count 0),
    num_segments [B] int32), with the Spec's phone_bonus."""
    spec, (scores, lengths, onset, params) = inputs[0], inputs[1:]
    sess = session(spec, scores)
    sess.push(params)
    return sess.crf.viterbi(_compute(scores), lengths, onset=_opt(onset), padded=True)


def _viterbi_fake(*inputs):
    scores = inputs[1]
    B, T, _ = scores.shape
    return (scores.new_empty((B,), dtype=torch.float64), scores.new_empty((B, T, 3), dtype=torch.int32),
            scores.new_empty((B,), dtype=torch.int32))


VITERBI = Op("semicrf_viterbi", "Tensor scores, Tensor lengths, Tensor? onset, Tensor[] params) -> (Tensor, "
             "Tensor, Tensor)", _viterbi_forward, _viterbi_fake)


def _pen_forward(inputs, ctx=None):
    """(reg * (||transition||^2 + ||duration_bias||^2) as a 0-dim float64 tensor, its gradients), computed by
    the C API (timitseg_crf_penalty_grads; on CUDA queued on torch's current stream); params: [transition]
    or [transition, duration_bias]. On the Function route the value is a view of the C API's [1] output
    (an operator may not return one: there a copy)."""
    spec, (reg, params) = inputs[0], inputs[1:]
    transition, duration_bias = params[0], params[1] if len(params) > 1 else None
    value, ga, gd = session(spec, transition).crf.penalty_grads(
        reg, transition.detach(), None if duration_bias is None else duration_bias.detach())
    value = value.reshape(())
    return value if ctx is not None else value.clone(), ga, gd if gd is not None else _empty(transition)


def _pen_fake(*inputs):
    params = inputs[2]
    transition, dt = params[0], _cdtype(params[0])
    gd = params[1].new_empty(params[1].shape, dtype=dt) if len(params) > 1 else _empty(transition)
    return transition.new_empty((), dtype=torch.float64), transition.new_empty(transition.shape, dtype=dt), gd


def _pen_setup(ctx, inputs, output):
    ctx.dtypes = [p.dtype for p in inputs[2]]
    ctx.save_for_backward(output[1], output[2])


def _pen_backward(ctx, g_value, _ga=None, _gd=None):
    ga, gd = ctx.saved_tensors
    grads = [_scaled(ga, g_value, ctx.dtypes[0])] + [_scaled(gd, g_value, dt) for dt in ctx.dtypes[1:]]
    return None, None, grads


PENALTY = Op("semicrf_penalty", "float reg, Tensor[] params) -> (Tensor, Tensor, Tensor)", _pen_forward,
             _pen_fake, _pen_setup, _pen_backward)
