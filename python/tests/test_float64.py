"""float64 end to end (docs/python.md "float64"): float64 scores and
parameters set as float64 are computed in float64 through the centered cumsum
and the CRF on the reference and cpu backends, so central differences at
eps 1e-6 resolve every gradient (the NLL with the penalty, log Z) to ~1e-8,
and a 1e-9 change of one score moves log Z by its marginal times 1e-9
(before, scores were rounded to float32: log Z did not move at 1e-9). A cuda
handle refuses float64 scores with one line."""
import itertools

import numpy as np
import pytest

import timitseg

NAMES = ("transition", "duration_bias", "start", "end")


def make(C, K, backend, rng, reg=0.0, duration_model="table"):
    crf = timitseg.CRF(C, K, backend=backend, threads=1, reg=reg, duration_model=duration_model)
    params = {"transition": rng.normal(0, 0.7, (C, C)), "start": rng.normal(0, 0.7, C),
              "end": rng.normal(0, 0.7, C)}
    if duration_model == "lognormal":
        params["duration_lognormal"] = np.stack([rng.normal(1.0, 0.3, C), rng.normal(0.0, 0.3, C),
                                                 rng.normal(0.0, 0.3, C)])
    else:
        params["duration_bias"] = rng.normal(0, 0.7, (K, C))
    for n, v in params.items():
        crf.set_param(n, v)  # float64: taken unrounded
    return crf, params


def batch(rng, B, T, C, lengths):
    x = rng.normal(0, 1.0, (B, T, C))
    labels = rng.integers(0, C, (B, T)).astype(np.int32)
    return x, np.array(lengths, dtype=np.int32), labels


def central(f, v, idx, eps=1e-6):
    old = v[idx]
    v[idx] = old + eps
    hi = f()
    v[idx] = old - eps
    lo = f()
    v[idx] = old
    return (hi - lo) / (2 * eps)


# K = 1, K < T and K > T; padded batches (a row of length 0 included)
CASES = [(1, 5, (5, 3, 0)), (3, 6, (6, 4, 1)), (8, 5, (5, 2, 0))]


@pytest.mark.parametrize("backend,case", list(itertools.product(["reference", "cpu"], CASES)))
def test_numpy_float64_gradients_equal_central_differences(backend, case):
    K, T, lengths = case
    rng = np.random.default_rng(K * 10 + T)
    C = 3
    crf, params = make(C, K, backend, rng, reg=0.05)
    x, lens, labels = batch(rng, len(lengths), T, C, lengths)
    nll, g = crf.nll(x, lens, labels=labels)
    assert g["scores"].dtype == np.float64 and g["transition"].dtype == np.float64

    def loss():
        return float(crf.nll(x, lens, labels=labels, grads=False).sum()) + crf.penalty()

    worst = 0.0
    for b, t, c in [(0, 0, 0), (0, T - 1, 2), (1, 1, 1), (len(lengths) - 1, 0, 1)]:
        fd = central(loss, x, (b, t, c))
        worst = max(worst, abs(fd - g["scores"][b, t, c]))
    for n in NAMES:
        v = params[n]
        for idx in [(0,) * v.ndim, tuple(s - 1 for s in v.shape)]:
            def loss_p():
                crf.set_param(n, v)
                return loss()
            fd = central(loss_p, v, idx)
            crf.set_param(n, v)
            worst = max(worst, abs(fd - g[n][idx]))
    assert worst < 1e-7, worst  # float32 rounding of the scores made this ~1e-2 at eps 1e-6


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_log_partition_gradients_equal_central_differences(backend):
    rng = np.random.default_rng(7)
    C, K, T = 3, 3, 6
    crf, params = make(C, K, backend, rng, reg=0.3)  # the penalty is not log Z's: left out
    x, lens, _ = batch(rng, 3, T, C, (6, 4, 0))
    lz, g = crf.log_partition(x, lens, grads=True, scale=0.5)
    np.testing.assert_array_equal(lz, crf.log_partition(x, lens))
    for b, t, c in [(0, 0, 0), (1, 3, 2), (2, 0, 1)]:
        fd = central(lambda: 0.5 * float(crf.log_partition(x, lens).sum()), x, (b, t, c))
        assert abs(fd - g["scores"][b, t, c]) < 1e-8
    for n in NAMES:
        v = params[n]
        idx = tuple(s - 1 for s in v.shape)

        def f():
            crf.set_param(n, v)
            return 0.5 * float(crf.log_partition(x, lens).sum())
        fd = central(f, v, idx)
        crf.set_param(n, v)
        assert abs(fd - g[n][idx]) < 1e-8, n
    # the scores' gradient of log Z is the frame marginals through the centering
    _, fr = crf.marginals(x, lens)
    for b, L in enumerate(lens[:2]):  # (row 2 has length 0)
        m = fr[b, :L]
        np.testing.assert_allclose(g["scores"][b, :L], 0.5 * (m - m.mean(0)), atol=1e-13)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_a_1e9_change_of_one_score_moves_log_z_by_the_marginal_times_1e9(backend):
    rng = np.random.default_rng(3)
    C, K, T = 3, 3, 6
    crf, _ = make(C, K, backend, rng)
    x, lens, _ = batch(rng, 1, T, C, (T,))
    _, g = crf.log_partition(x, lens, grads=True)  # d log Z / d x: the centered marginal
    base = crf.log_partition(x, lens)[0]
    for t, c in [(0, 0), (2, 1), (5, 2)]:
        y = x.copy()
        y[0, t, c] += 1e-9
        moved = crf.log_partition(y, lens)[0] - base
        assert moved != 0.0
        # log Z ~ 10 holds ~2e-15 of rounding: the step of ~1e-10 to ~1e-5 relative
        assert moved == pytest.approx(1e-9 * g["scores"][0, t, c], rel=1e-4, abs=1e-14), (t, c)
    # float32 scores are rounded: the same step leaves log Z where it was
    x32 = x.astype(np.float32)
    y32 = x32.copy()
    y32[0, 2, 1] += np.float32(1e-9)
    assert crf.log_partition(y32, lens)[0] == crf.log_partition(x32, lens)[0]


def test_lognormal_float64_gradient_equals_central_differences():
    rng = np.random.default_rng(5)
    C, K, T = 2, 4, 6
    crf, params = make(C, K, "cpu", rng, reg=0.1, duration_model="lognormal")
    x, lens, labels = batch(rng, 2, T, C, (6, 3))
    _, g = crf.nll(x, lens, labels=labels)
    v = params["duration_lognormal"]
    for idx in [(0, 0), (1, 1), (2, 0)]:
        def f():
            crf.set_param("duration_lognormal", v)
            return float(crf.nll(x, lens, labels=labels, grads=False).sum()) + crf.penalty()
        fd = central(f, v, idx)
        crf.set_param("duration_lognormal", v)
        assert abs(fd - g["duration_lognormal"][idx]) < 1e-7, idx


def test_float64_segments_gold_and_marginals_sum_to_one():
    rng = np.random.default_rng(9)
    C, K, T = 3, 3, 5
    crf, _ = make(C, K, "reference", rng)
    x, lens, labels = batch(rng, 2, T, C, (5, 3))
    segs = np.array([[[0, 2, 1], [2, 3, 0]], [[0, 3, 2], [0, 0, 0]]], dtype=np.int64)
    ns = np.array([2, 1], dtype=np.int64)
    lab = np.array([[1, 1, 0, 0, 0], [2, 2, 2, 0, 0]], dtype=np.int32)
    a, ga = crf.nll(x, lens, segments=segs, num_segments=ns)
    b, gb = crf.nll(x, lens, labels=lab)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
    for n in ga:
        np.testing.assert_allclose(ga[n], gb[n], rtol=0, atol=1e-13, err_msg=n)
    bo, fr = crf.marginals(x, lens)
    assert bo.dtype == fr.dtype == np.float64
    np.testing.assert_allclose(fr[0].sum(1), np.ones(T), atol=1e-14)
    _, _, sg = crf.marginals(x, lens, segments=True)
    np.testing.assert_allclose(sg.sum((2, 3))[0], bo[0, 1:], atol=1e-14)


def test_float64_parameters_read_back_unrounded():
    crf = timitseg.CRF(2, 2, backend="cpu")
    v = np.array([[0.1, 1 / 3], [np.pi, -np.e]])
    crf.set_param("transition", v)
    np.testing.assert_array_equal(crf.get_param("transition", dtype="float64"), v)
    np.testing.assert_array_equal(crf.get_param("transition"), v.astype(np.float32))


def test_cuda_refuses_float64_scores_with_one_line():
    if not timitseg.has_cuda():
        pytest.skip("this build has no CUDA backend")
    try:
        crf = timitseg.CRF(2, 2, backend="cuda")
    except timitseg.DeviceError as e:
        pytest.skip("no CUDA device: %s" % e)
    x = np.zeros((1, 3, 2))
    with pytest.raises(timitseg.DTypeError, match=r"^timitseg_crf_log_partition: scores are F64: the cuda backend "
                                                  r"computes in float32") as e:
        crf.log_partition(x, np.array([3], dtype=np.int32))
    assert "\n" not in str(e.value)
    with pytest.raises(timitseg.DTypeError, match="scores are F64"):
        crf.nll(x, np.array([3], dtype=np.int32), labels=np.zeros((1, 3), dtype=np.int32))


def _marginal_objective(crf, x, lens, onset, ups):
    """sum(g * marginals) of the three marginals (boundaries, frames, segments) by the forward calls."""
    bo, fr, sg = crf.marginals(x, lens, onset=onset, segments=True)
    return float((ups[0] * bo).sum() + (ups[1] * fr).sum() + (ups[2] * sg).sum())


@pytest.mark.parametrize("backend,case,model", [(b, c, m) for b in ("reference", "cpu") for c in CASES
                                                for m in ("table", "lognormal")])
def test_numpy_marginals_backward_equals_central_differences(backend, case, model):
    """CRF.marginals_backward (the gradient of the marginals, docs/crf.md) against central differences of
    CRF.marginals at eps 1e-6, w.r.t. every score, onset entry and parameter entry."""
    K, T, lengths = case
    rng = np.random.default_rng(K * 100 + T + (model == "lognormal"))
    C = 3
    crf, params = make(C, K, backend, rng, duration_model=model)
    x, lens, _ = batch(rng, len(lengths), T, C, lengths)
    B = len(lengths)
    onset = rng.normal(0, 0.5, (B, T, C))
    ups = [rng.normal(0, 1, (B, T + 1)), rng.normal(0, 1, (B, T, C)), rng.normal(0, 1, (B, T, K, C))]
    g = crf.marginals_backward(x, lens, *ups, onset=onset)
    assert g["scores"].dtype == np.float64 and g["transition"].dtype == np.float64

    def f():
        return _marginal_objective(crf, x, lens, onset, ups)

    worst = 0.0
    for arr, grad in ((x, g["scores"]), (onset, g["onset"])):
        for idx in np.ndindex(*arr.shape):
            worst = max(worst, abs(central(f, arr, idx) - grad[idx]))
    for n, v in params.items():
        for idx in np.ndindex(*v.shape):
            def f_p():
                crf.set_param(n, v)
                return f()
            fd = central(f_p, v, idx)
            crf.set_param(n, v)
            worst = max(worst, abs(fd - g[n][idx]))
    assert worst < 1e-7, worst
    assert not g["scores"][lens == 0].any()  # a row of length 0: no gradient


def test_numpy_marginals_backward_upstreams_add_and_absent_is_zero():
    rng = np.random.default_rng(5)
    crf, _ = make(3, 3, "cpu", rng)
    x, lens, _ = batch(rng, 2, 5, 3, (5, 3))
    ups = [rng.normal(0, 1, (2, 6)), rng.normal(0, 1, (2, 5, 3)), rng.normal(0, 1, (2, 5, 3, 3))]
    whole = crf.marginals_backward(x, lens, *ups)
    parts = [crf.marginals_backward(x, lens, *[u if i == j else None for j, u in enumerate(ups)]) for i in range(3)]
    for n in ("scores",) + NAMES:
        np.testing.assert_allclose(whole[n], sum(p[n] for p in parts), rtol=1e-12, atol=1e-14)
    zero = crf.marginals_backward(x, lens)
    for n in ("scores",) + NAMES:
        assert not zero[n].any()
    with pytest.raises(timitseg.ShapeError, match="grad_frames"):
        crf.marginals_backward(x, lens, grad_frames=np.zeros((2, 5, 4)))
