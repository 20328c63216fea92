#!/usr/bin/env python3
"""Namespaces match folders: every .h/.cpp/.cu/.cuh of the product's
folders opens the namespace of its folder and no other folder's.

  scripts/check_namespaces.py [--root DIR]

  common/   -> timitseg (its generic utilities; sub-namespaces such as timitseg::cuda allowed)
  settings/ -> timitseg::env or timitseg::limits (the bottom room's two parts, named
               for what they hold: the environment's table and parser, the ranges)
  FOLDER/   -> timitseg::FOLDER, or a namespace inside it (timitseg::crf::cpu,
               timitseg::model::gpu, timitseg::app::report::sections, ...)
               for FOLDER in app capi config crf data model options eval train

No folder opens another folder's namespace (timitseg::env and
timitseg::limits are settings/'s, common/ included).

A sub-folder's files live inside their folder's namespace: crf/cpu/ in
timitseg::crf::cpu, crf/reference/ in timitseg::crf::reference, crf/cuda/ in
timitseg::crf::cuda_impl; model/cpu/ and model/cuda/, the private
implementations of model/'s interfaces, in timitseg::model and its detail
namespaces (a namespace timitseg::model::cuda would hide common/'s
timitseg::cuda from all of model/). Two kinds of file are exempt: a file that
opens no namespace at all and declares nothing but includes or macros, and
capi/ files defining the C API (`extern "C"`), whose functions and handle
structs are global by the C ABI.

Prints FILE: what is wrong, for each file that opens no namespace of its
folder or opens another folder's namespace (timitseg::OTHER), and exits 1 when
there is any, 0 otherwise.
"""
import os
import re
import sys

import checklib

FOLDERS = ("settings", "common", "crf", "data", "config", "model", "options", "eval", "train", "app", "capi")
# Folders whose namespaces are not timitseg::FOLDER: common/ is timitseg itself,
# settings/ the two namespaces its headers have always had.
NAMESPACES = {"common": ("timitseg",), "settings": ("timitseg::env", "timitseg::limits")}
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")
OPEN = re.compile(r"^\s*namespace\s+([A-Za-z_][\w:]*)\s*\{", re.M)
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def expected(folder):
    """The namespaces of FOLDER's files (a file opens one of them, or one inside it)."""
    return NAMESPACES.get(folder, (f"timitseg::{folder}",))


def within(name, spaces):
    return any(name == w or name.startswith(w + "::") for w in spaces)


def owner(name):
    """The folder whose namespace NAME is (or lies inside), or None (timitseg, timitseg::cuda, ...)."""
    for folder, spaces in NAMESPACES.items():
        if folder != "common" and within(name, spaces):
            return folder
    part = name.split("::")[1:2]
    return part[0] if part and part[0] in FOLDERS and part[0] not in NAMESPACES else None


def opened(text):
    """The project namespaces a file opens (`namespace timitseg::x {`, or nested
    `namespace timitseg {` ... `namespace x {` one level down)."""
    code = COMMENT.sub("", text)
    names = []
    for m in OPEN.finditer(code):
        names.append(m.group(1))
    out = [n for n in names if n == "timitseg" or n.startswith("timitseg::")]
    # `namespace timitseg {` followed by `namespace x {`: count as timitseg::x
    if "timitseg" in names:
        for a, b in zip(names, names[1:]):
            if a == "timitseg" and not b.startswith("timitseg"):
                out.append(f"timitseg::{b}")
    return out


def problems(root):
    out = []
    for folder, path in checklib.source_files(root, FOLDERS, EXTENSIONS):
        spaces = expected(folder)
        want = " or ".join(spaces)
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        ns = opened(text)
        code = COMMENT.sub("", text)
        if folder == "capi" and 'extern "C"' in code:
            continue
        if not ns:
            if re.search(r"^\s*namespace\s", code, re.M) or re.search(
                    r"^\s*(struct|class|enum|template|using|[\w:<>]+\s+[\w:]+\s*\()", code, re.M):
                out.append(f"{rel}: opens no namespace {want} (code of {folder}/ lives in {want})")
            continue
        if folder == "common":
            if "timitseg" not in ns and not any(n.startswith("timitseg::") for n in ns):
                out.append(f"{rel}: opens no namespace timitseg")
            foreign = [n for n in ns if owner(n) is not None]
        else:
            mine = [n for n in ns if within(n, spaces)]
            if not mine:
                out.append(f"{rel}: opens {', '.join(sorted(set(ns)))}, not {want} (the namespace of {folder}/)")
            foreign = [n for n in ns if n != "timitseg" and not within(n, spaces) and owner(n) is not None]
        for n in sorted(set(foreign)):
            out.append(f"{rel}: opens {n}, the namespace of {owner(n)}/, from {folder}/")
    return out


def main():
    a = checklib.arguments(__doc__).parse_args()
    bad = problems(a.root)
    files = {line.split(": ", 1)[0] for line in bad}
    return checklib.report(
        bad, f"check_namespaces: {len(files)} file(s) whose namespace does not match its folder (docs/design.md)",
        "check_namespaces: every file opens the namespace of its folder (common/: timitseg, settings/: timitseg::env "
        "or timitseg::limits, FOLDER/: timitseg::FOLDER)")


if __name__ == "__main__":
    sys.exit(main())
