#!/usr/bin/env python3
"""common/git_stamp.cmake (the commit `timitseg --version` names) on throwaway
git repositories whose HEAD is known (build.git_stamp): the header names HEAD,
"-dirty" while a tracked file differs, the new HEAD after a commit, "unknown"
outside a checkout or without git, and it is not rewritten (same mtime and
inode) when nothing changed, so builds stay incremental.

  test_git_stamp.py CMAKE GIT   (GIT "" or missing: skipped, exit 77)
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "common", "git_stamp.cmake")
CMAKE = sys.argv[1] if len(sys.argv) > 1 else "cmake"
GIT = sys.argv[2] if len(sys.argv) > 2 else ""


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run([GIT, "-C", repo, *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def stamp(src, out, git_exe=None):
    """Runs the script; the commit it wrote (the string of TIMITSEG_GIT_COMMIT)."""
    subprocess.run([CMAKE, f"-DGIT_EXECUTABLE={GIT if git_exe is None else git_exe}", f"-DSOURCE_DIR={src}",
                    f"-DOUT={out}", "-P", SCRIPT], check=True, capture_output=True, text=True)
    with open(out) as f:
        m = re.search(r'^#define TIMITSEG_GIT_COMMIT "([^"]*)"$', f.read(), re.M)
    return m.group(1)


class GitStamp(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = os.path.join(self.tmp.name, "repo")
        self.out = os.path.join(self.tmp.name, "build", "git_commit.h")
        os.makedirs(os.path.dirname(self.out))
        os.makedirs(self.repo)
        git(self.repo, "init", "-q")
        with open(os.path.join(self.repo, "a.txt"), "w") as f:
            f.write("one\n")
        git(self.repo, "add", "a.txt")
        git(self.repo, "commit", "-q", "-m", "first")

    def tearDown(self):
        self.tmp.cleanup()

    def test_follows_head_and_rewrites_only_on_change(self):
        first = git(self.repo, "rev-parse", "HEAD")
        self.assertEqual(stamp(self.repo, self.out), first)
        before = os.stat(self.out)
        self.assertEqual(stamp(self.repo, self.out), first)  # nothing changed: the file is left alone
        after = os.stat(self.out)
        self.assertEqual((before.st_mtime_ns, before.st_ino), (after.st_mtime_ns, after.st_ino))
        with open(os.path.join(self.repo, "a.txt"), "w") as f:
            f.write("two\n")
        self.assertEqual(stamp(self.repo, self.out), first + "-dirty")
        with open(os.path.join(self.repo, "new.txt"), "w") as f:  # untracked files do not count
            f.write("x\n")
        self.assertEqual(stamp(self.repo, self.out), first + "-dirty")
        git(self.repo, "commit", "-q", "-am", "second")  # a commit without any configure
        second = git(self.repo, "rev-parse", "HEAD")
        self.assertNotEqual(second, first)
        self.assertRegex(second, r"^[0-9a-f]{40}$")
        self.assertEqual(stamp(self.repo, self.out), second)
        git(self.repo, "checkout", "-q", first)  # a detached HEAD
        self.assertEqual(stamp(self.repo, self.out), first)

    def test_unknown_outside_a_checkout_or_without_git(self):
        plain = os.path.join(self.tmp.name, "plain")
        os.makedirs(plain)
        # GIT_CEILING_DIRECTORIES: the temporary folder is not searched upwards for a repository
        os.environ["GIT_CEILING_DIRECTORIES"] = self.tmp.name
        try:
            self.assertEqual(stamp(plain, self.out), "unknown")
        finally:
            del os.environ["GIT_CEILING_DIRECTORIES"]
        self.assertEqual(stamp(self.repo, self.out, git_exe=""), "unknown")


if __name__ == "__main__":
    if not GIT or not os.path.exists(GIT):
        print("test_git_stamp: skipped: git was not found by CMake (find_package(Git))")
        sys.exit(77)
    unittest.main(argv=sys.argv[:1])
