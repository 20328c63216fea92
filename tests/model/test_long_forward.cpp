// The encoder in windows for long recordings (model/cpu/long_forward.h)
// against Network::forward over the whole utterance: bitwise when the context
// covers the utterance (each window then sees every frame), and an error that
// shrinks as the context grows otherwise (the BiLSTM's memory fades).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/progress.h"
#include "crf/cumsum.h"
#include "model/cpu/long_forward.h"
#include "model/cpu/network.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

namespace timitseg::model {
namespace {

struct Whole {
  std::vector<float> cum, onset;
};

ModelDims onset_dims() {
  ModelDims d = testsupport::small_dims();
  d.onset = true;
  return d;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// With the onset head, the end head (folded into cum and onset after the
// windows are stitched) and both.
TEST(LongForward, WholeContextIsTheForwardBitwise) {
  Progress::set_enabled(false);
  for (int v = 0; v < 3; ++v) {
    ModelDims d = onset_dims();
    d.onset = v != 1;
    d.end = v != 0;
    const Network<float> net(d);
    const std::vector<float> params = testsupport::random_model_params(d, 3, 0.5f);
    const Batch b = testsupport::random_model_batch(d, 1, 300, 4);
    Activations<float> whole, win;
    net.forward(params, b.input, 0.0, nullptr, whole);
    ASSERT_TRUE(long_input(b.input, 64));
    EXPECT_FALSE(long_input(b.input, 300));
    forward_in_windows(net, params, b.input, win, nullptr, 64, 300);
    EXPECT_EQ(win.cum, whole.cum) << "variant " << v;
    EXPECT_EQ(win.onset, whole.onset) << "variant " << v;
    ASSERT_FALSE(win.onset.empty());
  }
  Progress::set_enabled(true);
}

TEST(LongForward, ShortContextErrorShrinksWithTheContext) {
  Progress::set_enabled(false);
  const ModelDims d = onset_dims();
  const Network<float> net(d);
  const std::vector<float> params = testsupport::random_model_params(d, 5, 0.5f);
  const Batch b = testsupport::random_model_batch(d, 1, 600, 6);
  Activations<float> whole;
  net.forward(params, b.input, 0.0, nullptr, whole);
  double scale = 0;
  for (float v : whole.onset) scale = std::max(scale, std::fabs(double(v)));
  std::vector<double> err;
  for (int context : {0, 8, 32, 128}) {
    Activations<float> win;
    forward_in_windows(net, params, b.input, win, nullptr, 100, context);
    // the onset scores are per frame (no cumsum): their error is the encoder's
    err.push_back(max_abs_diff(win.onset, whole.onset) / scale);
    std::printf("[ info ] context %d: max |onset error| / max |onset| = %.3g\n", context, err.back());
  }
  EXPECT_GT(err[0], 1e-4);  // no context: the window edges differ
  for (size_t i = 1; i < err.size(); ++i) EXPECT_LT(err[i], err[i - 1]);
  EXPECT_LT(err.back(), 1e-5);
  Progress::set_enabled(true);
}

// --centre-frames (ExecutorOptions::centre_frames): the same windowed scores,
// the cumsum centred by the running mean of crf::running_centered_cumsum_forward
// (bitwise), different from the whole recording's centring; a window wider
// than the recording is that centring again.
TEST(LongForward, CentreFramesCentresByTheRunningMean) {
  Progress::set_enabled(false);
  const ModelDims d = testsupport::small_dims();
  const Network<float> net(d);
  const std::vector<float> params = testsupport::random_model_params(d, 7, 0.5f);
  const Batch b = testsupport::random_model_batch(d, 1, 600, 8);
  Activations<float> whole, run, wide;
  forward_in_windows(net, params, b.input, whole, nullptr, 100, 32, 0);
  forward_in_windows(net, params, b.input, run, nullptr, 100, 32, 20);
  forward_in_windows(net, params, b.input, wide, nullptr, 100, 32, 599);
  const int64_t T = 600, C = d.num_classes;
  std::vector<float> x(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t q = 0; q < C; ++q) x[t * C + q] = run.scores(t, q);
  std::vector<float> want(static_cast<size_t>((T + 1) * C));
  crf::running_centered_cumsum_forward(T, C, x.data(), T, 20, want.data());
  EXPECT_EQ(run.cum, want);
  EXPECT_NE(run.cum, whole.cum);
  EXPECT_EQ(wide.cum, whole.cum);
  EXPECT_THROW(forward_in_windows(net, params, b.input, run, nullptr, 100, 32, -1), std::invalid_argument);
  Progress::set_enabled(true);
}

// decode's segment posteriors of a long recording (Executor::span_marginals,
// decode --format csv/json) come from the same windowed, running-centred
// cumsum as its segments (bounded memory), not from a forward over the whole
// recording; each is a probability.
TEST(LongForward, SpanMarginalsOfALongRecordingUseDecodesWindowedScores) {
  Progress::set_enabled(false);
  const ModelDims d = testsupport::small_dims();
  const std::vector<float> params = testsupport::random_model_params(d, 21, 0.5f);
  const int T = static_cast<int>(kWindowFrames) + 400;
  const Batch batch = testsupport::random_model_batch(d, 1, T, 22);
  ExecutorOptions xo;
  xo.threads = 2;
  xo.centre_frames = 200;
  auto ex = make_executor(Device::cpu, d, xo);
  AdamW opt;
  opt.reset(params.size());
  ex->set_state(params, opt);
  const auto segs = ex->decode(batch, nullptr, nullptr);
  const std::vector<float> decode_cum = ex->last_cum();
  ASSERT_EQ(segs.size(), 1u);
  const int64_t Q = static_cast<int64_t>(segs[0].size());
  ASSERT_GT(Q, 0);
  std::vector<int32_t> q(static_cast<size_t>(3 * Q));
  for (int64_t i = 0; i < Q; ++i) {
    q[3 * i] = segs[0][i].start;
    q[3 * i + 1] = segs[0][i].duration;
    q[3 * i + 2] = segs[0][i].label;
  }
  const std::vector<double> post = ex->span_marginals(batch, Q, q, {static_cast<int32_t>(Q)});
  EXPECT_EQ(ex->last_cum(), decode_cum);  // the same windows and centring, bitwise
  Activations<float> whole;
  const Network<float> net(d);
  net.forward(params, batch.input, 0.0, nullptr, whole, nullptr);
  EXPECT_NE(whole.cum, decode_cum);  // what span_marginals used before
  ASSERT_EQ(post.size(), static_cast<size_t>(Q));
  for (double p : post) {
    EXPECT_GT(p, 0.0);
    EXPECT_LE(p, 1.0 + 1e-12);
  }
  Progress::set_enabled(true);
}

TEST(LongForward, OneUtteranceOnly) {
  const ModelDims d = testsupport::small_dims();
  const Network<float> net(d);
  const std::vector<float> params = testsupport::random_model_params(d, 1);
  const Batch b = testsupport::random_model_batch(d, 2, 50, 1);
  Activations<float> act;
  EXPECT_FALSE(long_input(b.input, 10));
  EXPECT_THROW(forward_in_windows(net, params, b.input, act, nullptr, 10, 2), std::invalid_argument);
}

}  // namespace
}  // namespace timitseg::model
