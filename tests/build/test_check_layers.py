#!/usr/bin/env python3
"""scripts/check_layers.py on small trees whose verdict is known (build.check_layers_checker)."""
import unittest

from checker_trees import run_checker, tree


def run(root):
    return run_checker("check_layers.py", root)


class Layers(unittest.TestCase):
    def test_downward_includes_pass(self):
        with tree({"app/a.cpp": '#include "train/t.h"\n#include "common/c.h"\n',
                   "train/t.h": '#include "eval/e.h"\n#include "train/u.h"\n',
                   "eval/e.h": '#include "model/m.h"\n',
                   "model/m.h": '#include "crf/c.h"\n#include "data/d.h"\n#include <vector>\n',
                   "crf/cuda/k.cu": '#include "common/cuda.h"\n',
                   "common/c.h": '#include "common/b.h"\n#include "tests/x.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 0, r.stdout)

    def test_upward_and_sideways_includes_fail(self):
        with tree({"model/infer.cpp": '// x\n#include "train/train.h"\n',
                   "crf/a.cu": '#include "data/d.h"\n',
                   "eval/e.cpp": '  #  include "app/commands.h"\n',
                   "common/c.h": '#include "model/m.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1)
            self.assertIn("model/infer.cpp:2: model/ may not include train/", r.stdout)
            self.assertIn("crf/a.cu:1: crf/ may not include data/", r.stdout)
            self.assertIn("eval/e.cpp:1: eval/ may not include app/", r.stdout)
            self.assertIn("common/c.h:1: common/ may not include model/", r.stdout)
            self.assertIn("4 include(s)", r.stdout)

    def test_config_sits_between_model_and_crf_data(self):
        with tree({"model/params.h": '#include "config/config.h"\n',
                   "train/t.cpp": '#include "config/config_enums.h"\n',
                   "config/config.cpp": '#include "crf/backend.h"\n#include "data/d.h"\n#include "common/c.h"\n',
                   "config/bad.cpp": '#include "model/encoder.h"\n',
                   "crf/c.cpp": '#include "config/config.h"\n',
                   "data/d.cpp": '#include "config/config_enums.h"\n',
                   "capi/crf_ops.cpp": '#include "config/config.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("config/bad.cpp:1: config/ may not include model/", r.stdout)
            self.assertIn("crf/c.cpp:1: crf/ may not include config/", r.stdout)
            self.assertIn("data/d.cpp:1: data/ may not include config/", r.stdout)
            self.assertIn("capi/crf_ops.cpp:1: capi/crf_* may not include config/", r.stdout)
            self.assertNotIn("model/params.h", r.stdout)
            self.assertNotIn("train/t.cpp", r.stdout)
            self.assertNotIn("config/config.cpp", r.stdout)
            self.assertIn("4 include(s)", r.stdout)

    def test_model_implementations_are_private(self):
        with tree({"model/executor.cpp": '#include "model/cpu/cpu_executor.h"\n#include "model/cuda/ops.h"\n',
                   "model/cuda/k.cu": '#include "model/cpu/network.h"\n',
                   "eval/infer.cpp": '#include "model/executor.h"\n#include "model/cpu/network.h"\n',
                   "app/cmd.cpp": '#include "model/cuda/lstm_fused.h"\n#include "model/cudax.h"\n',
                   "train/t.cpp": '#include "model/cpu.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("eval/infer.cpp:2: eval/ may not include model/cpu/", r.stdout)
            self.assertIn("app/cmd.cpp:1: app/ may not include model/cuda/", r.stdout)
            self.assertNotIn("model/executor.cpp", r.stdout)  # model/ itself may
            self.assertNotIn("model/cuda/k.cu", r.stdout)
            self.assertNotIn("train/t.cpp", r.stdout)  # a file named model/cpu.h is no sub-folder
            self.assertIn("2 include(s)", r.stdout)

    def test_capi_crf_half_stands_on_crf(self):
        with tree({"capi/crf_ops.cpp": '#include "capi/crf_batch.h"\n#include "capi/api_detail.h"\n'
                                       '#include "crf/session.h"\n#include "common/cuda.h"\n',
                   "capi/crf_fast.cpp": '#include "model/crf_device.h"\n#include "crf/duration.h"\n',
                   "capi/crf_batch.h": '#include "capi/model_detail.h"\n#include "eval/infer.h"\n',
                   "capi/crf_f64.cpp": '#include "data/audio.h"\n#include "app/x.h"\n',
                   "capi/model_api.cpp": '#include "eval/align.h"\n#include "model/checkpoint.h"\n'
                                         '#include "capi/crf_batch.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("capi/crf_fast.cpp:1: capi/crf_* may not include model/", r.stdout)
            self.assertIn("capi/crf_batch.h:1: capi/crf_* may not include capi/model_detail.h", r.stdout)
            self.assertIn("capi/crf_batch.h:2: capi/crf_* may not include eval/", r.stdout)
            self.assertIn("capi/crf_f64.cpp:1: capi/crf_* may not include data/", r.stdout)
            self.assertIn("capi/crf_f64.cpp:2: capi/ may not include app/", r.stdout)  # the folder's own rule
            self.assertNotIn("capi/crf_ops.cpp", r.stdout)
            self.assertNotIn("capi/model_api.cpp", r.stdout)  # the model half: capi/'s rule
            self.assertIn("5 include(s)", r.stdout)

    def test_settings_is_the_bottom_room(self):
        with tree({"common/dist.cpp": '#include "settings/env.h"\n#include "common/dist.h"\n',
                   "crf/cuda/backend.cu": '#include "settings/env.h"\n',
                   "capi/crf_api.cpp": '#include "settings/limits.h"\n#include "crf/session.h"\n',
                   "app/a.cpp": '#include "settings/limits.h"\n',
                   "settings/env.cpp": '#include "settings/env.h"\n',
                   "settings/bad.h": '#include "common/files.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("settings/bad.h:1: settings/ may not include common/", r.stdout)
            for ok in ("common/dist.cpp", "crf/cuda/backend.cu", "capi/crf_api.cpp", "app/a.cpp", "settings/env.cpp"):
                self.assertNotIn(ok, r.stdout)
            self.assertIn("1 include(s)", r.stdout)

    def test_options_sits_between_eval_and_model(self):
        with tree({"options/options.cpp": '#include "model/executor.h"\n#include "config/config.h"\n'
                                          '#include "settings/limits.h"\n',
                   "options/bad.cpp": '#include "eval/evaluate.h"\n#include "model/cuda/lstm_fused.h"\n',
                   "eval/infer.cpp": '#include "options/device_choice.h"\n',
                   "train/t.cpp": '#include "options/options.h"\n',
                   "capi/model_api.cpp": '#include "options/options.h"\n',
                   "capi/crf_api.cpp": '#include "options/options.h"\n',
                   "model/m.cpp": '#include "options/options.h"\n',
                   "config/c.cpp": '#include "options/device_choice.h"\n'}) as d:
            r = run(d)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("options/bad.cpp:1: options/ may not include eval/", r.stdout)
            self.assertIn("options/bad.cpp:2: options/ may not include model/cuda/", r.stdout)
            self.assertIn("capi/crf_api.cpp:1: capi/crf_* may not include options/", r.stdout)
            self.assertIn("model/m.cpp:1: model/ may not include options/", r.stdout)
            self.assertIn("config/c.cpp:1: config/ may not include options/", r.stdout)
            for ok in ("options/options.cpp", "eval/infer.cpp", "train/t.cpp", "capi/model_api.cpp"):
                self.assertNotIn(ok, r.stdout)
            self.assertIn("5 include(s)", r.stdout)


if __name__ == "__main__":
    unittest.main()
