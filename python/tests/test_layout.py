"""The ctypes mirrors of include/timitseg.h in timitseg/_lib.py against the C
compiler's layout: tests/capi/capi_layout.c (built with the library, ctest
capi.layout) prints every struct's sizeof, each field's offsetof and size, and
every enum constant; each must equal _lib.py's. The header is also scanned so
that a struct or enum constant added there and not to capi_layout.c fails here."""
import json
import os
import re
import subprocess

import pytest

from timitseg import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEADER = os.path.join(ROOT, "include", "timitseg.h")

MIRRORS = {"timitseg_tensor": _lib.Tensor, "timitseg_crf_params": _lib.CrfParams, "timitseg_crf_batch": _lib.CrfBatch,
           "timitseg_crf_gold": _lib.CrfGold, "timitseg_crf_grads": _lib.CrfGrads,
           "timitseg_model_params": _lib.ModelParams, "timitseg_align_words_options": _lib.AlignWordsOptions}


@pytest.fixture(scope="module")
def layout():
    path = os.environ.get("TIMITSEG_LAYOUT") or os.path.join(ROOT, "build", "bin", "timitseg_capi_layout")
    if not os.path.exists(path):
        pytest.skip("no timitseg_capi_layout at %s (build the target, or set TIMITSEG_LAYOUT)" % path)
    return json.loads(subprocess.run([path], check=True, capture_output=True, text=True).stdout)


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_struct_size_and_field_offsets_equal_the_headers(layout, name):
    c = layout["structs"][name]
    mirror = MIRRORS[name]
    assert [f[0] for f in mirror._fields_] == list(c["fields"]), name + ": the fields (names and order) differ"
    for field, (offset, size) in c["fields"].items():
        got = getattr(mirror, field)
        assert (got.offset, got.size) == (offset, size), "%s.%s: ctypes (offset %d, size %d), C (%d, %d)" % (
            name, field, got.offset, got.size, offset, size)
    import ctypes
    assert ctypes.sizeof(mirror) == c["size"], name


def test_every_struct_of_the_header_is_mirrored_and_checked(layout):
    text = open(HEADER).read()
    declared = set(re.findall(r"typedef struct (timitseg_\w+) \{", text))
    assert declared == set(layout["structs"]), "capi_layout.c must print every struct of the header"
    assert declared == set(MIRRORS), "every struct of the header needs its ctypes mirror in _lib.py"


def test_enum_values_equal_the_headers(layout):
    e = layout["enums"]
    text = open(HEADER).read()
    declared = set(re.findall(r"\b(TIMITSEG_[A-Z0-9_]+) = -?\d+", text))
    assert declared == set(e), "capi_layout.c must print every enum constant of the header"
    assert (_lib.F32, _lib.F64, _lib.I32, _lib.I64) == (e["TIMITSEG_F32"], e["TIMITSEG_F64"], e["TIMITSEG_I32"],
                                                         e["TIMITSEG_I64"])
    assert (_lib.DEVICE_CPU, _lib.DEVICE_CUDA) == (e["TIMITSEG_DEVICE_CPU"], e["TIMITSEG_DEVICE_CUDA"])
    assert _lib.BACKENDS == {n.lower(): e["TIMITSEG_BACKEND_" + n] for n in ("AUTO", "REFERENCE", "CPU", "CUDA")}
    assert _lib.DURATION_MODELS == {n.lower(): e["TIMITSEG_DURATION_" + n] for n in ("TABLE", "LOGNORMAL")}
    assert _lib.MODEL_DEVICES == {n.lower(): e["TIMITSEG_MODEL_DEVICE_" + n] for n in ("AUTO", "CPU", "CUDA")}
    assert _lib.SILENCE_EDGES == {n.lower(): e["TIMITSEG_SILENCE_EDGES_" + n] for n in ("AUTO", "ON", "OFF")}
    assert _lib.BOUNDARIES == {n.lower().replace("_", "-"): e["TIMITSEG_BOUNDARIES_" + n]
                               for n in ("AUTO", "VITERBI", "POSTERIOR", "POSTERIOR_FRAMES")}
    errors = {k: v for k, v in e.items() if k.startswith("TIMITSEG_ERR_")}
    assert sorted(_lib._STATUS) == sorted(errors.values()) and e["TIMITSEG_OK"] == 0
    # each status's exception class is the one its name promises
    kinds = {"SHAPE": _lib.ShapeError, "DTYPE": _lib.DTypeError, "DEVICE": _lib.DeviceError,
             "LENGTH": _lib.LengthError, "MEMORY": MemoryError}
    for name, value in errors.items():
        assert _lib._STATUS[value] is kinds.get(name[len("TIMITSEG_ERR_"):], _lib.TimitsegError), name


def test_defines_equal_the_headers(layout):
    d = layout["defines"]
    assert _lib.API_VERSION == d["TIMITSEG_API_VERSION"]
    assert _lib.MAX_DIMS == d["TIMITSEG_MAX_DIMS"]
    assert _lib.SEGMENT_POSTERIORS_MAX_ENTRIES == d["TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES"]
