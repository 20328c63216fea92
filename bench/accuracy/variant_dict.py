#!/usr/bin/env python3
"""Pronunciation dictionaries for the variants experiment (docs/training.md
"Several pronunciations of a word, measured").

Reads the words and phones tiers of a `synth --format textgrid` corpus (each
word's phones: those whose midpoint lies inside it; the corpus's words have one
pronunciation each, the one the audio has) and writes three MFA-format
dictionaries into OUT:

  true.dict   every word with the pronunciation the audio has
  first.dict  a FRACTION of the word types (those with a vowel, chosen by SEED)
              get a wrong pronunciation instead: the first vowel replaced by
              another vowel of the corpus (what a dictionary whose most probable
              variant is not the speaker's gives a loss that reads one sequence)
  graph.dict  those words with both: the wrong one first (probability 0.6),
              the audio's second (0.4): every variant offered

  variant_dict.py CORPUS OUT [FRACTION] [SEED]   (defaults 0.3, 1)
"""
import glob
import os
import random
import re
import sys
from collections import Counter, defaultdict


def tiers(path):
    """{tier name: [(xmin, xmax, text)]} of a long-format TextGrid."""
    out, name, cur = {}, None, None
    xmin = xmax = None
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        m = re.match(r'name = "(.*)"', line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = re.match(r"xmin = ([0-9.eE+-]+)", line)
        if m:
            xmin = float(m.group(1))
            continue
        m = re.match(r"xmax = ([0-9.eE+-]+)", line)
        if m:
            xmax = float(m.group(1))
            continue
        m = re.match(r'text = "(.*)"', line)
        if m and name is not None:
            out[name].append((xmin, xmax, m.group(1)))
    return out


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    fraction = float(sys.argv[3]) if len(sys.argv) > 3 else 0.3
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    prons = defaultdict(Counter)
    files = sorted(glob.glob(os.path.join(corpus, "**", "*.TextGrid"), recursive=True))
    if not files:
        sys.exit(f"{corpus}: no TextGrid files")
    for f in files:
        t = tiers(f)
        if "words" not in t or "phones" not in t:
            sys.exit(f"{f}: needs a words and a phones tier")
        for (a, b, w) in t["words"]:
            if not w.strip():
                continue
            ph = tuple(p for (x, y, p) in t["phones"] if p.strip() and a <= (x + y) / 2 < b)
            if ph:
                prons[w.strip().lower()][ph] += 1
    vowels = sorted({p for c in prons.values() for ph in c for p in ph if p in set("aeiouəɛɔɪʊæʌɑ")})
    if len(vowels) < 2:
        sys.exit(f"{corpus}: fewer than two vowels among its phones")
    rng = random.Random(seed)
    true = {w: c.most_common(1)[0][0] for w, c in sorted(prons.items())}
    wrong = {}
    for w, ph in true.items():
        at = [i for i, p in enumerate(ph) if p in vowels]
        if at and rng.random() < fraction:
            i = at[0]
            other = rng.choice([v for v in vowels if v != ph[i]])
            wrong[w] = ph[:i] + (other,) + ph[i + 1:]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "true.dict"), "w", encoding="utf-8") as f:
        for w, ph in true.items():
            f.write(f"{w}\t{' '.join(ph)}\n")
    with open(os.path.join(out, "first.dict"), "w", encoding="utf-8") as f:
        for w, ph in true.items():
            f.write(f"{w}\t{' '.join(wrong.get(w, ph))}\n")
    with open(os.path.join(out, "graph.dict"), "w", encoding="utf-8") as f:
        for w, ph in true.items():
            if w in wrong:
                f.write(f"{w}\t0.6\t{' '.join(wrong[w])}\n{w}\t0.4\t{' '.join(ph)}\n")
            else:
                f.write(f"{w}\t{' '.join(ph)}\n")
    print(f"{len(true)} word types, {len(wrong)} with a wrong first pronunciation (vowels {' '.join(vowels)})")


if __name__ == "__main__":
    main()
