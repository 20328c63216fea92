"""A timitseg checkpoint: decode audio and align phones as the `decode` and
`align` commands do, through the C API."""
import ctypes
import json
import os

import numpy as np

from ._lib import BACKENDS, BOUNDARIES, MODEL_DEVICES, SILENCE_EDGES, check, lib


class Segment(tuple):
    """(begin, end, label): samples of the input audio, the phone's name."""
    __slots__ = ()

    def __new__(cls, begin, end, label):
        return tuple.__new__(cls, (begin, end, label))

    begin = property(lambda s: s[0])
    end = property(lambda s: s[1])
    label = property(lambda s: s[2])


class Alignment(tuple):
    """(phones, words) of a word alignment: lists of Segment (begin, end samples; the phone or the word)."""
    __slots__ = ()

    def __new__(cls, phones, words):
        return tuple.__new__(cls, (phones, words))

    phones = property(lambda s: s[0])
    words = property(lambda s: s[1])


def set_log_level(level):
    """The library's log level for the whole process: "trace", "debug", "info" (log lines and progress
    bars on stderr, as the commands), "warn", "error" or "off" (Model.load's verbose= sets it)."""
    f = lib.timitseg_set_log_level
    f.argtypes, f.restype = [ctypes.c_char_p], ctypes.c_int
    check(f(str(level).encode()))


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
    def load(cls, checkpoint, device="auto", backend=None, threads=0, verbose=False):
        """device: "cpu", "cuda" or "auto"; backend: the CRF backend (None or "auto": as `timitseg decode`
        picks it); both reach the C API as its enum fields (timitseg_model_params.device_kind, backend_kind).

        verbose: the log lines and progress bars the commands print on stderr. False (the default):
        none (errors are raised, never printed); True: as the commands ("info"); or a level, "trace",
        "debug", "info", "warn", "error" or "off". The level is the library's, for the whole process
        (every Model), set by each load."""
        set_log_level("info" if verbose is True else "off" if verbose is False else verbose)
        p = lib.timitseg_model_default_params()
        # the enum fields; a word they do not know goes to the library as text, which names the valid ones
        if device in MODEL_DEVICES:
            p.device_kind = MODEL_DEVICES[device]
        else:
            p.device = str(device).encode()
        if backend in BACKENDS:
            p.backend_kind = BACKENDS[backend]
        elif backend:
            p.backend = str(backend).encode()
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
    def phone_set(self):
        """The checkpoint's phone set (docs/phone_sets.md): a dict with "name", "phones" (the labels, as
        `labels`), "silence", "merge", "map", "drop", "fold", "extra_scoring_labels", "broad_classes" ([name,
        [members]] pairs), "scoring_labels" (the folded set PER is scored on) and "sha256" (its digest)."""
        return json.loads(lib.timitseg_model_phone_set(self._h).decode())

    @property
    def labels(self):
        """The label names by class index (UTF-8 as the checkpoint writes them)."""
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

    def set_shifts(self, path=None):
        """Per-phone boundary shifts for this model's alignments, as `timitseg align --shifts FILE`: path a
        JSON file written by `timitseg evaluate --align --fit-shifts` with this checkpoint; from then on
        align() moves each boundary by its shift (its phone pair's, else the phone's after it) (docs/align.md "Calibrating to a
        labelling convention"). None removes them. A bad file raises TimitsegError naming it, and the
        shifts set before stay."""
        check(lib.timitseg_model_set_shifts(self._h, os.fsencode(path) if path else None))

    def set_silence_edges(self, mode="auto", margin_db=6.0, max_move_ms=80.0, min_quiet_pct=10.0):
        """Silence edges for this model's alignments, as `timitseg align --silence-edges MODE
        --silence-margin-db MARGIN --silence-max-move-ms MOVE --silence-min-quiet QUIET`: each boundary between
        a silence and a phone moved to where the audio's energy crosses the utterance's floor + margin_db, within
        max_move_ms, for the silences of which at least min_quiet_pct % is below that (docs/align.md "Silence
        edges"); the defaults are the commands'. mode "auto" (a new Model's: on for a checkpoint trained on
        transcripts, off for one trained on times), "on" or "off". A bad value raises ValueError and the
        setting before stays."""
        if mode not in SILENCE_EDGES:
            raise ValueError("set_silence_edges: mode must be 'auto', 'on' or 'off', got %r" % (mode,))
        check(lib.timitseg_model_set_silence_edges(self._h, SILENCE_EDGES[mode], float(margin_db), float(max_move_ms),
                                                   float(min_quiet_pct)))

    def set_boundaries(self, mode="auto"):
        """Where this model's alignment boundaries go, as `timitseg align --boundaries MODE` (docs/align.md
        "Boundaries from the posteriors"): "viterbi" (the most probable alignment's), "posterior" (each
        boundary at its most probable frame under the transcript, jointly increasing, then moved up to half
        a frame toward the likelier neighbour frame; before the silence edges and the shifts),
        "posterior-frames" (the same left on the frames), or "auto" (a new Model's: posterior, for every
        checkpoint; chosen on dev, docs/training.md rules 15, 16 and 18). A bad mode raises ValueError and
        the setting before stays."""
        if mode not in BOUNDARIES:
            raise ValueError("set_boundaries: mode must be 'auto', 'viterbi', 'posterior' or 'posterior-frames', "
                             "got %r" % (mode,))
        check(lib.timitseg_model_set_boundaries(self._h, BOUNDARIES[mode]))

    def align(self, path, phones=None, words=None, dictionary=None, closures=True, edge_silence=True,
              word_silence=False, obligatory_silence=False, dict_format="auto"):
        """Forced alignment of an audio file, as `timitseg align` does.

        phones: a list of names or one space-separated string (`align --phones`): returns the phone
        Segments (the command's .PHN rows). words + dictionary (`align --words --dict`): words a list
        or one string, dictionary a file in TIMIT's TIMITDIC.TXT or CMUdict's format; returns
        Alignment(phones, words), the phone Segments and the word Segments (begin and end samples, the
        word) of the command's output. The options are the command's: closures=False is
        --no-closures, edge_silence=False --no-edge-silence, word_silence --word-silence,
        obligatory_silence --obligatory-silence, dict_format --dict-format (timit, cmudict, mfa, auto)."""
        if (phones is None) == (words is None):
            raise ValueError("align: give phones, or words and a dictionary (exactly one of phones and words)")
        out = ctypes.c_void_p()
        if phones is not None:
            text = phones if isinstance(phones, str) else " ".join(phones)
            check(lib.timitseg_model_align_file(self._h, os.fsencode(path), text.encode(), ctypes.byref(out)))
            return _segments(out)
        if dictionary is None:
            raise ValueError("align(words=...): give dictionary, a pronunciation dictionary file")
        if dict_format not in ("timit", "cmudict", "mfa", "auto"):
            raise ValueError("align: dict_format must be timit, cmudict, mfa or auto, got %r" % (dict_format,))
        text = words if isinstance(words, str) else " ".join(words)
        o = lib.timitseg_align_words_default_options()
        o.closures, o.edge_silence = int(bool(closures)), int(bool(edge_silence))
        o.word_silence, o.obligatory_silence = int(bool(word_silence)), int(bool(obligatory_silence))
        o.dict_format = dict_format.encode()
        wout = ctypes.c_void_p()
        check(lib.timitseg_model_align_words_file(self._h, os.fsencode(path), text.encode(), os.fsencode(dictionary),
                                                  ctypes.byref(o), ctypes.byref(out), ctypes.byref(wout)))
        phone_segs = _segments(out)
        return Alignment(phone_segs, _segments(wout))
