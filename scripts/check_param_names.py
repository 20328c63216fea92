#!/usr/bin/env python3
"""The CRF's checkpoint tensor names are written once: code reaches a CRF
tensor through model::CrfParamView (model/crf_params.h), never through its
name.

  scripts/check_param_names.py [--root DIR]

The names are the "crf.*" string literals of the table in
model/crf_params.cpp (crf.transition, crf.duration_bias, ...). Below it, in
app common crf data config model options eval train capi settings (.cpp .h
.cu .cuh, comments ignored), a string literal that is one of these names, a
tap name "d_" + name, or a prefix of a name ending in "." ("crf.projection.")
is a problem. Python (python/timitseg/*.py) takes its names from the table
CRF_TENSORS of python/timitseg/checkpoint.py: a literal name or prefix
elsewhere there is a problem, and so is an entry of that table the C++ table
lacks or whose key is not the name without "crf.".

Prints FILE:LINE: a line for each, and exits 1 when there is any, 0 otherwise.
"""
import ast
import io
import os
import re
import sys
import tokenize

import checklib

FOLDERS = ("app", "settings", "common", "crf", "data", "config", "model", "options", "eval", "train", "capi")
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")
TABLE = "model/crf_params.cpp"
PY_FOLDER = "python/timitseg"
PY_TABLE = "python/timitseg/checkpoint.py"
PREFIX = "crf."
LITERAL = re.compile(r'"((?:\\.|[^"\\\n])*)"')


def table_names(root):
    """The "crf.*" literals of the C++ table, or None without the table file."""
    path = os.path.join(root, TABLE)
    if not os.path.exists(path):
        return None
    return {w for w in LITERAL.findall(checklib.strip_comments(checklib.read(path))) if w.startswith(PREFIX) and w != PREFIX}


def forbidden(names):
    """{literal: what it names}: each name, its tap name ("d_" + name), its dotted prefixes."""
    out = {}
    for n in sorted(names):
        parts = n.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[:i]) + ".", "a prefix of the CRF's tensor names")
    for n in sorted(names):
        out[n] = f"the CRF tensor '{n}'"
        out["d_" + n] = f"the CRF tensor '{n}' (its gradient's tap)"
    return out


def cpp_problems(root, bad):
    out = []
    for _, path in checklib.source_files(root, FOLDERS, EXTENSIONS):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel == TABLE:
            continue
        code = checklib.strip_comments(checklib.read(path))
        for m in LITERAL.finditer(code):
            if m.group(1) in bad:
                n = code.count("\n", 0, m.start()) + 1
                out.append(f"{rel}:{n}: names {bad[m.group(1)]} with the string \"{m.group(1)}\": "
                           f"use its member of model::CrfParamView (ParamLayout::crf(), model/crf_params.h)")
    return out


def py_strings(path):
    """(line, value) of each string literal of a Python file (comments are not tokens)."""
    with open(path, encoding="utf-8") as fh:
        toks = list(tokenize.generate_tokens(io.StringIO(fh.read()).readline))
    for t in toks:
        if t.type == tokenize.STRING:
            try:
                v = ast.literal_eval(t.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(v, str):
                yield t.start[0], v


def py_table(root, names):
    """Problems of python/timitseg/checkpoint.py's CRF_TENSORS against the C++ table."""
    path = os.path.join(root, PY_TABLE)
    if not os.path.exists(path):
        return []
    for node in ast.parse(checklib.read(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CRF_TENSORS" for t in node.targets):
            table = ast.literal_eval(node.value)
            line = node.lineno
            break
    else:
        return [f"{PY_TABLE}:1: no CRF_TENSORS table of the CRF's checkpoint names"]
    out = []
    for key, name in sorted(table.items()):
        if name not in names:
            out.append(f"{PY_TABLE}:{line}: CRF_TENSORS['{key}'] = '{name}' is no tensor of {TABLE}'s table")
        elif key != name[len(PREFIX):]:
            out.append(f"{PY_TABLE}:{line}: CRF_TENSORS['{key}'] = '{name}': the key must be the name without "
                       f"'{PREFIX}'")
    return out


def py_problems(root, bad):
    out = []
    folder = os.path.join(root, PY_FOLDER)
    if not os.path.isdir(folder):
        return out
    for f in sorted(os.listdir(folder)):
        rel = f"{PY_FOLDER}/{f}"
        if not f.endswith(".py") or rel == PY_TABLE:
            continue
        for line, v in py_strings(os.path.join(folder, f)):
            if v in bad:
                out.append(f"{rel}:{line}: names {bad[v]} with the string '{v}': "
                           f"use CRF_TENSORS / CRF_PREFIX of {PY_TABLE}")
    return out


def problems(root):
    names = table_names(root)
    if not names:
        return [f"{TABLE}: no table of the CRF's checkpoint names (\"{PREFIX}*\" literals) found"], 0
    bad = forbidden(names)
    return sorted(set(cpp_problems(root, bad) + py_problems(root, bad) + py_table(root, names))), len(names)


def main():
    args = checklib.arguments(__doc__).parse_args()
    found, n = problems(args.root)
    return checklib.report(found, f"FAILED: {len(found)} name-string use(s) of the CRF's tensors outside their table",
                           f"PASSED: the {n} CRF tensor names appear only in {TABLE} (and {PY_TABLE})")


if __name__ == "__main__":
    sys.exit(main())
