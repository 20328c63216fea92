"""timitseg.CRF.transcript_nll on numpy arrays (docs/crf.md "Training from transcripts"): values against the
Python brute-force oracle (every segmentation and every alignment of the phones), the float64 gradients
against central differences, a row of length 0, and the infeasible utterance's error."""
import itertools

import numpy as np
import pytest

import oracle
import timitseg


def make_crf(C, K, backend, rng, scale=0.7, dtype=np.float32):
    crf = timitseg.CRF(C, K, backend=backend, threads=1)
    params = {"transition": rng.normal(0, scale, (C, C)), "duration_bias": rng.normal(0, scale, (K, C)),
              "start": rng.normal(0, scale, C), "end": rng.normal(0, scale, C)}
    for n, v in params.items():
        crf.set_param(n, v.astype(dtype))
    return crf, {n: crf.get_param(n, dtype="float64") for n in params}


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_values_match_brute_force(backend):
    rng = np.random.default_rng(3)
    checked = 0
    for T, C, K in itertools.product([1, 3, 5], [1, 2, 3], [1, 2, 6]):
        crf, p = make_crf(C, K, backend, rng)
        lengths = np.array([T, max(1, T - 2)], dtype=np.int32)
        x = rng.normal(0, 1, (2, T, C))
        N = 3
        num = np.array([min(N, int(lengths[0])), min(2, int(lengths[1]))], dtype=np.int64)
        phones = rng.integers(0, C, (2, N))
        optional = np.zeros((2, N), dtype=np.int32)
        if num[0] == 3:
            optional[0, 1] = 1
        nll = crf.transcript_nll(x, lengths, phones, num, optional=optional)
        for b in range(2):
            n = int(num[b])
            want = oracle.transcript_nll(x[b], int(lengths[b]), phones[b, :n], p["transition"], p["duration_bias"],
                                         p["start"], p["end"], optional[b, :n])
            assert abs(nll[b] - want) <= 1e-5 * (1 + abs(want)), (backend, T, C, K, b, nll[b], want)
            checked += 1
    assert checked == 2 * 27


def test_float64_gradients_match_central_differences():
    rng = np.random.default_rng(7)
    C, K, T = 3, 2, 5
    crf, _ = make_crf(C, K, "reference", rng, dtype=np.float64)
    lengths = np.array([5, 3], dtype=np.int32)
    phones = np.array([[0, 2, 1], [1, 0, 0]], dtype=np.int32)
    num = np.array([3, 2], dtype=np.int32)
    optional = np.array([[0, 1, 0], [0, 0, 0]], dtype=np.int32)
    x = rng.normal(0, 1, (2, T, C))
    _, g = crf.transcript_nll(x, lengths, phones, num, optional=optional, grads=True, scale=1.0)

    def total(xx):
        return float(crf.transcript_nll(xx, lengths, phones, num, optional=optional).sum())
    h = 1e-6
    worst = 0.0
    for idx in itertools.product(range(2), range(T), range(C)):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd = (total(xp) - total(xm)) / (2 * h)
        worst = max(worst, abs(fd - g["scores"][idx]))
    assert worst < 1e-6, worst
    A = crf.get_param("transition", dtype="float64")
    for i, j in itertools.product(range(C), range(C)):
        Ap, Am = A.copy(), A.copy()
        Ap[i, j] += h
        Am[i, j] -= h
        crf.set_param("transition", Ap)
        up = total(x)
        crf.set_param("transition", Am)
        down = total(x)
        crf.set_param("transition", A)
        assert abs((up - down) / (2 * h) - g["transition"][i, j]) < 1e-6, (i, j)


def test_length_zero_row_and_infeasible_utterance():
    rng = np.random.default_rng(2)
    crf, _ = make_crf(2, 2, "cpu", rng)
    x = rng.normal(0, 1, (2, 3, 2)).astype(np.float32)
    phones = np.array([[0, 1], [0, 0]], dtype=np.int32)
    nll = crf.transcript_nll(x, np.array([3, 0], dtype=np.int32), phones, np.array([2, 0], dtype=np.int32))
    assert nll[0] > 0 and nll[1] == 0
    with pytest.raises(timitseg.TimitsegError, match="utterance 0"):
        crf.transcript_nll(x, np.array([1, 0], dtype=np.int32), phones, np.array([2, 0], dtype=np.int32))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_phone_graph_is_the_sum_over_its_paths(backend):
    """links (docs/crf.md "Alternative pronunciations: the phone graph"): a word with two pronunciations,
    {a b | c} then d, is exactly the two transcripts "a b d" and "c d" summed: exp(-nll) adds; each path
    checked against the Python brute-force oracle; optional and links together are refused."""
    rng = np.random.default_rng(11)
    C, K, T = 4, 3, 7
    crf, p = make_crf(C, K, backend, rng, dtype=np.float64)
    x = rng.normal(0, 1, (1, T, C))
    lengths = np.array([T], dtype=np.int32)
    S, E = 1 << 29, 1 << 30
    phones = np.array([[0, 1, 2, 3]], dtype=np.int32)  # a b | c, then d
    links = np.array([[S, 1, S, (1 << 0) | (1 << 1) | E]], dtype=np.int32)  # d follows b (1 back) or c (2 back)
    nll = crf.transcript_nll(x, lengths, phones, np.array([4]), links=links)[0]
    paths = [[0, 1, 3], [2, 3]]
    each = [oracle.transcript_nll(x[0], T, np.array(q), p["transition"], p["duration_bias"], p["start"], p["end"],
                                  np.zeros(len(q), dtype=np.int32)) for q in paths]
    want = -np.log(sum(np.exp(-v) for v in each))
    assert abs(nll - want) <= 1e-9 * (1 + abs(want)), (nll, want, each)
    for q, v in zip(paths, each):  # the library on each path alone agrees with the oracle too
        got = crf.transcript_nll(x, lengths, np.array([q + [0] * (4 - len(q))]), np.array([len(q)]))[0]
        assert abs(got - v) <= 1e-9 * (1 + abs(v)), (q, got, v)
    with pytest.raises(ValueError):
        crf.transcript_nll(x, lengths, phones, np.array([4]), links=links, optional=np.zeros((1, 4), np.int32))
    bad = links.copy()
    bad[0, 0] |= 1  # phone 0 would follow phone -1
    with pytest.raises(timitseg.TimitsegError, match="before phone 0"):
        crf.transcript_nll(x, lengths, phones, np.array([4]), links=bad)
