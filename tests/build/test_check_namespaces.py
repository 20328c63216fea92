#!/usr/bin/env python3
"""scripts/check_namespaces.py on small trees whose verdict is known (build.check_namespaces_checker)."""
import unittest

from checker_trees import run_checker, tree


def run(root):
    return run_checker("check_namespaces.py", root)


class Namespaces(unittest.TestCase):
    def test_matching_namespaces_pass(self):
        with tree({"eval/infer.cpp": '#include "eval/infer.h"\nnamespace timitseg::eval {\nint f() { return 1; }\n}\n',
                   "train/t.h": "namespace spdlog::sinks { class sink; }\nnamespace timitseg::train {\nvoid train();\n}\n",
                   "crf/cpu/c.cpp": "namespace timitseg::crf::cpu {\n}\n",
                   "crf/cuda/b.cu": "namespace timitseg::crf {\nnamespace cuda_impl {\n}\n}\n",
                   "model/cuda/o.h": "namespace timitseg::model::gpu {\nvoid k();\n}\n",
                   "common/c.h": "#pragma once\nnamespace timitseg {\nnamespace cuda {\nint n();\n}\n}\n",
                   "common/m.h": "#pragma once\n#define CHECK(x) (x)\n",
                   "app/report/r.h": "namespace timitseg::app::report {\n}\n",
                   "capi/api.cpp": 'struct timitseg_model { int x; };\nextern "C" {\nint timitseg_f() { return 0; }\n}\n',
                   "tests/t.cpp": "namespace timitseg::model {\n}\n"}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)

    def test_wrong_or_missing_namespaces_fail(self):
        with tree({"eval/infer.cpp": "namespace timitseg::model {\nint f() { return 1; }\n}\n",
                   "train/t.cpp": "namespace timitseg::train {\n}\nnamespace timitseg::eval {\nvoid g() {}\n}\n",
                   "app/report/r.h": "namespace timitseg::report {\n}\n",
                   "data/d.cpp": "// namespace timitseg::data {\nint free_function() { return 0; }\n",
                   "capi/helpers.cpp": "namespace {\nint h() { return 0; }\n}\n"}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1)
            self.assertIn("eval/infer.cpp: opens timitseg::model, not timitseg::eval", r.stdout)
            self.assertIn("train/t.cpp: opens timitseg::eval, the namespace of eval/, from train/", r.stdout)
            self.assertIn("app/report/r.h: opens timitseg::report, not timitseg::app", r.stdout)
            self.assertIn("data/d.cpp: opens no namespace timitseg::data", r.stdout)
            self.assertIn("capi/helpers.cpp: opens no namespace timitseg::capi", r.stdout)
            self.assertIn("5 file(s)", r.stdout)

    def test_settings_keeps_env_and_limits(self):
        with tree({"settings/env.h": "#pragma once\nnamespace timitseg::env {\nint integer();\n}\n",
                   "settings/limits.h": "#pragma once\nnamespace timitseg::limits {\nstruct Range {};\n}\n",
                   "settings/bad.h": "namespace timitseg::settings {\nint f();\n}\n",
                   "common/c.cpp": "namespace timitseg {\nint g();\n}\nnamespace timitseg::limits {\nint h();\n}\n",
                   "eval/e.cpp": "namespace timitseg::eval {\n}\nnamespace timitseg::env {\nint k();\n}\n",
                   "crf/c.cpp": '#include "settings/limits.h"\nnamespace timitseg::crf {\nint n();\n}\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("settings/bad.h: opens timitseg::settings, not timitseg::env or timitseg::limits", r.stdout)
            self.assertIn("common/c.cpp: opens timitseg::limits, the namespace of settings/, from common/", r.stdout)
            self.assertIn("eval/e.cpp: opens timitseg::env, the namespace of settings/, from eval/", r.stdout)
            self.assertNotIn("settings/env.h", r.stdout)
            self.assertNotIn("settings/limits.h", r.stdout)
            self.assertNotIn("crf/c.cpp", r.stdout)
            self.assertIn("3 file(s)", r.stdout)


if __name__ == "__main__":
    unittest.main()
