"""Reading the tensors of a timitseg checkpoint (safetensors) with numpy only."""
import numpy as np

# The checkpoint names of the CRF's tensors that timitseg.torch.SemiCRF holds, by
# the module's (short) name: the one place Python writes them (the C++ table:
# model/crf_params.cpp; scripts/check_param_names.py checks both agree).
CRF_PREFIX = "crf."
CRF_TENSORS = {
    "transition": "crf.transition",                  # [C][C]
    "duration_bias": "crf.duration_bias",            # [K][C]
    "start": "crf.start",                            # [C]
    "end": "crf.end",                                # [C]
    "duration_lognormal": "crf.duration_lognormal",  # [3][C], with duration_model="lognormal"
}


def read_safetensors(path, prefix=""):
    """The F32/F64/I32/I64 tensors of a safetensors file whose names start with prefix, as numpy arrays."""
    import json
    import struct
    dtypes = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(prefix) or info["dtype"] not in dtypes:
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            out[name] = np.frombuffer(f.read(b - a), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        return out
