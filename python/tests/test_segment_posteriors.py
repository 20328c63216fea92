"""Segment posteriors [B][T][K][C] (CRF.marginals(segments=True)): against
the brute-force enumeration of oracle.py (every backend, with onset scores,
rows of length 0 and 1, K > T), against central differences of log Z
(onset scores and duration_bias: their gradients are sums of segment
posteriors), consistent with the boundary posteriors, and the size check."""
import ctypes
import itertools
import math

import numpy as np
import pytest

import oracle
import timitseg
from timitseg import _lib


def brute_force(x, L, K, C, p, onset):
    """[L][K][C]: P(segment of label c, duration d ends at frame t) by enumeration."""
    cum = oracle.centered_cumsum(x, L)
    paths = [(s, oracle.score(s, cum, p["transition"], p["duration_bias"], p["start"], p["end"], onset))
             for s in oracle.segmentations(L, K, C)]
    m = max(v for _, v in paths)
    lz = m + math.log(sum(math.exp(v - m) for _, v in paths))
    out = np.zeros((L, K, C))
    for s, v in paths:
        for (u, d, c) in s:
            out[u + d - 1, d - 1, c] += math.exp(v - lz)
    return out


def exact_crf(C, K, backend, rng):
    """A handle whose parameters are multiples of 1/256 (exact in float32: the oracle sees the same values)."""
    crf = timitseg.CRF(C, K, backend=backend, threads=1)
    p = {"transition": (C, C), "duration_bias": (K, C), "start": (C,), "end": (C,)}
    for n, shape in p.items():
        p[n] = rng.integers(-200, 200, shape) / 256.0
        crf.set_param(n, p[n])
    return crf, p


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_segment_posteriors_match_brute_force(backend):
    rng = np.random.default_rng(11)
    for T, C, K in itertools.product([1, 3, 5], [1, 2, 3], [1, 2, 4]):
        crf, p = exact_crf(C, K, backend, rng)
        lengths = np.array([T, 0, 1, max(1, T - 2)], dtype=np.int64)
        x = rng.normal(0, 1, (4, T, C))
        onset = rng.integers(-128, 128, (4, T, C)) / 256.0
        for o in (None, onset):
            bo, fr, sg = crf.marginals(x, lengths, onset=o, segments=True)
            assert sg.shape == (4, T, K, C) and sg.dtype == np.float64
            where = "%s T=%d C=%d K=%d onset=%s" % (backend, T, C, K, o is not None)
            for b in range(4):
                L = int(lengths[b])
                if L:
                    want = brute_force(x[b], L, K, C, p, None if o is None else o[b])
                    np.testing.assert_allclose(sg[b, :L], want, atol=1e-6, err_msg=where)
                assert not sg[b, L:].any(), where  # padding frames: 0
                for t in range(L):  # a segment of duration d ending at t starts at t-d+1 >= 0
                    assert not sg[b, t, t + 1:].any(), where
                # summed over durations and labels: the boundary posterior of the same call
                np.testing.assert_allclose(sg[b].sum(axis=(1, 2)), bo[b, 1:], atol=1e-6, err_msg=where)


def test_segment_posteriors_are_derivatives_of_log_z():
    """d log Z / d onset[b][u][c] = sum_d P(segment (u, d, c)); d sum_b log Z_b / d D[d-1][c] =
    sum_b sum_t P(segment of label c, duration d, ending at t). Central differences with steps of
    2^-8 on values that are multiples of 2^-8 (exact in float32, as the library stores them)."""
    rng = np.random.default_rng(12)
    B, T, C, K = 2, 7, 3, 4
    crf, p = exact_crf(C, K, "reference", rng)
    x = rng.normal(0, 1, (B, T, C))
    lengths = np.array([7, 5], dtype=np.int64)
    onset = rng.integers(-64, 64, (B, T, C)) / 256.0
    _, _, sg = crf.marginals(x, lengths, onset=onset, boundaries=False, frames=False, segments=True)
    h = 2.0 ** -8
    for b, u, c in [(0, 0, 0), (0, 3, 2), (1, 4, 1), (1, 2, 0)]:
        up, dn = onset.copy(), onset.copy()
        up[b, u, c] += h
        dn[b, u, c] -= h
        fd = (crf.log_partition(x, lengths, onset=up)[b] - crf.log_partition(x, lengths, onset=dn)[b]) / (2 * h)
        want = sum(sg[b, u + d - 1, d - 1, c] for d in range(1, K + 1) if u + d <= lengths[b])
        assert fd == pytest.approx(want, abs=2e-5), (b, u, c)
    for d, c in [(1, 0), (2, 2), (4, 1)]:
        vals = []
        for sgn in (1, -1):
            D = p["duration_bias"].copy()
            D[d - 1, c] += sgn * h
            crf.set_param("duration_bias", D)
            vals.append(crf.log_partition(x, lengths, onset=onset).sum())
        crf.set_param("duration_bias", p["duration_bias"])
        assert (vals[0] - vals[1]) / (2 * h) == pytest.approx(sg[:, :, d - 1, c].sum(), abs=2e-5), (d, c)


def test_segment_posteriors_size_check_is_one_error():
    crf = timitseg.CRF(10, 1000, backend="cpu", threads=1)
    x = np.zeros((1, 30000, 10), dtype=np.float32)  # 1 * 30000 * 1000 * 10 = 3e8 entries, over 2^28
    lengths = np.array([30000], dtype=np.int32)
    with pytest.raises(timitseg.ShapeError, match=r"segments \[B\]\[T\]\[K\]\[C\] = \[1, 30000, 1000, 10\] would "
                                                  r"hold 300000000 entries, over the limit of 268435456"):
        crf.marginals(x, lengths, segments=True)
    # the C API's own check (the Python one bypassed): one status and one line, before any output is read
    b, _keep = crf._batch(x, lengths, None, False)
    small = np.zeros((1, 1, 1, 1))
    t = _lib.describe(small, "segments")
    st = _lib.lib.timitseg_crf_segment_posteriors(crf._h, ctypes.byref(b), ctypes.byref(t))
    assert st == 2  # TIMITSEG_ERR_SHAPE
    msg = _lib.lib.timitseg_last_error().decode()
    assert msg.startswith("timitseg_crf_segment_posteriors: segments [B][T][K][C] = [1][30000][1000][10] would "
                          "hold 300000000 entries, over the limit of 268435456"), msg
    with pytest.raises(timitseg.ShapeError, match="segments"):  # a wrong output shape names the tensor
        bad = np.zeros((1, 2, 3, 4))
        tb = _lib.describe(bad, "segments")
        small_crf = timitseg.CRF(3, 2, backend="cpu", threads=1)
        bb, _k = small_crf._batch(np.zeros((1, 4, 3)), np.array([4]), None, False)
        _lib.check(_lib.lib.timitseg_crf_segment_posteriors(small_crf._h, ctypes.byref(bb), ctypes.byref(tb)))
