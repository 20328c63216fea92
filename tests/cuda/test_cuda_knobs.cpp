// The semi-CRF ablation knobs of issue 20 on the GPU, against the CPU
// versions (their own tests: tests/model/test_frame_ce.cpp, test_network.cpp,
// tests/crf/test_posterior.cpp):
//   crf.frame_ce_weight  the frame CE kernel (model/cuda/frame_ce.cu) against
//                        model/frame_ce.h on the same scores (padding NaN,
//                        never read); the GPU executor's loss, CE sum and every
//                        gradient against the CPU executor's, both loss
//                        normalisations, cuda and host CRF backends
//   crf.decode posterior the GPU executor's segments and dev NLL against the
//                        CPU executor's
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "model/cuda/frame_ce.h"
#include "model/frame_ce.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"
#include "tests/support/gpu.h"

using timitseg::testsupport::small_dims;

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

std::unique_ptr<Executor> executor_with(const std::string& device, const ModelDims& d,
                                        const std::vector<float>& params, const std::string& crf,
                                        const std::string& decode = "viterbi") {
  ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = crf::backend_kind(crf);
  xo.decode = enum_value<DecodeMode>(decode, "decode");
  auto ex = make_executor(resolve_device(enum_value<DeviceSetting>(device, "device")), d, xo);
  AdamW opt;
  opt.reset(params.size());
  ex->set_state(params, opt);
  return ex;
}

// Frame labels [B][T] of per-utterance segments (-1 on padding).
std::vector<int32_t> frame_labels(const std::vector<std::vector<crf::Segment>>& segs, int B, int T) {
  std::vector<int32_t> out(static_cast<size_t>(B) * T, -1);
  for (const auto& u : segs)
    for (const crf::Segment& s : u)
      for (int t = s.start; t < s.start + s.duration; ++t) out[static_cast<size_t>(s.batch) * T + t] = s.label;
  return out;
}

}  // namespace

TEST(CudaKnobs, FrameCrossEntropyKernelMatchesTheHost) {
  REQUIRE_GPU();
  const int B = 5, T = 37, C = 11;
  std::mt19937 rng(3);
  std::normal_distribution<float> nx(0.f, 3.f);
  std::uniform_int_distribution<int32_t> ul(0, C - 1);
  const std::vector<int32_t> lengths{37, 1, 20, 36, 9};
  std::vector<float> x(static_cast<size_t>(B) * T * C);
  std::vector<int32_t> labels(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c)
        x[(size_t(b) * T + t) * C + c] = t < lengths[b] ? nx(rng) : std::numeric_limits<float>::quiet_NaN();
      labels[size_t(b) * T + t] = t < lengths[b] ? ul(rng) : -3;
    }
  const double scale = 0.37;
  std::vector<double> want_utt(B);
  std::vector<float> want_dx(x.size());
  frame_cross_entropy<float>(B, T, C, x.data(), int64_t(T) * C, C, lengths.data(), labels.data(), scale,
                             want_utt.data(), want_dx.data());
  Buffer dx_(Memory::device, 0), dl(Memory::device, 0), dlab(Memory::device, 0), dframes(Memory::device, 0),
      dutt(Memory::device, 0), ddx(Memory::device, 0);
  dx_.upload(x);
  dl.upload(lengths);
  dlab.upload(labels);
  dframes.reserve(size_t(B) * T * sizeof(double));
  dutt.reserve(B * sizeof(double));
  ddx.reserve(x.size() * sizeof(float));
  gpu::frame_cross_entropy(B, T, C, dx_.as<float>(), dl.as<int32_t>(), dlab.as<int32_t>(), scale,
                           dframes.as<double>(), dutt.as<double>(), ddx.as<float>(), nullptr);
  std::vector<double> got_utt(B);
  std::vector<float> got_dx(x.size());
  dutt.download(got_utt.data(), B * sizeof(double));
  ddx.download(got_dx.data(), got_dx.size() * sizeof(float));
  for (int b = 0; b < B; ++b) EXPECT_NEAR(got_utt[b], want_utt[b], 1e-12 * (1 + std::abs(want_utt[b]))) << b;
  for (size_t i = 0; i < x.size(); ++i) {
    const int t = static_cast<int>((i / C) % T), b = static_cast<int>(i / (size_t(T) * C));
    if (t >= lengths[b])
      EXPECT_EQ(got_dx[i], 0.0f) << i;
    else
      EXPECT_NEAR(got_dx[i], want_dx[i], 1e-7) << i;
  }
}

TEST(CudaKnobs, FrameCrossEntropyGradientsAgreeWithTheCpu) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = testsupport::random_model_params(d, 11, 0.5f);
  const Batch batch = testsupport::random_model_batch(d, 6, 57, 12);
  for (const bool frame : {false, true})
    for (const std::string crf : {"cuda", "cpu"}) {
      SCOPED_TRACE(std::string(frame ? "frame" : "utterance") + " normalisation, crf " + crf);
      StepOptions o;
      o.dropout = 0.0;
      o.crf_reg = 1e-3;
      o.frame_normalization = frame;
      o.frame_ce_weight = 1.5;
      std::vector<float> gc, gg, g0;
      auto cpu = executor_with("cpu", d, params, "cpu");
      auto gpu = executor_with("cuda", d, params, crf);
      const StepResult rc = cpu->gradients(batch, o, gc);
      const StepResult rg = gpu->gradients(batch, o, gg);
      StepOptions o0 = o;
      o0.frame_ce_weight = 0.0;
      const StepResult r0 = gpu->gradients(batch, o0, g0);
      EXPECT_GT(rc.frame_ce_sum, 0.0);
      EXPECT_NEAR(rg.frame_ce_sum, rc.frame_ce_sum, 1e-5 * rc.frame_ce_sum);
      EXPECT_NEAR(rg.loss, rc.loss, 1e-4 * std::abs(rc.loss));
      const double norm = frame ? double(batch.frames) : 6.0;
      EXPECT_NEAR(rg.loss - r0.loss, 1.5 * rg.frame_ce_sum / norm, 1e-6 * std::abs(rg.loss));
      const ParamLayout layout(d);
      for (const ParamInfo& p : layout.params()) {
        if (p.name == "crf.projection.bias") continue;  // compared below: no longer 0 with the CE term
        double diff = 0, ref = 0;
        for (size_t i = 0; i < p.size; ++i) {
          diff += std::pow(double(gg[p.offset + i]) - gc[p.offset + i], 2);
          ref += std::pow(double(gc[p.offset + i]), 2);
        }
        EXPECT_LT(std::sqrt(diff) / std::max(std::sqrt(ref), 1e-12), 1e-3) << p.name;
      }
      // The projection bias gets the CE's gradient only (the cumsum's share is
      // 0 up to rounding): it is not 0 now, and agrees.
      const ParamInfo& pb = layout.get("crf.projection.bias");
      double diff = 0, ref = 0;
      for (size_t i = 0; i < pb.size; ++i) {
        diff += std::pow(double(gg[pb.offset + i]) - gc[pb.offset + i], 2);
        ref += std::pow(double(gc[pb.offset + i]), 2);
      }
      EXPECT_GT(std::sqrt(ref), 1e-3);
      EXPECT_LT(std::sqrt(diff) / std::sqrt(ref), 1e-3);
    }
}

TEST(CudaKnobs, PosteriorDecodingMatchesTheCpu) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = testsupport::random_model_params(d, 41, 0.5f);
  const int B = 6, T = 53;
  const Batch batch = testsupport::random_model_batch(d, B, T, 42);
  std::vector<double> nll_cpu, nll_vit;
  const auto want = executor_with("cpu", d, params, "cpu", "posterior")->decode(batch, nullptr, &nll_cpu);
  const auto vit = executor_with("cpu", d, params, "cpu")->decode(batch, nullptr, &nll_vit);
  const std::vector<int32_t> fw = frame_labels(want, B, T), fv = frame_labels(vit, B, T);
  EXPECT_NE(fw, fv) << "posterior decoding should differ from Viterbi here";
  for (const std::string backend : {"cuda", "cpu"}) {
    std::vector<double> nll_gpu;
    const auto got = executor_with("cuda", d, params, backend, "posterior")->decode(batch, nullptr, &nll_gpu);
    const std::vector<int32_t> fg = frame_labels(got, B, T);
    // float32 encoders differ by rounding: a frame whose top two marginals
    // nearly tie may flip; allow 1 % of the frames
    int differ = 0;
    for (size_t i = 0; i < fw.size(); ++i) differ += fg[i] != fw[i];
    EXPECT_LE(differ, static_cast<int>(batch.frames / 100)) << backend;
    ASSERT_EQ(nll_gpu.size(), nll_cpu.size());
    for (int b = 0; b < B; ++b) {
      EXPECT_NEAR(nll_gpu[b], nll_cpu[b], 1e-4 * (1 + std::abs(nll_cpu[b]))) << backend << " utterance " << b;
      EXPECT_NEAR(nll_cpu[b], nll_vit[b], 1e-9 * (1 + std::abs(nll_vit[b])));  // the dev loss is the decoding's own
    }
  }
}
