"""Which torch features a test needs (imports no torch): the version check of
the tests that skip, with a reason, on a torch too old for them (docs/python.md
states the minimum torch of the package and of each such test)."""
import re

# AdamW(fused=True) on CPU tensors: torch 2.4 (before: CUDA only; 1.13 has no `fused` at all).
FUSED_ADAMW_CPU = (2, 4)


def version_tuple(version):
    """(major, minor) of a torch version string: "1.13.1+cpu" -> (1, 13), "2.4.0a0+git..." -> (2, 4)."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(version))
    if not m:
        raise ValueError("not a torch version: %r" % (version,))
    return int(m.group(1)), int(m.group(2))


def at_least(version, required):
    """True when torch `version` (a string) is `required` (major, minor) or newer."""
    return version_tuple(version) >= tuple(required)


def skip_reason(version, required, feature):
    """The skip reason of a test that needs `feature` of torch >= required, or None when `version` has it."""
    if at_least(version, required):
        return None
    return "%s needs torch >= %d.%d, this is torch %s" % (feature, required[0], required[1], version)
