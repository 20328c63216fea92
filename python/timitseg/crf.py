"""The semi-Markov CRF of timitseg (docs/crf.md) on numpy arrays or torch
tensors, through the C API. Inputs are read in place (any strides, float32 or
float64 scores, int32 or int64 integers); outputs are new arrays of the input's
kind (numpy, or torch on the input's device)."""
import ctypes

import numpy as np

from . import _lib
from ._lib import check, describe, is_torch, lib

PARAM_NAMES = ("transition", "duration_bias", "start", "end")


def _empty(like, shape, dtype, zeroed=True):
    """A new array of `like`'s kind (numpy, or torch on like's device); zeroed=False for an
    output the call writes whole (nll, log_partition: every path writes every entry)."""
    if is_torch(like):
        import torch
        make = torch.zeros if zeroed else torch.empty
        return make(shape, dtype=getattr(torch, dtype), device=like.device)
    return (np.zeros if zeroed else np.empty)(shape, dtype=dtype)


def _int32(x):
    """int64 lengths or labels as int32, the zero-copy path's type (capi/crf_fast.h), on the array's own
    device (a device kernel for CUDA, no host copy). Values outside int32 are clamped to its ends, which
    every check then rejects as it would reject the value."""
    if is_torch(x):
        import torch
        return x.clamp(-2 ** 31, 2 ** 31 - 1).to(torch.int32) if x.dtype == torch.int64 else x
    if isinstance(x, np.ndarray) and x.dtype == np.int64:
        return np.clip(x, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return x


def _stream(x):
    """torch's current stream on x's device (None for CPU arrays), through the public
    torch.cuda.current_stream (the stream a CUDA graph capture records on, too), given the device's
    index (an int: no torch.device object made and parsed per call)."""
    if is_torch(x) and x.is_cuda:
        import torch
        return ctypes.c_void_p(torch.cuda.current_stream(x.get_device()).cuda_stream)
    return None


class CRF:
    """A CRF handle: C labels, maximum duration K, a backend ("auto",
    "reference", "cpu", "cuda"), the parameters (transition [C][C],
    duration_bias [K][C], start [C], end [C]; with duration_model "lognormal"
    also duration_lognormal [3][C], from which duration_bias is derived), and
    the session's workspaces. All parameters start at 0."""

    def __init__(self, num_labels, max_duration, backend="auto", threads=0, duration_model="table", reg=0.0,
                 phone_bonus=0.0):
        if backend not in _lib.BACKENDS:
            raise ValueError("backend must be one of %s, got %r" % (", ".join(_lib.BACKENDS), backend))
        if duration_model not in _lib.DURATION_MODELS:
            raise ValueError("duration_model must be table or lognormal, got %r" % (duration_model,))
        p = lib.timitseg_crf_default_params()
        p.num_labels, p.max_duration, p.backend, p.threads = num_labels, max_duration, _lib.BACKENDS[backend], threads
        p.duration_model, p.reg, p.phone_bonus = _lib.DURATION_MODELS[duration_model], reg, phone_bonus
        self._h = ctypes.c_void_p()
        check(lib.timitseg_crf_create(ctypes.byref(p), ctypes.byref(self._h)))
        self.num_labels, self.max_duration, self.duration_model = num_labels, max_duration, duration_model
        self.backend = lib.timitseg_crf_backend_name(self._h).decode()
        # (name, offset, size, shape) of each parameter's gradient in nll's one flat buffer
        self._flat_layout, at = [], 0
        for name in self.param_names():
            shape = self.param_shape(name)
            size = int(np.prod(shape))
            self._flat_layout.append((name, at, size, shape))
            at += size
        self._flat_size = at
        self._flat_names = [name for name, _, _, _ in self._flat_layout]
        self._flat_sizes = [size for _, _, size, _ in self._flat_layout]
        self._flat_shapes = {name: tuple(shape) for name, _, _, shape in self._flat_layout}
        self._flat_cuts = [at for _, at, _, _ in self._flat_layout[1:]]
        self._cached_batch, self._cached_gold = {}, {}  # _batch's and _gold_labels' last descriptors
        self._cached_outputs = {}  # _outputs_cached's: the last layout's output descriptors
        # the parts' descriptors by the flat buffer's dtype: float32, or float64 for float64 scores
        self._flat_parts = {"float32": _lib.part_layout(self._flat_layout, 4),
                            "float64": _lib.part_layout(self._flat_layout, 8)}
        # (shape, strides, offset) of each part, for as_strided views of a scaled copy of the buffer
        self._flat_strided = {name: (shape, tuple(d[_lib.MAX_DIMS:_lib.MAX_DIMS + len(shape)]), at)
                              for (name, at, _, shape), (_, _, d) in zip(self._flat_layout,
                                                                         self._flat_parts["float32"])}

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.timitseg_crf_free(h)
            self._h = None

    def param_names(self):
        return PARAM_NAMES + (("duration_lognormal",) if self.duration_model == "lognormal" else ())

    def param_shape(self, name):
        C, K = self.num_labels, self.max_duration
        return {"transition": (C, C), "duration_bias": (K, C), "start": (C,), "end": (C,),
                "duration_lognormal": (3, C)}[name]

    def set_param(self, name, value):
        if not is_torch(value):
            value = np.asarray(value)
        t = describe(value, "parameter " + name)
        check(lib.timitseg_crf_set_param(self._h, name.encode(), ctypes.byref(t)))
        self._bound = None  # set_param ends a binding

    def bind_params(self, transition, duration_bias, start, end):
        """Binds the four parameters to these arrays instead of copies (timitseg_crf_bind_params): every
        later call reads them in place, so writing them (an optimizer step) needs no set_param and, on
        CUDA, no host wait. float32, contiguous, in the backend's memory (CUDA tensors for "cuda", numpy
        arrays or CPU tensors otherwise); they must stay alive while bound (the handle keeps a reference).
        A NaN or +inf entry is the next call's error. set_param or unbind_params() ends the binding."""
        arrays = (transition, duration_bias, start, end)
        ts = [describe(a, "parameter " + n) for a, n in zip(arrays, PARAM_NAMES)]
        check(lib.timitseg_crf_bind_params(self._h, *[ctypes.byref(t) for t in ts]))
        self._bound = arrays

    def unbind_params(self):
        """Ends bind_params: the bound values become the handle's own copies."""
        check(lib.timitseg_crf_bind_params(self._h, None, None, None, None))
        self._bound = None

    def get_param(self, name, dtype="float32"):
        """The parameter as a numpy array; dtype "float64": the values as set_param took them (a float64
        array's unrounded: those float64 scores are computed with)."""
        if name not in self.param_names():
            raise ValueError("no parameter %r (%s)" % (name, ", ".join(self.param_names())))
        out = np.zeros(self.param_shape(name), dtype=dtype)
        t = describe(out, "out")
        check(lib.timitseg_crf_get_param(self._h, name.encode(), ctypes.byref(t)))
        return out

    # ---- batches -----------------------------------------------------------------
    @staticmethod
    def _layout(x):
        """What a torch tensor's descriptor holds besides its address (the descriptors' cache key)."""
        return x.shape, x.stride(), x.dtype, x.get_device() if x.is_cuda else -1

    def _batch(self, scores, lengths, onset, cumulative):
        lengths = _int32(lengths)
        keep = [scores, lengths, onset]
        if onset is None and is_torch(scores) and is_torch(lengths) and scores.numel() and lengths.numel():
            # the descriptors of the last batch of this layout, re-aimed at these tensors (the C API copies
            # them per call): a training loop's batches of one shape build them once
            key = (self._layout(scores), self._layout(lengths), cumulative)
            b = self._cached_batch.get(key)
            if b is None:
                b = self._new_batch(scores, lengths, None, cumulative)
                self._cached_batch = {key: b}
            b.scores.data, b.lengths.data, b.stream = scores.data_ptr(), lengths.data_ptr(), _stream(scores)
            return b, keep
        return self._new_batch(scores, lengths, onset, cumulative), keep

    def _gold_labels(self, labels):
        """A CrfGold of frame labels (int32, as _int32 makes them), cached by layout as _batch's."""
        if is_torch(labels) and labels.numel():
            key = self._layout(labels)
            gold = self._cached_gold.get(key)
            if gold is None:
                gold = _lib.CrfGold()
                gold.labels = describe(labels, "labels")
                self._cached_gold = {key: gold}
            gold.labels.data = labels.data_ptr()
            return gold
        gold = _lib.CrfGold()
        gold.labels = describe(labels, "labels")
        return gold

    def _new_batch(self, scores, lengths, onset, cumulative):
        b = _lib.CrfBatch()
        b.scores = describe(scores, "scores")
        b.cumulative = 1 if cumulative else 0
        b.lengths = describe(lengths, "lengths")
        b.onset = describe(onset, "onset") if onset is not None else _lib.absent()
        b.stream = _stream(scores)
        return b

    @staticmethod
    def _dims(scores, cumulative):
        shape = tuple(scores.shape)
        if len(shape) != 3:
            raise _lib.ShapeError("scores has shape %s, expected [B, T, C]%s"
                                  % (list(shape), " (T+1 rows: cumulative)" if cumulative else ""))
        return shape[0], shape[1] - 1 if cumulative else shape[1], shape[2]

    def log_partition(self, scores, lengths, onset=None, cumulative=False, grads=False, scale=1.0):
        """log Z [B] (float64) of frame scores [B][T][C] (or cum_scores [B][T+1][C] with cumulative). With
        grads, (log Z, the gradients of scale * sum(log Z) as nll's dict: no gold, no penalty)."""
        B, _, _ = self._dims(scores, cumulative)
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        out = _empty(scores, (B,), "float64", zeroed=False)
        t = describe(out, "log_z")
        if not grads:
            check(lib.timitseg_crf_log_partition(self._h, ctypes.byref(b), ctypes.byref(t)))
            return out
        g, result, _ = self._grad_outputs(scores, onset, views=True)
        check(lib.timitseg_crf_log_partition_grads(self._h, ctypes.byref(b), float(scale), ctypes.byref(t),
                                                   ctypes.byref(g)))
        return out, result

    def _grad_outputs(self, scores, onset, views):
        """(CrfGrads, the dict of its arrays, the parameters' one flat buffer) for the gradients of a call on
        scores: the scores' gradient of their shape; float64 scores get float64 gradients throughout (the
        float64 path), others float32."""
        g, result = _lib.CrfGrads(), {}
        sdt = "float64" if str(scores.dtype).endswith("float64") else "float32"
        result["scores"] = _empty(scores, tuple(scores.shape), sdt, zeroed=False)
        flat = _empty(scores, (self._flat_size,), sdt, zeroed=False)  # one allocation for every parameter
        if onset is not None:
            result["onset"] = _empty(scores, tuple(onset.shape), sdt, zeroed=False)
        for name, arr in result.items():
            setattr(g, name, describe(arr, "grads." + name))
        # the parameters' descriptors straight from the flat buffer's address (no views made here)
        for name, t in zip(self._flat_names, _lib.describe_parts(flat, self._flat_parts[sdt])):
            setattr(g, name, t)
        if views:
            # one split (torch: split_with_sizes, one op), reshaped where 2-D
            parts = flat.split(self._flat_sizes) if is_torch(flat) else np.split(flat, self._flat_cuts)
            for name, part in zip(self._flat_names, parts):
                shape = self._flat_shapes[name]
                result[name] = part if len(shape) == 1 else part.reshape(shape)
        return g, result, flat

    def _outputs_cached(self, scores, out_dtype, grads):
        """_nll's outputs for torch scores without onset and views=False (SemiCRF's calls): (nll, its
        descriptor, CrfGrads or None, {"scores": gradient}, the flat gradient buffer or None), new tensors
        whose descriptors are the last call's of this layout re-aimed at them (as _batch's; the C API
        copies descriptors per call)."""
        key = (self._layout(scores), out_dtype, grads)
        plan = self._cached_outputs.get(key)
        if plan is None:
            import torch
            sdt = "float64" if scores.dtype == torch.float64 else "float32"
            made = (_empty(scores, (scores.shape[0],), out_dtype, zeroed=False),) + (
                self._grad_outputs(scores, None, False) if grads else (None, {}, None))
            out, g, result, flat = made
            tn = describe(out, "nll")
            # the descriptors (views into tn and g) whose addresses the next calls set, and how to make
            # the tensors they describe
            aims = [] if g is None else [(getattr(g, n), off) for n, (off, _, _) in
                                         zip(self._flat_names, self._flat_parts[sdt])]
            self._cached_outputs = {key: (tn, g, None if g is None else g.scores, aims, tuple(scores.shape),
                                          getattr(torch, out_dtype), getattr(torch, sdt), scores.device)}
            return out, tn, g, result, flat
        tn, g, gs_t, aims, shape, odt, sdt, device = plan
        import torch
        out = torch.empty((shape[0],), dtype=odt, device=device)
        tn.data = out.data_ptr()
        if g is None:
            return out, tn, None, {}, None
        gs = torch.empty(shape, dtype=sdt, device=device)
        flat = torch.empty((self._flat_size,), dtype=sdt, device=device)
        gs_t.data = gs.data_ptr()
        base = flat.data_ptr()
        for t, off in aims:
            t.data = base + off
        return out, tn, g, {"scores": gs}, flat

    def nll(self, scores, lengths, labels=None, segments=None, num_segments=None, onset=None, cumulative=False,
            scale=1.0, grads=True):
        """NLL [B] (float64) against the gold frame labels [B][T] or segments
        [B][S][3] (start, duration, label) + num_segments [B]; with grads the
        gradients of scale * sum(nll) + the penalty, as a dict: scores (the
        scores' shape and dtype), the parameters, onset (float64 for float64
        scores, computed in float64 end to end; else float32)."""
        out, result, _ = self._nll(scores, lengths, labels, segments, num_segments, onset, cumulative, scale, grads,
                                   "float64")
        return (out, result) if grads else out

    def _nll(self, scores, lengths, labels, segments, num_segments, onset, cumulative, scale, grads, out_dtype,
             views=True, deferred=None):
        """nll's work: (nll [B] of out_dtype, the gradients' dict, the parameters' gradients as one flat
        float32 buffer (None without grads) whose views the dict holds unless views=False). O(1) Python
        per call, in two C calls (timitseg_crf_nll_begin / _end): the begin queues the recurrences (cuda
        zero-copy path), the outputs are made here while the GPU runs them, the end queues the rest.
        deferred: a list that receives (ticket, the tensors the call reads and writes, which must live
        until check(ticket)): the end then returns before the GPU has run the call (include/timitseg.h)."""
        B, T, C = self._dims(scores, cumulative)
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        if labels is not None:
            labels = _int32(labels)
            _keep.append(labels)
            gold = self._gold_labels(labels)
        else:
            gold = _lib.CrfGold()
        if segments is not None:
            gold.segments = describe(segments, "segments")
            gold.num_segments = describe(num_segments, "num_segments") if num_segments is not None else _lib.absent()
        begun = ctypes.c_uint64()
        check(lib.timitseg_crf_nll_begin(self._h, ctypes.byref(b), ctypes.byref(gold), float(scale),
                                         1 if grads else 0, ctypes.byref(begun)))
        # the GPU runs the recurrences while the outputs are made (a failure here: the next call drops the begun one)
        if not views and onset is None and is_torch(scores) and scores.numel():
            out, tn, g, result, flat = self._outputs_cached(scores, out_dtype, grads)
        else:
            out = _empty(scores, (B,), out_dtype, zeroed=False)
            tn = describe(out, "nll")
            g, result, flat = None, {}, None
            if grads:
                g, result, flat = self._grad_outputs(scores, onset, views)
        pg = ctypes.byref(g) if g is not None else None
        if deferred is None:
            check(lib.timitseg_crf_nll_end(self._h, begun, ctypes.byref(tn), pg, None))
            return out, result, flat
        ticket = ctypes.c_uint64()
        check(lib.timitseg_crf_nll_end(self._h, begun, ctypes.byref(tn), pg, ctypes.byref(ticket)))
        deferred.append((ticket.value, _keep + [segments, num_segments, out, flat] + list(result.values())))
        return out, result, flat

    def check(self, ticket):
        """Waits for the deferred nll call `ticket` (see _nll) and raises the exception the synchronous
        call would have raised for its inputs. True when its outputs were written here, by the general path
        (a batch the CUDA device path does not take: a row of length 0), else False."""
        rerun = ctypes.c_int()
        check(lib.timitseg_crf_check(self._h, ctypes.c_uint64(ticket), ctypes.byref(rerun)))
        return rerun.value == 1

    def check_again(self):
        """timitseg_crf_check_again: the status word of the last checked deferred nll read again (what the
        last replay of a CUDA graph that captured the call wrote) and its error raised; True when the
        outputs were re-written by the general path (a row of length 0), else False."""
        rerun = ctypes.c_int()
        check(lib.timitseg_crf_check_again(self._h, ctypes.byref(rerun)))
        return rerun.value == 1

    def viterbi(self, scores, lengths, onset=None, cumulative=False, padded=False):
        """(score [B] float64, segments: a list of B int32 arrays [n][3] (start, duration, label)); padded:
        (score, segments [B][T][3] int32 (rows past a count 0), num_segments [B] int32), no host wait."""
        B, T, _ = self._dims(scores, cumulative)
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        score = _empty(scores, (B,), "float64", zeroed=False)  # every entry written (rows past a count: 0)
        segs = _empty(scores, (B, T, 3), "int32", zeroed=False)
        counts = _empty(scores, (B,), "int32", zeroed=False)
        ts, tg, tc = describe(score, "score"), describe(segs, "segments"), describe(counts, "num_segments")
        check(lib.timitseg_crf_viterbi(self._h, ctypes.byref(b), ctypes.byref(ts), ctypes.byref(tg),
                                       ctypes.byref(tc)))
        if padded:
            return score, segs, counts
        n = counts.tolist()
        return score, [segs[i, :n[i]] for i in range(B)]

    def marginals(self, scores, lengths, onset=None, cumulative=False, boundaries=True, frames=True, segments=False):
        """(boundary posteriors [B][T+1], frame label posteriors [B][T][C]), float64; either may be None.
        With segments=True a third: segment posteriors [B][T][K][C] float64, entry [b][t][d-1][c] =
        P(a segment of label c and duration d ends at frame t) (0 for t >= length or d > t+1)."""
        B, T, C = self._dims(scores, cumulative)
        K = self.max_duration
        if segments and B * T * K * C > _lib.SEGMENT_POSTERIORS_MAX_ENTRIES:
            raise _lib.ShapeError("segments [B][T][K][C] = %s would hold %d entries, over the limit of %d (2 GiB as "
                                  "float64); pass fewer or shorter utterances"
                                  % (list((B, T, K, C)), B * T * K * C, _lib.SEGMENT_POSTERIORS_MAX_ENTRIES))
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        bo = _empty(scores, (B, T + 1), "float64") if boundaries else None
        fr = _empty(scores, (B, T, C), "float64") if frames else None
        if boundaries or frames:
            tb = describe(bo, "boundaries") if boundaries else _lib.absent()
            tf = describe(fr, "frames") if frames else _lib.absent()
            check(lib.timitseg_crf_marginals(self._h, ctypes.byref(b), ctypes.byref(tb), ctypes.byref(tf)))
        if not segments:
            return bo, fr
        sg = _empty(scores, (B, T, K, C), "float64", zeroed=False)
        ts = describe(sg, "segments")
        check(lib.timitseg_crf_segment_posteriors(self._h, ctypes.byref(b), ctypes.byref(ts)))
        return bo, fr, sg

    def marginals_backward(self, scores, lengths, grad_boundaries=None, grad_frames=None, grad_segments=None,
                           onset=None, cumulative=False):
        """The gradients of sum(grad_boundaries * boundaries) + sum(grad_frames * frames) + sum(grad_segments *
        segments), the outputs of marginals(..., segments=True) ([B][T+1], [B][T][C], [B][T][K][C]; each None
        = zero), as nll's dict (scores, the parameters, onset; no penalty): a Hessian-vector product of log Z
        (timitseg_crf_marginals_backward, docs/crf.md "Gradient of the marginals"), on the host in float64 on
        every backend; float64 scores in float64 end to end (refused on cuda), float64 gradients for them."""
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        g, result, _ = self._grad_outputs(scores, onset, views=True)
        ups = [None if x is None else describe(x, name) for x, name in
               ((grad_boundaries, "grad_boundaries"), (grad_frames, "grad_frames"), (grad_segments, "grad_segments"))]
        check(lib.timitseg_crf_marginals_backward(self._h, ctypes.byref(b),
                                                  *[None if t is None else ctypes.byref(t) for t in ups],
                                                  ctypes.byref(g)))
        return result

    def transcript_nll(self, scores, lengths, phones, num_phones, optional=None, onset=None, cumulative=False,
                       grads=False, scale=1.0, links=None):
        """The transcript NLL [B] (float64) = log Z - log Z_c (docs/crf.md "Training from transcripts"): Z_c
        sums over every alignment of the phones [B][N] (num_phones [B], 0 for a row of length 0; optional
        [B][N] marks phones that may be skipped, align's rules). links [B][N] instead of optional: the
        phone graph (docs/crf.md "Alternative pronunciations: the phone graph"; bit j of links[b][n]: phone
        n-1-j may precede phone n, bit 29: may start, bit 30: may end), Z_c summing over every path through
        it. With grads, (nll, the gradients of scale * sum(nll) + penalty as nll's dict). An utterance whose
        frames cannot hold its phones is a TimitsegError naming it (timitseg_crf_transcript_nll,
        timitseg_crf_transcript_graph_nll)."""
        if links is not None and optional is not None:
            raise ValueError("transcript_nll: give optional or links, not both (links is the whole graph)")
        B, _, _ = self._dims(scores, cumulative)
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        out = _empty(scores, (B,), "float64", zeroed=False)
        t = describe(out, "nll")
        tp, tn = describe(phones, "phones"), describe(num_phones, "num_phones")
        if links is not None:
            call, to = lib.timitseg_crf_transcript_graph_nll, describe(links, "links")
        else:
            call = lib.timitseg_crf_transcript_nll
            to = describe(optional, "optional") if optional is not None else _lib.absent()
        g, result = None, None
        if grads:
            g, result, _ = self._grad_outputs(scores, onset, views=True)
        check(call(self._h, ctypes.byref(b), ctypes.byref(tp), ctypes.byref(tn), ctypes.byref(to), float(scale),
                   ctypes.byref(t), ctypes.byref(g) if grads else None))
        return (out, result) if grads else out

    def align(self, scores, lengths, phones, num_phones, optional=None, onset=None, cumulative=False):
        """Forced alignment of phones [B][N] (num_phones [B]): (score [B] float64, spans [B][N][2] int32)."""
        B, _, _ = self._dims(scores, cumulative)
        b, _keep = self._batch(scores, lengths, onset, cumulative)
        N = tuple(phones.shape)[1] if len(tuple(phones.shape)) == 2 else 0
        score = _empty(scores, (B,), "float64")
        spans = _empty(scores, (B, N, 2), "int32")
        tp, tn = describe(phones, "phones"), describe(num_phones, "num_phones")
        to = describe(optional, "optional") if optional is not None else _lib.absent()
        ts, tsp = describe(score, "score"), describe(spans, "spans")
        check(lib.timitseg_crf_align(self._h, ctypes.byref(b), ctypes.byref(tp), ctypes.byref(tn), ctypes.byref(to),
                                     ctypes.byref(ts), ctypes.byref(tsp)))
        return score, spans

    def penalty_grads(self, reg, transition, duration_bias=None):
        """(value [1] float64, d/d transition, d/d duration_bias or None) of reg * (||transition||^2 +
        ||duration_bias||^2) of these arrays, not the handle's parameters (timitseg_crf_penalty_grads: with
        the log-normal model transition only; -inf entries left out). Float32 CUDA tensors on a cuda
        handle: queued on torch's current stream, no host wait."""
        stream = _stream(transition)
        value = _empty(transition, (1,), "float64", zeroed=False)
        dt = "float64" if str(transition.dtype).endswith("float64") else "float32"
        ga = _empty(transition, tuple(transition.shape), dt, zeroed=False)
        gd = None if duration_bias is None else _empty(transition, tuple(duration_bias.shape), dt, zeroed=False)
        ta, tv, tga = describe(transition, "transition"), describe(value, "value"), describe(ga, "grad_transition")
        td = describe(duration_bias, "duration_bias") if duration_bias is not None else None
        tgd = describe(gd, "grad_duration_bias") if gd is not None else None
        check(lib.timitseg_crf_penalty_grads(self._h, float(reg), ctypes.byref(ta), ctypes.byref(td) if td else None,
                                             ctypes.byref(tv), ctypes.byref(tga),
                                             ctypes.byref(tgd) if tgd else None, stream))
        return value, ga, gd

    def penalty(self):
        v = ctypes.c_double()
        check(lib.timitseg_crf_penalty(self._h, ctypes.byref(v)))
        return v.value
