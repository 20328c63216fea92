"""ctypes bindings of include/timitseg.h (libtimitseg.so) and the conversion
of numpy arrays and torch tensors into timitseg_tensor descriptors (no copy).

The library is looked up in this order: the environment variable
TIMITSEG_LIBRARY (a path), then libtimitseg.so next to this file (where
`pip install ./python` puts it).
"""
import ctypes
import os
import struct

API_VERSION = 3
SEGMENT_POSTERIORS_MAX_ENTRIES = 268435456  # TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES
MAX_DIMS = 4

F32, F64, I32, I64 = 0, 1, 2, 3
DEVICE_CPU, DEVICE_CUDA = 0, 1
BACKENDS = {"auto": 0, "reference": 1, "cpu": 2, "cuda": 3}
DURATION_MODELS = {"table": 0, "lognormal": 1}
MODEL_DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}  # timitseg_model_device
SILENCE_EDGES = {"auto": 0, "on": 1, "off": 2}  # timitseg_silence_edges
BOUNDARIES = {"auto": 0, "viterbi": 1, "posterior": 2, "posterior-frames": 3}  # timitseg_boundaries


class TimitsegError(Exception):
    """An error of the timitseg library: the message names the argument."""


class ShapeError(TimitsegError, ValueError):
    pass


class DTypeError(TimitsegError, TypeError):
    pass


class DeviceError(TimitsegError, ValueError):
    pass


class LengthError(TimitsegError, ValueError):
    pass


_STATUS = {1: TimitsegError, 2: ShapeError, 3: DTypeError, 4: DeviceError, 5: LengthError, 6: TimitsegError,
           7: MemoryError}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS)]


class CrfParams(ctypes.Structure):
    _fields_ = [("num_labels", ctypes.c_int32), ("max_duration", ctypes.c_int32), ("backend", ctypes.c_int32),
                ("threads", ctypes.c_int32), ("duration_model", ctypes.c_int32), ("reg", ctypes.c_double),
                ("phone_bonus", ctypes.c_double)]


class CrfBatch(ctypes.Structure):
    _fields_ = [("scores", Tensor), ("cumulative", ctypes.c_int32), ("lengths", Tensor), ("onset", Tensor),
                ("stream", ctypes.c_void_p)]


class CrfGold(ctypes.Structure):
    _fields_ = [("labels", Tensor), ("segments", Tensor), ("num_segments", Tensor)]


class CrfGrads(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("scores", "transition", "duration_bias", "start", "end",
                                      "duration_lognormal", "onset")]


class AlignWordsOptions(ctypes.Structure):
    _fields_ = [("closures", ctypes.c_int32), ("edge_silence", ctypes.c_int32), ("word_silence", ctypes.c_int32),
                ("obligatory_silence", ctypes.c_int32), ("dict_format", ctypes.c_char_p)]


class ModelParams(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char_p), ("backend", ctypes.c_char_p), ("threads", ctypes.c_int32),
                ("device_kind", ctypes.c_int32), ("backend_kind", ctypes.c_int32)]


def _find_library():
    env = os.environ.get("TIMITSEG_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise OSError("TIMITSEG_LIBRARY=%s: no such file" % env)
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libtimitseg.so"):
            return os.path.join(here, name)
    raise OSError("libtimitseg.so was not found next to %s; install the package with `pip install ./python` "
                  "from the timitseg repository, or set TIMITSEG_LIBRARY to a built build/lib/libtimitseg.so" % here)


def _preload_torch():
    """A CUDA build of libtimitseg.so links the system's NCCL, cuDNN and cuBLAS;
    loaded before torch, their sonames would be taken by torch too (torch then
    fails on a newer NCCL symbol). torch first, when installed, makes ours use
    torch's copies (same major versions). TIMITSEG_NO_TORCH_PRELOAD=1 skips it."""
    import importlib.util
    if os.environ.get("TIMITSEG_NO_TORCH_PRELOAD") == "1" or importlib.util.find_spec("torch") is None:
        return
    try:
        import torch  # noqa: F401
    except Exception:  # a broken torch must not break the numpy path
        pass


def _load():
    _preload_torch()
    lib = ctypes.CDLL(_find_library())
    P = ctypes.POINTER
    vp, i32, i64, dbl, cp = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_double, ctypes.c_char_p
    sig = {
        "timitseg_api_version": (ctypes.c_int, []),
        "timitseg_version_string": (cp, []),
        "timitseg_has_cuda": (ctypes.c_int, []),
        "timitseg_last_error": (cp, []),
        "timitseg_crf_default_params": (CrfParams, []),
        "timitseg_crf_create": (ctypes.c_int, [P(CrfParams), P(vp)]),
        "timitseg_crf_free": (None, [vp]),
        "timitseg_crf_backend_name": (cp, [vp]),
        "timitseg_crf_set_param": (ctypes.c_int, [vp, cp, P(Tensor)]),
        "timitseg_crf_get_param": (ctypes.c_int, [vp, cp, P(Tensor)]),
        "timitseg_crf_bind_params": (ctypes.c_int, [vp, P(Tensor), P(Tensor), P(Tensor), P(Tensor)]),
        "timitseg_crf_penalty": (ctypes.c_int, [vp, P(dbl)]),
        "timitseg_crf_penalty_grads": (ctypes.c_int, [vp, dbl, P(Tensor), P(Tensor), P(Tensor), P(Tensor), P(Tensor),
                                                      vp]),
        "timitseg_crf_log_partition": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor)]),
        "timitseg_crf_log_partition_grads": (ctypes.c_int, [vp, P(CrfBatch), dbl, P(Tensor), P(CrfGrads)]),
        "timitseg_crf_nll": (ctypes.c_int, [vp, P(CrfBatch), P(CrfGold), dbl, P(Tensor), P(CrfGrads)]),
        "timitseg_crf_nll_deferred": (ctypes.c_int, [vp, P(CrfBatch), P(CrfGold), dbl, P(Tensor), P(CrfGrads),
                                                     P(ctypes.c_uint64)]),
        "timitseg_crf_check": (ctypes.c_int, [vp, ctypes.c_uint64, P(ctypes.c_int)]),
        "timitseg_crf_check_again": (ctypes.c_int, [vp, P(ctypes.c_int)]),
        "timitseg_crf_nll_begin": (ctypes.c_int, [vp, P(CrfBatch), P(CrfGold), dbl, ctypes.c_int, P(ctypes.c_uint64)]),
        "timitseg_crf_nll_end": (ctypes.c_int, [vp, ctypes.c_uint64, P(Tensor), P(CrfGrads), P(ctypes.c_uint64)]),
        "timitseg_crf_viterbi": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor), P(Tensor)]),
        "timitseg_crf_marginals": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor)]),
        "timitseg_crf_segment_posteriors": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor)]),
        "timitseg_crf_marginals_backward": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor), P(Tensor),
                                                           P(CrfGrads)]),
        "timitseg_crf_transcript_nll": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor), P(Tensor), dbl,
                                                       P(Tensor), P(CrfGrads)]),
        "timitseg_crf_transcript_graph_nll": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor), P(Tensor),
                                                             dbl, P(Tensor), P(CrfGrads)]),
        "timitseg_crf_align": (ctypes.c_int, [vp, P(CrfBatch), P(Tensor), P(Tensor), P(Tensor), P(Tensor),
                                              P(Tensor)]),
        "timitseg_model_default_params": (ModelParams, []),
        "timitseg_model_load": (ctypes.c_int, [cp, P(ModelParams), P(vp)]),
        "timitseg_model_free": (None, [vp]),
        "timitseg_model_sample_rate": (ctypes.c_int, [vp]),
        "timitseg_model_num_labels": (ctypes.c_int, [vp]),
        "timitseg_model_label_name": (cp, [vp, ctypes.c_int]),
        "timitseg_model_phone_set": (cp, [vp]),
        "timitseg_model_decode_file": (ctypes.c_int, [vp, cp, P(vp)]),
        "timitseg_model_decode_samples": (ctypes.c_int, [vp, P(ctypes.c_float), i64, i32, P(vp)]),
        "timitseg_model_align_file": (ctypes.c_int, [vp, cp, cp, P(vp)]),
        "timitseg_model_set_shifts": (ctypes.c_int, [vp, cp]),
        "timitseg_model_set_silence_edges": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                             ctypes.c_double]),
        "timitseg_model_set_boundaries": (ctypes.c_int, [vp, ctypes.c_int]),
        "timitseg_align_words_default_options": (AlignWordsOptions, []),
        "timitseg_model_align_words_file": (ctypes.c_int, [vp, cp, cp, cp, P(AlignWordsOptions), P(vp), P(vp)]),
        "timitseg_segments_count": (i64, [vp]),
        "timitseg_segments_get": (ctypes.c_int, [vp, i64, P(i64), P(i64), P(cp)]),
        "timitseg_segments_free": (None, [vp]),
    }
    for name, (res, args) in sig.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise OSError("%s has no %s: it is older than this package; reinstall the package (pip install ./python)"
                          % (lib._name, name)) from None
        f.restype, f.argtypes = res, args
    if lib.timitseg_api_version() != API_VERSION:
        raise OSError("libtimitseg.so has API version %d, this package was written for %d; reinstall the package"
                      % (lib.timitseg_api_version(), API_VERSION))
    return lib


lib = _load()


def check(status):
    """Raises the exception of a non-zero status with the library's message."""
    if status != 0:
        msg = lib.timitseg_last_error().decode("utf-8", "replace")
        raise _STATUS.get(status, TimitsegError)(python_words(msg))


# The commands' flags in the library's messages, as this package's arguments.
_FLAG_WORDS = (("use --backend cpu or reference", 'use backend="cpu" or backend="reference"'),
               ("--crf-backend cpu", 'backend="cpu"'), ("with --device cpu", 'with device="cpu"'),
               ("--device auto", 'device="auto"'))


def python_words(msg):
    """A library message in the words of the Python API (backend="cpu", not --backend cpu)."""
    for flag, arg in _FLAG_WORDS:
        msg = msg.replace(flag, arg)
    return msg


# ---- arrays -> descriptors ---------------------------------------------------------

_NP_DTYPES = {"float32": F32, "float64": F64, "int32": I32, "int64": I64}


_TORCH_TYPES = set()  # the tensor classes seen (is_torch's cache)
_TORCH_DTYPES = {}    # torch dtype -> (code, name), filled on first use
_PACK = struct.Struct("@P4i%dq%dq" % (MAX_DIMS, MAX_DIMS))  # Tensor's layout (checked below)
_PAD = (0,) * (2 * MAX_DIMS)
assert ctypes.sizeof(Tensor) == _PACK.size, "timitseg_tensor's layout changed"


def is_torch(x):
    tp = type(x)
    if tp in _TORCH_TYPES:
        return True
    if tp.__module__.startswith("torch") and hasattr(x, "data_ptr"):
        _TORCH_TYPES.add(tp)
        return True
    return False


def _torch_dtype(x, name):
    code = _TORCH_DTYPES.get(x.dtype)
    if code is None:
        dt = str(x.dtype).replace("torch.", "")
        if dt not in _NP_DTYPES:
            raise DTypeError("%s has dtype %s, expected float32, float64, int32 or int64" % (name, dt))
        code = _TORCH_DTYPES[x.dtype] = _NP_DTYPES[dt]
    return code


def describe(x, name):
    """A Tensor descriptor of a numpy array or torch tensor, in place (no copy).
    Raises DTypeError for a dtype the library does not take. A few microseconds
    (one struct.pack): it runs for every tensor of every call."""
    if is_torch(x):
        code = _torch_dtype(x, name)
        data = x.data_ptr() if x.numel() > 0 else 0
        # is_cuda + get_device(): the cheapest attributes (x.device builds a device object)
        device, index = (DEVICE_CUDA, x.get_device()) if x.is_cuda else (DEVICE_CPU, 0)
        shape, strides = x.shape, x.stride()
    else:
        dt = str(x.dtype)
        if dt not in _NP_DTYPES:
            raise DTypeError("%s has dtype %s, expected float32, float64, int32 or int64" % (name, dt))
        data = x.ctypes.data if x.size > 0 else 0
        code, device, index = _NP_DTYPES[dt], DEVICE_CPU, 0
        shape = x.shape
        if any(s % x.itemsize for s in x.strides):
            raise ShapeError("%s has strides %s bytes, not a multiple of its item size" % (name, x.strides))
        strides = tuple(s // x.itemsize for s in x.strides)
    n = len(shape)
    if n > MAX_DIMS:
        raise ShapeError("%s has %d dimensions, at most %d are taken" % (name, n, MAX_DIMS))
    pad = _PAD[:MAX_DIMS - n]
    return Tensor.from_buffer_copy(_PACK.pack(data, code, device, index, n, *shape, *pad, *strides, *pad))


def part_layout(layout, itemsize=4):
    """(offset in bytes, ndim, shape and strides padded to MAX_DIMS) of each part (float32: itemsize 4,
    float64: 8) of (name, offset, size, shape): what describe_parts packs."""
    out = []
    for _, at, _, shape in layout:
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        pad = _PAD[:MAX_DIMS - len(shape)]
        out.append((itemsize * at, len(shape), tuple(shape) + pad + tuple(reversed(strides)) + pad))
    return out


def describe_parts(flat, parts):
    """Descriptors of contiguous parts (part_layout of flat's item size) of a flat tensor or array,
    without making views: the flat buffer's address + each part's offset."""
    t = describe(flat, "grads")
    base, code, device, index, pack = t.data, t.dtype, t.device, t.device_index, _PACK.pack
    return [Tensor.from_buffer_copy(pack(base + off, code, device, index, n, *dims)) for off, n, dims in parts]


def absent():
    return Tensor()
