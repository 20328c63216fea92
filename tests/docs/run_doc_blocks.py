#!/usr/bin/env python3
"""Runs every ```bash / ```sh command block of README.md and docs/*.md.

The documentation test of timitseg (docs/testing-docs.md has the rules): the
markdown files run one after another in one shared scratch checkout, as a
user reading them in order would: README.md, then the docs in the order
README's "## Documentation" list names them, then any other docs by name. The
checkout is a copy of the repository (without build folders, .git, work/ and
runs/) made a git repository of its own, with build/bin pointing at the built
binary; each command block runs there, one `bash -eu -o pipefail` process
each, so a block sees the files the blocks before it wrote (a synth corpus, a
prepared workdir, a run folder), also those of earlier files. The built
binary's folder is first on PATH (blocks say `timitseg ...`), and
TIMITSEG_DOCTEST_MAX_EPOCHS=1 is exported, so every training run stops after
one epoch (the binary logs a warning; model::apply_doctest_limits). After the
last file, `git status --porcelain` in the checkout must be empty: the docs
write under work/ and runs/ (or names .gitignore covers) and change no
tracked file.

Markers, an HTML comment on the line right before a block's opening fence:
  <!-- doctest: skip: REASON -->   never run here; the reason is printed
  <!-- doctest: needs-gpu -->      run only where a CUDA GPU is present
  <!-- doctest: expect-exit N -->  the block must end with exit status N (its
                                   first failing command ends it: set -e)
  <!-- doctest: instead: COMMAND -->  the test runs COMMAND in place of the block
                                   (README's demo without its package installation
                                   and build: `scripts/demo.sh --no-build`), so
                                   later blocks see what it wrote
(needs-gpu and expect-exit combine: `<!-- doctest: needs-gpu; expect-exit 1 -->`).

Errors that fail the test, each naming FILE:LINE: a block that fails (its
output tail is printed; the file's later blocks are then not run), a marker
that is not on the line before a fence, a marker on a block that is never run,
an unknown directive, a checkout left unclean by the blocks, a fence without a language whose first line is a command
(`timitseg ...`, `scripts/...`, `$ ...`: say ```bash to run it, or
```text/```console when it is not to be run), and a console transcript
(`$ timitseg ...`) in an indented code block.

Python 3 standard library only. Exit status 0 when every block run passed and
nothing is malformed, 1 otherwise, 2 for usage errors.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

RUN_LANGUAGES = {"bash", "sh", "shell"}
ENV_MAX_EPOCHS = "TIMITSEG_DOCTEST_MAX_EPOCHS"
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
# "timitseg synth ...", not "timitseg: a help text" (docs/cli.md).
COMMANDISH = re.compile(r"^(\$ |timitseg(\s|$)|build/bin/timitseg(\s|$)|scripts/|\./scripts/|python3? )")
INDENTED_TRANSCRIPT = re.compile(r"^( {4,}|\t)\$ (timitseg|build/bin/timitseg|scripts/)")
# Top-level entries of the source tree never copied into a scratch folder.
NOT_COPIED = {".git", "work", "runs", "synth", ".devbundle"}


class Block:
    def __init__(self, path, line, language, text, skip=None, needs_gpu=False, expect_exit=0, instead=None):
        self.path = path          # markdown file, as shown in messages
        self.line = line          # 1-based line of the opening fence
        self.language = language
        self.text = text
        self.skip = skip          # reason, or None
        self.needs_gpu = needs_gpu
        self.expect_exit = expect_exit
        self.instead = instead    # the command run in place of the block, or None

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def parse_marker(text, where):
    """Directives of one marker comment -> (skip, needs_gpu, expect_exit, instead); raises ValueError."""
    if text.startswith("instead"):
        m = re.match(r"^instead:\s*(\S.*)$", text)
        if not m:
            raise ValueError(f"{where}: 'instead' needs a command: <!-- doctest: instead: COMMAND RUN IN PLACE OF THE BLOCK -->")
        return None, False, 0, m.group(1)
    if text.startswith("skip"):
        m = re.match(r"^skip:\s*(\S.*)$", text)
        if not m:
            raise ValueError(f"{where}: 'skip' needs a reason: <!-- doctest: skip: WHY IT CANNOT RUN HERE -->")
        return m.group(1), False, 0, None
    needs_gpu, expect_exit = False, 0
    for part in [p.strip() for p in text.split(";")]:
        if part == "needs-gpu":
            needs_gpu = True
        elif re.fullmatch(r"expect-exit\s+\d+", part):
            expect_exit = int(part.split()[1])
        else:
            raise ValueError(f"{where}: unknown doctest directive '{part}' (known: 'skip: REASON', "
                             f"'instead: COMMAND', 'needs-gpu', 'expect-exit N'; combine the last two with ';')")
    return None, needs_gpu, expect_exit, None


def parse_markdown(path, shown):
    """Returns (blocks to run or skip, errors) of one markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, errors = [], []
    i = 0
    pending = None  # (line number, directive text) of a marker on the previous line
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            if pending:
                errors.append(f"{shown}:{pending[0]}: doctest marker not on the line right before a fence")
            pending = (i + 1, m.group(1))
            i += 1
            continue
        fm = FENCE_OPEN.match(line)
        if fm:
            indent, fence, language = len(fm.group(1)), fm.group(2), fm.group(3).lower()
            start = i + 1
            body = []
            i += 1
            while i < len(lines):
                close = re.match(r"^\s*(`{3,}|~{3,})\s*$", lines[i])
                if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                    break
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i].lstrip())
                i += 1
            else:
                errors.append(f"{shown}:{start}: fence opened here is never closed")
            i += 1
            marker = pending
            pending = None
            first = next((b.strip() for b in body if b.strip()), "")
            if language in RUN_LANGUAGES:
                skip, needs_gpu, expect_exit, instead = None, False, 0, None
                if marker:
                    try:
                        skip, needs_gpu, expect_exit, instead = parse_marker(marker[1], f"{shown}:{marker[0]}")
                    except ValueError as e:
                        errors.append(str(e))
                        continue
                blocks.append(Block(shown, start, language, "\n".join(body) + "\n", skip, needs_gpu, expect_exit,
                                    instead))
            else:
                if marker:
                    errors.append(f"{shown}:{marker[0]}: doctest marker on a ```{language or '(no language)'} "
                                  f"block, which is never run (only ```bash / ```sh blocks are)")
                if language == "" and COMMANDISH.match(first):
                    errors.append(f"{shown}:{start}: a block without a language that starts with a command "
                                  f"('{first[:60]}'): say ```bash to run it in this test, or ```text / ```console "
                                  f"when it is a synopsis or output")
            continue
        if pending:
            errors.append(f"{shown}:{pending[0]}: doctest marker not on the line right before a fence")
            pending = None
        if INDENTED_TRANSCRIPT.match(line):
            errors.append(f"{shown}:{i + 1}: a console transcript in an indented code block "
                          f"('{line.strip()[:60]}'): put the commands in a ```bash block (run by this test) "
                          f"and the output in a ```console or ```text block")
        i += 1
    if pending:
        errors.append(f"{shown}:{pending[0]}: doctest marker not on the line right before a fence")
    return blocks, errors


def markdown_files(source_dir, only):
    """The files given, else README.md, then docs/*.md in README order (the
    docs/X.md links of its "## Documentation" section, in order), then the
    other docs by name."""
    if only:
        return [os.path.relpath(os.path.abspath(p), source_dir) if os.path.isabs(p) else p for p in only]
    readme = os.path.join(source_dir, "README.md")
    files = ["README.md"] if os.path.isfile(readme) else []
    docs = os.path.join(source_dir, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md")) if os.path.isdir(docs) else []
    listed = []
    if files:
        with open(readme, encoding="utf-8") as f:
            section = re.split(r"^## ", f.read(), flags=re.M)
        for part in section:
            if part.startswith("Documentation"):
                for n in re.findall(r"docs/([A-Za-z0-9_.-]+\.md)", part):
                    if n in names and n not in listed:
                        listed.append(n)
    return files + ["docs/" + n for n in listed + [n for n in names if n not in listed]]


def gpu_present(mode):
    if mode != "auto":
        return mode == "yes"
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        r = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(l.startswith("GPU ") for l in r.stdout.splitlines())


def make_scratch(source_dir, bin_dir, dest):
    """A copy of the source tree (no build folders, .git, work/, runs/) with
    build/bin -> bin_dir (and build/lib -> bin_dir/../lib), made a git repository with one commit (as a fresh
    clone) when git is installed. Returns whether it is one."""
    def ignore(folder, names):
        if os.path.abspath(folder) != os.path.abspath(source_dir):
            return []
        return [n for n in names if n in NOT_COPIED or n.startswith("build")]
    shutil.copytree(source_dir, dest, ignore=ignore, symlinks=True)
    is_repo = False
    if shutil.which("git"):
        git = ["git", "-c", "user.name=doctest", "-c", "user.email=doctest@localhost", "-c", "commit.gpgsign=false"]
        for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the checkout the docs run in"]):
            subprocess.run(git + cmd, cwd=dest, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(dest, ".git", "info", "exclude"), "a") as f:
            f.write("/build/\n")  # the link to the binary made below is the test's, not the docs'
        is_repo = True
    os.makedirs(os.path.join(dest, "build"))
    os.symlink(os.path.abspath(bin_dir), os.path.join(dest, "build", "bin"))
    # build/lib (libtimitseg.so: docs/python.md's TIMITSEG_LIBRARY=build/lib/libtimitseg.so) beside it, when built
    lib_dir = os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "lib")
    if os.path.isdir(lib_dir):
        os.symlink(lib_dir, os.path.join(dest, "build", "lib"))
    return is_repo


def unclean(checkout):
    """`git status --porcelain` lines of the checkout (build/ is ignored by .gitignore)."""
    r = subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True)
    return [l for l in r.stdout.splitlines() if l.strip()]


def tail(text, n):
    lines = text.rstrip("\n").split("\n")
    cut = lines[-n:]
    return ("    ... (%d lines cut)\n" % (len(lines) - n) if len(lines) > n else "") + \
        "\n".join("    | " + l for l in cut)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source-dir", required=True, help="repository root (README.md, docs/, configs/, scripts/)")
    ap.add_argument("--bin-dir", required=True, help="folder of the built timitseg binary (put first on PATH)")
    ap.add_argument("--scratch", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto",
                    help="run needs-gpu blocks: auto = when `nvidia-smi -L` lists a GPU")
    ap.add_argument("--max-epochs", default="1", help=f"value of {ENV_MAX_EPOCHS} for the blocks (default 1)")
    ap.add_argument("--block-timeout", type=float, default=300, help="seconds one block may take (default 300)")
    ap.add_argument("--tail", type=int, default=40, help="output lines shown of a failing block")
    ap.add_argument("files", nargs="*", help="markdown files relative to --source-dir (default: README.md docs/*.md)")
    a = ap.parse_args(argv)

    source_dir = os.path.abspath(a.source_dir)
    bin_dir = os.path.abspath(a.bin_dir)
    if not os.path.isfile(os.path.join(bin_dir, "timitseg")):
        print(f"error: --bin-dir {bin_dir}: no timitseg binary there (build it first: "
              f"cmake --build build --target timitseg)", file=sys.stderr)
        return 2
    scratch = os.path.abspath(a.scratch)
    # The scratch folder is deleted first: never the source tree, an ancestor of
    # it, or a folder in it other than one under a top-level build* folder.
    inside = os.path.commonpath([scratch, source_dir]) == source_dir
    if os.path.commonpath([scratch, source_dir]) == scratch or (
            inside and not os.path.relpath(scratch, source_dir).split(os.sep)[0].startswith("build")):
        print(f"error: --scratch {scratch}: would delete (part of) the source tree {source_dir}; "
              f"use a folder under the build folder", file=sys.stderr)
        return 2
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    have_gpu = gpu_present(a.gpu)

    env = dict(os.environ)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env[ENV_MAX_EPOCHS] = a.max_epochs
    print(f"docs test: source {source_dir}, binary {bin_dir}/timitseg, scratch {scratch}, "
          f"{ENV_MAX_EPOCHS}={a.max_epochs}, GPU {'present' if have_gpu else 'absent (needs-gpu blocks skip)'}")

    counts = {"passed": 0, "failed": 0, "skipped": 0, "not run": 0}
    problems = []  # one line each, repeated in the summary
    t_all = time.monotonic()
    work = os.path.join(scratch, "checkout")  # one checkout for every file (made at the first block run)
    made = is_repo = False
    for shown in markdown_files(source_dir, a.files):
        path = os.path.join(source_dir, shown)
        if not os.path.isfile(path):
            problems.append(f"{shown}: no such file")
            continue
        blocks, errors = parse_markdown(path, shown)
        for e in errors:
            print(f"ERROR {e}")
        problems += errors
        if not blocks:
            continue
        log_name = re.sub(r"[^A-Za-z0-9_.-]", "_", shown[:-3] if shown.endswith(".md") else shown)
        failed_at = None
        for b in blocks:
            if b.skip is not None:
                print(f"SKIP {b.where}: {b.skip}")
                counts["skipped"] += 1
                continue
            if b.needs_gpu and not have_gpu:
                print(f"SKIP {b.where}: needs a CUDA GPU (none found: `nvidia-smi -L` lists none)")
                counts["skipped"] += 1
                continue
            if failed_at:
                print(f"NOT RUN {b.where}: an earlier block of this file failed ({failed_at})")
                counts["not run"] += 1
                continue
            if not made:
                is_repo = make_scratch(source_dir, bin_dir, work)
                made = True
            first = next((l.strip() for l in b.text.split("\n") if l.strip()), "")
            text = b.text
            if b.instead is not None:
                print(f"RUN  {b.where}: {b.instead} (instead of the block's '{first[:60]}')", flush=True)
                text = b.instead + "\n"
            else:
                print(f"RUN  {b.where}: {first[:100]}", flush=True)
            t0 = time.monotonic()
            # Own process group, so a timeout ends the block's children too.
            proc = subprocess.Popen(["bash", "-eu", "-o", "pipefail", "-c", text], cwd=work, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=a.block_timeout)
                status = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                status = None
            dt = time.monotonic() - t0
            # Every block's output is kept, to compare with the docs' ```console blocks.
            log = os.path.join(scratch, "_logs", f"{log_name}-{b.line}.log")
            os.makedirs(os.path.dirname(log), exist_ok=True)
            with open(log, "w", encoding="utf-8") as f:
                f.write(out)
            if status == b.expect_exit:
                print(f"     ok, exit status {status} ({dt:.1f} s)")
                counts["passed"] += 1
                continue
            why = (f"timed out after {a.block_timeout:.0f} s" if status is None else
                   f"exit status {status}, expected {b.expect_exit}")
            msg = f"{b.where}: block failed: {why} (cwd {work})"
            print(f"FAIL {msg}\n{tail(out, a.tail)}")
            problems.append(msg)
            counts["failed"] += 1
            failed_at = b.where

    if made and not is_repo:
        print("NOTE git is not installed: the checkout's `git status --porcelain` is not checked")
    elif made:
        left = unclean(work)
        if left:
            msg = (f"after the last file, `git status --porcelain` in {work} is not empty: the blocks wrote files "
                   f"outside work/ and runs/ that .gitignore does not cover, or changed tracked files: "
                   + ", ".join(l.strip() for l in left[:20]) + (" ..." if len(left) > 20 else ""))
            print(f"FAIL {msg}")
            problems.append(msg)
        else:
            print("     ok, the checkout is clean afterwards (`git status --porcelain` prints nothing)")
    print(f"docs test: {counts['passed']} blocks passed, {counts['failed']} failed, {counts['skipped']} skipped, "
          f"{counts['not run']} not run after a failure; {len(problems) - counts['failed']} other problems; "
          f"{time.monotonic() - t_all:.0f} s")
    if problems:
        print("problems:")
        for p in problems:
            print(f"  {p}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
