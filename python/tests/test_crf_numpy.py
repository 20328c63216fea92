"""timitseg.CRF on numpy arrays: values against the Python brute-force oracle
(oracle.py), gradients against central differences in float64, batches with
lengths 0, 1 and K > T against one utterance at a time, and one exception
naming each bad argument."""
import itertools

import numpy as np
import pytest

import oracle
import timitseg


def make_crf(C, K, backend, rng, scale=0.7):
    crf = timitseg.CRF(C, K, backend=backend, threads=1)
    params = {"transition": rng.normal(0, scale, (C, C)), "duration_bias": rng.normal(0, scale, (K, C)),
              "start": rng.normal(0, scale, C), "end": rng.normal(0, scale, C)}
    for n, v in params.items():
        crf.set_param(n, v.astype(np.float32))
    # the float32 values the handle holds, as float64 for the oracle
    return crf, {n: crf.get_param(n).astype(np.float64) for n in params}


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_every_call_matches_brute_force(backend):
    rng = np.random.default_rng(1)
    for T, C, K in itertools.product([1, 2, 4], [1, 2, 3], [1, 2, 3]):
        crf, p = make_crf(C, K, backend, rng)
        lengths = np.array([T, max(1, T - 2)], dtype=np.int32)
        x = rng.normal(0, 1, (2, T, C))
        labels = rng.integers(0, C, (2, T))
        nll = crf.nll(x, lengths, labels=labels, grads=False)
        lz = crf.log_partition(x, lengths)
        vs, segs = crf.viterbi(x, lengths)
        bo, fr = crf.marginals(x, lengths)
        for b in range(2):
            L = int(lengths[b])
            w_lz, w_gold, w_vs, w_bp = oracle.utterance(x[b], L, labels[b], p["transition"], p["duration_bias"],
                                                       p["start"], p["end"])
            where = "%s T=%d C=%d K=%d b=%d" % (backend, T, C, K, b)
            assert lz[b] == pytest.approx(w_lz, rel=1e-6, abs=1e-5), where
            assert nll[b] == pytest.approx(w_lz - w_gold, rel=1e-5, abs=1e-5), where
            assert vs[b] == pytest.approx(w_vs, rel=1e-6, abs=1e-5), where
            np.testing.assert_allclose(bo[b, :L + 1], w_bp, atol=1e-5, err_msg=where)
            # the Viterbi segments tile the utterance and score what viterbi says
            cum = oracle.centered_cumsum(x[b], L)
            s = [tuple(int(v) for v in r) for r in segs[b]]
            assert s[0][0] == 0 and s[-1][0] + s[-1][1] == L, where
            assert oracle.score(s, cum, p["transition"], p["duration_bias"], p["start"], p["end"]) == \
                pytest.approx(w_vs, abs=1e-5), where
            np.testing.assert_allclose(fr[b, :L].sum(axis=1), 1.0, atol=1e-5, err_msg=where)


def test_gradients_match_central_differences():
    rng = np.random.default_rng(2)
    B, T, C, K = 2, 5, 3, 3
    crf, p = make_crf(C, K, "reference", rng)
    x = rng.normal(0, 1, (B, T, C))
    lengths = np.array([5, 3], dtype=np.int64)
    labels = rng.integers(0, C, (B, T))
    _, g = crf.nll(x, lengths, labels=labels)

    def loss(xx):
        return float(crf.nll(xx, lengths, labels=labels, grads=False).sum())

    eps = 1e-3
    for idx in [(0, 0, 0), (0, 4, 2), (1, 1, 1), (1, 2, 0)]:
        up, dn = x.copy(), x.copy()
        up[idx] += eps
        dn[idx] -= eps
        assert g["scores"][idx] == pytest.approx((loss(up) - loss(dn)) / (2 * eps), abs=2e-3), idx
    assert g["scores"].dtype == np.float64
    assert np.all(g["scores"][1, 3:] == 0.0)  # padding frames
    for name in ["transition", "duration_bias", "start", "end"]:
        base = p[name].copy()
        for idx in list(np.ndindex(base.shape))[:4]:
            vals = []
            for sgn in (1, -1):
                v = base.copy()
                v[idx] += sgn * 0.01
                crf.set_param(name, v.astype(np.float32))
                vals.append(loss(x))
            crf.set_param(name, base.astype(np.float32))
            assert g[name][idx] == pytest.approx((vals[0] - vals[1]) / 0.02, abs=3e-3), (name, idx)


def test_mixed_lengths_equal_one_by_one():
    rng = np.random.default_rng(3)
    B, T, C, K = 5, 4, 3, 6  # K > T
    crf, _ = make_crf(C, K, "cpu", rng)
    x = rng.normal(0, 1, (B, T, C)).astype(np.float32)
    lengths = np.array([0, 1, 4, 0, 3], dtype=np.int32)
    labels = rng.integers(0, C, (B, T)).astype(np.int32)
    nll, g = crf.nll(x, lengths, labels=labels)
    vs, segs = crf.viterbi(x, lengths)
    bo, _ = crf.marginals(x, lengths, frames=False)
    gA = np.zeros((C, C))
    for b in range(B):
        L = int(lengths[b])
        if L == 0:
            assert nll[b] == 0.0 and vs[b] == 0.0 and len(segs[b]) == 0 and np.all(g["scores"][b] == 0)
            continue
        n1, g1 = crf.nll(x[b:b + 1, :L], lengths[b:b + 1], labels=labels[b:b + 1, :L])
        v1, s1 = crf.viterbi(x[b:b + 1, :L], lengths[b:b + 1])
        b1, _ = crf.marginals(x[b:b + 1, :L], lengths[b:b + 1], frames=False)
        assert nll[b] == n1[0] and vs[b] == v1[0]
        np.testing.assert_array_equal(g["scores"][b, :L], g1["scores"][0])
        np.testing.assert_array_equal(segs[b], s1[0])
        np.testing.assert_array_equal(bo[b, :L + 1], b1[0])
        gA += g1["transition"]
    np.testing.assert_allclose(g["transition"], gA, rtol=1e-5, atol=1e-6)
    none = crf.nll(x, np.zeros(B, dtype=np.int32), labels=labels, grads=False)
    assert np.all(none == 0.0)


def test_segments_gold_equals_labels_gold_and_strided_inputs():
    rng = np.random.default_rng(4)
    B, T, C, K = 2, 7, 3, 2
    crf, _ = make_crf(C, K, "cpu", rng)
    x = rng.normal(0, 1, (B, C, T)).astype(np.float32).transpose(0, 2, 1)  # a strided view [B][T][C]
    assert not x.flags["C_CONTIGUOUS"]
    lengths = np.array([7, 5])
    labels = rng.integers(0, C, (B, T))
    segs = np.zeros((B, T, 3), dtype=np.int64)
    ns = np.zeros(B, dtype=np.int64)
    for b in range(B):
        g = oracle.gold_segments(labels[b, :lengths[b]], K)
        segs[b, :len(g)] = g
        ns[b] = len(g)
    n1, g1 = crf.nll(x, lengths, labels=labels)
    n2, g2 = crf.nll(x, lengths, segments=segs, num_segments=ns)
    n3, g3 = crf.nll(np.ascontiguousarray(x), lengths, labels=labels)
    np.testing.assert_array_equal(n1, n3)
    np.testing.assert_array_equal(g1["scores"], g3["scores"])
    np.testing.assert_allclose(n2, n1, rtol=1e-6)
    for k in g1:
        np.testing.assert_allclose(g2[k], g1[k], atol=1e-5, err_msg=k)


def test_bad_arguments_raise_one_exception_naming_them():
    crf = timitseg.CRF(3, 2, backend="cpu")
    x = np.zeros((2, 4, 3), dtype=np.float32)
    L = np.array([4, 2], dtype=np.int32)
    with pytest.raises(timitseg.ShapeError, match=r"scores has shape \[2, 4, 2\], expected \[\*, \*, 3\]"):
        crf.log_partition(np.zeros((2, 4, 2), dtype=np.float32), L)
    with pytest.raises(timitseg.ShapeError, match="scores has shape"):
        crf.log_partition(np.zeros((4, 3), dtype=np.float32), L)
    with pytest.raises(timitseg.DTypeError, match="scores has dtype float16"):
        crf.log_partition(x.astype(np.float16), L)
    with pytest.raises(timitseg.DTypeError, match="lengths has dtype F32"):
        crf.log_partition(x, L.astype(np.float32))
    with pytest.raises(timitseg.LengthError, match=r"lengths\[1\] = 5 is outside \[0, T = 4\]"):
        crf.log_partition(x, np.array([4, 5], dtype=np.int32))
    with pytest.raises(timitseg.ShapeError, match=r"lengths has shape \[3\], expected \[2\]"):
        crf.log_partition(x, np.array([4, 2, 1], dtype=np.int32))
    bad = x.copy()
    bad[1, 1, 2] = np.nan
    with pytest.raises(timitseg.TimitsegError, match=r"scores\[1\]\[1\]\[2\] = nan is not finite"):
        crf.log_partition(bad, L)
    bad[1, 1, 2] = 0.0
    bad[1, 3, 0] = np.nan  # padding: never read
    assert np.all(np.isfinite(crf.log_partition(bad, L)))
    with pytest.raises(timitseg.TimitsegError, match="labels"):
        crf.nll(x, L, labels=np.full((2, 4), 3))
    with pytest.raises(timitseg.TimitsegError, match="give exactly one of labels and segments"):
        crf.nll(x, L)
    with pytest.raises(timitseg.TimitsegError, match="no parameter 'transitions'"):
        crf.set_param("transitions", np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(timitseg.ShapeError, match=r"parameter start has shape \[2\], expected \[3\]"):
        crf.set_param("start", np.zeros(2))
    with pytest.raises(timitseg.TimitsegError, match=r"transition\[4\] = inf is NaN or \+inf"):
        crf.set_param("transition", np.array([[0, 0, 0], [0, np.inf, 0], [0, 0, 0]], dtype=np.float32))
    with pytest.raises(timitseg.TimitsegError, match="num_labels .* must be >= 1"):
        timitseg.CRF(0, 2)
    with pytest.raises(ValueError, match="backend must be one of"):
        timitseg.CRF(2, 2, backend="gpu")
    if not timitseg.has_cuda():
        with pytest.raises(timitseg.DeviceError, match="no CUDA support"):
            timitseg.CRF(2, 2, backend="cuda")


def test_align_places_phones_in_order():
    rng = np.random.default_rng(5)
    crf, _ = make_crf(3, 3, "cpu", rng)
    x = rng.normal(0, 1, (3, 8, 3)).astype(np.float32)
    lengths = np.array([8, 5, 0], dtype=np.int32)
    phones = np.array([[0, 2, 1, 0], [1, 2, 0, 0], [0, 0, 0, 0]], dtype=np.int32)
    nph = np.array([4, 3, 0], dtype=np.int32)
    score, spans = crf.align(x, lengths, phones, nph)
    assert score[2] == 0.0 and np.all(spans[2] == 0)
    for b in range(2):
        t = 0
        for i in range(nph[b]):
            assert spans[b, i, 0] == t and spans[b, i, 1] >= 1
            t += spans[b, i, 1]
        assert t == lengths[b]
    with pytest.raises(timitseg.LengthError, match=r"num_phones\[1\] = 5 is outside \[1, N = 4\]"):
        crf.align(x, lengths, phones, np.array([4, 5, 0], dtype=np.int32))
