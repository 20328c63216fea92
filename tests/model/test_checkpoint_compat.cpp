// A checkpoint written before the issue-11 restructuring (tests/model/fixtures/
// legacy/README.md) loads with today's code and reproduces, on the CPU
// executor, the projection scores and Viterbi segments that the old binary
// dumped for the same utterances (the independent oracle: the old program's
// own output).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;

namespace {
const std::string kDir = std::string(TIMITSEG_SOURCE_DIR) + "/tests/model/fixtures/legacy/";
}

TEST(CheckpointCompat, PreRestructuringCheckpointLoads) {
  const ModelState s = load_checkpoint(kDir + "checkpoint-pre-issue11.safetensors");
  EXPECT_EQ(s.dims.hidden_dim, 16);
  EXPECT_EQ(s.dims.num_layers, 2);
  EXPECT_EQ(s.dims.max_duration, 8);
  EXPECT_EQ(s.dims.num_classes, 39);
  EXPECT_EQ(s.epoch, 2);
  EXPECT_EQ(s.labels.set, 39);
  EXPECT_TRUE(s.has_cmvn);
  EXPECT_EQ(s.params.size(), ParamLayout(s.dims).total());
  ASSERT_EQ(s.optimizer.m.size(), s.params.size());
  EXPECT_EQ(s.optimizer.step, 2);  // 2 epochs of one batch (4 training utterances)
  EXPECT_EQ(s.config.train_seed, 5u);
}

TEST(CheckpointCompat, ReproducesTheOldBinarysScoresAndSegments) {
  const ModelState s = load_checkpoint(kDir + "checkpoint-pre-issue11.safetensors");
  ExecutorOptions xo;
  xo.threads = 1;
  xo.crf_backend = crf::BackendKind::cpu;
  auto exec = make_executor(Device::cpu, s.dims, xo);
  exec->set_state(s.params, s.optimizer);
  int checked = 0;
  for (const std::string& utt : testsupport::legacy_utterances()) {
    const st::File f = st::load(kDir + utt + ".safetensors");
    const Batch b = testsupport::legacy_batch(f, utt);
    std::vector<float> scores;
    const auto segs = exec->decode(b, &scores);
    const std::vector<float> ref = f.tensors.at("scores").to<float>();
    ASSERT_EQ(scores.size(), ref.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(double(scores[i]) - ref[i]));
      scale = std::max(scale, std::abs(double(ref[i])));
    }
    EXPECT_LE(worst, 1e-5 * std::max(1.0, scale)) << utt;
    const std::vector<int32_t> rs = f.tensors.at("segments").to<int32_t>();
    ASSERT_EQ(segs[0].size() * 3, rs.size()) << utt;
    for (size_t i = 0; i < segs[0].size(); ++i) {
      EXPECT_EQ(segs[0][i].start, rs[3 * i]) << utt << " segment " << i;
      EXPECT_EQ(segs[0][i].duration, rs[3 * i + 1]) << utt << " segment " << i;
      EXPECT_EQ(segs[0][i].label, rs[3 * i + 2]) << utt << " segment " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}
