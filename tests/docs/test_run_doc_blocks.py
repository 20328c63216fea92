#!/usr/bin/env python3
"""Tests of tests/docs/run_doc_blocks.py on small markdown trees whose outcome
is known by construction: which blocks run, in which folder and order, with
which environment; that a failing block, a malformed marker or an unlabelled
command block fails the run naming FILE:LINE; that markers skip, gate on a GPU
and expect an exit status. A fake `timitseg` (a shell script) stands in for
the binary. Python 3 standard library only."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_doc_blocks.py")
FENCE = "`" * 3


def md(text):
    """Dedents and writes ``` for ''' so the markdown reads inside this file."""
    return textwrap.dedent(text).lstrip("\n").replace("'''", FENCE)


class RunnerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        root = self.tmp.name
        self.src = os.path.join(root, "src")
        self.bin = os.path.join(root, "bin")
        self.scratch = os.path.join(root, "scratch")
        os.makedirs(os.path.join(self.src, "docs"))
        os.makedirs(os.path.join(self.src, "configs"))
        os.makedirs(os.path.join(self.src, "build", "bin"))
        os.makedirs(os.path.join(self.src, "work"))
        os.makedirs(self.bin)
        with open(os.path.join(self.src, "configs", "x.yaml"), "w") as f:
            f.write("k: 1\n")
        with open(os.path.join(self.src, "work", "big"), "w") as f:
            f.write("not copied\n")
        with open(os.path.join(self.src, ".gitignore"), "w") as f:
            f.write("/runs/\n/work/\n")
        fake = os.path.join(self.bin, "timitseg")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\necho "fake timitseg $*"\n[ "$1" = fail ] && exit 7\nexit 0\n')
        os.chmod(fake, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, text):
        with open(os.path.join(self.src, rel), "w") as f:
            f.write(md(text))

    def run_runner(self, *extra):
        r = subprocess.run([sys.executable, RUNNER, "--source-dir", self.src, "--bin-dir", self.bin,
                            "--scratch", self.scratch, "--gpu", "no", *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        return r.returncode, r.stdout

    def test_blocks_run_in_order_in_a_scratch_copy_with_the_binary_and_the_epoch_cap(self):
        self.write("README.md", """
            # t
            '''bash
            mkdir -p work
            timitseg synth > work/made.txt
            test -f configs/x.yaml
            test ! -e work/big
            test -x build/bin/timitseg
            echo "cap=$TIMITSEG_DOCTEST_MAX_EPOCHS" >> work/made.txt
            '''
            text between
            '''sh
            grep -q "fake timitseg synth" work/made.txt
            grep -q "cap=1" work/made.txt
            '''
            '''text
            this is never run: exit 9
            '''
            '''console
            $ timitseg fail
            '''
            ## Documentation
            - docs/b.md: second
            - docs/a.md: third
            ## Other
            docs/c.md
            """)
        # README's order (b, a), then the unlisted ones by name (c); one shared checkout
        self.write("docs/a.md", """
            '''bash
            grep -q "cap=1" work/made.txt && test -e work/b.txt && echo a >> work/order.txt
            '''
            """)
        self.write("docs/b.md", """
            '''bash
            test -e work/made.txt   # the checkout README's blocks ran in
            echo b > work/order.txt && touch work/b.txt
            '''
            """)
        self.write("docs/c.md", """
            '''bash
            echo c >> work/order.txt
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 0, out)
        self.assertIn("5 blocks passed, 0 failed, 0 skipped", out)
        self.assertIn("RUN  README.md:2: mkdir -p work", out)
        self.assertIn("RUN  README.md:11:", out)
        self.assertLess(out.index("RUN  docs/b.md:1:"), out.index("RUN  docs/a.md:1:"))
        self.assertLess(out.index("RUN  docs/a.md:1:"), out.index("RUN  docs/c.md:1:"))
        self.assertEqual(out.count("RUN "), 5, out)
        with open(os.path.join(self.scratch, "checkout", "work", "order.txt")) as f:
            self.assertEqual(f.read(), "b\na\nc\n")
        self.assertIn("the checkout is clean afterwards", out)

    def test_files_left_outside_work_or_a_changed_tracked_file_fail_the_run(self):
        self.write("README.md", """
            '''bash
            echo stray > stray.txt
            mkdir -p runs work && touch runs/ok work/ok
            '''
            """)
        self.write("docs/a.md", """
            '''bash
            echo "k: 2" > configs/x.yaml
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("2 blocks passed, 0 failed", out)
        line = next(l for l in out.splitlines() if l.startswith("FAIL after the last file, `git status --porcelain`"))
        self.assertTrue(line.endswith(": M configs/x.yaml, ?? stray.txt"), line)  # runs/ and work/ are not listed

    def test_a_failing_block_fails_the_run_naming_file_and_line_and_stops_that_file(self):
        self.write("README.md", """
            '''bash
            echo first
            '''
            '''bash
            false
            echo "set -e did not stop the block"
            '''
            '''bash
            echo after
            '''
            """)
        self.write("docs/ok.md", """
            '''bash
            echo fine
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL README.md:4: block failed: exit status 1, expected 0", out)
        self.assertNotIn("set -e did not stop", out)
        self.assertIn("NOT RUN README.md:8: an earlier block of this file failed (README.md:4)", out)
        self.assertIn("RUN  docs/ok.md:1:", out)
        self.assertIn("2 blocks passed, 1 failed, 0 skipped, 1 not run", out)

    def test_pipefail_and_unset_variables_fail(self):
        self.write("README.md", """
            '''bash
            timitseg fail | cat
            '''
            """)
        self.write("docs/u.md", """
            '''bash
            echo "$NO_SUCH_VARIABLE_HERE"
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL README.md:1: block failed: exit status 7", out)
        self.assertIn("FAIL docs/u.md:1: block failed: exit status 1", out)

    def test_markers_skip_gate_on_gpu_and_expect_an_exit_status(self):
        self.write("README.md", """
            <!-- doctest: skip: needs the licensed TIMIT corpus -->
            '''bash
            exit 3
            '''
            <!-- doctest: needs-gpu -->
            '''bash
            mkdir -p work && echo gpu-ran > work/gpu.txt
            '''
            <!-- doctest: expect-exit 7 -->
            '''bash
            timitseg fail
            echo "not reached"
            '''
            <!-- doctest: needs-gpu; expect-exit 7 -->
            '''bash
            timitseg fail
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 0, out)
        self.assertIn("SKIP README.md:2: needs the licensed TIMIT corpus", out)
        self.assertIn("SKIP README.md:6: needs a CUDA GPU", out)
        self.assertIn("SKIP README.md:15: needs a CUDA GPU", out)
        self.assertIn("1 blocks passed, 0 failed, 3 skipped", out)
        code, out = self.run_runner("--gpu", "yes")
        self.assertEqual(code, 0, out)
        self.assertIn("3 blocks passed, 0 failed, 1 skipped", out)

    def test_instead_runs_its_command_in_place_of_the_block(self):
        self.write("README.md", """
            <!-- doctest: instead: echo replaced > made.txt -->
            '''bash
            exit 9
            '''
            '''bash
            grep -q replaced made.txt
            '''
            <!-- doctest: instead -->
            '''bash
            true
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("README.md:8: 'instead' needs a command", out)
        self.assertIn("RUN  README.md:2: echo replaced > made.txt (instead of the block's 'exit 9')", out)
        self.assertIn("2 blocks passed, 0 failed", out)

    def test_an_unexpected_exit_status_fails(self):
        self.write("README.md", """
            <!-- doctest: expect-exit 1 -->
            '''bash
            timitseg ok
            '''
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL README.md:2: block failed: exit status 0, expected 1", out)

    def test_malformed_markers_and_unlabelled_commands_are_errors(self):
        self.write("README.md", """
            <!-- doctest: skip -->
            '''bash
            echo a
            '''
            <!-- doctest: needs-gpu -->

            '''bash
            echo b
            '''
            <!-- doctest: expect-exit one -->
            '''bash
            echo c
            '''
            <!-- doctest: skip: output -->
            '''text
            out
            '''
            '''
            timitseg synth --out DIR [--speakers 16]
            '''
            '''
            timitseg: a help text is fine unlabelled
            Usage: timitseg [OPTIONS] SUBCOMMAND
            '''
            A transcript:

                $ timitseg train --config x.yaml
                [info] ...
            """)
        code, out = self.run_runner()
        self.assertEqual(code, 1, out)
        self.assertIn("README.md:1: 'skip' needs a reason", out)
        self.assertIn("README.md:5: doctest marker not on the line right before a fence", out)
        self.assertIn("README.md:10: unknown doctest directive 'expect-exit one'", out)
        self.assertIn("README.md:14: doctest marker on a ```text block, which is never run", out)
        self.assertIn("README.md:18: a block without a language that starts with a command", out)
        self.assertNotIn("README.md:21:", out)
        self.assertIn("README.md:27: a console transcript in an indented code block", out)
        # the valid, unmarked block after the stray marker still ran
        self.assertIn("RUN  README.md:7: echo b", out)

    def test_a_timeout_fails_the_block(self):
        self.write("README.md", """
            '''bash
            sleep 30
            echo "a second command: bash forks sleep as a child"
            '''
            """)
        code, out = self.run_runner("--block-timeout", "1")
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL README.md:1: block failed: timed out after 1 s", out)

    def test_refuses_a_scratch_folder_that_would_delete_the_sources(self):
        self.write("README.md", "x\n")
        for bad in (self.src, os.path.join(self.src, "docs"), os.path.dirname(self.src)):
            r = subprocess.run([sys.executable, RUNNER, "--source-dir", self.src, "--bin-dir", self.bin,
                                "--scratch", bad], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("would delete", r.stdout)
        self.assertTrue(os.path.isfile(os.path.join(self.src, "README.md")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
