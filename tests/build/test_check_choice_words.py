#!/usr/bin/env python3
"""scripts/check_choice_words.py on small trees whose verdict is known (build.check_choice_words_checker)."""
import os
import unittest

from checker_trees import ROOT, run_checker, tree

TABLE = ('#pragma once\n#include "common/enum_names.h"\nnamespace timitseg::data {\n'
         'enum class Voice { tones, flite };\n'
         'TIMITSEG_ENUM_NAMES(Voice, 2, {Voice::tones, "tones"},\n'
         '                    {Voice::flite, "flite"});\n}\n')
MACRO = ('#pragma once\n#define TIMITSEG_ENUM_NAMES(E, N, ...) \\\n'
         '  constexpr std::array<std::pair<E, const char*>, N> enum_names(E) { return {{__VA_ARGS__}}; }\n')


def run(root):
    return run_checker("check_choice_words.py", root)


class ChoiceWords(unittest.TestCase):
    def test_enum_compares_and_other_words_pass(self):
        with tree({"common/enum_names.h": MACRO,
                   "data/voice.h": TABLE,
                   "data/synth.cpp": '#include "data/voice.h"\nnamespace timitseg::data {\n'
                                     'bool f(Voice v) { return v == Voice::flite; }\n'
                                     'bool g(const std::string& p) { return p == "h#" || p != "q"; }\n'
                                     '// a comment may say o.voice == "flite"\n'
                                     'const char* h() { return "flite"; }\n}\n',
                   # app/ reads the words into the enum: compares there are the CLI's
                   "app/cmd.cpp": 'namespace timitseg::app {\nbool k(const std::string& s) { return s == "tones"; }\n}\n',
                   "tests/t.cpp": 'bool t(const std::string& s) { return s == "flite"; }\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("PASSED: no compare of text with any of 2 choice words", r.stdout)

    def test_planted_compares_fail(self):
        with tree({"common/enum_names.h": MACRO,
                   "data/voice.h": TABLE,
                   "data/synth.cpp": 'namespace timitseg::data {\n'
                                     'bool f(const std::string& v) { return v == "flite"; }\n'
                                     'bool g(const std::string& v) { return "tones" != v; }\n}\n',
                   "eval/e.cpp": 'namespace timitseg::eval {\nint c(const std::string& v) { return v.compare("tones"); }\n'
                                 'int s(const char* v) { return std::strcmp(v, "flite"); }\n}\n',
                   "crf/cuda/b.cu": 'namespace timitseg::crf {\nbool b(const std::string& v) {\n'
                                    '  return v ==\n      "flite"; }\n}\n',
                   # the table may live in app/ too: its words are choice words below app/ all the same
                   "app/w.h": 'namespace timitseg::app {\nenum class Layout { kaldi };\n'
                              'TIMITSEG_ENUM_NAMES(Layout, 1, {Layout::kaldi, "kaldi"});\n}\n',
                   "train/t.cpp": 'namespace timitseg::train {\nbool k(const std::string& v) { return v == "kaldi"; }\n}\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("data/synth.cpp:2: compares text with the choice word 'flite' (Voice)", r.stdout)
            self.assertIn("data/synth.cpp:3: compares text with the choice word 'tones' (Voice)", r.stdout)
            self.assertIn("eval/e.cpp:2: compares text with the choice word 'tones' (Voice)", r.stdout)
            self.assertIn("eval/e.cpp:3: compares text with the choice word 'flite' (Voice)", r.stdout)
            self.assertIn("crf/cuda/b.cu:4: compares text with the choice word 'flite' (Voice)", r.stdout)
            self.assertIn("train/t.cpp:2: compares text with the choice word 'kaldi' (Layout)", r.stdout)
            self.assertIn("FAILED: 6 compare(s)", r.stdout)

    def test_allowed_compare_is_only_allowed_in_its_file(self):
        table = ('namespace timitseg::config {\nenum class Onset { off, on };\n'
                 'TIMITSEG_ENUM_NAMES(Onset, 2, {Onset::off, "false"}, {Onset::on, "true"});\n}\n')
        with tree({"config/config_enums.h": table,
                   "config/config.cpp": 'namespace timitseg::config {\nbool b(const std::string& t) { return t == "true"; }\n}\n',
                   "model/m.cpp": 'namespace timitseg::model {\nbool b(const std::string& t) { return t == "true"; }\n}\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertNotIn("config/config.cpp", r.stdout)
            self.assertIn("model/m.cpp:2: compares text with the choice word 'true' (Onset)", r.stdout)

    def test_environment_launcher_and_label_set_words_are_choice_words(self):
        # the product's own tables (the CUDA backend's environment knobs, the
        # launchers, the shipped TIMIT label sets) with a compare of each kind planted
        def real(rel):
            with open(os.path.join(ROOT, rel)) as f:
                return f.read()
        planted = {
            "crf/cuda/backend.cu": 'namespace timitseg::crf {\nvoid k() {\n'
                                   '  fast = env_knob("TIMITSEG_CUDA_RECURRENCE") != "exact";\n'
                                   '  ring = env_knob("TIMITSEG_CUDA_RING") == "global";\n'
                                   '  lin = "linear" == env_knob("TIMITSEG_CUDA_MARGINALS");\n'
                                   '  cp = checkpoint == "always" ? 1 : checkpoint == "never" ? 2 : 0;\n'
                                   '  sh = env_knob("TIMITSEG_CUDA_RING").compare("shared");\n}\n}\n',
            "train/distributed.cpp": 'namespace timitseg::train {\nstd::string r(const std::string& l) {\n'
                                     '  if (l == "mpirun") return "a";\n  if (l == "srun") return "b";\n'
                                     '  return l != "none" ? "c" : "d"; }\n}\n',
            "data/phone_set.cpp": 'namespace timitseg::data {\n'
                                  'bool t(const std::string& v) { return v == "39" || v == "48" || v == "61"; }\n}\n',
        }
        files = {rel: real(rel) for rel in ("common/enum_names.h", "common/dist.h", "crf/cuda_knobs.h",
                                            "data/phone_set.h")}
        files.update(planted)
        with tree(files) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            for line, word, enum in ((3, "exact", "CudaRecurrence"), (4, "global", "CudaRing"),
                                     (5, "linear", "CudaMarginals"), (6, "always", "CudaCheckpoint"),
                                     (6, "never", "CudaCheckpoint"), (7, "shared", "CudaRing")):
                self.assertIn(f"crf/cuda/backend.cu:{line}: compares text with the choice word '{word}' ({enum})",
                              r.stdout)
            for line, word in ((3, "mpirun"), (4, "srun"), (5, "none")):
                self.assertIn(f"train/distributed.cpp:{line}: compares text with the choice word '{word}' (Launcher)",
                              r.stdout)
            for word in ("39", "48", "61"):
                self.assertIn(f"data/phone_set.cpp:2: compares text with the choice word '{word}' (TimitLabelSet)",
                              r.stdout)
            self.assertIn("FAILED: 12 compare(s)", r.stdout)


if __name__ == "__main__":
    unittest.main()
