// The end-score fold and its backward on the GPU (crf/device_layers.h) against
// the host functions they must equal bit for bit (crf/end_scores.h, checked
// against brute force, finite differences and their adjoint identity in
// tests/crf/test_end_scores.cpp): onset and end read from one anchored buffer
// [B][T][A][C] (strides A*C) and dense, with and without onset, in place,
// with and without the onset gradient, padding frames NaN (never read),
// outputs poisoned with NaN before each call (every entry written; g_end's
// entries beyond its C per frame kept). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/buffer.h"
#include "crf/device_layers.h"
#include "crf/end_scores.h"
#include "tests/support/gpu.h"

namespace timitseg::crf {
namespace {

struct Case {
  int64_t B, T, C, A;  // A heads per frame: onset at head 0, end at head A-1 (A = 1: separate dense tables)
  bool with_onset, with_g_onset;
};

std::vector<float> download(Buffer& d, size_t n) {
  std::vector<float> v(n);
  d.download(v.data(), n * sizeof(float));
  return v;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
}

void check_case(const Case& k, uint64_t seed) {
  const int64_t B = k.B, T = k.T, C = k.C, A = k.A;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 2.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> len(B);
  for (int64_t b = 0; b < B; ++b) len[b] = static_cast<int32_t>(1 + rng() % T);
  len[0] = static_cast<int32_t>(T);
  if (B > 1) len[1] = 1;
  const int64_t stride = A * C, ncum = B * (T + 1) * C, nfr = B * T * C;
  std::vector<float> cum(ncum), onset_t(B * T * stride), end_t(B * T * stride), gc(ncum), go(nfr);
  for (auto* v : {&cum, &onset_t, &end_t, &gc, &go})
    for (float& x : *v) x = normal(rng);
  for (int64_t b = 0; b < B; ++b)  // padding frames: NaN (never read)
    for (int64_t i = b * T * stride + len[b] * stride; i < (b + 1) * T * stride; ++i) onset_t[i] = end_t[i] = nan;
  // one anchored buffer when A > 1: onset head 0, end head A-1
  std::vector<float> anch = end_t;
  if (A > 1)
    for (int64_t f = 0; f < B * T; ++f)
      std::memcpy(&anch[f * stride], &onset_t[f * stride], C * sizeof(float));
  const float* h_onset = A > 1 ? anch.data() : onset_t.data();
  const float* h_end = A > 1 ? anch.data() + (A - 1) * C : end_t.data();
  const EndFoldShape s{B, T, C, stride, stride};
  std::vector<float> want_cum(ncum), want_on(nfr), want_ge(B * T * stride, nan);
  fold_end_scores(s, len.data(), cum.data(), k.with_onset ? h_onset : nullptr, h_end, want_cum.data(), want_on.data());
  fold_end_scores_backward(s, len.data(), gc.data(), k.with_g_onset ? go.data() : nullptr, want_ge.data());

  Buffer d_len(Memory::device, B * 4), d_cum(Memory::device, ncum * 4), d_anch(Memory::device, anch.size() * 4);
  Buffer d_on_in(Memory::device, onset_t.size() * 4), d_cum_out(Memory::device, ncum * 4);
  Buffer d_on(Memory::device, nfr * 4), d_gc(Memory::device, ncum * 4), d_go(Memory::device, nfr * 4);
  Buffer d_ge(Memory::device, want_ge.size() * 4);
  d_len.upload(len);
  d_cum.upload(cum);
  d_anch.upload(anch);
  d_on_in.upload(onset_t);
  d_gc.upload(gc);
  d_go.upload(go);
  d_cum_out.upload(std::vector<float>(ncum, nan));
  d_on.upload(std::vector<float>(nfr, nan));
  d_ge.upload(std::vector<float>(want_ge.size(), nan));
  const float* d_onset = A > 1 ? d_anch.as<float>() : d_on_in.as<float>();
  const float* d_end = d_anch.as<float>() + (A - 1) * C;
  device::fold_end_scores(s, d_len.as<int32_t>(), d_cum.as<float>(), k.with_onset ? d_onset : nullptr, d_end,
                          d_cum_out.as<float>(), d_on.as<float>(), nullptr);
  const float* d_g_onset = k.with_g_onset ? d_go.as<float>() : nullptr;
  device::fold_end_scores_backward(s, d_len.as<int32_t>(), d_gc.as<float>(), d_g_onset, d_ge.as<float>(), nullptr);
  expect_bitwise(download(d_cum_out, ncum), want_cum, "cum_out");
  expect_bitwise(download(d_on, nfr), want_on, "onset_out");
  expect_bitwise(download(d_ge, want_ge.size()), want_ge, "g_end");
  // in place: cum_out == cum
  device::fold_end_scores(s, d_len.as<int32_t>(), d_cum.as<float>(), k.with_onset ? d_onset : nullptr, d_end,
                          d_cum.as<float>(), d_on.as<float>(), nullptr);
  expect_bitwise(download(d_cum, ncum), want_cum, "cum_out in place");
}

TEST(CudaEndScores, FoldAndBackwardBitwiseTheHost) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  const std::vector<Case> cases{{3, 7, 4, 2, true, true},     {3, 7, 4, 2, false, false},   {3, 7, 4, 1, true, false},
                                {32, 200, 39, 2, true, true}, {32, 200, 39, 3, false, true}, {1, 1, 1, 1, true, true},
                                {4, 513, 257, 2, true, true}};
  for (const Case& k : cases) {
    SCOPED_TRACE("B=" + std::to_string(k.B) + " T=" + std::to_string(k.T) + " C=" + std::to_string(k.C) +
                 " A=" + std::to_string(k.A) + (k.with_onset ? " onset" : "") + (k.with_g_onset ? " g_onset" : ""));
    check_case(k, seed++);
  }
}

TEST(CudaEndScores, BadDimsThrowBeforeAnyLaunch) {
  REQUIRE_GPU();
  EXPECT_THROW(device::fold_end_scores(EndFoldShape{1, 0, 1, 1, 1}, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(device::fold_end_scores_backward(EndFoldShape{1, 2, 3, 3, 2}, nullptr, nullptr, nullptr, nullptr,
                                                nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace timitseg::crf
