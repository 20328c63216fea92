"""Parameters read in place (CRF.bind_params on numpy arrays; SemiCRF, which
binds its parameters, and CUDA tensors in test_bind_torch.py): the oracle is a handle whose parameters were copied in with
set_param; with the same values every output has the same bits, an in-place
write (an optimizer step) is what the next call reads, and a training loop
makes no set_param call after its first step."""
import numpy as np
import pytest

import timitseg

NAMES = ("transition", "duration_bias", "start", "end")


def params(C, K, seed):
    rng = np.random.default_rng(seed)
    shapes = {"transition": (C, C), "duration_bias": (K, C), "start": (C,), "end": (C,)}
    return {n: (rng.standard_normal(shapes[n]) * 0.5).astype(np.float32) for n in NAMES}


def copied(C, K, p, backend="cpu"):
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    for n in NAMES:
        crf.set_param(n, p[n])
    return crf


def batch(B=3, T=9, C=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    lengths = np.array([T, 4, 1][:B], dtype=np.int32)
    labels = rng.integers(0, 2, (B, T)).astype(np.int32)  # labels 0 and 1 (the test forbids ending in 2)
    return x, lengths, labels


def same_bits(a, b):
    nll_a, g_a = a
    nll_b, g_b = b
    assert np.array_equal(nll_a, nll_b)
    for k in g_b:
        assert np.array_equal(np.asarray(g_a[k]), np.asarray(g_b[k])), k


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bound_numpy_parameters_equal_copied_ones_and_writes_are_read(backend):
    C, K = 4, 3
    p = params(C, K, 1)
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    crf.bind_params(*(p[n] for n in NAMES))
    x, lengths, labels = batch(C=C)
    same_bits(crf.nll(x, lengths, labels=labels), copied(C, K, p, backend).nll(x, lengths, labels=labels))
    assert crf.penalty() == copied(C, K, p, backend).penalty() > 0
    p["transition"] *= 1.5  # in place, as an optimizer step
    p["end"][2] = -np.inf   # a forbidden end label
    want = copied(C, K, p, backend)
    same_bits(crf.nll(x, lengths, labels=labels), want.nll(x, lengths, labels=labels))
    assert np.array_equal(crf.log_partition(x, lengths), want.log_partition(x, lengths))
    assert np.array_equal(crf.get_param("transition"), p["transition"])
    p["start"][1] = np.nan
    with pytest.raises(timitseg.TimitsegError, match=r"start\[1\]"):
        crf.nll(x, lengths, labels=labels)
    p["start"][1] = 0.0
    crf.unbind_params()
    kept = {n: v.copy() for n, v in p.items()}
    p["duration_bias"][:] = 9.0  # no longer bound
    same_bits(crf.nll(x, lengths, labels=labels), copied(C, K, kept, backend).nll(x, lengths, labels=labels))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_segment_posteriors_read_the_bound_parameters_of_the_call(backend):
    # The segment posteriors alone (no other call between the write and it) read what the bound arrays hold now.
    C, K = 4, 3
    p = params(C, K, 3)
    crf = timitseg.CRF(C, K, backend=backend, reg=0.01)
    crf.bind_params(*(p[n] for n in NAMES))
    x, lengths, _ = batch(C=C)
    for step in range(3):
        got = crf.marginals(x, lengths, boundaries=False, frames=False, segments=True)[2]
        want = copied(C, K, p, backend).marginals(x, lengths, boundaries=False, frames=False, segments=True)[2]
        assert np.array_equal(got, want), step
        p["transition"] += 0.25  # in place, as an optimizer step
        p["duration_bias"][1] -= 0.5


def test_bad_bindings_name_the_parameter():
    C, K = 4, 3
    p = params(C, K, 2)
    crf = timitseg.CRF(C, K, backend="cpu")
    with pytest.raises(timitseg.DTypeError, match="parameter transition"):
        crf.bind_params(p["transition"].astype(np.float64), p["duration_bias"], p["start"], p["end"])
    with pytest.raises(timitseg.ShapeError, match="parameter duration_bias"):
        crf.bind_params(p["transition"], p["duration_bias"].T.copy(), p["start"], p["end"])
    with pytest.raises(timitseg.ShapeError, match="contiguous"):
        crf.bind_params(p["transition"].T, p["duration_bias"], p["start"], p["end"])

