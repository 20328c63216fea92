"""examples/ctc_align.py's CTC forced alignment against brute force: on small
posterior matrices, the Viterbi path equals the best of every CTC path that
reads the phone sequence (enumerated), its score that path's summed
log-posteriors; the phone spans follow the documented rule."""
import itertools
import os
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
ctc_align = pytest.importorskip("ctc_align")  # imports train_bilstm, which needs the library


def collapse(labels, blank):
    """CTC's many-to-one map: merge repeats, then drop blanks."""
    out = []
    for i, c in enumerate(labels):
        if c != blank and (i == 0 or labels[i - 1] != c):
            out.append(c)
    return out


def brute_force(logp, phones, blank):
    """The best frame-label sequence (over all (C+1)^T) that collapses to `phones`."""
    T, K = logp.shape
    best, arg = -np.inf, None
    for labels in itertools.product(range(K), repeat=T):
        if collapse(labels, blank) != list(phones):
            continue
        s = sum(logp[t, c] for t, c in enumerate(labels))
        if s > best:
            best, arg = s, labels
    return best, arg


def path_labels(path, phones, blank):
    return [blank if s % 2 == 0 else phones[(s - 1) // 2] for s in path]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("phones", [[0], [0, 1], [1, 1], [0, 1, 0], [2, 2, 1]])
def test_forced_alignment_is_the_best_ctc_path(seed, phones):
    rng = np.random.default_rng(seed)
    C, T = 3, 6  # 3 phones + blank (index 3), 4^6 label sequences
    blank = C
    logp = np.log(rng.dirichlet(np.ones(C + 1), size=T))
    path, score = ctc_align.ctc_forced_align(logp, phones, blank)
    best, arg = brute_force(logp, phones, blank)
    assert score == pytest.approx(best, abs=1e-12)
    labels = path_labels(path, phones, blank)
    assert collapse(labels, blank) == phones
    assert sum(logp[t, c] for t, c in enumerate(labels)) == pytest.approx(best, abs=1e-12)
    assert labels == list(arg)  # random posteriors: the best path is unique


def test_known_path_and_spans():
    # frames 0-1 blank, 2 'a', 3 blank, 4-5 'b', 6 blank: a peaked posterior matrix with that best path
    blank, truth = 2, [2, 2, 0, 2, 1, 1, 2]
    logp = np.full((7, 3), np.log(0.05))
    for t, c in enumerate(truth):
        logp[t, c] = np.log(0.9)
    path, _ = ctc_align.ctc_forced_align(logp, [0, 1], blank)
    assert path_labels(path, [0, 1], blank) == truth
    # phone 0 from frame 0 (the first phone) to phone 1's first frame 4; phone 1 from 4 to T = 7
    assert ctc_align.path_to_spans(path, 2) == [(0, 4), (4, 7)]


def test_repeated_phone_needs_a_blank_and_too_few_frames_fail():
    blank = 1
    logp = np.log(np.full((3, 2), 0.5))
    path, _ = ctc_align.ctc_forced_align(logp, [0, 0], blank)
    assert path_labels(path, [0, 0], blank) == [0, 1, 0]  # the only path: a blank between the two
    with pytest.raises(ValueError, match="no CTC path"):
        ctc_align.ctc_forced_align(logp[:2], [0, 0], blank)


def test_boundary_seconds_is_halfway_between_frame_centres():
    fo = {"sample_rate": 16000, "frame_shift_ms": 10.0, "frame_length_ms": 25.0, "snip_edges": True}
    # centres at t*160 + 200: boundary f at (f-1)*160 + 200 + 80 = f*160 + 120
    assert ctc_align.boundary_seconds(0, fo) == 0.0
    assert ctc_align.boundary_seconds(1, fo) == pytest.approx(280 / 16000)
    assert ctc_align.boundary_seconds(10, fo) == pytest.approx(1720 / 16000)
