#!/usr/bin/env python3
"""scripts/check_include_cycles.py on small trees whose verdict is known (build.check_include_cycles_checker)."""
import unittest

from checker_trees import run_checker, tree


def run(root):
    return run_checker("check_include_cycles.py", root)


def header(*includes):
    return "#pragma once\n" + "".join(f'#include "{i}"\n' for i in includes)


def source(own, *includes):
    return f'#include "{own}"\n' + "".join(f'#include "{i}"\n' for i in includes)


class IncludeCycles(unittest.TestCase):
    def test_includes_down_one_way_pass(self):
        # a.cpp -> b.h -> c.h; a module's own header; a room including another room's module and back
        # is the layers' business, not this check's; tests/ is not a room
        with tree({"eval/a.h": header("eval/b.h"),
                   "eval/a.cpp": source("eval/a.h", "eval/b.h", "eval/c.h"),
                   "eval/b.h": header("eval/c.h"),
                   "eval/b.cpp": source("eval/b.h"),
                   "eval/c.h": header("model/m.h"),
                   "model/m.h": header(),
                   "model/m.cpp": source("model/m.h", "eval/a.h"),
                   "tests/t.cpp": source("eval/a.h"),
                   "tests/u.h": header("tests/t.h"),
                   "tests/t.h": header("tests/u.h")}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("PASSED", r.stdout)

    def test_planted_mutual_include_fails(self):
        # the pair of the rule: a header's source includes a header that includes the first one back
        with tree({"data/synth.h": header(),
                   "data/synth.cpp": source("data/synth.h", "data/synth_internal.h"),
                   "data/synth_internal.h": header("data/synth.h"),
                   "data/other.h": header("data/synth.h")}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("data/: modules include each other: data/synth (data/synth.cpp:2 includes "
                          "data/synth_internal) -> data/synth_internal (data/synth_internal.h:2 includes "
                          "data/synth)", r.stdout)
            self.assertIn("FAILED: 1 include cycle(s)", r.stdout)
            self.assertNotIn("data/other", r.stdout)

    def test_longer_loop_and_subfolders_and_cuda_fail(self):
        # a loop of three modules across sub-folders of one room; a .cuh/.cu module in another room
        with tree({"model/executor.h": header(),
                   "model/executor.cpp": source("model/executor.h", "model/cpu/cpu_executor.h"),
                   "model/cpu/cpu_executor.h": header("model/step.h"),
                   "model/step.h": header("model/executor.h"),
                   "crf/cuda/reduce.cuh": header("crf/cuda/recurrence.cuh"),
                   "crf/cuda/recurrence.cuh": header(),
                   "crf/cuda/recurrence.cu": source("crf/cuda/recurrence.cuh", "crf/cuda/reduce.cuh")}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("crf/: modules include each other: crf/cuda/recurrence (crf/cuda/recurrence.cu:2 includes "
                          "crf/cuda/reduce) -> crf/cuda/reduce (crf/cuda/reduce.cuh:2 includes crf/cuda/recurrence)",
                          r.stdout)
            self.assertIn("model/: modules include each other: model/cpu/cpu_executor (model/cpu/cpu_executor.h:2 "
                          "includes model/step) -> model/step (model/step.h:2 includes model/executor) -> "
                          "model/executor (model/executor.cpp:2 includes model/cpu/cpu_executor)", r.stdout)
            self.assertIn("FAILED: 2 include cycle(s)", r.stdout)

    def test_the_shared_header_breaks_the_pair(self):
        # the fix the message suggests: what both need in a lower header
        with tree({"data/synth.h": header("data/synth_utterance.h"),
                   "data/synth.cpp": source("data/synth.h", "data/synth_internal.h"),
                   "data/synth_utterance.h": header(),
                   "data/synth_internal.h": header("data/synth_utterance.h")}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
