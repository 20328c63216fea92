#!/usr/bin/env python3
"""PocketSphinx 5 forced alignment of a TIMIT-layout corpus split, as spans JSONL, and its score.

A ready aligner users can install, to compare with `timitseg evaluate --align`.
This program installs nothing: `align` needs a Python with PocketSphinx 5, e.g.

    python3 -m venv /tmp/ps_venv && /tmp/ps_venv/bin/pip install pocketsphinx

(`phn2spans` and `score` need the standard library only.)

Subcommands:

  align --corpus DIR --out SPANS.jsonl [--transcript phn|words] [--labels timit|espeak-en] [--limit N]
      Every *.WAV (NIST SPHERE or RIFF, 16 kHz mono 16-bit) under DIR (e.g. C/TEST of
      `timitseg synth`), aligned by PocketSphinx 5 with its default en-us acoustic model:
      the first pass aligns the words (Decoder.set_align_text), the second the phones
      (Decoder.set_alignment / get_alignment). The transcript:
        phn   (default) the utterance's .PHN phone sequence (times ignored), as
              `timitseg evaluate --align` and `timitseg align` use it: TIMIT phones as
              ARPAbet (a closure with its release is one stop, dx -> T, ...), one
              pseudo-word per stretch between pauses, in a dictionary added to the
              decoder's (pauses are PocketSphinx's optional silence between words);
              (--labels espeak-en: the IPA labels of an espeak-ng en-us corpus, mapped to
              TIMIT phones first, an r-coloured vowel to its vowel);
        words the .WRD words (else the .TXT sentence), pronounced by the model's CMUdict.
      Writes one JSON line per utterance, in sorted path order:
        {"utterance_id": ID, "phones": [[start_seconds, end_seconds, label], ...]}
      ID is the audio path under the corpus root without extension, with '/'
      in lower case (e.g. test/dr7/fwhs0/si1112: a `timitseg prepare --timit` WORKDIR's
      id when DIR is ROOT/TEST and --id-root ROOT, the default); labels are TIMIT names (arpabet_to_timit of
      data/transcripts.h; SIL -> h# at the edges, pau inside). PocketSphinx's times are
      whole 10 ms frames. Utterances it cannot align are listed on stderr and left out.

  phn2spans --dir DIR --out SPANS.jsonl [--rate 16000]
      The .PHN files under DIR (e.g. the output of `timitseg align --timit`) as spans
      JSONL, with the same ids, so that both aligners are scored by one rule.

  score --spans SPANS.jsonl (--corpus DIR [--id-root ROOT] | --workdir W --split S) [--json OUT.json]
        [--reference timit|espeak-en] [--keep-closures]
      Boundary errors against the .PHN beside each audio file (sample-accurate; with
      --workdir, the utterances of that prepared split, e.g. TIMIT's test without SA), the
      rule of eval/align_metrics.cpp: both sequences are folded to TIMIT's 39 phones
      (data/phone_sets/timit39.yaml), q merged into the phone before it, consecutive
      equal labels merged, a gap given to the phone before it; the k-th inner boundary
      of one is paired with the k-th of the other and |hyp - ref| is in ms. Fraction
      within 10/20/25/50 ms, mean and median. One change, since ARPAbet has no
      closures: in the reference a closure followed by its release (bcl b, tcl ch, ...)
      is one phone, the release's (--keep-closures: not, which is evaluate --align's sequence
      exactly). An aligner that places closures as sil (`timitseg align`'s 39 labels: its phones
      are the reference's with closures) has its closures joined to their releases the same way
      (join_closures_as_reference), so both aligners are scored on one set of boundaries. When the folded sequences
      still differ (PocketSphinx may add a silence between words, or pronounce a word
      otherwise), the boundaries are paired along a minimum edit alignment of the two
      label sequences: a boundary is scored only when the phones on both of its sides
      are matched to equal labels in the other sequence. The counts of utterances with
      equal sequences, with differing ones, and of boundaries scored and not are reported.
      --reference espeak-en reads the IPA labels of an espeak-ng en-us corpus, each mapped to
      its nearest TIMIT phone by sound (ESPEAK_EN_TO_TIMIT below) before that rule.
"""
from __future__ import annotations

import argparse
import array
import json
import os
import sys
import tempfile
import time
import wave
from pathlib import Path

ARPABET = {"aa", "ae", "ah", "ao", "aw", "ay", "b", "ch", "d", "dh", "eh", "er", "ey", "f", "g", "hh", "ih", "iy",
           "jh", "k", "l", "m", "n", "ng", "ow", "oy", "p", "r", "s", "sh", "t", "th", "uh", "uw", "v", "w", "y", "z",
           "zh"}
VOWELS = {"aa", "ae", "ah", "ao", "aw", "ay", "eh", "er", "ey", "ih", "iy", "ow", "oy", "uh", "uw"}
# TIMIT 61 -> ARPAbet (the pseudo-word pronunciations of --transcript phn); closures handled apart.
TIMIT_TO_ARPABET = {"ax": "ah", "ax-h": "ah", "axr": "er", "ix": "ih", "ux": "uw", "dx": "t", "nx": "n", "el": "l",
                    "em": "m", "en": "n", "eng": "ng", "hv": "hh"}
CLOSURE_RELEASES = {"bcl": {"b"}, "dcl": {"d", "jh"}, "gcl": {"g"}, "pcl": {"p"}, "tcl": {"t", "ch"}, "kcl": {"k"}}
CLOSURE_STOP = {"bcl": "b", "dcl": "d", "gcl": "g", "pcl": "p", "tcl": "t", "kcl": "k"}
PAUSES = {"h#", "pau", "epi"}
# timit39.yaml's map (61 -> 39), for the phones that change.
FOLD39 = {"ao": "aa", "ax": "ah", "ax-h": "ah", "axr": "er", "bcl": "sil", "dcl": "sil", "el": "l", "em": "m",
          "en": "n", "eng": "ng", "epi": "sil", "gcl": "sil", "h#": "sil", "hv": "hh", "ix": "ih", "kcl": "sil",
          "nx": "n", "pau": "sil", "pcl": "sil", "tcl": "sil", "ux": "uw", "zh": "sh"}
TOLERANCES_MS = (10, 20, 25, 50)
# `timitseg synth --voice espeak --language en-us`'s IPA labels -> TIMIT phones, for --reference espeak-en:
# the nearest TIMIT phone by sound; an r-coloured vowel (ɑːɹ, ɔːɹ, ...) is its vowel (PocketSphinx's
# vowel + R then differs from the reference, and the boundaries around it are not paired).
ESPEAK_EN_TO_TIMIT = {
    "sil": "h#", "s": "s", "n": "n", "t": "t", "l": "l", "k": "k", "ɹ": "r", "z": "z", "ɪ": "ih", "d": "d",
    "ɚ": "axr", "iː": "iy", "i": "iy", "ɛ": "eh", "b": "b", "w": "w", "oʊ": "ow", "oː": "ow", "eɪ": "ey", "æ": "ae",
    "m": "m", "ŋ": "ng", "p": "p", "aɪ": "ay", "tʃ": "ch", "ʌ": "ah", "ə": "ax", "ɐ": "ax", "v": "v", "ð": "dh",
    "h": "hh", "ɔː": "ao", "ɔ": "ao", "j": "y", "f": "f", "aʊ": "aw", "ɡ": "g", "uː": "uw", "u": "uw", "ɜː": "er",
    "θ": "th", "ɾ": "dx", "ɔɪ": "oy", "dʒ": "jh", "ʊ": "uh", "ᵻ": "ix", "ʒ": "zh", "ʃ": "sh", "əl": "el",
    "ɑː": "aa", "ɑ": "aa", "ɑːɹ": "aa", "ɔːɹ": "ao", "oːɹ": "ao", "ɛɹ": "eh", "ɪɹ": "ih", "ʊɹ": "uh", "aɪɚ": "ay",
    "aɪə": "ay", "iə": "iy", "eə": "eh", "ʔ": "q", "n̩": "en", "x": "hh", "r": "r", "ɬ": "l", "e": "eh", "o": "ow",
    "a": "ae", "ɒ": "aa", "ʊə": "uh", "ɜ": "er"}


def fail(msg: str) -> None:
    raise SystemExit(f"error: {msg}")


def arpabet_to_timit(symbol: str) -> str:
    """data/transcripts.h's arpabet_to_timit: '' for a symbol that is not ARPAbet."""
    s = symbol.lower()
    stress = s[-1] if s and s[-1] in "012" else ""
    if stress:
        s = s[:-1]
    if s not in ARPABET:
        return ""
    if stress and s not in VOWELS:  # stress digits go on vowels only
        return ""
    if s == "ah" and stress == "0":
        return "ax"
    if s == "er" and stress == "0":
        return "axr"
    return s


def pcm16(data: bytes, little_endian: bool) -> array.array:
    a = array.array("h")
    a.frombytes(data[: len(data) // 2 * 2])
    if little_endian != (sys.byteorder == "little"):
        a.byteswap()
    return a


def read_audio(path: Path) -> tuple[array.array, int]:
    """16-bit mono samples and rate of a NIST SPHERE or RIFF file."""
    data = path.read_bytes()
    if data.startswith(b"NIST_1A"):
        head_len = int(data[8:16].decode().strip())
        fields = {}
        for line in data[16:head_len].decode("ascii", "replace").splitlines():
            t = line.split()
            if len(t) >= 3:
                fields[t[0]] = t[2]
        if fields.get("channel_count", "1") != "1" or fields.get("sample_n_bytes", "2") != "2":
            fail(f"{path}: only mono 16-bit SPHERE is read")
        if fields.get("sample_coding", "pcm") != "pcm":
            fail(f"{path}: sample_coding {fields['sample_coding']} (only pcm is read)")
        little = fields.get("sample_byte_format", "01") == "01"
        return pcm16(data[head_len:], little), int(fields["sample_rate"])
    with wave.open(str(path), "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            fail(f"{path}: only mono 16-bit RIFF WAV is read")
        return pcm16(w.readframes(w.getnframes()), True), w.getframerate()


def read_phn(path: Path) -> list[tuple[int, int, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        t = line.split()
        if not t:
            continue
        if len(t) != 3:
            fail(f"{path}:{n}: expected 'start end phone', got {line!r}")
        out.append((int(t[0]), int(t[1]), t[2]))
    return out


def audio_files(root: Path) -> list[Path]:
    files = sorted(p for p in root.rglob("*") if p.suffix in (".WAV", ".wav") and p.is_file())
    if not files:
        fail(f"{root}: no *.WAV / *.wav under it")
    return files


def utt_id(audio: Path, id_root: Path) -> str:
    """The path under ID_ROOT without extension, lower case: `timitseg prepare --timit`'s id."""
    return audio.relative_to(id_root).with_suffix("").as_posix().lower()


def sibling(audio: Path, ext: str) -> Path | None:
    for e in (ext.upper(), ext.lower()):
        p = audio.with_suffix(e)
        if p.is_file():
            return p
    return None


# ---- transcripts --------------------------------------------------------------------------------------------


def phn_pseudo_words(phn: list[tuple[int, int, str]]) -> list[list[str]]:
    """The .PHN phone sequence as ARPAbet, one word per stretch between pauses."""
    words: list[list[str]] = [[]]
    labels = [p[2] for p in phn]
    for i, lab in enumerate(labels):
        if lab in PAUSES:
            if words[-1]:
                words.append([])
            continue
        if lab == "q":
            continue
        if lab in CLOSURE_STOP:
            nxt = labels[i + 1] if i + 1 < len(labels) else ""
            if nxt in CLOSURE_RELEASES[lab]:
                continue  # the release carries the stop
            words[-1].append(CLOSURE_STOP[lab])
            continue
        a = TIMIT_TO_ARPABET.get(lab, lab)
        if a not in ARPABET:
            fail(f"phone {lab!r} has no ARPAbet counterpart")
        words[-1].append(a)
    return [w for w in words if w]


def word_transcript(audio: Path) -> list[str]:
    wrd = sibling(audio, ".WRD")
    if wrd is not None:
        return [line.split()[2].lower() for line in wrd.read_text().splitlines() if len(line.split()) >= 3]
    txt = sibling(audio, ".TXT")
    if txt is not None:
        t = txt.read_text().split()[2:]
        return ["".join(c for c in w.lower() if c.isalnum() or c == "'") for w in t if any(c.isalnum() for c in w)]
    fail(f"{audio}: no .WRD or .TXT beside it (--transcript words)")
    return []


# ---- align --------------------------------------------------------------------------------------------------


def decode_phones(decoder, words: list[str], pcm: bytes) -> list[tuple[int, int, str]]:
    """(start frame, end frame, ARPAbet phone) of the second-pass alignment of WORDS."""
    decoder.set_align_text(" ".join(words))
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    decoder.set_alignment()
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    out = []
    for word in decoder.get_alignment():
        for phone in word:
            out.append((phone.start, phone.start + phone.duration, phone.name))
    return out


def to_timit_spans(phones: list[tuple[int, int, str]], frame_s: float, n_samples: int, rate: int) -> list[list]:
    spans = []
    for k, (s, e, name) in enumerate(phones):
        if name.upper() == "SIL" or name.startswith("+"):
            lab = "h#" if k == 0 or k == len(phones) - 1 else "pau"
        else:
            lab = arpabet_to_timit(name)
            if not lab:
                fail(f"PocketSphinx phone {name!r} is not ARPAbet")
        spans.append([round(s * frame_s, 6), round(min(e * frame_s, n_samples / rate), 6), lab])
    return spans


def cmd_align(a: argparse.Namespace) -> None:
    from pocketsphinx import Decoder  # PocketSphinx 5

    root = Path(a.corpus)
    id_root = Path(a.id_root) if a.id_root else root.parent
    files = audio_files(root)[: a.limit or None]
    decoder = Decoder(samprate=16000, loglevel="ERROR")
    frame_s = 1.0 / decoder.config["frate"]
    out_lines, left_out = [], []
    t0 = time.time()
    for i, audio in enumerate(files):
        uid = utt_id(audio, id_root)
        samples, rate = read_audio(audio)
        if rate != 16000:
            left_out.append((uid, f"sample rate {rate} (the en-us model is 16 kHz)"))
            continue
        if a.transcript == "phn":
            phn_path = sibling(audio, ".PHN")
            if phn_path is None:
                left_out.append((uid, "no .PHN beside it"))
                continue
            phn = read_phn(phn_path)
            if a.labels == "espeak-en":
                unknown = sorted({lab for _, _, lab in phn if lab not in ESPEAK_EN_TO_TIMIT})
                if unknown:
                    left_out.append((uid, f"espeak label(s) {' '.join(unknown)} not in the espeak-en map"))
                    continue
                phn = [(s_, e_, ESPEAK_EN_TO_TIMIT[lab]) for s_, e_, lab in phn]
            pw = phn_pseudo_words(phn)
            words = []
            for j, pron in enumerate(pw):
                name = f"u{i}w{j}"
                decoder.add_word(name, " ".join(p.upper() for p in pron), update=(j == len(pw) - 1))
                words.append(name)
        else:
            words = word_transcript(audio)
            missing = [w for w in words if decoder.lookup_word(w) is None]
            if missing:
                left_out.append((uid, "words not in the dictionary: " + " ".join(missing)))
                continue
        try:
            phones = decode_phones(decoder, words, samples.tobytes())
        except RuntimeError as e:
            left_out.append((uid, f"PocketSphinx: {e}"))
            continue
        if not phones:
            left_out.append((uid, "PocketSphinx found no alignment"))
            continue
        spans = to_timit_spans(phones, frame_s, len(samples), rate)
        out_lines.append(json.dumps({"utterance_id": uid, "phones": spans}))
        if (i + 1) % 20 == 0:
            print(f"{i + 1}/{len(files)} utterances, {time.time() - t0:.1f} s", file=sys.stderr)
    write_atomic(Path(a.out), "".join(line + "\n" for line in out_lines))
    for uid, why in left_out:
        print(f"left out {uid}: {why}", file=sys.stderr)
    print(f"aligned {len(out_lines)} of {len(files)} utterances in {time.time() - t0:.1f} s "
          f"({len(left_out)} left out) -> {a.out}", file=sys.stderr)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def cmd_phn2spans(a: argparse.Namespace) -> None:
    root = Path(a.dir)
    id_root = Path(a.id_root) if a.id_root else root
    files = sorted(p for p in root.rglob("*") if p.suffix in (".PHN", ".phn"))
    if not files:
        fail(f"{root}: no .PHN under it")
    lines = []
    for p in files:
        spans = [[s / a.rate, e / a.rate, lab] for s, e, lab in read_phn(p)]
        lines.append(json.dumps({"utterance_id": utt_id(p, id_root), "phones": spans}) + "\n")
    write_atomic(Path(a.out), "".join(lines))
    print(f"{len(lines)} utterances -> {a.out}", file=sys.stderr)


# ---- score --------------------------------------------------------------------------------------------------


def fold_reference(phn: list[tuple[int, int, str]], rate: int, keep_closures: bool = False) -> list[tuple[str, float, float]]:
    """The .PHN as (39 label, start s, end s): closure+release one phone, q merged, equal labels merged."""
    ents = [(s / rate, e / rate, lab) for s, e, lab in phn]
    if keep_closures:
        return fold_spans(ents)
    merged = []
    for i, (s, e, lab) in enumerate(ents):
        if merged and merged[-1][2] in CLOSURE_RELEASES and lab in CLOSURE_RELEASES[merged[-1][2]]:
            merged[-1] = (merged[-1][0], e, lab)
            continue
        merged.append((s, e, lab))
    closure_alone = [(s, e, CLOSURE_STOP.get(lab, lab)) for s, e, lab in merged]
    return fold_spans(closure_alone)


def fold_spans(spans, members: list | None = None) -> list[tuple[str, float, float]]:
    """eval/align_metrics.cpp phn_reference: 39 labels, q into the phone before it (a leading q into
    the next), equal neighbours merged, a gap given to the phone before it. MEMBERS, when given, gets
    each folded phone's input spans."""
    out: list[list] = []
    mem: list[list] = []
    q_start = None
    for s, e, lab in spans:
        if lab == "q":
            if not out and q_start is None:
                q_start = s
            if out:
                out[-1][2] = e
            continue
        c = FOLD39.get(lab, lab)
        if out and out[-1][0] == c:
            out[-1][2] = e
            mem[-1].append((lab, s, e))
            continue
        if out:
            out[-1][2] = s
        out.append([c, q_start if q_start is not None else s, e])
        mem.append([(lab, s, e)])
        q_start = None
    if members is not None:
        members[:] = mem
    return [tuple(x) for x in out]


def join_closures_as_reference(hyp: list[tuple[str, float, float]], ref_members: list) -> list[tuple[str, float, float]]:
    """An aligner's phones that are the reference's with closures (39 labels: a closure is sil), with each
    closure joined to its release as the reference's are: a phone that is only a closure followed by its
    release starts the release; a silence that ends in such a closure (pau then pcl) keeps its span, whose
    end stands for the closure's start (the aligner placed no boundary there); a closure without its
    release becomes its stop."""
    out: list[list] = []
    pending = None  # start of a release whose closure was joined to it
    for i, (lab, s, e) in enumerate(hyp):
        mem = ref_members[i]
        last = mem[-1][0]
        nxt = ref_members[i + 1][0][0] if i + 1 < len(hyp) else ""
        only_closures = all(m[0] in CLOSURE_STOP for m in mem)
        if last in CLOSURE_RELEASES and nxt in CLOSURE_RELEASES[last]:
            if only_closures:
                pending = s if pending is None else pending
                continue
        elif only_closures:
            lab = FOLD39.get(CLOSURE_STOP[last], CLOSURE_STOP[last])
        start = pending if pending is not None else s
        pending = None
        if out and out[-1][0] == lab:
            out[-1][2] = e
        else:
            out.append([lab, start, e])
    return [tuple(x) for x in out]


def edit_pairs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Index pairs (i, j) with a[i] == b[j] along a minimum edit alignment (Levenshtein)."""
    n, m = len(a), len(b)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        if d[i][j] == d[i - 1][j - 1] + (a[i - 1] != b[j - 1]):
            if a[i - 1] == b[j - 1]:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif d[i][j] == d[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def summarize(errs: list[float]) -> dict:
    j: dict = {"boundaries": len(errs)}
    if not errs:
        return j
    v = sorted(errs)
    j["within_ms"] = {str(t): sum(e <= t + 1e-9 for e in errs) / len(errs) for t in TOLERANCES_MS}
    j["mean_abs_ms"] = sum(errs) / len(errs)
    m = len(v) // 2
    j["median_abs_ms"] = v[m] if len(v) % 2 else 0.5 * (v[m - 1] + v[m])
    return j


def split_utterances(workdir: Path, split: str) -> list[dict]:
    """The utterances (id, audio) of WORKDIR/SPLIT.safetensors, from its metadata."""
    path = workdir / f"{split}.safetensors"
    if not path.is_file():
        fail(f"{path}: not found (a `timitseg prepare` WORKDIR and one of its splits)")
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
    meta = head.get("__metadata__", {})
    if "utterances" not in meta:
        fail(f"{path}: no 'utterances' in its metadata")
    utts = json.loads(meta["utterances"])
    if any(not u.get("audio") for u in utts):
        fail(f"{path}: an utterance without its audio path")
    return utts


def cmd_score(a: argparse.Namespace) -> None:
    refs = {}  # id -> (.PHN path, sample rate)
    if a.workdir:
        for u in split_utterances(Path(a.workdir), a.split):
            audio = Path(u["audio"])
            phn = sibling(audio, ".PHN")
            if phn is None:
                fail(f"{audio}: no .PHN beside it (utterance {u['id']} of {a.workdir} split {a.split})")
            refs[u["id"]] = (phn, read_audio(audio)[1])
        where = f"{a.workdir} split {a.split}"
    else:
        root = Path(a.corpus)
        id_root = Path(a.id_root) if a.id_root else root.parent
        for audio in audio_files(root):
            phn = sibling(audio, ".PHN")
            if phn is not None:
                refs[utt_id(audio, id_root)] = (phn, read_audio(audio)[1])
        where = str(root)
    not_in_split = 0
    errs: list[float] = []
    same = differ = unscored = 0
    seen = set()
    for n, line in enumerate(Path(a.spans).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        uid = rec["utterance_id"]
        if uid not in refs:
            if a.workdir:
                not_in_split += 1  # e.g. TIMIT's SA sentences, which prepare leaves out of the splits
                continue
            fail(f"{a.spans}:{n}: utterance {uid!r} has no .PHN under {where}")
        seen.add(uid)
        phn, rate = refs[uid]
        ref_phn = read_phn(phn)
        if a.reference == "espeak-en":
            unknown = sorted({lab for _, _, lab in ref_phn if lab not in ESPEAK_EN_TO_TIMIT})
            if unknown:
                fail(f"{phn}: espeak label(s) {' '.join(unknown)} not in the espeak-en map")
            ref_phn = [(s_, e_, ESPEAK_EN_TO_TIMIT[lab]) for s_, e_, lab in ref_phn]
        ref = fold_reference(ref_phn, rate, a.keep_closures)
        hyp_spans = [(float(s), float(e), str(lab)) for s, e, lab in rec["phones"]]
        if a.reference == "espeak-en":  # an aligner that wrote espeak's labels (timitseg align): mapped alike
            hyp_spans = [(s_, e_, ESPEAK_EN_TO_TIMIT.get(lab, lab)) for s_, e_, lab in hyp_spans]
        # the hypothesis's closures (timitseg align writes them) join their release as in the reference
        hyp = fold_reference([(round(s * rate), round(e * rate), lab) for s, e, lab in hyp_spans], rate,
                             a.keep_closures)
        if not a.keep_closures:
            # an aligner that placed TIMIT's closures in 39 labels (sil), e.g. `timitseg align`: its phones
            # are the reference's with closures; they are joined to their releases as the reference's are
            members: list = []
            ref_keep = fold_spans([(s_ / rate, e_ / rate, lab) for s_, e_, lab in ref_phn], members)
            hyp_keep = fold_spans(hyp_spans)
            if [h[0] for h in hyp_keep] == [r[0] for r in ref_keep]:
                hyp = join_closures_as_reference(hyp_keep, members)
        rl, hl = [r[0] for r in ref], [h[0] for h in hyp]
        if rl == hl:
            same += 1
            errs += [abs(hyp[k][2] - ref[k][2]) * 1000.0 for k in range(len(ref) - 1)]
            continue
        differ += 1
        pairs = edit_pairs(rl, hl)
        matched = dict(pairs)
        scored = 0
        for i in range(len(ref) - 1):
            if i in matched and i + 1 in matched and matched[i + 1] == matched[i] + 1:
                errs.append(abs(hyp[matched[i]][2] - ref[i][2]) * 1000.0)
                scored += 1
        unscored += len(ref) - 1 - scored
    result = summarize(errs)
    result.update({"utterances": len(seen), "same_sequence": same, "differing_sequence": differ,
                   "reference_boundaries_not_scored": unscored, "utterances_without_spans": len(refs) - len(seen),
                   "spans_not_in_split": not_in_split, "reference": where})
    print(json.dumps(result, indent=2))
    if a.json:
        write_atomic(Path(a.json), json.dumps(result, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("align", help="PocketSphinx forced alignment of every *.WAV under --corpus")
    p.add_argument("--corpus", required=True, help="folder of *.WAV + .PHN (e.g. C/TEST)")
    p.add_argument("--id-root", help="ids are paths under this folder (default: the parent of --corpus)")
    p.add_argument("--out", required=True, help="spans JSONL to write")
    p.add_argument("--transcript", choices=("phn", "words"), default="phn")
    p.add_argument("--labels", choices=("timit", "espeak-en"), default="timit",
                   help="--transcript phn: the .PHN labels, TIMIT's or espeak-ng en-us IPA (mapped to TIMIT "
                   "phones as score --reference espeak-en maps them)")
    p.add_argument("--limit", type=int, default=0, help="align only the first N files (0: all)")
    p = sub.add_parser("phn2spans", help=".PHN files (e.g. of timitseg align) as spans JSONL")
    p.add_argument("--dir", required=True)
    p.add_argument("--id-root", help="ids are paths under this folder (default: --dir)")
    p.add_argument("--rate", type=int, default=16000, help="sample rate of the .PHN times")
    p.add_argument("--out", required=True)
    p = sub.add_parser("score", help="boundary errors of spans JSONL against the .PHN")
    p.add_argument("--spans", required=True)
    p.add_argument("--corpus", help="folder of *.WAV + .PHN: every utterance under it is a reference")
    p.add_argument("--id-root", help="ids are paths under this folder (default: the parent of --corpus)")
    p.add_argument("--workdir", help="instead of --corpus: the utterances of a prepared WORKDIR's --split "
                   "(their .PHN beside the audio paths it records); spans of other ids are counted and ignored")
    p.add_argument("--split", default="test", help="with --workdir: train, dev, core-test or test")
    p.add_argument("--reference", choices=("timit", "espeak-en"), default="timit",
                   help="the .PHN labels: TIMIT's 61 (flite and TIMIT corpora) or espeak-ng's IPA of "
                   "`synth --voice espeak --language en-us`, mapped to TIMIT phones by sound")
    p.add_argument("--keep-closures", action="store_true",
                   help="no closure+release merge: exactly evaluate --align's sequence (closures as sil)")
    p.add_argument("--json", help="also write the scores here")
    a = ap.parse_args()
    if a.cmd == "score" and bool(a.corpus) == bool(a.workdir):
        ap.error("score needs one of --corpus and --workdir")
    {"align": cmd_align, "phn2spans": cmd_phn2spans, "score": cmd_score}[a.cmd](a)


if __name__ == "__main__":
    main()
