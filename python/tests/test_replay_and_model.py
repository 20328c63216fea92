"""The op equals `timitseg crf replay` on the same inputs to the last bit on
the same backend, and Model.load + decode equals the `decode` command's .PHN
(both with the binary of the same build)."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import safetensors_io
import timitseg
from timitseg.checkpoint import read_safetensors


def run(binary, *args):
    r = subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    return r.stdout


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("with_onset", [False, True])
def test_op_equals_crf_replay_bitwise(binary, tmp_path, backend, with_onset):
    rng = np.random.default_rng(7)
    B, T, C, K = 3, 12, 4, 5
    lengths = np.array([12, 7, 1], dtype=np.int32)
    x = rng.normal(0, 1, (B, T, C))
    cum = np.zeros((B, T + 1, C), dtype=np.float32)
    for b in range(B):
        L = lengths[b]
        xc = x[b, :L] - x[b, :L].mean(axis=0)
        cum[b, 1:L + 1] = np.cumsum(xc, axis=0)
    params = {"transition": rng.normal(0, .5, (C, C)), "duration_bias": rng.normal(0, .5, (K, C)),
              "start": rng.normal(0, .5, C), "end": rng.normal(0, .5, C)}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    labels = rng.integers(0, C, (B, T)).astype(np.int32)
    inputs = dict(cum_scores=cum, lengths=lengths, labels=labels, **params)
    onset = rng.normal(0, 1, (B, T, C)).astype(np.float32) if with_onset else None
    if with_onset:
        inputs["onset"] = onset
    safetensors_io.write(tmp_path / "in.safetensors", inputs)
    run(binary, "crf", "replay", str(tmp_path / "in.safetensors"), "--backend", backend, "--threads", "1",
        "--out", str(tmp_path / "out.safetensors"))
    want = read_safetensors(str(tmp_path / "out.safetensors"))

    crf = timitseg.CRF(C, K, backend=backend, threads=1)
    for k, v in params.items():
        crf.set_param(k, v)
    nll, g = crf.nll(cum, lengths, labels=labels, onset=onset, cumulative=True)
    lz = crf.log_partition(cum, lengths, onset=onset, cumulative=True)
    vs, segs = crf.viterbi(cum, lengths, onset=onset, cumulative=True)
    bo, _ = crf.marginals(cum, lengths, onset=onset, cumulative=True, frames=False)
    np.testing.assert_array_equal(nll, want["nll"])
    np.testing.assert_array_equal(lz, want["log_partition"])
    np.testing.assert_array_equal(vs, want["viterbi_score"])
    np.testing.assert_array_equal(bo, want["boundary_posteriors"])
    rows = np.concatenate([np.hstack([np.full((len(s), 1), b), s]) for b, s in enumerate(segs)])
    np.testing.assert_array_equal(rows, want["viterbi_segments"])
    for b in range(B):  # rows 1..length of grad cum_scores (row 0 and padding are the backend's own)
        np.testing.assert_array_equal(g["scores"][b, 1:lengths[b] + 1], want["grad_cum_scores"][b, 1:lengths[b] + 1])
    for k in params:
        np.testing.assert_array_equal(g[k], want["grad_" + k], err_msg=k)
    if with_onset:
        np.testing.assert_array_equal(g["onset"], want["grad_onset"])


@pytest.fixture(scope="module")
def checkpoint(binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    run(binary, "synth", "--out", str(d / "synth"), "--speakers", "4", "--utterances-per-speaker", "3", "--seed", "5")
    run(binary, "prepare", "--timit", str(d / "synth"), "--out", str(d / "work"))
    (d / "tiny.yaml").write_text(
        "data:\n  workdir: %s\nmodel:\n  hidden_dim: 16\n  num_layers: 1\ncrf:\n  max_duration: 8\n  backend: cpu\n"
        "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n  device: cpu\n  run_dir: %s\n"
        % (d / "work", d / "run"))
    run(binary, "train", "--config", str(d / "tiny.yaml"))
    wavs = sorted(str(p) for p in (d / "synth").rglob("*") if p.suffix.lower() == ".wav")
    return d, str(d / "run" / "checkpoints" / "best.safetensors"), wavs


def read_phn(path):
    return [(int(b), int(e), n) for b, e, n in (line.split() for line in open(path) if line.strip())]


def test_model_decode_equals_the_decode_command(binary, checkpoint):
    d, ckpt, wavs = checkpoint
    run(binary, "decode", "--checkpoint", ckpt, "--device", "cpu", "--out", str(d / "dec"), *wavs[:3])
    m = timitseg.Model.load(ckpt, device="cpu")
    assert m.sample_rate == 16000 and len(m.labels) == 39
    ps = m.phone_set  # the checkpoint's inventory: TIMIT's shipped 39 set (docs/phone_sets.md)
    assert ps["name"] == "timit39" and ps["phones"] == m.labels and ps["scoring_labels"] == m.labels
    assert ps["silence"] == ["sil"] and ps["map"]["h#"] == "sil" and len(ps["sha256"]) == 64
    for w in wavs[:3]:
        want = read_phn(str(d / "dec" / (os.path.splitext(os.path.basename(w))[0] + ".PHN")))
        assert want and [tuple(s) for s in m.decode(w)] == want
    phones = [n for _, _, n in read_phn(os.path.splitext(wavs[0])[0] + ".PHN")]
    al = m.align(wavs[0], phones)
    assert al[0].begin == 0 and all(a.end == b.begin for a, b in zip(al, al[1:]))
    with pytest.raises(timitseg.TimitsegError, match="nope.wav"):
        m.decode(str(d / "nope.wav"))
    with pytest.raises(timitseg.TimitsegError, match="phone 'zz'"):
        m.align(wavs[0], "h# zz h#")
    with pytest.raises(timitseg.TimitsegError, match="missing.safetensors"):
        timitseg.Model.load(str(d / "missing.safetensors"))


def test_model_set_shifts_moves_alignments_as_the_align_command(binary, checkpoint):
    """Model.set_shifts(path) moves each boundary of align() by its phone's shift in samples, as
    `timitseg align --shifts` writes it; a bad file raises naming it and keeps the shifts; None removes them."""
    d, ckpt, wavs = checkpoint
    m = timitseg.Model.load(ckpt, device="cpu")
    phones = [n for _, _, n in read_phn(os.path.splitext(wavs[0])[0] + ".PHN")]
    plain = [tuple(x) for x in m.align(wavs[0], phones)]
    names = [n for _, _, n in plain]
    shifted = names[len(names) // 2]  # a phone of this utterance, by its label-set name
    sh = d / "shifts.json"
    sh.write_text(json.dumps({"format": "timitseg-boundary-shifts", "version": 1, "phone_set": m.phone_set["name"],
                              "shift_ms": {shifted: 2.5}}))
    m.set_shifts(str(sh))
    moved = [tuple(x) for x in m.align(wavs[0], phones)]
    want = [b for b, _, _ in plain]
    for i in range(1, len(want)):  # 2.5 ms = 40 samples earlier, each phone kept >= 1 sample
        if names[i] == shifted:
            want[i] = max(want[i] - 40, want[i - 1] + 1)
    assert [b for b, _, _ in moved] == want and moved != plain
    assert [e for _, e, _ in moved][:-1] == want[1:] and moved[-1][1] == plain[-1][1]
    lst = d / "shift_list.txt"
    lst.write_text(wavs[0] + " " + " ".join(phones) + "\n")
    run(binary, "align", "--checkpoint", ckpt, "--device", "cpu", "--phones", str(lst), "--shifts", str(sh),
        "--out", str(d / "al_shift"))
    assert read_phn(str(d / "al_shift" / (os.path.splitext(os.path.basename(wavs[0]))[0] + ".PHN"))) == moved
    bad = d / "shifts_bad.json"
    bad.write_text(json.dumps({"format": "timitseg-boundary-shifts", "version": 1, "phone_set": "other",
                               "shift_ms": {}}))
    with pytest.raises(timitseg.TimitsegError, match="shifts_bad.json: fitted for phone set 'other'"):
        m.set_shifts(str(bad))
    assert [tuple(x) for x in m.align(wavs[0], phones)] == moved
    m.set_shifts(None)
    assert [tuple(x) for x in m.align(wavs[0], phones)] == plain


def _phones_of_distinct_files(wavs):
    """{wav: the phone names of its .PHN} for the files of distinct names (align names its outputs by them)."""
    rows, stems = {}, set()
    for w in wavs:
        stem = os.path.splitext(os.path.basename(w))[0]
        if stem not in stems:
            stems.add(stem)
            rows[w] = [n for _, _, n in read_phn(os.path.splitext(w)[0] + ".PHN")]
    return rows


def test_model_set_silence_edges_aligns_as_the_align_command(binary, checkpoint):
    """Model.set_silence_edges("on", margin_db, max_move_ms) gives align() the boundaries `timitseg align
    --silence-edges on` writes; the checkpoint trained on times gets none by default ("auto"); a bad value raises
    and keeps the setting; "off" and "auto" give the plain alignment back."""
    d, ckpt, wavs = checkpoint
    m = timitseg.Model.load(ckpt, device="cpu")
    lst = d / "edges_list.txt"
    rows = _phones_of_distinct_files(wavs)
    wavs = list(rows)
    lst.write_text("".join(w + " " + " ".join(p) + "\n" for w, p in rows.items()))
    run(binary, "align", "--checkpoint", ckpt, "--device", "cpu", "--phones", str(lst), "--silence-edges", "on",
        "--silence-margin-db", "10", "--silence-max-move-ms", "30", "--silence-min-quiet", "25",
        "--out", str(d / "al_edges"))
    plain = {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()}
    m.set_silence_edges("on", margin_db=10, max_move_ms=30, min_quiet_pct=25)
    edged = {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()}
    for w in wavs:
        assert read_phn(str(d / "al_edges" / (os.path.splitext(os.path.basename(w))[0] + ".PHN"))) == edged[w]
    assert any(edged[w] != plain[w] for w in wavs)  # some silence edge moved
    with pytest.raises(ValueError, match="mode must be"):
        m.set_silence_edges("sometimes")
    with pytest.raises(timitseg.TimitsegError, match="--silence-margin-db must be a number > 0"):
        m.set_silence_edges("on", margin_db=0)
    with pytest.raises(timitseg.TimitsegError, match="--silence-min-quiet must be a percentage"):
        m.set_silence_edges("on", min_quiet_pct=0)
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == edged  # kept
    m.set_silence_edges("off")
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == plain
    m.set_silence_edges("auto")  # trained on times: off
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == plain


def test_model_set_boundaries_aligns_as_the_align_command(binary, checkpoint):
    """A new Model ("auto") aligns as `timitseg align` does by default, with the posteriors' boundaries;
    Model.set_boundaries("viterbi") gives the boundaries `timitseg align --boundaries viterbi` writes (some of them
    not the posteriors'); a bad mode raises and keeps the setting; "posterior" and "auto" give the default back."""
    d, ckpt, wavs = checkpoint
    m = timitseg.Model.load(ckpt, device="cpu")
    lst = d / "boundaries_list.txt"
    rows = _phones_of_distinct_files(wavs)
    lst.write_text("".join(w + " " + " ".join(p) + "\n" for w, p in rows.items()))
    for mode in ("viterbi", "auto"):
        run(binary, "align", "--checkpoint", ckpt, "--device", "cpu", "--phones", str(lst), "--boundaries", mode,
            "--out", str(d / ("al_boundaries_" + mode)))
    default = {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()}
    m.set_boundaries("viterbi")
    viterbi = {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()}
    for w in rows:
        stem = os.path.splitext(os.path.basename(w))[0] + ".PHN"
        assert read_phn(str(d / "al_boundaries_viterbi" / stem)) == viterbi[w]
        assert read_phn(str(d / "al_boundaries_auto" / stem)) == default[w]
        assert [x[2] for x in viterbi[w]] == [x[2] for x in default[w]]  # the same phones
    assert any(viterbi[w] != default[w] for w in rows)  # some boundary moved
    with pytest.raises(ValueError, match="mode must be"):
        m.set_boundaries("sometimes")
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == viterbi  # kept
    m.set_boundaries("posterior")
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == default
    run(binary, "align", "--checkpoint", ckpt, "--device", "cpu", "--phones", str(lst), "--boundaries",
        "posterior-frames", "--out", str(d / "al_boundaries_frames"))
    m.set_boundaries("posterior-frames")  # the posteriors' frames: each boundary within half a frame of the default's
    for w, p in rows.items():
        on_frames = [tuple(x) for x in m.align(w, p)]
        stem = os.path.splitext(os.path.basename(w))[0] + ".PHN"
        assert read_phn(str(d / "al_boundaries_frames" / stem)) == on_frames
        assert [x[2] for x in on_frames] == [x[2] for x in default[w]]
        assert all(abs(a[0] - b[0]) <= 81 for a, b in zip(on_frames, default[w]))
    m.set_boundaries("auto")
    assert {w: [tuple(x) for x in m.align(w, p)] for w, p in rows.items()} == default


def test_set_silence_edges_defaults_are_the_commands(binary):
    """Model.set_silence_edges's default margin, bound and quiet share are `timitseg align --help`'s."""
    import inspect
    import re
    import subprocess
    text = subprocess.run([binary, "align", "--help"], capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    got = {p.name: p.default for p in inspect.signature(timitseg.Model.set_silence_edges).parameters.values()}
    for flag, arg in (("--silence-margin-db", "margin_db"), ("--silence-max-move-ms", "max_move_ms"),
                      ("--silence-min-quiet", "min_quiet_pct")):
        m = re.search(re.escape(flag) + r" FLOAT=([0-9.]+)", flat)
        assert m, flag + " and its default not in align --help"
        assert float(m.group(1)) == got[arg], flag


def read_csv_tiers(path):
    """{tier: [(start_sample, end_sample, label)]} of the align command's .csv."""
    import csv
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["tier"], []).append((int(row["start_sample"]), int(row["end_sample"]), row["label"]))
    return out


def test_model_align_words_equals_the_align_command(binary, checkpoint):
    """Model.align(audio, words=..., dictionary=...) gives the phones and the words of `timitseg align
    --words --dict` (its .PHN and the word tier of its .csv), with the command's options."""
    d, ckpt, wavs = checkpoint
    dic = d / "dict.txt"
    dic.write_text("; a TIMIT-format test dictionary\nhello  /hh ah l ow/\nworld  /w er1 l d/\nsee  /s iy/\n")
    words = "hello world see hello"
    m = timitseg.Model.load(ckpt, device="cpu")
    cases = [([], {}), (["--word-silence", "--no-closures"], {"word_silence": True, "closures": False}),
             (["--obligatory-silence"], {"obligatory_silence": True})]
    for k, (flags, kw) in enumerate(cases):
        wav = wavs[k]
        lst = d / ("words%d.txt" % k)
        lst.write_text("%s %s\n" % (wav, words))
        out = d / ("al%d" % k)
        run(binary, "align", "--checkpoint", ckpt, "--device", "cpu", "--words", str(lst), "--dict", str(dic),
            "--format", "phn,csv", "--out", str(out), *flags)
        stem = os.path.splitext(os.path.basename(wav))[0]
        want_phones = read_phn(str(out / (stem + ".PHN")))
        want_words = read_csv_tiers(str(out / (stem + ".csv")))["word"]
        got = m.align(wav, words=words, dictionary=str(dic), **kw)
        assert [tuple(s) for s in got.phones] == want_phones
        assert [tuple(s) for s in got.words] == want_words
        assert [w.label for w in got.words] == words.split()
        assert got.words[0].begin >= got.phones[0].begin and got.words[-1].end <= got.phones[-1].end
        labels = " %s " % " ".join(s.label for s in got.phones)  # 39-set names: a closure folds into sil
        assert (" l sil d " in labels) == (k != 1) and (" l d " in labels) == (k == 1)  # world's d
        if k == 2:  # the edge silences take a frame each
            assert labels.startswith(" sil ") and labels.endswith(" sil ") and got.words[0].begin > 0
    with pytest.raises(timitseg.TimitsegError, match="word 'nosuchword' is not in the dictionary"):
        m.align(wavs[0], words="hello nosuchword", dictionary=str(dic))
    with pytest.raises(timitseg.TimitsegError, match="missing.txt"):
        m.align(wavs[0], words="hello", dictionary=str(d / "missing.txt"))
    with pytest.raises(ValueError, match="exactly one of phones and words"):
        m.align(wavs[0])


def _edited_checkpoint(src, dst, key, value):
    """A copy of checkpoint src with one metadata value replaced (the tensors and their checksum kept)."""
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header["__metadata__"][key] = value
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + raw[8 + n:])


def test_model_load_reads_device_and_backend_into_the_enum_fields(checkpoint):
    """Model.load passes device and backend as timitseg_model_params' enum fields (API version 2); a word
    they do not know reaches the library as text and is refused there in one line naming the valid ones."""
    d, ckpt, wavs = checkpoint
    assert timitseg.API_VERSION == 3
    with pytest.raises(timitseg.TimitsegError, match="device must be cpu, cuda or auto, got 'gpu'"):
        timitseg.Model.load(ckpt, device="gpu")
    with pytest.raises(timitseg.TimitsegError, match="unknown crf backend 'fast'"):
        timitseg.Model.load(ckpt, device="cpu", backend="fast")
    want = timitseg.Model.load(ckpt, device="cpu").decode(wavs[0])
    assert want and timitseg.Model.load(ckpt, device="cpu", backend="auto").decode(wavs[0]) == want


def test_model_load_refuses_feature_options_its_model_was_not_trained_on(checkpoint, tmp_path):
    """Model.load + decode compute features with the checkpoint's own options: options that do not give
    the model's input dimension (edited metadata) are refused at load, in one line naming both."""
    d, ckpt, wavs = checkpoint
    bad = str(tmp_path / "edited.safetensors")
    _edited_checkpoint(ckpt, bad, "feature_options", json.dumps({"type": "fbank", "num_mel_bins": 40}))
    with pytest.raises(timitseg.TimitsegError) as e:
        timitseg.Model.load(bad, device="cpu").decode(wavs[0])
    assert str(e.value) == ("timitseg_model_load: %s: the checkpoint's feature options give fbank features (40 dims; "
                            "num_mel_bins 40), its model takes 39 dims (metadata feature_options and dims disagree): "
                            "the file was not written by `timitseg train`; use another checkpoint" % bad)


def _stderr_of(code, *args):
    # the package these tests imported (python/, or the installed one), with the same library
    here = os.path.dirname(os.path.dirname(os.path.abspath(timitseg.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    r = subprocess.run([sys.executable, "-c", code] + list(args), capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "", r.stdout  # a library never writes on stdout
    return r.stderr


_ALIGN = ("import sys, timitseg\n"
          "m = timitseg.Model.load(sys.argv[1], device='cpu'%s)\n"
          "m.decode(sys.argv[2])\n"
          "m.align(sys.argv[2], open(sys.argv[3]).read().split()[2::3])\n"
          "try:\n"
          "    m.align(sys.argv[2], 'h# zz h#')\n"
          "except timitseg.TimitsegError:\n"
          "    pass\n")


def test_model_is_quiet_unless_verbose(checkpoint):
    """Model writes nothing on stderr by default (a library); verbose=True gives the commands' log lines."""
    d, ckpt, wavs = checkpoint
    phn = os.path.splitext(wavs[0])[0] + ".PHN"
    assert _stderr_of(_ALIGN % "", ckpt, wavs[0], phn) == ""
    loud = _stderr_of(_ALIGN % ", verbose=True", ckpt, wavs[0], phn)
    assert "aligned 1 utterance(s)" in loud, loud
    warn = _stderr_of(_ALIGN % ", verbose='warn'", ckpt, wavs[0], phn)
    assert "[info]" not in warn, warn
    with pytest.raises(timitseg.TimitsegError, match="level must be trace, debug, info, warn, error or off"):
        timitseg.set_log_level("loud")


def test_messages_name_the_python_arguments():
    """The library's hints name backend="cpu" / device="cpu", not the commands' flags."""
    from timitseg._lib import python_words
    assert python_words("no NVIDIA GPU or driver on this machine; use --backend cpu or reference") == \
        'no NVIDIA GPU or driver on this machine; use backend="cpu" or backend="reference"'
    assert python_words("x; run on the CPU with --device cpu, or --device auto (the GPU when one is present)") == \
        'x; run on the CPU with device="cpu", or device="auto" (the GPU when one is present)'


@pytest.mark.skipif(not timitseg.has_cuda() or bool(shutil.which("nvidia-smi")),
                    reason="needs a CUDA build of libtimitseg on a machine without a GPU")
def test_device_error_names_the_backend_argument():
    with pytest.raises(timitseg.DeviceError) as e:
        timitseg.CRF(3, 2, backend="cuda")
    assert 'backend="cpu"' in str(e.value) and "--backend" not in str(e.value), str(e.value)
