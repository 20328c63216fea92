"""The version check of the torch tests that need a newer torch than the
package's minimum (torch_version.py); no torch needed: the logic is what a
torch 1.13 (Debian 12's python3-torch) would see."""
import pytest

from torch_version import FUSED_ADAMW_CPU, at_least, skip_reason, version_tuple


@pytest.mark.parametrize("text,want", [("1.13.1+cpu", (1, 13)), ("1.13.0", (1, 13)), ("2.4.0a0+git1234", (2, 4)),
                                       ("2.11.0+cu130", (2, 11)), ("2.3.1", (2, 3)), ("10.0", (10, 0))])
def test_version_tuple(text, want):
    assert version_tuple(text) == want


def test_version_tuple_refuses_what_is_no_version():
    with pytest.raises(ValueError):
        version_tuple("nightly")


def test_fused_adamw_on_the_cpu_skips_on_older_torch():
    assert skip_reason("1.13.1", FUSED_ADAMW_CPU, "AdamW(fused=True) on the CPU") == \
        "AdamW(fused=True) on the CPU needs torch >= 2.4, this is torch 1.13.1"
    assert skip_reason("2.3.1+cpu", FUSED_ADAMW_CPU, "x") is not None
    assert skip_reason("2.4.0", FUSED_ADAMW_CPU, "x") is None
    assert skip_reason("2.11.0+cu130", FUSED_ADAMW_CPU, "x") is None
    assert not at_least("1.13.1", (2, 0)) and at_least("2.10.0", (2, 4))  # numeric, not text, order
