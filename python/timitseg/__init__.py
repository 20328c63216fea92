"""timitseg: the exact semi-Markov CRF of timitseg (reference, CPU and CUDA
backends) and checkpoint inference, over the C API (libtimitseg.so, ctypes).

    import timitseg
    crf = timitseg.CRF(num_labels=39, max_duration=30, backend="cpu")
    nll, grads = crf.nll(scores, lengths, labels=labels)      # numpy or torch
    model = timitseg.Model.load("best.safetensors")
    model.decode("SA1.WAV")                                    # [(begin, end, label), ...]

PyTorch: timitseg.torch.SemiCRF (an nn.Module). docs/python.md.
"""
from ._lib import DTypeError, DeviceError, LengthError, ShapeError, TimitsegError, lib as _clib
from .crf import CRF
from .model import Alignment, Model, Segment, set_log_level

__version__ = _clib.timitseg_version_string().decode().split(" ")[0]
API_VERSION = _clib.timitseg_api_version()


def has_cuda():
    """True when the library was built with the CUDA backend."""
    return bool(_clib.timitseg_has_cuda())


__all__ = ["CRF", "Model", "Segment", "Alignment", "TimitsegError", "ShapeError", "DTypeError", "DeviceError", "LengthError",
           "has_cuda", "set_log_level", "API_VERSION"]
