"""Test setup: the package from python/ (or the installed one) and the library
from TIMITSEG_LIBRARY (scripts/test.sh points it at build/lib/libtimitseg.so)."""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
if "TIMITSEG_LIBRARY" not in os.environ and os.path.exists(os.path.join(ROOT, "build", "lib", "libtimitseg.so")):
    os.environ["TIMITSEG_LIBRARY"] = os.path.join(ROOT, "build", "lib", "libtimitseg.so")


@pytest.fixture(scope="session")
def binary():
    """The `timitseg` binary of the same build (TIMITSEG_BINARY, else build/bin/timitseg)."""
    path = os.environ.get("TIMITSEG_BINARY") or os.path.join(ROOT, "build", "bin", "timitseg")
    if not os.path.exists(path):
        pytest.skip("no timitseg binary at %s (build it, or set TIMITSEG_BINARY)" % path)
    return path
