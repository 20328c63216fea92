"""timitseg's semi-CRF as PyTorch operators (torch.library.custom_op, torch >= 2.4): the NLL, the log
partition, the marginals, Viterbi and the L2 penalty, each with its fake (shapes only) implementation and,
where differentiable, its autograd formula, so that a model using timitseg.torch.SemiCRF runs under
torch.compile(fullgraph=True) and torch.export with the values and gradients of eager mode.

Still pure Python over the C API: each operator's body is the ctypes call of timitseg.CRF (outputs made by
torch on the inputs' device, CUDA work queued on torch's current stream). The forward computes every
gradient in the same C call and returns it as an extra output; the backward (register_autograd) scales
the saved gradients by the incoming one (save_for_backward), with torch ops that torch.compile traces
into its backward graph. Per-utterance weights that differ (reduction "none" with weights not all
equal) go through one more operator that computes the parameters' gradients one utterance at a time.

An operator reaches its module's handle through an int key (SemiCRF registers itself here): a compiled
or exported graph holds the key as a constant and runs in the process that made it, while the module
lives. The handle's parameters are the operator's tensor inputs (bound or copied on every call, as the
eager module does). The public torch APIs only: torch.library.custom_op, register_fake, register_autograd
(torch 2.4 to 2.15 tested: 2.15.0 on the development machine, 2.11 on the device).
"""
import itertools
import weakref
from typing import List, Optional, Tuple

import torch
from torch import Tensor

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")

_MODULES = {}
_KEYS = itertools.count(1)


def register(module):
    """A key for `module` (a SemiCRF) that the operators take."""
    key = next(_KEYS)
    _MODULES[key] = weakref.ref(module, lambda _ref, key=key: _MODULES.pop(key, None))
    return key


def _module(key):
    ref = _MODULES.get(key)
    m = ref() if ref is not None else None
    if m is None:
        raise RuntimeError("timitseg: the SemiCRF of key %d no longer exists (a compiled or exported graph runs "
                           "only while the module it was made from lives, in its process)" % key)
    return m


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


def _grad_outputs(scores, onset, g, flat, grads):
    """The gradient outputs of nll / log_partition (empty [0] tensors when not computed)."""
    if not grads:
        return _empty(scores), _empty(scores), _empty(scores)
    return g["scores"], flat, g["onset"] if onset is not None else _empty(scores)


def _fake_grads(scores, onset, params, grads):
    if not grads:
        return _empty(scores), _empty(scores), _empty(scores)
    dt = _cdtype(scores)
    size = sum(p.numel() for p in params)
    go = scores.new_empty(onset.shape, dtype=dt) if onset is not None else _empty(scores)
    return scores.new_empty(scores.shape, dtype=dt), scores.new_empty((size,), dtype=dt), go


def _module_flat(m, flat):
    """The handle's flat gradient buffer (its parameters in its order: transition, duration_bias, start,
    end[, duration_lognormal]) as the module's parameters' (SemiCRF._param_names order)."""
    names = m._param_names()
    if tuple(names) == tuple(m.handle.param_names()):
        return flat
    strided = m.handle._flat_strided
    return torch.cat([flat.as_strided(*strided[n]).reshape(-1) for n in names])


def _to(t, dtype):
    """t.to(dtype) without the call when t has that dtype already (t.to returns t itself then)."""
    return t if t.dtype == dtype else t.to(dtype)


def _param_meta(params):
    """What the backward needs of the parameters (kept on ctx, not saved tensors): (sizes, shapes, dtypes)."""
    return [p.numel() for p in params], [p.shape for p in params], [p.dtype for p in params]


def _param_grads(flat, meta):
    """Views of one flat gradient buffer shaped as the parameters (meta: _param_meta), in their dtypes."""
    sizes, shapes, dtypes = meta
    parts = flat.split(sizes)
    return [_to(q if len(shape) == 1 else q.reshape(shape), dt) for q, shape, dt in zip(parts, shapes, dtypes)]


def _weighted(scores, *args):
    """semicrf_weighted_param_grads: its body called directly on the eager route (no dispatch), else the
    operator (which torch.compile's backward graph records)."""
    return (_weighted_param_grads if eager(scores) else semicrf_weighted_param_grads)(*args)


def _weighted_param_grads(key, kind, scores, lengths, labels, segments, num_segments, onset, weights, flat):
    """semicrf_weighted_param_grads's body."""
    w = weights.detach().reshape(-1)
    if w.numel() == 0:
        return torch.zeros_like(flat)
    if w.numel() == 1 or w.stride(0) == 0 or bool(torch.all(w == w[0])):  # stride 0: sum()'s, no wait
        return flat * w[0].to(flat.dtype)
    m = _module(key)
    out = torch.zeros(flat.shape, dtype=torch.float64, device=flat.device)
    for b in range(w.shape[0]):
        sl = slice(b, b + 1)
        o = None if onset is None else onset[sl]
        if kind == "nll":
            _, _, fb = m.handle._nll(scores[sl], lengths[sl], None if labels is None else labels[sl],
                                     None if segments is None else segments[sl],
                                     None if num_segments is None else num_segments[sl], o, False, 1.0, True,
                                     "float64", views=False)
            fb = _module_flat(m, fb)
        elif kind == "transcript":  # labels, segments, num_segments carry phones, num_phones, optional
            _, gb = m.handle.transcript_nll(scores[sl], lengths[sl], labels[sl], segments[sl],
                                            optional=None if num_segments is None else num_segments[sl], onset=o,
                                            grads=True)
            fb = torch.cat([gb[n].reshape(-1) for n in m._param_names()])
        else:
            _, gb = m.handle.log_partition(scores[sl], lengths[sl], onset=o, grads=True)
            fb = torch.cat([gb[n].reshape(-1) for n in m._param_names()])
        out += fb.to(torch.float64) * w[b].to(torch.float64)
    return out.to(flat.dtype)


def eager(scores):
    """The eager route of nll, log_partition and penalty: not under torch.compile / torch.export (which see
    the operators) and scores (or transition) an ordinary tensor or parameter. The same Python bodies and
    backward formulas as the operators, run by a torch.autograd.Function: torch.library's dispatch of an
    operator of this many arguments costs more per call than our whole forward (docs/python.md, "Overhead
    on the host")."""
    return not torch.compiler.is_compiling() and type(scores) in _PLAIN


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a FakeTensor, FunctionalTensor or another tracer's subclass


def _nll_forward(key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads, deferred):
    """semicrf_nll's body (the operator's, and _EagerNLL's forward)."""
    m = _module(key)
    m._push(m._param_names(), params)
    onset = None if onset is None else _compute(onset)
    out_dtype = "float64" if scores.dtype == torch.float64 else "float32"
    pending = None
    if deferred:
        captured = scores.is_cuda and torch.cuda.is_current_stream_capturing()
        if not captured:
            m.check()  # the previous deferred call's status (at the next eager call)
        pending = []
    nll, g, flat = m.handle._nll(_compute(scores), lengths, labels, segments, num_segments, onset, False, 1.0,
                                 grads, out_dtype, views=False, deferred=pending)
    m._steps += 1
    if pending:
        m._pending.append((m._steps, captured, pending[0]))
    loss = nll.mean() if reduction == "mean" else nll.sum() if reduction == "sum" else nll
    return (loss,) + _grad_outputs(scores, onset, g, _module_flat(m, flat) if grads else None, grads)


def _lz_forward(key, scores, lengths, onset, params, grads):
    """semicrf_log_partition's body (the operator's, and _EagerLogZ's forward)."""
    m = _module(key)
    m._push(m._param_names(), params)
    onset = None if onset is None else _compute(onset)
    if not grads:
        lz = m.handle.log_partition(_compute(scores), lengths, onset=onset)
        return (lz,) + _grad_outputs(scores, onset, None, None, False)
    lz, g = m.handle.log_partition(_compute(scores), lengths, onset=onset, grads=True)
    flat = torch.cat([g[n].reshape(-1) for n in m._param_names()])
    return (lz,) + _grad_outputs(scores, onset, g, flat, True)


def _tr_forward(key, scores, lengths, phones, num_phones, optional, onset, params, grads):
    """semicrf_transcript_nll's body (the operator's, and _EagerTranscript's forward): the transcript NLL [B]
    float64 (docs/crf.md "Training from transcripts") and the gradients of its sum."""
    m = _module(key)
    m._push(m._param_names(), params)
    onset = None if onset is None else _compute(onset)
    x = _compute(scores)
    if not grads:
        nll = m.handle.transcript_nll(x, lengths, phones, num_phones, optional=optional, onset=onset)
        return (nll,) + _grad_outputs(scores, onset, None, None, False)
    nll, g = m.handle.transcript_nll(x, lengths, phones, num_phones, optional=optional, onset=onset, grads=True)
    flat = torch.cat([g[n].reshape(-1) for n in m._param_names()])
    return (nll,) + _grad_outputs(scores, onset, g, flat, True)


def _penalty_forward(key, reg, transition, duration_bias, eager_route=False):
    """semicrf_penalty's body (the operator's, and _EagerPenalty's forward with eager_route: the value a view
    of the C API's [1] output, which an operator may not return, so no copy kernel)."""
    m = _module(key)
    value, ga, gd = m.handle.penalty_grads(reg, transition.detach(),
                                           None if duration_bias is None else duration_bias.detach())
    value = value.reshape(())
    return value if eager_route else value.clone(), ga, gd if gd is not None else _empty(transition)


def marginals_forward(key, scores, lengths, onset, params, segments):
    """semicrf_marginals's body (the operator's, and the eager route's, timitseg.torch._Marginals): the three
    posteriors, the third empty [0] without segments."""
    m = _module(key)
    m._push(m._param_names(), params)
    onset = None if onset is None else _compute(onset)
    out = m.handle.marginals(_compute(scores), lengths, onset=onset, segments=segments)
    return tuple(out) if segments else tuple(out) + (scores.new_empty((0,), dtype=torch.float64),)


def marginals_backward_body(key, scores, lengths, onset, params, grad_boundaries, grad_frames, grad_segments):
    """semicrf_marginals_backward's body: the module's handle on the forward's parameters (pushed again: the
    handle may have served other calls since), the C API's gradients, the parameters' as one flat buffer."""
    m = _module(key)
    m._push(m._param_names(), params)
    ups = [None if g is None else _to(g.contiguous() if g.is_cuda else g, torch.float64)
           for g in (grad_boundaries, grad_frames, grad_segments)]
    g = m.handle.marginals_backward(_compute(scores), lengths, *ups, onset=None if onset is None else _compute(onset))
    flat = torch.cat([g[n].reshape(-1) for n in m._param_names()])
    return g["scores"], flat, g["onset"] if onset is not None else _empty(scores)


if AVAILABLE:
    @torch.library.custom_op("timitseg::semicrf_nll", mutates_args=())
    def semicrf_nll(key: int, reduction: str, scores: Tensor, lengths: Tensor, labels: Optional[Tensor],
                    segments: Optional[Tensor], num_segments: Optional[Tensor], onset: Optional[Tensor],
                    params: List[Tensor], grads: bool, deferred: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(loss: NLL [B] or its mean / sum, d sum(NLL) / d scores, the parameters' gradients as one flat
        buffer, d sum(NLL) / d onset); the gradients empty without grads. deferred: SemiCRF(check="deferred"),
        the C call does not wait for the GPU (timitseg_crf_nll_end with a check ticket, kept by the module
        for its check(); the previous call's check runs first, unless a CUDA graph is being captured)."""
        return _nll_forward(key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads,
                            deferred)

    @semicrf_nll.register_fake
    def _(key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads, deferred):
        shape = (scores.shape[0],) if reduction == "none" else ()
        return (scores.new_empty(shape, dtype=_cdtype(scores)),) + _fake_grads(scores, onset, params, grads)

    def _nll_setup(ctx, inputs, output):
        key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads, _ = inputs
        _, gs, flat, go = output
        ctx.key, ctx.reduction, ctx.B, ctx.score_dtype = key, reduction, scores.shape[0], scores.dtype
        ctx.has_onset, ctx.onset_dtype, ctx.params = onset is not None, onset is not None and onset.dtype, \
            _param_meta(params)
        if reduction == "none":  # the inputs again for the per-utterance weights (semicrf_weighted_param_grads)
            ctx.save_for_backward(gs, flat, go, scores, lengths, labels, segments, num_segments, onset)
        else:
            ctx.save_for_backward(gs, flat, go)

    def _nll_backward(ctx, g_loss, _gs, _flat, _go):
        if ctx.reduction == "none":
            gs, flat, go, scores, lengths, labels, segments, num_segments, onset = ctx.saved_tensors
            w = g_loss.reshape(-1, 1, 1)
            pflat = _weighted(scores, ctx.key, "nll", _compute(scores), lengths, labels, segments, num_segments,
                              onset, g_loss, flat)
        else:
            gs, flat, go = ctx.saved_tensors
            w = g_loss / ctx.B if ctx.reduction == "mean" else g_loss  # as torch's mean backward
            pflat = flat * _to(w, flat.dtype)
        d_scores = _to(gs * _to(w, gs.dtype), ctx.score_dtype)
        d_onset = _to(go * _to(w, go.dtype), ctx.onset_dtype) if ctx.has_onset else None
        return (None, None, d_scores, None, None, None, None, d_onset, _param_grads(pflat, ctx.params), None, None)

    semicrf_nll.register_autograd(_nll_backward, setup_context=_nll_setup)

    def _eager_outputs(ctx, out):
        """The outputs of an _Eager* Function: the operator's (the same autograd graph: under create_graph the
        gradients it returns are differentiable as the operator's are). Only the first output's gradient is
        read by the backward: the others are not materialized (no zero fills), the first one zeros when absent
        (the zeros the operator's autograd would pass)."""
        ctx.set_materialize_grads(False)
        ctx.first = (out[0].shape, out[0].dtype, out[0].device)
        return out

    def _first_grad(ctx, g):
        if g is None:
            shape, dtype, device = ctx.first
            return torch.zeros(shape, dtype=dtype, device=device)
        return g

    class _EagerNLL(torch.autograd.Function):
        """semicrf_nll outside torch.compile / torch.export: the operator's body (_nll_forward), context
        (_nll_setup) and backward (_nll_backward), so values and gradients are the operator's bit for bit."""

        @staticmethod
        def forward(ctx, key, reduction, scores, lengths, labels, segments, num_segments, onset, grads, deferred,
                    *params):
            inputs = (key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads,
                      deferred)
            out = _nll_forward(*inputs)
            _nll_setup(ctx, inputs, out)
            return _eager_outputs(ctx, out)

        @staticmethod
        def backward(ctx, g_loss, *_unused):
            grads = _nll_backward(ctx, _first_grad(ctx, g_loss), None, None, None)
            return grads[:8] + (None, None) + tuple(grads[8])

    def nll(key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads, deferred):
        """The loss of semicrf_nll: through _EagerNLL where eager(scores), else the operator."""
        if eager(scores):
            return _EagerNLL.apply(key, reduction, scores, lengths, labels, segments, num_segments, onset, grads,
                                   deferred, *params)[0]
        return semicrf_nll(key, reduction, scores, lengths, labels, segments, num_segments, onset, params, grads,
                           deferred)[0]

    @torch.library.custom_op("timitseg::semicrf_log_partition", mutates_args=())
    def semicrf_log_partition(key: int, scores: Tensor, lengths: Tensor, onset: Optional[Tensor],
                              params: List[Tensor], grads: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(log Z [B] float64, d sum(log Z) / d scores, the parameters' flat gradient, d / d onset)."""
        return _lz_forward(key, scores, lengths, onset, params, grads)

    @semicrf_log_partition.register_fake
    def _(key, scores, lengths, onset, params, grads):
        return (scores.new_empty((scores.shape[0],), dtype=torch.float64),) + _fake_grads(scores, onset, params,
                                                                                           grads)

    def _lz_setup(ctx, inputs, output):
        key, scores, lengths, onset, params, grads = inputs
        _, gs, flat, go = output
        ctx.key, ctx.score_dtype, ctx.has_onset = key, scores.dtype, onset is not None
        ctx.params = _param_meta(params)
        ctx.save_for_backward(gs, flat, go, scores, lengths, onset)

    def _lz_backward(ctx, g_lz, _gs, _flat, _go):
        gs, flat, go, scores, lengths, onset = ctx.saved_tensors
        w = g_lz.reshape(-1, 1, 1)
        pflat = _weighted(scores, ctx.key, "log_z", _compute(scores), lengths, None, None, None, onset, g_lz, flat)
        d_scores = _to(gs * _to(w, gs.dtype), ctx.score_dtype)
        d_onset = _to(go * _to(w, go.dtype), onset.dtype) if ctx.has_onset else None
        return (None, d_scores, None, d_onset, _param_grads(pflat, ctx.params), None)

    semicrf_log_partition.register_autograd(_lz_backward, setup_context=_lz_setup)

    class _EagerLogZ(torch.autograd.Function):
        """semicrf_log_partition outside torch.compile / torch.export (as _EagerNLL)."""

        @staticmethod
        def forward(ctx, key, scores, lengths, onset, grads, *params):
            inputs = (key, scores, lengths, onset, params, grads)
            out = _lz_forward(*inputs)
            _lz_setup(ctx, inputs, out)
            return _eager_outputs(ctx, out)

        @staticmethod
        def backward(ctx, g_lz, *_unused):
            grads = _lz_backward(ctx, _first_grad(ctx, g_lz), None, None, None)
            return grads[:4] + (None,) + tuple(grads[4])

    def log_partition(key, scores, lengths, onset, params, grads):
        """log Z of semicrf_log_partition: through _EagerLogZ where eager(scores), else the operator."""
        if eager(scores):
            return _EagerLogZ.apply(key, scores, lengths, onset, grads, *params)[0]
        return semicrf_log_partition(key, scores, lengths, onset, params, grads)[0]

    @torch.library.custom_op("timitseg::semicrf_weighted_param_grads", mutates_args=())
    def semicrf_weighted_param_grads(key: int, kind: str, scores: Tensor, lengths: Tensor, labels: Optional[Tensor],
                                     segments: Optional[Tensor], num_segments: Optional[Tensor],
                                     onset: Optional[Tensor], weights: Tensor, flat: Tensor) -> Tensor:
        """sum_b weights[b] * d value_b / d parameters (value: NLL or log Z), flat: the forward's sum over b.
        One weight for every utterance (read on the host: a wait on CUDA) scales flat; else one call per
        utterance of the module's handle (whose parameters the forward bound or copied)."""
        return _weighted_param_grads(key, kind, scores, lengths, labels, segments, num_segments, onset, weights,
                                     flat)

    @semicrf_weighted_param_grads.register_fake
    def _(key, kind, scores, lengths, labels, segments, num_segments, onset, weights, flat):
        return torch.empty_like(flat)

    @torch.library.custom_op("timitseg::semicrf_marginals", mutates_args=())
    def semicrf_marginals(key: int, scores: Tensor, lengths: Tensor, onset: Optional[Tensor],
                          params: List[Tensor], segments: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """(boundary posteriors [B][T+1], frame label posteriors [B][T][C], segment posteriors [B][T][K][C]
        with segments, else empty [0]), float64; differentiable (semicrf_marginals_backward)."""
        return marginals_forward(key, scores, lengths, onset, params, segments)

    @semicrf_marginals.register_fake
    def _(key, scores, lengths, onset, params, segments):
        B, T, C = scores.shape
        third = (B, T, _module(key).max_duration, C) if segments else (0,)
        return (scores.new_empty((B, T + 1), dtype=torch.float64),
                scores.new_empty((B, T, C), dtype=torch.float64), scores.new_empty(third, dtype=torch.float64))

    @torch.library.custom_op("timitseg::semicrf_marginals_backward", mutates_args=())
    def semicrf_marginals_backward(key: int, scores: Tensor, lengths: Tensor, onset: Optional[Tensor],
                                   params: List[Tensor], grad_boundaries: Optional[Tensor],
                                   grad_frames: Optional[Tensor],
                                   grad_segments: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
        """(d / d scores, the parameters' flat gradient, d / d onset (empty without onset)) of
        sum(grad_boundaries * boundaries + grad_frames * frames + grad_segments * segments)
        (timitseg_crf_marginals_backward; docs/crf.md "Gradient of the marginals")."""
        return marginals_backward_body(key, scores, lengths, onset, params, grad_boundaries, grad_frames,
                                       grad_segments)

    @semicrf_marginals_backward.register_fake
    def _(key, scores, lengths, onset, params, grad_boundaries, grad_frames, grad_segments):
        return _fake_grads(scores, onset, params, True)

    def _marg_setup(ctx, inputs, output):
        key, scores, lengths, onset, params, segments = inputs
        ctx.key, ctx.score_dtype, ctx.segments = key, scores.dtype, segments
        ctx.onset_dtype = None if onset is None else onset.dtype
        ctx.params = _param_meta(params)
        ctx.save_for_backward(scores, lengths, onset, *params)

    def _marg_backward(ctx, g_b, g_f, g_s):
        scores, lengths, onset, *params = ctx.saved_tensors
        gs, flat, go = semicrf_marginals_backward(ctx.key, _compute(scores), lengths, onset, list(params), g_b, g_f,
                                                  g_s if ctx.segments else None)
        d_onset = _to(go, ctx.onset_dtype) if onset is not None else None
        return None, _to(gs, ctx.score_dtype), None, d_onset, _param_grads(flat, ctx.params), None

    semicrf_marginals.register_autograd(_marg_backward, setup_context=_marg_setup)

    @torch.library.custom_op("timitseg::semicrf_viterbi", mutates_args=())
    def semicrf_viterbi(key: int, scores: Tensor, lengths: Tensor, onset: Optional[Tensor],
                        params: List[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
        """(score [B] float64, segments [B][T][3] int32 (start, duration, label; rows past a count 0),
        num_segments [B] int32), with crf.phone_bonus."""
        m = _module(key)
        m._push(m._param_names(), params)
        onset = None if onset is None else _compute(onset)
        return m.handle.viterbi(_compute(scores), lengths, onset=onset, padded=True)

    @semicrf_viterbi.register_fake
    def _(key, scores, lengths, onset, params):
        B, T, _ = scores.shape
        return (scores.new_empty((B,), dtype=torch.float64), scores.new_empty((B, T, 3), dtype=torch.int32),
                scores.new_empty((B,), dtype=torch.int32))

    @torch.library.custom_op("timitseg::semicrf_penalty", mutates_args=())
    def semicrf_penalty(key: int, reg: float, transition: Tensor,
                        duration_bias: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
        """(reg * (||transition||^2 + ||duration_bias||^2) as a 0-dim float64 tensor, its gradients), computed
        by the C API (timitseg_crf_penalty_grads; on CUDA queued on torch's current stream)."""
        return _penalty_forward(key, reg, transition, duration_bias)

    @semicrf_penalty.register_fake
    def _(key, reg, transition, duration_bias):
        dt = _cdtype(transition)
        gd = duration_bias.new_empty(duration_bias.shape, dtype=dt) if duration_bias is not None else \
            _empty(transition)
        return transition.new_empty((), dtype=torch.float64), transition.new_empty(transition.shape, dtype=dt), gd

    def _pen_setup(ctx, inputs, output):
        _, _, transition, duration_bias = inputs
        ctx.has_d = duration_bias is not None
        ctx.dtypes = (transition.dtype, None if duration_bias is None else duration_bias.dtype)
        ctx.save_for_backward(output[1], output[2])

    def _pen_backward(ctx, g_value, _ga, _gd):
        ga, gd = ctx.saved_tensors
        d_a = _to(ga * _to(g_value, ga.dtype), ctx.dtypes[0])
        d_d = _to(gd * _to(g_value, gd.dtype), ctx.dtypes[1]) if ctx.has_d else None
        return None, None, d_a, d_d

    semicrf_penalty.register_autograd(_pen_backward, setup_context=_pen_setup)

    class _EagerPenalty(torch.autograd.Function):
        """semicrf_penalty outside torch.compile / torch.export (as _EagerNLL: the operator's body, context
        and backward)."""

        @staticmethod
        def forward(ctx, key, reg, transition, duration_bias):
            out = _penalty_forward(key, reg, transition, duration_bias, eager_route=True)
            _pen_setup(ctx, (key, reg, transition, duration_bias), out)
            return _eager_outputs(ctx, out)

        @staticmethod
        def backward(ctx, g_value, *_unused):
            return _pen_backward(ctx, _first_grad(ctx, g_value), None, None)

    def penalty(key, reg, transition, duration_bias):
        """The value of semicrf_penalty: through _EagerPenalty where eager(transition), else the operator."""
        if eager(transition):
            return _EagerPenalty.apply(key, reg, transition, duration_bias)[0]
        return semicrf_penalty(key, reg, transition, duration_bias)[0]

    @torch.library.custom_op("timitseg::semicrf_transcript_nll", mutates_args=())
    def semicrf_transcript_nll(key: int, scores: Tensor, lengths: Tensor, phones: Tensor, num_phones: Tensor,
                               optional: Optional[Tensor], onset: Optional[Tensor], params: List[Tensor],
                               grads: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(transcript NLL [B] float64, d sum(nll) / d scores, the parameters' flat gradient, d / d onset)."""
        return _tr_forward(key, scores, lengths, phones, num_phones, optional, onset, params, grads)

    @semicrf_transcript_nll.register_fake
    def _(key, scores, lengths, phones, num_phones, optional, onset, params, grads):
        return (scores.new_empty((scores.shape[0],), dtype=torch.float64),) + _fake_grads(scores, onset, params,
                                                                                           grads)

    def _tr_setup(ctx, inputs, output):
        key, scores, lengths, phones, num_phones, optional, onset, params, grads = inputs
        _, gs, flat, go = output
        ctx.key, ctx.score_dtype, ctx.has_onset = key, scores.dtype, onset is not None
        ctx.params = _param_meta(params)
        ctx.save_for_backward(gs, flat, go, scores, lengths, phones, num_phones, optional, onset)

    def _tr_backward(ctx, g_nll, _gs, _flat, _go):
        gs, flat, go, scores, lengths, phones, num_phones, optional, onset = ctx.saved_tensors
        w = g_nll.reshape(-1, 1, 1)
        pflat = _weighted(scores, ctx.key, "transcript", _compute(scores), lengths, phones, num_phones, optional,
                          onset, g_nll, flat)
        d_scores = _to(gs * _to(w, gs.dtype), ctx.score_dtype)
        d_onset = _to(go * _to(w, go.dtype), onset.dtype) if ctx.has_onset else None
        return (None, d_scores, None, None, None, None, d_onset, _param_grads(pflat, ctx.params), None)

    semicrf_transcript_nll.register_autograd(_tr_backward, setup_context=_tr_setup)

    class _EagerTranscript(torch.autograd.Function):
        """semicrf_transcript_nll outside torch.compile / torch.export (as _EagerNLL)."""

        @staticmethod
        def forward(ctx, key, scores, lengths, phones, num_phones, optional, onset, grads, *params):
            inputs = (key, scores, lengths, phones, num_phones, optional, onset, params, grads)
            out = _tr_forward(*inputs)
            _tr_setup(ctx, inputs, out)
            return _eager_outputs(ctx, out)

        @staticmethod
        def backward(ctx, g_nll, *_unused):
            grads = _tr_backward(ctx, _first_grad(ctx, g_nll), None, None, None)
            return grads[:7] + (None,) + tuple(grads[7])

    def transcript_nll(key, scores, lengths, phones, num_phones, optional, onset, params, grads):
        """The transcript NLL of semicrf_transcript_nll: through _EagerTranscript where eager(scores), else the
        operator."""
        if eager(scores):
            return _EagerTranscript.apply(key, scores, lengths, phones, num_phones, optional, onset, grads,
                                          *params)[0]
        return semicrf_transcript_nll(key, scores, lengths, phones, num_phones, optional, onset, params, grads)[0]
