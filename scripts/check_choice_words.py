#!/usr/bin/env python3
"""Choice words are enums below the CLI: no file of the folders below app/
compares a string with a choice word.

  scripts/check_choice_words.py [--root DIR]

The choice words are the words of every enum name table in the product
(TIMITSEG_ENUM_NAMES(E, N, {E::x, "word"}, ...), common/enum_names.h):
corpus formats, output formats, voices, noises, config keys' words, ... The
command line (app/) reads such a word into its enum once; below it, in
common config crf data model options eval train capi settings, code compares
enums, never text: a `== "word"`, `!= "word"`, `"word" ==`, `"word" !=`,
`.compare("word")` or `strcmp(..., "word")` with a table's word is a problem.
Comments are ignored; string literals are read as written.

ALLOWED lists the few compares with a table's word that are not choices,
each with its reason.

Prints FILE:LINE: compares TEXT with the choice word 'WORD' (EnumName), for
each, and exits 1 when there is any, 0 otherwise.
"""
import os
import re
import sys

import checklib

FOLDERS = ("settings", "common", "crf", "data", "config", "model", "options", "eval", "train", "capi")
TABLE_FOLDERS = FOLDERS + ("app",)
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")
TABLE = re.compile(r"TIMITSEG_ENUM_NAMES\(\s*(\w+)\s*,([^;]*)\)\s*;", re.S)
WORD = re.compile(r'"((?:\\.|[^"\\\n])*)"')
LITERAL = r'"((?:\\.|[^"\\\n])*)"'
COMPARES = [re.compile(p) for p in (
    r"(?:==|!=)\s*" + LITERAL,                          # x == "word"
    LITERAL + r"\s*(?:==|!=)",                          # "word" == x
    r"\.compare\s*\(\s*" + LITERAL + r"\s*\)",          # x.compare("word")
    r"\bstr(?:n?case)?n?cmp\s*\([^;)]*?" + LITERAL,     # strcmp(x, "word")
)]
# (file relative to the root, word): why that compare is not a choice.
ALLOWED = {
    ("config/config.cpp", "true"): "YAML 1.2's boolean scalars read at the config boundary (bool keys)",
    ("config/config.cpp", "false"): "YAML 1.2's boolean scalars read at the config boundary (bool keys)",
    ("data/corpus_manifest.cpp", "segments"): "a JSON-lines manifest's field name (a key of the file), not a choice",
}


def choice_words(root):
    """{word: enum name} of every TIMITSEG_ENUM_NAMES table below ROOT's product folders."""
    words = {}
    for _, path in checklib.source_files(root, TABLE_FOLDERS, EXTENSIONS):
        code = checklib.strip_comments(checklib.read(path))
        for m in TABLE.finditer(code):
            if m.group(1) == "E":  # the macro's own definition
                continue
            for w in WORD.findall(m.group(2)):
                words.setdefault(w, m.group(1))
    return words


def problems(root):
    words = choice_words(root)
    out = []
    for _, path in checklib.source_files(root, FOLDERS, EXTENSIONS):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        code = TABLE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), checklib.strip_comments(checklib.read(path)))
        for pat in COMPARES:
            for m in pat.finditer(code):  # a compare may span lines: its line is the word's
                w = m.group(1)
                if w in words and (rel, w) not in ALLOWED:
                    n = code.count("\n", 0, m.start(1)) + 1
                    out.append(f"{rel}:{n}: compares text with the choice word '{w}' ({words[w]}): "
                               f"compare the enum instead, read from the text once in app/")
    return sorted(set(out)), len(words)


def main():
    args = checklib.arguments(__doc__).parse_args()
    found, n = problems(args.root)
    return checklib.report(found, f"FAILED: {len(found)} compare(s) of text with a choice word below app/",
                           f"PASSED: no compare of text with any of {n} choice words below app/")


if __name__ == "__main__":
    sys.exit(main())
