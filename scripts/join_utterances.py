#!/usr/bin/env python3
"""Joins TIMIT-layout utterances (NIST SPHERE or RIFF WAV, 16-bit mono, with a
.PHN beside each) into one long recording: OUT.wav (RIFF), OUT.PHN (the
phones with their sample times shifted) and OUT.utts (one line per joined
utterance: its first sample in OUT.wav, its number of samples, its audio
path), cycling through the inputs until the recording lasts at least --minutes. For measuring `timitseg align` on long
audio (docs/align.md). Python standard library only.

Usage: scripts/join_utterances.py --minutes 10 --out long10 FOLDER...
"""
import argparse
import os
import struct
import sys
import wave


def read_audio(path):
    with open(path, "rb") as f:
        head = f.read(1024)
        if head.startswith(b"NIST_1A"):
            fields = {}
            for line in head.decode("ascii", "replace").splitlines()[2:]:
                parts = line.split()
                if len(parts) >= 3:
                    fields[parts[0]] = parts[2]
            if fields.get("channel_count", "1") != "1" or fields.get("sample_n_bytes", "2") != "2":
                sys.exit(f"error: {path}: only 16-bit mono SPHERE is supported")
            hsize = int(head.splitlines()[1])
            f.seek(hsize)
            data = f.read()
            if fields.get("sample_byte_format", "01") == "10":  # big endian: swap
                n = len(data) // 2
                data = struct.pack(f"<{n}h", *struct.unpack(f">{n}h", data[: 2 * n]))
            return int(fields.get("sample_rate", "16000")), data
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            sys.exit(f"error: {path}: only 16-bit mono WAV is supported")
        return w.getframerate(), w.readframes(w.getnframes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--out", required=True, help="output stem: OUT.wav, OUT.PHN and OUT.utts")
    ap.add_argument("--frame-multiple", type=int, default=0,
                    help="cut each utterance's end to a multiple of this many samples (e.g. 160, the 10 ms frame "
                         "shift at 16 kHz), so that every utterance starts on the frame grid of the joined recording "
                         "and its boundaries can be compared with those of the utterance aligned alone")
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    inputs = []
    for d in a.folders:
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if name.lower().endswith(".wav"):
                    phn = os.path.join(root, name[:-4] + ".PHN")
                    if os.path.exists(phn):
                        inputs.append((os.path.join(root, name), phn))
    if not inputs:
        sys.exit("error: no .WAV with a .PHN beside it under " + " ".join(a.folders))
    inputs.sort()
    chunks, lines, utts, at, rate, i = [], [], [], 0, None, 0
    while rate is None or at < a.minutes * 60 * rate:
        wav, phn = inputs[i % len(inputs)]
        i += 1
        r, data = read_audio(wav)
        if rate is None:
            rate = r
        elif r != rate:
            sys.exit(f"error: {wav}: {r} Hz, the others {rate} Hz")
        if a.frame_multiple > 0:
            n = len(data) // 2
            data = data[: 2 * (n - n % a.frame_multiple)]
        n = len(data) // 2
        for line in open(phn):
            p = line.split()
            if len(p) == 3 and int(p[0]) < n:
                lines.append(f"{int(p[0]) + at} {min(int(p[1]), n) + at} {p[2]}\n")
        chunks.append(data)
        utts.append(f"{at} {len(data) // 2} {wav}\n")
        at += len(data) // 2
    with wave.open(a.out + ".wav", "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(chunks))
    with open(a.out + ".PHN", "w") as f:
        f.writelines(lines)
    with open(a.out + ".utts", "w") as f:
        f.writelines(utts)
    print(f"{a.out}.wav: {i} utterances, {at / rate / 60:.2f} min, {len(lines)} phones")


if __name__ == "__main__":
    main()
