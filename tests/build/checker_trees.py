"""Shared by the tests of scripts/check_*.py: small trees of files whose
verdict is known, and a checker run on one."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tree(files):
    """A temporary tree of FILES (relative path -> text); `with tree(...) as root`."""
    d = tempfile.TemporaryDirectory()
    for rel, text in files.items():
        path = os.path.join(d.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return d


def run_checker(name, root):
    """scripts/NAME --root ROOT: the finished process (returncode, stdout, stderr)."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), "--root", root],
                          capture_output=True, text=True)
