"""The zero-copy path (capi/crf_fast.h, docs/python.md "Zero-copy"): float32
scores and int32 lengths/labels, contiguous, in the backend's memory space,
go to the kernels in place; everything else takes the general path. Both
must give the same bits on the same backend. The general path is reached by
keeping int64 lengths and labels (timitseg.crf._int32 patched out). These
are the numpy tests, which run without torch; test_zero_copy_torch.py holds
the torch and CUDA ones."""
import numpy as np
import pytest

import timitseg
import timitseg.crf as tcrf


def make(C, K, backend, seed, reg=0.01):
    rng = np.random.default_rng(seed)
    crf = timitseg.CRF(C, K, backend=backend, threads=2, reg=reg)
    for n in ("transition", "duration_bias", "start", "end"):
        crf.set_param(n, (rng.standard_normal(crf.param_shape(n)) * 0.5).astype(np.float32))
    return crf


def problem(B, T, C, seed, scale=1.0, lengths=None):
    rng = np.random.default_rng(seed + 100)
    x = (rng.standard_normal((B, T, C)) * scale).astype(np.float32)
    L = np.array(lengths if lengths is not None else rng.integers(1, T + 1, B), dtype=np.int64)
    y = rng.integers(0, C, (B, T)).astype(np.int64)
    return x, L, y


def both_paths(crf, x, L, y, monkeypatch):
    """(zero-copy, general) results of nll with every gradient and log_partition."""
    fast = crf.nll(x, L, labels=y, scale=0.25), crf.log_partition(x, L)
    with monkeypatch.context() as m:
        m.setattr(tcrf, "_int32", lambda v: v)
        general = crf.nll(x, L, labels=y, scale=0.25), crf.log_partition(x, L)
    return fast, general


def assert_same_bits(a, b):
    (na, ga), lza = a
    (nb, gb), lzb = b
    as_np = (lambda v: v.detach().cpu().numpy()) if not isinstance(na, np.ndarray) else (lambda v: v)
    assert as_np(na).tobytes() == as_np(nb).tobytes()
    assert as_np(lza).tobytes() == as_np(lzb).tobytes()
    for k in ga:
        assert as_np(ga[k]).tobytes() == as_np(gb[k]).tobytes(), k


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_numpy_float32_fast_equals_general_bitwise(backend, monkeypatch):
    crf = make(5, 4, backend, 1)
    for seed, scale in ((1, 1.0), (2, 1e4)):
        x, L, y = problem(6, 17, 5, seed, scale)
        fast, general = both_paths(crf, x, L, y, monkeypatch)
        assert_same_bits(fast, general)
        assert np.all(np.isfinite(fast[0][0]))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_numpy_cumulative_fast_equals_general_bitwise(backend, monkeypatch):
    crf = make(4, 3, backend, 3)
    x, L, y = problem(5, 11, 4, 4)
    cum = np.cumsum(np.concatenate([np.zeros((5, 1, 4), np.float32), x], axis=1), axis=1, dtype=np.float32)
    fast = crf.nll(cum, L, labels=y, cumulative=True), crf.log_partition(cum, L, cumulative=True)
    with monkeypatch.context() as m:
        m.setattr(tcrf, "_int32", lambda v: v)
        general = crf.nll(cum, L, labels=y, cumulative=True), crf.log_partition(cum, L, cumulative=True)
    assert_same_bits(fast, general)


def test_int64_values_outside_int32_are_still_rejected():
    crf = make(3, 3, "cpu", 2)
    x, L, y = problem(2, 5, 3, 3, lengths=[5, 4])
    y[1, 0] = 2 ** 32 + 1  # 1 after a plain int32 cast
    with pytest.raises(timitseg.TimitsegError, match="labels"):
        crf.nll(x, L, labels=y)
    L[0] = 2 ** 32 + 5
    with pytest.raises(timitseg.LengthError, match=r"lengths\[0\]"):
        crf.nll(x, L, labels=y)
