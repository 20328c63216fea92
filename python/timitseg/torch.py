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
Its calls are the ops of timitseg/_ops.py (each written once; torch operators under torch.compile and
torch.export, else run through an autograd.Function), which take the module's configuration and
parameters as arguments (timitseg/_session.py: the C handle they compute with).
"""
import numpy as np
import torch

from . import _lib, _ops, _session
from .checkpoint import CRF_PREFIX, CRF_TENSORS, read_safetensors

_COMPUTE = (torch.float32, torch.float64)


def _as_compute(x):
    return x if x.dtype in _COMPUTE else x.float()


_REDUCTIONS = ("none", "mean", "sum")


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
        C, K = num_labels, max_duration
        self.num_labels, self.max_duration, self.duration_model, self.reg = C, K, duration_model, reg
        # the ops' configuration, one string (timitseg/_session.py), the backend resolved; the session of the
        # last call (a cuda handle on the CUDA device of its inputs; made on the current device here)
        self._spec, self._session = _session.resolve(C, K, backend, int(threads), duration_model, float(phone_bonus))
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
        return self._session.spec.backend

    @property
    def handle(self):
        """The CRF handle (timitseg.CRF) of the module's last call (its thread's, for its device)."""
        return self._session.crf

    def _param_names(self):
        return _session.names_of(self.duration_model)

    def _params(self):
        held = self._parameters  # what getattr reads, without nn.Module.__getattr__ per name
        return [held[n] for n in _session.names_of(self.duration_model)]

    def _follow(self, x):
        """The session that computes on x (a cuda handle on x's CUDA device: the module moved to another GPU,
        or given inputs there, computes there; in another thread, that thread's), held by the module so that
        its ops find it (timitseg/_session.py). Under torch.compile the ops find it when they run."""
        if _ops.eager(x):
            s = _session.session(self._spec, x)
            if s is not self._session:
                self.__dict__["_session"] = s

    def _sync(self):
        """The module's parameters into the handle (and the derived duration table back)."""
        self._session.push(self._params())
        if self.duration_model == "lognormal":
            with torch.no_grad():
                self.duration_bias.copy_(torch.from_numpy(self.handle.get_param("duration_bias")))

    def _grads(self, scores, onset, params):
        return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in [scores, onset] + params)

    def forward(self, scores, lengths, labels=None, segments=None, num_segments=None, onset=None, reduction="none",
                phones=None, num_phones=None, optional=None, links=None):
        """NLL per utterance [B] of frame scores [B][T][C] (utterance lengths
        [B], 0 allowed) against gold frame labels [B][T] or segments [B][S][3]
        (start, duration, label) with num_segments [B]; reduction "mean" or
        "sum" returns their mean / sum (the same value as .mean() / .sum(), and
        a backward that never waits for the GPU). Differentiable in scores,
        onset and the parameters.

        With phones [B][N] (int32/int64, padded) and num_phones [B] instead of labels: the transcript NLL
        log Z - log Z_c [B] (float64; docs/crf.md "Training from transcripts"), Z_c over every alignment of
        the phones to the frames; optional [B][N] marks phones that may be skipped (an optional silence:
        never two in a row, never all). links [B][N] instead of optional: the phone graph of a transcript
        with alternatives (docs/crf.md "Alternative pronunciations: the phone graph"; bit j of links[b][n]:
        phone n-1-j may come right before phone n, bit 29: it may start the utterance, bit 30: end it), Z_c
        summing over every path through it. A row whose frames cannot hold its phones raises naming it
        (filter first)."""
        if reduction not in _REDUCTIONS:
            raise ValueError("reduction must be one of %s, got %r" % (", ".join(_REDUCTIONS), reduction))
        if phones is not None:
            return self._transcript(scores, lengths, phones, num_phones, optional, links, onset, reduction)
        self._follow(scores)
        params = self._params()
        # the op timitseg::semicrf_nll (timitseg/_ops.py): one operator under torch.compile and torch.export,
        # else its body and backward through an autograd.Function (always with check="backward", whose check
        # runs in the backward)
        nll = _ops.NLL(scores, self._spec, reduction, scores, lengths, labels, segments, num_segments, onset,
                       self._grads(scores, onset, params), self.check_mode, params,
                       function=self.check_mode == "backward")[0]
        self._derived_durations()
        return nll

    def _transcript(self, scores, lengths, phones, num_phones, optional, links, onset, reduction):
        if num_phones is None:
            raise ValueError("phones needs num_phones [B]")
        if optional is not None and links is not None:
            raise ValueError("give optional or links, not both (links is the whole phone graph)")
        self._follow(scores)
        params = self._params()
        nll = _ops.TRANSCRIPT_NLL(scores, self._spec, scores, lengths, phones, num_phones, optional, links, onset,
                                  self._grads(scores, onset, params), params)[0]
        self._derived_durations()
        if reduction == "mean":
            return nll.mean()
        return nll.sum() if reduction == "sum" else nll

    def check(self):
        """check="deferred": waits for the forward calls not checked yet and raises the first bad input's
        error, "SemiCRF step N: timitseg_crf_nll: gold.labels[1][2] = 7 is outside [0, C = 5)" (N: the
        forward count of the module's handle, 1 for its first call; the index's first entry the batch row).
        After a CUDA graph that captured a forward was replayed, reads the status of its last replay (its
        inputs as the capture's tensors hold them now). A row of length 0, which the deferred call cannot
        compute on the device, is a LengthError. Nothing pending: returns at once (host backends: always).
        Modules of one configuration in one thread share a handle (timitseg/_session.py), and so their
        pending calls and count."""
        self._session.check()

    def penalty(self):
        """crf.reg * (||transition||^2 + ||duration_bias||^2) (transition only with the log-normal), -inf
        entries left out: a 0-dim tensor of transition's dtype, differentiable, computed by the C API
        (timitseg_crf_penalty_grads: on CUDA queued on torch's current stream, in float64 sums)."""
        held = self._parameters
        a = held["transition"]
        params = [a] if self.duration_model == "lognormal" else [a, held["duration_bias"]]
        return _ops.PENALTY(a, self._spec, float(self.reg), params)[0].to(a.dtype)

    def log_partition(self, scores, lengths, onset=None):
        """log Z [B] (float64), differentiable in the scores, onset and the parameters (its gradient: the
        marginals; float64 inputs computed in float64 end to end on the reference and cpu backends)."""
        self._follow(scores)
        params = self._params()
        lz = _ops.LOG_PARTITION(scores, self._spec, scores, lengths, onset, self._grads(scores, onset, params),
                                params)[0]
        self._derived_durations()
        return lz

    def _derived_durations(self):
        """With the log-normal model the duration_bias buffer is the C API's table of the module's
        duration_lognormal; it is computed (the parameters pushed, a host copy) only when read through
        state_dict() or duration_table(), not on every forward (which torch.compile would also break at)."""
        if self.duration_model == "lognormal":
            self.__dict__["_durations_stale"] = True

    def duration_table(self):
        """duration_bias [K][C]: the parameter (table model), or the buffer refreshed from the handle's
        derived table (log-normal model)."""
        if self.__dict__.pop("_durations_stale", False):
            self._sync()
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
        out = _ops.MARGINALS(scores, self._spec, scores, lengths, onset, segments, self._params())
        self._derived_durations()
        return tuple(out) if segments else tuple(out[:2])

    @torch.no_grad()
    def viterbi(self, scores, lengths, onset=None, padded=False):
        """(score [B], list of B int32 tensors [n][3] (start, duration, label)); padded=True: (score,
        segments [B][T][3] int32 (rows past a count 0), num_segments [B] int32), no host wait (the form
        torch.compile(fullgraph=True) keeps in its graph; the list needs the counts on the host)."""
        self._follow(scores)
        score, segs, counts = _ops.VITERBI(scores, self._spec, scores, lengths, onset, self._params())
        self._derived_durations()
        if padded:
            return score, segs, counts
        n = counts.tolist()
        return score, [segs[i, :n[i]] for i in range(len(n))]

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
