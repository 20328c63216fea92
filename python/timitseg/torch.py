"""timitseg.torch.SemiCRF: the semi-CRF as a PyTorch module whose loss's
backward is timitseg's own kernels (through the C API).

    crf = SemiCRF(num_labels=39, max_duration=30)
    loss = crf(scores, lengths, labels=labels).mean()   # scores [B][T][C]
    loss.backward()

Parameters carry the names of a timitseg checkpoint under its "crf." prefix
(transition [C][C], duration_bias [K][C], start [C], end [C]; with
duration_model="lognormal", duration_lognormal [3][C] and duration_bias a
derived buffer), so a module registered as `crf` loads a checkpoint's CRF.
float16/bfloat16 scores are computed in float32 (their gradient is cast back).
"""
import numpy as np
import torch

from . import _lib, _ops
from .checkpoint import CRF_PREFIX, CRF_TENSORS, read_safetensors
from .crf import CRF

_COMPUTE = (torch.float32, torch.float64)


def _as_compute(x):
    return x if x.dtype in _COMPUTE else x.float()


_REDUCTIONS = ("none", "mean", "sum")


class _NLL(torch.autograd.Function):
    """The NLL [B] (reduction "none") or its mean / sum over the batch. The forward computes every
    gradient of sum(nll) (scale 1) in the same call; the backward scales them by the incoming
    gradient on torch's current stream, without a host wait when one weight serves every utterance
    (a reduction, or a gradient broadcast from one value as sum() gives): one multiplication for
    the parameters' gradients (one flat buffer) and one for the scores'.

    Deferred check (SemiCRF(eager_check=False), when gradients are wanted):
    the forward queues the whole call (timitseg_crf_nll_begin / _end with a check ticket) and returns
    without waiting for the GPU; the backward queues its scaling and leaves the check (one wait) to a
    callback autograd runs once the backward pass is queued, raising the exception the synchronous call
    raises for a bad input. Host backends run the call inside the forward as before."""

    @staticmethod
    def forward(ctx, crf, names, gold, reduction, grad_mode, scores, lengths, onset, *params):
        handle = crf.handle
        crf._push(names, params)
        need = ctx.needs_input_grad
        # needs_input_grad ignores grad mode: under torch.no_grad() no backward will run (grad_mode is
        # torch.is_grad_enabled() at the call), so neither gradients nor a deferred check are wanted
        want_grads = grad_mode and any(need[5:])
        x = _as_compute(scores)  # read in place (forward runs without grad; no detach needed)
        out_dtype = "float64" if scores.dtype == torch.float64 else "float32"
        pending = [] if want_grads and not crf.eager_check else None
        nll, grads, flat = handle._nll(x, lengths, gold.get("labels"), gold.get("segments"),
                                       gold.get("num_segments"), None if onset is None else onset.detach(), False,
                                       1.0, want_grads, out_dtype, views=False, deferred=pending)
        ctx.pending = pending[0] if pending else None  # (ticket, the tensors the queued call uses)
        ctx.grads, ctx.flat, ctx.names, ctx.reduction, ctx.B = grads, flat, names, reduction, nll.shape[0]
        ctx.score_dtype = scores.dtype
        ctx.has_onset = onset is not None
        ctx.gold, ctx.lengths, ctx.onset, ctx.x = gold, lengths, onset, x
        ctx.handle = handle
        if reduction == "mean":
            return nll.mean()
        return nll.sum() if reduction == "sum" else nll

    @staticmethod
    def backward(ctx, grad_out):
        g = ctx.grads
        gn = grad_out.detach()
        if ctx.pending is not None and not _one_weight(ctx, gn):
            _check(ctx)  # per-utterance weights: the handle is called again below, after the check
        if ctx.reduction == "mean":
            w, rows = gn / ctx.B, None  # as torch's mean backward: each utterance's weight g / B
        elif ctx.reduction == "sum":
            w, rows = gn, None
        elif gn.numel() == 0 or gn.stride(0) == 0 or gn.numel() == 1:
            w, rows = gn.reshape(-1)[0] if gn.numel() else gn.sum(), None  # one value broadcast: no host wait
        elif bool(torch.all(gn == gn.reshape(-1)[0])):  # a host wait: the weights of .mean() look like this
            w, rows = gn.reshape(-1)[0], None
        else:
            w, rows = None, gn
        go = None
        if rows is None:
            flat, gs = _scaled(ctx.flat, w, ctx.flat.dtype), _scaled(g["scores"], w, ctx.score_dtype)
            part = ctx.handle._flat_strided
            param_grads = [flat.as_strided(*part[n]) for n in ctx.names]  # views of the one scaled buffer
            if ctx.has_onset:
                go = _scaled(g["onset"], w, g["onset"].dtype)
        else:  # per-utterance weights: the parameter gradients one utterance at a time
            param_grads = _weighted_param_grads(ctx, rows)
            gs = _scaled(g["scores"], rows.reshape(-1, 1, 1), ctx.score_dtype)
            if ctx.has_onset:
                go = _scaled(g["onset"], rows.reshape(-1, 1, 1), g["onset"].dtype)
        if ctx.pending is not None:
            # The one wait of a deferred forward, once the whole backward pass is queued (the gradients'
            # accumulation into .grad included, which runs on the host while the GPU computes): autograd
            # runs the callback before backward() returns and raises its error from there.
            pending, handle = ctx.pending, ctx.handle
            ctx.pending = None
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _check_ticket(handle, pending))
        return (None, None, None, None, None, gs, None, go) + tuple(param_grads)


class _Penalty(torch.autograd.Function):
    """SemiCRF.penalty where torch has no custom_op (torch < 2.4): the C API's value and gradients."""

    @staticmethod
    def forward(ctx, handle, reg, transition, duration_bias):
        value, ga, gd = handle.penalty_grads(reg, transition.detach(),
                                             None if duration_bias is None else duration_bias.detach())
        ctx.save_for_backward(ga, gd)
        return value.reshape(()).to(transition.dtype)

    @staticmethod
    def backward(ctx, g):
        ga, gd = ctx.saved_tensors
        return None, None, ga * g.to(ga.dtype), None if gd is None else gd * g.to(gd.dtype)


class _LogZ(torch.autograd.Function):
    """log Z [B] (float64) differentiable in the scores, onset and the parameters: the forward computes the
    gradients of sum(log Z) in the same call (timitseg_crf_log_partition_grads: the marginals, no penalty);
    the backward scales each row's score gradient by its weight and the parameters' by one weight when all
    are equal, else computes them row by row (as _NLL's per-utterance path)."""

    @staticmethod
    def forward(ctx, crf, names, scores, lengths, onset, *params):
        crf._push(names, params)
        x = _as_compute(scores)
        o = None if onset is None else onset.detach()
        lz, g = crf.handle.log_partition(x, lengths, onset=o, grads=True)
        ctx.g, ctx.names, ctx.handle, ctx.x, ctx.lengths, ctx.onset = g, names, crf.handle, x, lengths, o
        ctx.score_dtype, ctx.param_dtypes = scores.dtype, [p.dtype for p in params]
        return lz

    @staticmethod
    def backward(ctx, grad_out):
        g, w = ctx.g, grad_out.detach().to(torch.float64)
        rows = w.reshape(-1, 1, 1)
        gs = (g["scores"].to(torch.float64) * rows).to(ctx.score_dtype)
        go = None if ctx.onset is None else (g["onset"].to(torch.float64) * rows).to(g["onset"].dtype)
        if w.numel() and bool(torch.all(w == w[0])):
            param_grads = [g[n].to(torch.float64) * w[0] for n in ctx.names]
        else:
            param_grads = [torch.zeros(ctx.handle.param_shape(n), dtype=torch.float64, device=w.device)
                           for n in ctx.names]
            for b in range(w.shape[0]):
                sl = slice(b, b + 1)
                o = None if ctx.onset is None else ctx.onset[sl]
                _, gb = ctx.handle.log_partition(ctx.x[sl], ctx.lengths[sl], onset=o, grads=True)
                for i, n in enumerate(ctx.names):
                    param_grads[i] += gb[n].to(torch.float64) * w[b]
        param_grads = [p.to(dt) for p, dt in zip(param_grads, ctx.param_dtypes)]
        return (None, None, gs, None, go) + tuple(param_grads)


class _Transcript(torch.autograd.Function):
    """SemiCRF's transcript NLL where torch has no custom_op (torch < 2.4): as _LogZ, through
    timitseg_crf_transcript_nll."""

    @staticmethod
    def forward(ctx, crf, names, scores, lengths, phones, num_phones, optional, onset, *params):
        crf._push(names, params)
        x = _as_compute(scores)
        o = None if onset is None else onset.detach()
        nll, g = crf.handle.transcript_nll(x, lengths, phones, num_phones, optional=optional, onset=o, grads=True)
        ctx.g, ctx.names, ctx.handle, ctx.x, ctx.lengths, ctx.onset = g, names, crf.handle, x, lengths, o
        ctx.tr = (phones, num_phones, optional)
        ctx.score_dtype, ctx.param_dtypes = scores.dtype, [p.dtype for p in params]
        return nll

    @staticmethod
    def backward(ctx, grad_out):
        g, w = ctx.g, grad_out.detach().to(torch.float64)
        rows = w.reshape(-1, 1, 1)
        gs = (g["scores"].to(torch.float64) * rows).to(ctx.score_dtype)
        go = None if ctx.onset is None else (g["onset"].to(torch.float64) * rows).to(g["onset"].dtype)
        param_grads = [torch.zeros(ctx.handle.param_shape(n), dtype=torch.float64, device=w.device)
                       for n in ctx.names]
        phones, num_phones, optional = ctx.tr
        for b in range(w.shape[0]):
            sl = slice(b, b + 1)
            o = None if ctx.onset is None else ctx.onset[sl]
            _, gb = ctx.handle.transcript_nll(ctx.x[sl], ctx.lengths[sl], phones[sl], num_phones[sl],
                                              optional=None if optional is None else optional[sl], onset=o,
                                              grads=True)
            for i, n in enumerate(ctx.names):
                param_grads[i] += gb[n].to(torch.float64) * w[b]
        param_grads = [p.to(dt) for p, dt in zip(param_grads, ctx.param_dtypes)]
        return (None, None, gs, None, None, None, None, go) + tuple(param_grads)


class _Marginals(torch.autograd.Function):
    """SemiCRF.marginals on the eager route (and where torch has no custom_op): the boundary, frame (and
    segment) posteriors, differentiable through timitseg_crf_marginals_backward (CRF.marginals_backward:
    the gradient of sum(upstream * marginals), docs/crf.md "Gradient of the marginals"), with the
    parameters' values of the forward (pushed to the handle again in the backward)."""

    @staticmethod
    def forward(ctx, crf, names, segments, scores, lengths, onset, *params):
        crf._push(names, params)
        o = None if onset is None else _as_compute(onset.detach())
        out = crf.handle.marginals(_as_compute(scores.detach()), lengths, onset=o, segments=segments)
        ctx.crf, ctx.names = crf, names
        ctx.save_for_backward(scores, lengths, onset, *params)
        ctx.set_materialize_grads(False)
        return tuple(out)

    @staticmethod
    def backward(ctx, *g_out):
        scores, lengths, onset, *params = ctx.saved_tensors
        if all(g is None for g in g_out):
            return (None,) * (6 + len(params))
        crf = ctx.crf
        crf._push(ctx.names, params)
        ups = [None if g is None else g.detach().to(torch.float64).contiguous() for g in g_out]
        ups += [None] * (3 - len(ups))
        o = None if onset is None else _as_compute(onset.detach())
        g = crf.handle.marginals_backward(_as_compute(scores.detach()), lengths, *ups, onset=o)
        d_onset = None if onset is None else g["onset"].to(onset.dtype)
        return (None, None, None, g["scores"].to(scores.dtype), None, d_onset) + \
            tuple(g[n].to(p.dtype) for n, p in zip(ctx.names, params))


def _one_weight(ctx, gn):
    """The backward scales by one weight without reading gn on the host (the branches above that need
    no host wait)."""
    return ctx.reduction in ("mean", "sum") or gn.numel() <= 1 or gn.stride(0) == 0


def _check(ctx):
    """The deferred forward's check, at once (the backward's per-utterance weights need the handle)."""
    pending = ctx.pending
    ctx.pending = None
    _check_ticket(ctx.handle, pending)


def _check_ticket(handle, pending):
    """A deferred forward's check: raises its input's error; a batch the CUDA device path could not take
    (a row of length 0) was computed only now, after the forward's value was used: an error too. pending:
    (ticket, the tensors the queued call uses, kept alive until here)."""
    ticket, _tensors = pending
    if handle.check(ticket):
        raise _lib.LengthError("SemiCRF: lengths has a row of length 0, which the deferred forward on CUDA "
                               "cannot compute without a host wait (its value was used before this check); "
                               "leave rows of length 0 out of the batch or construct SemiCRF(..., "
                               "eager_check=True)")


def _scaled(grad, w, dtype):
    """grad * w rounded once to dtype: in float32 when grad, w and dtype are float32 (float32's
    product is the exact one rounded, as the float64 product rounded to float32 would be), else
    through float64 (half-precision scores, a float64 weight)."""
    if grad.dtype == w.dtype == dtype == torch.float32:
        return grad.mul(w)
    return grad.to(torch.float64).mul(w.to(torch.float64)).to(dtype)


def _weighted_param_grads(ctx, gn):
    out = [torch.zeros(ctx.handle.param_shape(n), dtype=torch.float64, device=gn.device) for n in ctx.names]
    for b in range(gn.shape[0]):
        sl = slice(b, b + 1)
        gold = {k: v[sl] for k, v in ctx.gold.items()}
        onset = None if ctx.onset is None else ctx.onset.detach()[sl]
        _, gb = ctx.handle.nll(ctx.x[sl], ctx.lengths[sl], onset=onset, **gold)
        for i, n in enumerate(ctx.names):
            out[i] += gb[n].to(torch.float64) * gn[b]
    return [o.to(ctx.flat.dtype) for o in out]


class SemiCRF(torch.nn.Module):
    """The semi-Markov CRF of docs/crf.md with C labels and durations 1..K.

    backend: "auto" (cuda when built and present, else cpu), "cpu", "reference"
    or "cuda"; tensors on CUDA need the cuda backend. reg: crf.reg's L2 penalty,
    returned by penalty() (added by the caller, as the app adds it to the batch
    loss). phone_bonus: crf.phone_bonus for viterbi. init_scale: the parameters
    start as N(0, init_scale^2) (start and end at 0), the app's crf.init_scale.
    eager_check: True (the default): the forward waits for the GPU and raises a bad input there, and
    computes rows of length 0. False (faster training on the cuda backend): a forward whose backward
    autograd will run returns without waiting for the GPU, an input error found on the device (a
    length, a label, a non-finite score) is raised by that backward, and a batch with a row of length 0
    is an error (docs/python.md "Deferred check"). Host backends always raise in the forward.
    check: "eager" (eager_check=True), "backward" (eager_check=False), or "deferred" (torch >= 2.4, cuda
    backend): neither the forward nor the backward waits for the host, so that a training step can be
    captured in a CUDA graph; a bad input is raised by check() (or by the next forward, which checks
    the previous call first), naming the step (the module's forward count), the tensor and its index
    (the batch row). By then that step's backward and optimizer step ran on unspecified gradients:
    one optimizer step at most (docs/python.md "CUDA graphs"). Host backends raise in the forward.
    """

    def __init__(self, num_labels, max_duration, backend="auto", duration_model="table", reg=0.0, phone_bonus=0.0,
                 init_scale=0.1, threads=0, eager_check=True, check=None):
        super().__init__()
        if check is None:
            check = "eager" if eager_check else "backward"
        if check not in ("eager", "backward", "deferred"):
            raise ValueError("check must be one of eager, backward, deferred, got %r" % (check,))
        if check == "deferred" and not _ops.AVAILABLE:
            raise ValueError('check="deferred" needs torch >= 2.4 (torch.library.custom_op); this is torch %s'
                             % torch.__version__)
        self.check_mode = check
        self.eager_check = check == "eager"
        self._pending, self._steps, self._replayed = [], 0, None  # check="deferred": the calls not checked yet
        C, K = num_labels, max_duration
        self.num_labels, self.max_duration, self.duration_model, self.reg = C, K, duration_model, reg
        self._handle_args = dict(backend=backend, threads=threads, duration_model=duration_model,
                                 phone_bonus=phone_bonus)
        self.handle = CRF(C, K, **self._handle_args)
        self._key = _ops.register(self) if _ops.AVAILABLE else None  # the torch operators' way to this module
        # a cuda handle runs on the device current when it was made (its buffers and streams are there)
        self._handle_device = torch.cuda.current_device() if self.handle.backend == "cuda" else None
        self.transition = torch.nn.Parameter(torch.randn(C, C) * init_scale)
        self.start = torch.nn.Parameter(torch.zeros(C))
        self.end = torch.nn.Parameter(torch.zeros(C))
        if duration_model == "lognormal":
            rows = torch.zeros(3, C)
            rows[0] = 1.0  # mu = log e frames
            self.duration_lognormal = torch.nn.Parameter(rows)
            self.register_buffer("duration_bias", torch.zeros(K, C))
        else:
            self.duration_bias = torch.nn.Parameter(torch.randn(K, C) * init_scale)

    @property
    def backend(self):
        return self.handle.backend

    def _param_names(self):
        if self.duration_model == "lognormal":
            return ("transition", "duration_lognormal", "start", "end")
        return ("transition", "duration_bias", "start", "end")

    def _push(self, names, params):
        """The parameters into the handle. Bound in place (CRF.bind_params) where the handle can read
        them there (the table duration model; float32, contiguous, on the backend's device): any in-place
        write (an optimizer step) is then read by the next call, with no copy and no host wait, and they
        are bound again only when one is a new tensor. Otherwise copied (set_param) on every call: torch's
        version counter misses some in-place writes (a fused optimizer's step, AdamW(fused=True), leaves
        it unchanged; so do writes through .data), so a copy made only when it moved could be stale."""
        seen = self.__dict__.setdefault("_pushed", {})
        # what a binding depends on: the memory it reads (the torch operators get other tensor objects over
        # the same storage, under torch.compile), and the dtype and layout that made it bindable
        where = [(p.data_ptr(), p.dtype, p.is_contiguous(), p.is_cuda) for p in params]
        if seen.get("_bound") == where:
            return
        if self._bindable(names, params):
            self.handle.bind_params(*[p.detach() for p in params])
            seen["_bound"] = where
            return
        seen.pop("_bound", None)  # the copies below end the binding (set_param)
        for name, p in zip(names, params):
            self.handle.set_param(name, p.detach())

    def _bindable(self, names, params):
        """The handle can read these parameters in place (CRF.bind_params)."""
        if tuple(names) != ("transition", "duration_bias", "start", "end"):
            return False
        on_cuda = self.handle.backend == "cuda"
        return all(p.dtype == torch.float32 and p.is_contiguous() and p.is_cuda == on_cuda for p in params)

    def _follow(self, x):
        """A cuda handle on the CUDA device of x: the module moved to another GPU (or given inputs there)
        gets a new handle made on that device (its parameters are bound or copied again at the next call);
        the C API raises DeviceError for a tensor on another device than its handle's."""
        if self._handle_device is None or not x.is_cuda or x.get_device() == self._handle_device:
            return
        d = x.get_device()
        with torch.cuda.device(d):
            self.handle = CRF(self.num_labels, self.max_duration, **self._handle_args)
        self._handle_device = d
        self.__dict__.pop("_pushed", None)

    def _sync(self):
        """The module's parameters into the handle (and the derived duration table back)."""
        names = self._param_names()
        self._push(names, [getattr(self, n) for n in names])
        if self.duration_model == "lognormal":
            with torch.no_grad():
                self.duration_bias.copy_(torch.from_numpy(self.handle.get_param("duration_bias")))

    def forward(self, scores, lengths, labels=None, segments=None, num_segments=None, onset=None, reduction="none",
                phones=None, num_phones=None, optional=None):
        """NLL per utterance [B] of frame scores [B][T][C] (utterance lengths
        [B], 0 allowed) against gold frame labels [B][T] or segments [B][S][3]
        (start, duration, label) with num_segments [B]; reduction "mean" or
        "sum" returns their mean / sum (the same value as .mean() / .sum(), and
        a backward that never waits for the GPU). Differentiable in scores,
        onset and the parameters.

        With phones [B][N] (int32/int64, padded) and num_phones [B] instead of labels: the transcript NLL
        log Z - log Z_c [B] (float64; docs/crf.md "Training from transcripts"), Z_c over every alignment of
        the phones to the frames; optional [B][N] marks phones that may be skipped (an optional silence:
        never two in a row, never all). A row whose frames cannot hold its phones raises naming it (filter
        first)."""
        if reduction not in _REDUCTIONS:
            raise ValueError("reduction must be one of %s, got %r" % (", ".join(_REDUCTIONS), reduction))
        if phones is not None:
            return self._transcript(scores, lengths, phones, num_phones, optional, onset, reduction)
        names = self._param_names()
        self._follow(scores)
        params = [getattr(self, n) for n in names]
        if self._key is not None and self.check_mode != "backward":
            # the torch operator (timitseg/_ops.py): torch.compile and torch.export see one op (eager calls run
            # its body and backward through an autograd.Function, without torch.library's dispatch)
            grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                    for t in [scores, onset] + params)
            nll = _ops.nll(self._key, reduction, scores, lengths, labels, segments, num_segments, onset, params,
                           grads, self.check_mode == "deferred")
        else:  # the deferred check (eager_check=False), or torch < 2.4
            gold = {}
            if labels is not None:
                gold["labels"] = labels
            if segments is not None:
                gold["segments"], gold["num_segments"] = segments, num_segments
            nll = _NLL.apply(self, names, gold, reduction, torch.is_grad_enabled(), scores, lengths, onset, *params)
        self._derived_durations()
        return nll

    def _transcript(self, scores, lengths, phones, num_phones, optional, onset, reduction):
        if num_phones is None:
            raise ValueError("phones needs num_phones [B]")
        self._follow(scores)
        names = self._param_names()
        params = [getattr(self, n) for n in names]
        grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in [scores, onset] + params)
        if self._key is not None:
            nll = _ops.transcript_nll(self._key, scores, lengths, phones, num_phones, optional, onset, params, grads)
        else:
            nll = _Transcript.apply(self, names, scores, lengths, phones, num_phones, optional, onset, *params)
        self._derived_durations()
        if reduction == "mean":
            return nll.mean()
        return nll.sum() if reduction == "sum" else nll

    def check(self):
        """check="deferred": waits for the forward calls not checked yet and raises the first bad input's
        error, "SemiCRF step N: timitseg_crf_nll: gold.labels[1][2] = 7 is outside [0, C = 5)" (N: the
        module's forward count, 1 for its first call; the index's first entry the batch row). After a CUDA
        graph that captured a forward was replayed, reads the status of its last replay (its inputs as the
        capture's tensors hold them now). A row of length 0, which the deferred call cannot compute on the
        device, is a LengthError. Nothing pending: returns at once (host backends: always)."""
        pending, self._pending = self._pending, []
        captured = None
        for step, was_captured, (ticket, keep) in pending:
            if was_captured:
                captured = (step, keep)  # the captured tensors: a replay's error is worded from them
            self._raise_checked(step, "", lambda t=ticket: self.handle.check(t))
        if captured is not None:
            self._replayed = captured  # its replays: their status read by check_again at every later check()
        elif pending:
            self._replayed = None  # an eager call since: its word is the one a re-read would see
        elif self._replayed is not None:
            self._raise_checked(self._replayed[0], " (the last replay of the CUDA graph that captured it)",
                                self.handle.check_again)

    @staticmethod
    def _raise_checked(step, where, call):
        try:
            rerun = call()
        except _lib.TimitsegError as e:
            raise type(e)("SemiCRF step %d%s: %s" % (step, where, e)) from None
        if rerun:
            raise _lib.LengthError("SemiCRF step %d%s: lengths has a row of length 0, which the deferred forward "
                                   "on CUDA cannot compute without a host wait (its value was used before this "
                                   "check); leave rows of length 0 out of the batch or use check=\"eager\""
                                   % (step, where))

    def penalty(self):
        """crf.reg * (||transition||^2 + ||duration_bias||^2) (transition only with the log-normal), -inf
        entries left out: a 0-dim tensor of transition's dtype, differentiable, computed by the C API
        (timitseg_crf_penalty_grads: on CUDA queued on torch's current stream, in float64 sums)."""
        d = None if self.duration_model == "lognormal" else self.duration_bias
        if self._key is not None:
            return _ops.penalty(self._key, float(self.reg), self.transition, d).to(self.transition.dtype)
        return _Penalty.apply(self.handle, float(self.reg), self.transition, d)

    def log_partition(self, scores, lengths, onset=None):
        """log Z [B] (float64), differentiable in the scores, onset and the parameters (its gradient: the
        marginals; float64 inputs computed in float64 end to end on the reference and cpu backends)."""
        self._follow(scores)
        names = self._param_names()
        params = [getattr(self, n) for n in names]
        grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in [scores, onset] + params)
        if self._key is not None:
            lz = _ops.log_partition(self._key, scores, lengths, onset, params, grads)
        elif grads:
            lz = _LogZ.apply(self, names, scores, lengths, onset, *params)
        else:
            with torch.no_grad():
                self._push(names, params)
                lz = self.handle.log_partition(_as_compute(scores), lengths, onset=onset)
        self._derived_durations()
        return lz

    def _derived_durations(self):
        """With the log-normal model the duration_bias buffer is the C API's table of the last call's
        duration_lognormal; it is copied back from the handle (a host copy) only when read through
        state_dict() or duration_table(), not on every forward (which torch.compile would also break at)."""
        if self.duration_model == "lognormal":
            self.__dict__["_durations_stale"] = True

    def duration_table(self):
        """duration_bias [K][C]: the parameter (table model), or the buffer refreshed from the handle's
        derived table (log-normal model)."""
        if self.__dict__.pop("_durations_stale", False):
            with torch.no_grad():
                self.duration_bias.copy_(torch.from_numpy(self.handle.get_param("duration_bias")))
        return self.duration_bias

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        self.duration_table()  # the derived buffer up to date before it is saved
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def marginals(self, scores, lengths, onset=None, segments=False):
        """(boundary posteriors [B][T+1], frame label posteriors [B][T][C]), float64; with segments=True
        also segment posteriors [B][T][K][C]: P(a segment of label c and duration d ends at frame t) at
        [b][t][d-1][c]. Differentiable in the scores, onset and the parameters (their gradient, a
        Hessian-vector product of log Z, by timitseg_crf_marginals_backward: docs/python.md "float64")."""
        self._follow(scores)
        names = self._param_names()
        params = [getattr(self, n) for n in names]
        if self._key is not None and not _ops.eager(scores):  # torch.compile / torch.export: the operator
            out = _ops.semicrf_marginals(self._key, scores, lengths, onset, params, segments)
        else:
            out = _Marginals.apply(self, names, segments, scores, lengths, onset, *params)
        self._derived_durations()
        return tuple(out) if segments else tuple(out[:2])

    @torch.no_grad()
    def viterbi(self, scores, lengths, onset=None, padded=False):
        """(score [B], list of B int32 tensors [n][3] (start, duration, label)); padded=True: (score,
        segments [B][T][3] int32 (rows past a count 0), num_segments [B] int32), no host wait (the form
        torch.compile(fullgraph=True) keeps in its graph; the list needs the counts on the host)."""
        self._follow(scores)
        if self._key is not None:
            score, segs, counts = _ops.semicrf_viterbi(self._key, scores, lengths, onset,
                                                       [getattr(self, n) for n in self._param_names()])
            if padded:
                return score, segs, counts
            n = counts.tolist()
            return score, [segs[i, :n[i]] for i in range(len(n))]
        self._sync()
        return self.handle.viterbi(_as_compute(scores), lengths, onset=onset, padded=padded)

    @torch.no_grad()
    def align(self, scores, lengths, phones, num_phones, optional=None, onset=None):
        """Forced alignment: (score [B], spans [B][N][2] (start, duration))."""
        self._follow(scores)
        self._sync()
        return self.handle.align(_as_compute(scores), lengths, phones, num_phones, optional=optional, onset=onset)

    def load_checkpoint(self, path, strict=True):
        """Copies the crf.* parameters of a timitseg checkpoint (safetensors) into the module."""
        tensors = read_safetensors(path, prefix=CRF_PREFIX)
        with torch.no_grad():
            for n in self._param_names() + (("duration_bias",) if self.duration_model == "lognormal" else ()):
                key = CRF_TENSORS[n]
                if key not in tensors:
                    if strict:
                        raise KeyError("%s: no tensor %s" % (path, key))
                    continue
                v = torch.from_numpy(np.array(tensors[key]))
                if tuple(v.shape) != tuple(getattr(self, n).shape):
                    raise _lib.ShapeError("%s: %s has shape %s, the module's is %s"
                                          % (path, key, list(v.shape), list(getattr(self, n).shape)))
                getattr(self, n).copy_(v)
