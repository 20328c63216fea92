#!/usr/bin/env python3
"""`timitseg --version` names the commit the binary was built from
(build.version_commit): the commit in its line equals `git rev-parse HEAD` of
the source tree. Only the commit is compared: "-dirty" depends on edits made
after the build. Skipped (exit 77, saying why) without git or outside a
checkout.

  test_version_commit.py TIMITSEG SOURCE_DIR GIT
"""
import re
import subprocess
import sys


def main():
    binary, src, git = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
    if not git:
        print("version_commit: skipped: git was not found by CMake (find_package(Git))")
        return 77
    head = subprocess.run([git, "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        print(f"version_commit: skipped: {src} is not a git checkout ({head.stderr.strip()})")
        return 77
    v = subprocess.run([binary, "--version"], capture_output=True, text=True)
    line = v.stdout.strip()
    m = re.search(r"\(commit ([0-9a-f]{40})(-dirty)?,", line)
    if v.returncode != 0 or not m:
        print(f"version_commit: `{binary} --version` exited {v.returncode} and printed no commit: {line!r}")
        return 1
    if m.group(1) != head.stdout.strip():
        print(f"version_commit: --version names commit {m.group(1)}, the source tree's HEAD is "
              f"{head.stdout.strip()} (a stale stamp: build again)")
        return 1
    print(f"version_commit: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
