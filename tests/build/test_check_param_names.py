#!/usr/bin/env python3
"""scripts/check_param_names.py on small trees whose verdict is known (build.check_param_names_checker)."""
import unittest

from checker_trees import run_checker, tree

TABLE = ('#include "model/crf_params.h"\nnamespace timitseg::model {\nconstexpr char kPrefix[] = "crf.";\n'
         'const Table t = {{&V::transition, "crf.transition"}, // "crf.start" in a comment is no entry\n'
         '                 {&V::weight, "crf.projection.weight"}};\n}\n')
PY_TABLE = ('CRF_PREFIX = "crf."\n'
            'CRF_TENSORS = {"transition": "crf.transition"}  # \'crf.projection.weight\' here is a comment\n')


def run(root):
    return run_checker("check_param_names.py", root)


class ParamNames(unittest.TestCase):
    def test_members_comments_and_other_keys_pass(self):
        with tree({"model/crf_params.cpp": TABLE,
                   "python/timitseg/checkpoint.py": PY_TABLE,
                   "model/cpu/executor.cpp": 'namespace timitseg::model {\n'
                                             '// reads "crf.transition" through the view\n'
                                             'const float* f(const L& l, const float* p) { return l.crf().transition.in(p); }\n'
                                             'const char* k() { return "crf.reg"; }  /* "crf.projection." */\n}\n',
                   "config/config.cpp": 'const char* a = "crf.max_duration"; const char* b = "crf.transition_note";\n',
                   "python/timitseg/torch.py": 'from .checkpoint import CRF_TENSORS\n'
                                               '# "crf.transition" in a comment\nkey = CRF_TENSORS["transition"]\n'
                                               'x = "crf.reg"\n',
                   "tests/t.cpp": 'const char* t = "crf.transition";\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("PASSED: the 2 CRF tensor names appear only in model/crf_params.cpp", r.stdout)

    def test_planted_names_fail(self):
        with tree({"model/crf_params.cpp": TABLE,
                   "python/timitseg/checkpoint.py": PY_TABLE,
                   "model/cpu/executor.cpp": 'namespace timitseg::model {\n'
                                             'size_t o(const L& l) { return l.get("crf.transition").offset; }\n'
                                             'bool p(const std::string& n) { return n.rfind("crf.projection.", 0) == 0; }\n}\n',
                   "model/cuda/passes.cu": 'void t() {\n  tap(\n      "d_crf.projection.weight", g);\n}\n',
                   "train/train.cpp": 'auto x = get(\'c\', "crf.projection.weight");\n',
                   "python/timitseg/torch.py": 'key = "crf." + n\ny = \'crf.transition\'\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("model/cpu/executor.cpp:2: names the CRF tensor 'crf.transition' with the string "
                          "\"crf.transition\"", r.stdout)
            self.assertIn("model/cpu/executor.cpp:3: names a prefix of the CRF's tensor names with the string "
                          "\"crf.projection.\"", r.stdout)
            self.assertIn("model/cuda/passes.cu:3: names the CRF tensor 'crf.projection.weight' (its gradient's tap)",
                          r.stdout)
            self.assertIn("train/train.cpp:1: names the CRF tensor 'crf.projection.weight'", r.stdout)
            self.assertIn("python/timitseg/torch.py:1: names a prefix of the CRF's tensor names with the string 'crf.'",
                          r.stdout)
            self.assertIn("python/timitseg/torch.py:2: names the CRF tensor 'crf.transition'", r.stdout)
            self.assertIn("FAILED: 6 name-string use(s)", r.stdout)

    def test_python_table_must_agree_with_the_cpp_table(self):
        with tree({"model/crf_params.cpp": TABLE,
                   "python/timitseg/checkpoint.py": 'CRF_TENSORS = {"transition": "crf.transition",\n'
                                                    '               "start": "crf.start",\n'
                                                    '               "bias": "crf.projection.weight"}\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("CRF_TENSORS['start'] = 'crf.start' is no tensor of model/crf_params.cpp's table", r.stdout)
            self.assertIn("CRF_TENSORS['bias'] = 'crf.projection.weight': the key must be the name without 'crf.'",
                          r.stdout)
            self.assertIn("FAILED: 2 name-string use(s)", r.stdout)

    def test_missing_table_fails(self):
        with tree({"model/params.cpp": 'const char* n = "crf.transition";\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("model/crf_params.cpp: no table of the CRF's checkpoint names", r.stdout)


if __name__ == "__main__":
    unittest.main()
