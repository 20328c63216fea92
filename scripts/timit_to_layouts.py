#!/usr/bin/env python3
"""Writes a TIMIT-layout corpus (e.g. `timitseg synth`'s) in the other layouts
`timitseg prepare --corpus` reads (docs/data.md "Other corpora"), for
measuring and comparing them: OUT/textgrid (MFA: SPEAKER/UTT.wav beside
UTT.TextGrid), OUT/buckeye (SPEAKER/UTT.wav + .phones + .words), OUT/kaldi
(wav.scp, utt2spk, phones.ctm), OUT/manifest.csv and OUT/manifest.jsonl, and
OUT/splits.txt (TRAIN speakers train, TEST speakers test). Audio is linked,
not copied (symbolic links to the .WAV files; libsndfile reads the format from
the header). SA sentences are left out, as TIMIT's prepare does. Python
standard library only.

Usage: scripts/timit_to_layouts.py TIMIT_DIR OUT [--rate 16000]
"""
import argparse
import json
import os
import sys


def utterances(root):
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.lower().endswith(".phn") or f.lower().startswith("sa"):
                continue
            stem = f[:-4]
            wav = next((os.path.join(dirpath, stem + e) for e in (".WAV", ".wav") if os.path.exists(os.path.join(dirpath, stem + e))), None)
            if wav is None:
                continue
            rel = os.path.relpath(dirpath, root).split(os.sep)
            part, spk = rel[0].lower(), rel[-1].lower()
            phones = []
            with open(os.path.join(dirpath, f)) as fh:
                for line in fh:
                    a = line.split()
                    if len(a) == 3:
                        phones.append((int(a[0]), int(a[1]), a[2]))
            yield part, spk, stem.lower(), os.path.abspath(wav), phones


def textgrid(phones, rate):
    end = phones[-1][1] / rate
    out = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "", "0", "%.5f" % end, "<exists>", "1",
           '"IntervalTier"', '"phones"', "0", "%.5f" % end, str(len(phones))]
    for s, e, p in phones:
        out += ["%.5f" % (s / rate), "%.5f" % (e / rate), '"%s"' % p]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timit")
    ap.add_argument("out")
    ap.add_argument("--rate", type=int, default=16000)
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit("error: %s exists; give a new folder" % a.out)
    r = a.rate
    os.makedirs(os.path.join(a.out, "kaldi"))
    scp, u2s, ctm, csv, jl, spl = [], [], [], ["audio,speaker,labels"], [], {}
    for part, spk, utt, wav, phones in utterances(a.timit):
        if not phones:
            continue
        spl[spk] = "train" if part == "train" else "test"
        for layout in ("textgrid", "buckeye"):
            os.makedirs(os.path.join(a.out, layout, spk), exist_ok=True)
            os.symlink(wav, os.path.join(a.out, layout, spk, utt + ".wav"))
        base = os.path.join(a.out, "textgrid", spk, utt)
        with open(base + ".TextGrid", "w") as f:
            f.write(textgrid(phones, r))
        base = os.path.join(a.out, "buckeye", spk, utt)
        with open(base + ".phones", "w") as f:
            f.write("signal %s\ntype 0\ncolor 121\nnfields 1\n#\n" % utt)
            f.writelines("  %.6f  122 %s\n" % (e / r, p) for _, e, p in phones)
        with open(base + ".words", "w") as f:
            f.write("signal %s\n#\n" % utt)
        uid = spk + "_" + utt
        scp.append("%s %s\n" % (uid, wav))
        u2s.append("%s %s\n" % (uid, spk))
        ctm += ["%s 1 %.5f %.5f %s\n" % (uid, s / r, (e - s) / r, p) for s, e, p in phones]
        lab = os.path.join(a.out, "labels", spk, utt + ".lab")
        os.makedirs(os.path.dirname(lab), exist_ok=True)
        with open(lab, "w") as f:
            f.writelines("%.5f %.5f %s\n" % (s / r, e / r, p) for s, e, p in phones)
        csv.append('"%s",%s,labels/%s/%s.lab' % (wav, spk, spk, utt))
        jl.append(json.dumps({"id": spk + "/" + utt, "audio": wav, "speaker": spk,
                              "segments": [[s / r, e / r, p] for s, e, p in phones]}))
    for name, lines in (("wav.scp", scp), ("utt2spk", u2s), ("phones.ctm", ctm)):
        with open(os.path.join(a.out, "kaldi", name), "w") as f:
            f.writelines(sorted(lines) if name != "phones.ctm" else lines)
    with open(os.path.join(a.out, "manifest.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    with open(os.path.join(a.out, "manifest.jsonl"), "w") as f:
        f.write("\n".join(jl) + "\n")
    with open(os.path.join(a.out, "splits.txt"), "w") as f:
        f.writelines("%s %s\n" % kv for kv in sorted(spl.items()))
    print("%d utterances of %d speakers in %s" % (len(scp), len(spl), a.out))


if __name__ == "__main__":
    main()
