"""What the source checks scripts/check_layers.py, check_namespaces.py,
check_size.py, check_choice_words.py and check_include_cycles.py (the ctests
build.check_*) share: the command line (--root, by
default the checkout the script is in), the walk over the product's folders,
and the report (one line a problem, then one summary line; exit status 1 when
there is any problem, 0 otherwise). Python standard library only.
"""
import argparse
import os
import re


def arguments(doc):
    """An argument parser with the script's docstring as its help and --root."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return ap


def source_files(root, folders, extensions):
    """(folder, path) of each file below ROOT/FOLDER whose name ends in one of
    EXTENSIONS (a tuple), folder by folder in the order given, then sorted."""
    for folder in folders:
        for dp, dn, fn in os.walk(os.path.join(root, folder)):
            dn.sort()
            for f in sorted(fn):
                if f.endswith(extensions):
                    yield folder, os.path.join(dp, f)


def report(problems, failed, passed):
    """Prints each problem, then FAILED (when there is any) or PASSED; the exit status."""
    for line in problems:
        print(line)
    print(failed if problems else passed)
    return 1 if problems else 0


# A C/C++ comment, or a string literal (matched so that a // inside a string is not a comment).
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def read(path):
    """The text of a source file (undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def strip_comments(text):
    """TEXT with its comments blanked (newlines kept, so line numbers hold); string literals kept."""
    def keep(m):
        s = m.group(0)
        return s if s.startswith('"') else re.sub(r"[^\n]", " ", s)
    return COMMENT.sub(keep, text)
