"""Test setup: the package from python/ (or the installed one) and the library
from TIMITSEG_LIBRARY (scripts/test.sh points it at build/lib/libtimitseg.so)."""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_BUILT = os.path.join(ROOT, "build", "lib", "libtimitseg.so")
if "TIMITSEG_LIBRARY" in os.environ or os.path.exists(_BUILT):
    # the package from python/ with the library of this checkout's build (or TIMITSEG_LIBRARY)
    sys.path.insert(0, os.path.dirname(HERE))
    os.environ.setdefault("TIMITSEG_LIBRARY", _BUILT)
# else: the installed package (`pip install ./python`) with the library installed beside it


@pytest.fixture(scope="session")
def binary():
    """The `timitseg` binary of the same build (TIMITSEG_BINARY, else build/bin/timitseg)."""
    path = os.environ.get("TIMITSEG_BINARY") or os.path.join(ROOT, "build", "bin", "timitseg")
    if not os.path.exists(path):
        pytest.skip("no timitseg binary at %s (build it, or set TIMITSEG_BINARY)" % path)
    return path
