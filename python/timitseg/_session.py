"""The CRF handle that timitseg.torch's ops (timitseg/_ops.py) compute with, found from their arguments.

An op gets its configuration as its first argument, a spec: one string (one argument costs less in
torch.library's dispatch than six) such as "num_labels=39 max_duration=30 backend=cuda threads=0
duration_model=table phone_bonus=0.0", the backend resolved ("cpu", "reference" or "cuda", never "auto").
A Session is a C handle made from a spec on one device (-1: host memory) with what a handle keeps between
calls: which parameter tensors are bound to it (push), and the deferred checks of check="deferred" (check).
The parameters are op inputs, pushed (bound or copied) on every call, so any handle of the spec computes
what the module's would: a compiled or exported graph holds its spec as a constant and runs whether or not
the module that made it lives.

Sessions are per thread (two threads never share a handle: a handle's workspaces serve one call at a time)
and weakly held: a SemiCRF holds the session of its last call (SemiCRF._follow), which its ops then find;
one that nothing holds is freed (an op called with a spec whose session no module holds makes one for the
call). Modules of one spec in one thread share its session, and so its deferred checks.
"""
import threading
import weakref
from collections import namedtuple

import torch

from . import _lib
from .crf import CRF, PARAM_NAMES

Spec = namedtuple("Spec", "num_labels max_duration backend threads duration_model phone_bonus")
_TYPES = Spec(int, int, str, int, str, float)

_LOCAL = threading.local()


def spec_text(spec):
    """A Spec as the ops' spec argument."""
    return " ".join("%s=%r" % (k, v) if k == "phone_bonus" else "%s=%s" % (k, v) for k, v in spec._asdict().items())


def parse(text):
    """The Spec of a spec argument (spec_text's inverse)."""
    fields = dict(kv.split("=", 1) for kv in text.split())
    return Spec(*[t(fields[k]) for k, t in zip(Spec._fields, _TYPES)])


def names_of(duration_model):
    """The parameters an op takes, in its order (SemiCRF._param_names)."""
    if duration_model == "lognormal":
        return ("transition", "duration_lognormal", "start", "end")
    return PARAM_NAMES


def session(spec, x):
    """This thread's Session of spec (the text) for x's memory: x's CUDA device, or -1 (made when none is
    held; a cuda handle asked for host tensors is made on the current device and refuses them)."""
    key = (spec, x.get_device() if x.is_cuda else -1)
    try:
        s = _LOCAL.sessions.get(key)
    except AttributeError:
        _LOCAL.sessions = weakref.WeakValueDictionary()
        s = None
    if s is None:
        s = Session(*key)
        _LOCAL.sessions[key] = s
    return s


def resolve(num_labels, max_duration, backend, threads, duration_model, phone_bonus):
    """(the spec text with the backend resolved, a Session of it on the current device): SemiCRF's
    constructor."""
    dev = torch.cuda.current_device() if backend in ("auto", "cuda") and torch.cuda.is_available() else -1
    s = Session(spec_text(Spec(num_labels, max_duration, backend, threads, duration_model, phone_bonus)), dev)
    text = spec_text(s.spec._replace(backend=s.crf.backend))
    if s.crf.backend != "cuda":
        dev = -1
    s.spec = parse(text)
    held = getattr(_LOCAL, "sessions", None)
    if held is None:
        held = _LOCAL.sessions = weakref.WeakValueDictionary()
    return text, held.setdefault((text, dev), s)


class Session:
    """A C handle of one spec (the text) on one device, with its binding and deferred-check state."""

    def __init__(self, text, device):
        spec = parse(text)
        C, K, backend, threads, model, bonus = spec
        args = dict(backend=backend, threads=threads, duration_model=model, phone_bonus=bonus)
        if device >= 0:
            with torch.cuda.device(device):
                self.crf = CRF(C, K, **args)
        else:
            self.crf = CRF(C, K, **args)
        self.spec, self.names = spec, names_of(model)
        self._bound = None  # what the binding of push depends on
        self.pending, self.steps, self.replayed = [], 0, None  # check="deferred": the calls not checked yet
        # (shape, strides, offset) of each parameter's gradient in a flat buffer in names' order (as_strided)
        self.views, at = [], 0
        for name in self.names:
            shape = self.crf.param_shape(name)
            self.views.append((shape, (shape[1], 1) if len(shape) == 2 else (1,), at))
            at += shape[0] * (shape[1] if len(shape) == 2 else 1)
        strided = self.crf._flat_strided
        # the C API's flat gradient buffer in the operator's parameter order (None: the same order)
        self._reorder = None if self.names == tuple(self.crf.param_names()) else [strided[n] for n in self.names]

    def push(self, params):
        """The parameters (in names' order) into the handle. Bound in place (CRF.bind_params) where the handle
        can read them there (the table duration model; float32, contiguous, on the backend's device): any
        in-place write (an optimizer step) is then read by the next call, with no copy and no host wait, and
        they are bound again only when one is another tensor. Otherwise copied (set_param) on every call:
        torch's version counter misses some in-place writes (a fused optimizer's step, AdamW(fused=True),
        leaves it unchanged; so do writes through .data), so a copy made only when it moved could be stale."""
        # what a binding depends on: the memory it reads (the torch operators get other tensor objects over
        # the same storage, under torch.compile), and the dtype and layout that made it bindable
        where = [(p.data_ptr(), p.dtype, p.is_contiguous(), p.is_cuda) for p in params]
        if self._bound == where:
            return
        if self._bindable(params):
            self.crf.bind_params(*[p.detach() for p in params])
            self._bound = where
            return
        self._bound = None  # the copies below end the binding (set_param)
        for name, p in zip(self.names, params):
            self.crf.set_param(name, p.detach())

    def _bindable(self, params):
        if self.names != PARAM_NAMES:
            return False
        on_cuda = self.crf.backend == "cuda"
        return all(p.dtype == torch.float32 and p.is_contiguous() and p.is_cuda == on_cuda for p in params)

    def flat(self, flat):
        """The C API's flat gradient buffer (transition, duration_bias, start, end[, duration_lognormal]) in
        the operator's parameter order."""
        if self._reorder is None:
            return flat
        return torch.cat([flat.as_strided(*s).reshape(-1) for s in self._reorder])

    def check(self):
        """SemiCRF.check: waits for the deferred calls not checked yet and raises the first bad input's error
        naming its step; after replays of a CUDA graph that captured one, reads the last replay's status."""
        pending, self.pending = self.pending, []
        captured = None
        for step, was_captured, (ticket, keep) in pending:
            if was_captured:
                captured = (step, keep)  # the captured tensors: a replay's error is worded from them
            _raise_checked(step, "", lambda t=ticket: self.crf.check(t))
        if captured is not None:
            self.replayed = captured  # its replays: their status read by check_again at every later check()
        elif pending:
            self.replayed = None  # an eager call since: its word is the one a re-read would see
        elif self.replayed is not None:
            _raise_checked(self.replayed[0], " (the last replay of the CUDA graph that captured it)",
                           self.crf.check_again)


def _raise_checked(step, where, call):
    try:
        rerun = call()
    except _lib.TimitsegError as e:
        raise type(e)("SemiCRF step %d%s: %s" % (step, where, e)) from None
    if rerun:
        raise _lib.LengthError("SemiCRF step %d%s: lengths has a row of length 0, which the deferred forward on "
                               "CUDA cannot compute without a host wait (its value was used before this check); "
                               "leave rows of length 0 out of the batch or use check=\"eager\"" % (step, where))


def check_ticket(crf, pending):
    """check="backward": a forward's check, in its backward: raises its input's error; a batch the CUDA device
    path could not take (a row of length 0) was computed only now, after the forward's value was used: an
    error too. pending: (ticket, the tensors the queued call uses, kept alive until here)."""
    ticket, _tensors = pending
    if crf.check(ticket):
        raise _lib.LengthError("SemiCRF: lengths has a row of length 0, which the deferred forward on CUDA "
                               "cannot compute without a host wait (its value was used before this check); "
                               "leave rows of length 0 out of the batch or construct SemiCRF(..., "
                               "eager_check=True)")
