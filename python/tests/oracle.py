"""A float64 brute-force oracle of docs/crf.md in plain Python (independent of
the library): every segmentation of an utterance enumerated and scored."""
import math

import numpy as np


def centered_cumsum(x, L):
    """x [T][C] -> cum [L+1][C] of the valid frames, centered (float64)."""
    xv = np.asarray(x[:L], dtype=np.float64)
    xc = xv - xv.mean(axis=0, keepdims=True)
    return np.vstack([np.zeros((1, xv.shape[1])), np.cumsum(xc, axis=0)])


def segmentations(L, K, C):
    if L == 0:
        yield []
        return
    for d in range(1, min(K, L) + 1):
        for c in range(C):
            for rest in segmentations(L - d, K, C):
                yield [(0, d, c)] + [(u + d, dd, cc) for (u, dd, cc) in rest]


def score(segs, cum, A, D, s, e, onset=None):
    v = s[segs[0][2]] + e[segs[-1][2]]
    for i, (u, d, c) in enumerate(segs):
        v += cum[u + d, c] - cum[u, c] + D[d - 1, c] + (onset[u, c] if onset is not None else 0.0)
        if i:
            v += A[segs[i - 1][2], c]
    return v


def gold_segments(labels, K):
    segs, t, L = [], 0, len(labels)
    while t < L:
        r = t
        while r < L and labels[r] == labels[t]:
            r += 1
        u = t
        while u < r:
            d = min(K, r - u)
            segs.append((u, d, int(labels[t])))
            u += d
        t = r
    return segs


def utterance(x, L, labels, A, D, s, e):
    """log Z, gold score, Viterbi score and boundary posteriors [L+1] of one utterance."""
    K, C = D.shape
    cum = centered_cumsum(x, L)
    paths = [(p, score(p, cum, A, D, s, e)) for p in segmentations(L, K, C)]
    m = max(v for _, v in paths)
    lz = m + math.log(sum(math.exp(v - m) for _, v in paths))
    bpost = np.zeros(L + 1)
    for p, v in paths:
        for (u, d, c) in p:
            bpost[u + d] += math.exp(v - lz)
    gold = score(gold_segments(labels[:L], K), cum, A, D, s, e) if labels is not None else None
    return lz, gold, m, bpost


def alignments(L, phones, K, optional=None):
    """Every alignment of phones to L frames (docs/crf.md "Forced alignment"): each phone r >= 1 frames (>= 0
    when optional), in order, cut into pieces of K then the remainder; yields each alignment's segments."""
    n = len(phones)
    opt = [bool(optional[i]) if optional is not None else False for i in range(n)]

    def rec(i, t):
        if i == n:
            if t == L:
                yield []
            return
        for r in range(0 if opt[i] else 1, L - t + 1):
            pieces = [(u, min(K, t + r - u), int(phones[i])) for u in range(t, t + r, K)]
            for rest in rec(i + 1, t + r):
                yield pieces + rest
    yield from rec(0, 0)


def transcript_nll(x, L, phones, A, D, s, e, optional=None):
    """log Z - log Z_c of one utterance: Z over every segmentation, Z_c over every alignment of phones."""
    K, C = D.shape
    cum = centered_cumsum(x, L)

    def lse(vals):
        m = max(vals)
        return m + math.log(sum(math.exp(v - m) for v in vals))
    lz = lse([score(p, cum, A, D, s, e) for p in segmentations(L, K, C)])
    lzc = lse([score(p, cum, A, D, s, e) for p in alignments(L, phones, K, optional)])
    return lz - lzc
