"""Atomic output for the bench/accuracy scripts: a file appears whole or not at all."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_output(path: Path):
    """A text file to write PATH through: a temporary file next to it, renamed over PATH
    when the block ends normally, removed when it raises (PATH is then unchanged)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_atomic(path: Path, text: str) -> None:
    with atomic_output(path) as f:
        f.write(text)
