#!/usr/bin/env python3
"""Size limits of the product's source: no
function over 100 lines, no file over 600 lines, in the folders app capi common
config crf data model options train eval settings (.cpp .h .cu .cuh; CUDA
kernels included).

  scripts/check_size.py [--root DIR] [--max-function 100] [--max-file 600] [FILES...]

Prints every function and file over its limit (path:line, name, lines) and
exits 1 when there is any, 0 otherwise. With FILES, checks only those.

A function's length is counted from the line of its opening brace to the line
of its closing brace. The scanner is a brace matcher that first blanks out
comments, string and character literals (raw strings included) and
preprocessor lines; at namespace, class and extern "C" scope, a brace block
whose header (the text since the previous ; { or }) holds a parenthesis is a
function (constructors, operators, templates, lambdas bound at namespace scope
and CUDA kernels alike); a block without one is a class, namespace or
initializer. Lambdas and local classes count toward the function around them.
"""
import os
import re
import sys

import checklib

FOLDERS = ("app", "capi", "common", "config", "crf", "data", "model", "options", "train", "eval", "settings")
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")


def strip_code(text):
    """Comments, literals and preprocessor lines blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        m = re.match(r'(?:u8|u|U|L)?R"([^(\s]{0,16})\(', text[i:i + 24])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i:end])[2:])
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def strip_template_prefix(header):
    h = header.lstrip()
    while h.startswith("template"):
        k = h.find("<")
        if k < 0:
            return h
        depth, j = 0, k
        while j < len(h):
            if h[j] == "<":
                depth += 1
            elif h[j] == ">":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        h = h[j + 1:].lstrip()
    return h


CONTAINER = re.compile(r"^(?:(?:typedef|static|inline|export|__device__|__host__|alignas\s*\(\s*\d+\s*\))\s+)*"
                       r"(namespace|class|struct|union|enum|extern)\b")


def functions(code):
    """(name, first line, last line) of every function (1-based lines)."""
    found = []
    stack = []  # kinds of the open blocks at container scope: "container"
    i, n = 0, len(code)
    header_start = 0
    while i < n:
        c = code[i]
        if c in ";":
            header_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            h = strip_template_prefix(" ".join(header.split()))
            m = CONTAINER.match(h)
            is_container = m is not None and ("(" not in h or m.group(1) in ("namespace", "extern"))
            if is_container:
                stack.append("container")
                header_start = i + 1
            else:
                j = match_brace(code, i)
                if "(" in h:
                    found.append((function_name(h), code.count("\n", 0, i) + 1, code.count("\n", 0, j) + 1))
                i = j
                header_start = i + 1
        i += 1
    return found


ATTRIBUTES = {"__launch_bounds__", "__attribute__", "alignas", "__align__", "__declspec", "decltype"}


def function_name(header):
    """The name before the parameter list: the first identifier followed by ( that is no attribute
    (an attribute's parenthesized arguments, as `__launch_bounds__(f(x), 1)`, are skipped whole)."""
    pos = 0
    pattern = re.compile(r"([A-Za-z_~][\w:<>,~ ]*?)\s*\(")
    while True:
        m = pattern.search(header, pos)
        if not m:
            return "(lambda)"
        words = re.findall(r"[\w:~<>,]+|operator\S*", m.group(1))
        if words and words[-1] not in ATTRIBUTES:
            return words[-1]
        depth, j = 0, m.end() - 1  # at the attribute's "(": skip to its matching ")"
        while j < len(header):
            depth += {"(": 1, ")": -1}.get(header[j], 0)
            j += 1
            if depth == 0:
                break
        pos = j


def match_brace(code, i):
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def main():
    ap = checklib.arguments(__doc__)
    ap.add_argument("--max-function", type=int, default=100)
    ap.add_argument("--max-file", type=int, default=600)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    files = a.files or [path for _, path in checklib.source_files(a.root, FOLDERS, EXTENSIONS)]
    over = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            sys.exit(f"check_size: {path}: {e.strerror}")
        rel = os.path.relpath(path, a.root) if not a.files else path
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > a.max_file:
            over.append(f"{rel}: file has {lines} lines (limit {a.max_file})")
        for name, first, last in functions(strip_code(text)):
            if last - first + 1 > a.max_function:
                over.append(f"{rel}:{first}: function {name} has {last - first + 1} lines (limit {a.max_function})")
    return checklib.report(
        over, f"check_size: {len(over)} over the limits (functions > {a.max_function} lines, files > {a.max_file} lines)",
        f"check_size: {len(files)} files, no function over {a.max_function} lines, no file over {a.max_file} lines")


if __name__ == "__main__":
    sys.exit(main())
