"""A timitseg checkpoint: decode audio and align phones as the `decode` and
`align` commands do, through the C API."""
import ctypes
import os

import numpy as np

from ._lib import check, lib


class Segment(tuple):
    """(begin, end, label): samples of the input audio, the phone's name."""
    __slots__ = ()

    def __new__(cls, begin, end, label):
        return tuple.__new__(cls, (begin, end, label))

    begin = property(lambda s: s[0])
    end = property(lambda s: s[1])
    label = property(lambda s: s[2])


def _segments(handle):
    try:
        out = []
        b, e, name = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_char_p()
        for i in range(lib.timitseg_segments_count(handle)):
            check(lib.timitseg_segments_get(handle, i, ctypes.byref(b), ctypes.byref(e), ctypes.byref(name)))
            out.append(Segment(b.value, e.value, name.value.decode()))
        return out
    finally:
        lib.timitseg_segments_free(handle)


class Model:
    """A loaded checkpoint (`Model.load(path)`)."""

    def __init__(self, handle, path):
        self._h, self.path = handle, path

    @classmethod
    def load(cls, checkpoint, device="auto", backend=None, threads=0):
        """device: "cpu", "cuda" or "auto"; backend: the CRF backend (None: as `timitseg decode` picks it)."""
        p = lib.timitseg_model_default_params()
        p.device = device.encode()
        p.backend = backend.encode() if backend else None
        p.threads = threads
        h = ctypes.c_void_p()
        check(lib.timitseg_model_load(os.fsencode(checkpoint), ctypes.byref(p), ctypes.byref(h)))
        return cls(h, checkpoint)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.timitseg_model_free(h)
            self._h = None

    @property
    def sample_rate(self):
        return lib.timitseg_model_sample_rate(self._h)

    @property
    def labels(self):
        return [lib.timitseg_model_label_name(self._h, i).decode() for i in range(lib.timitseg_model_num_labels(self._h))]

    def decode(self, audio, sample_rate=None):
        """Segments [(begin, end, label)] of a path (any format libsndfile reads)
        or of mono samples in [-1, 1] (a numpy array, with sample_rate)."""
        out = ctypes.c_void_p()
        if isinstance(audio, (str, bytes, os.PathLike)):
            check(lib.timitseg_model_decode_file(self._h, os.fsencode(audio), ctypes.byref(out)))
        else:
            if sample_rate is None:
                raise ValueError("decode(samples): give sample_rate (Hz)")
            x = np.ascontiguousarray(np.asarray(audio, dtype=np.float32))
            if x.ndim != 1:
                raise ValueError("decode(samples): samples must be mono, shape [N], got %s" % (list(x.shape),))
            ptr = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            check(lib.timitseg_model_decode_samples(self._h, ptr, x.size, int(sample_rate), ctypes.byref(out)))
        return _segments(out)

    def align(self, path, phones):
        """Forced alignment of the phones (a list of names or one space-separated string) in an audio file."""
        text = phones if isinstance(phones, str) else " ".join(phones)
        out = ctypes.c_void_p()
        check(lib.timitseg_model_align_file(self._h, os.fsencode(path), text.encode(), ctypes.byref(out)))
        return _segments(out)
