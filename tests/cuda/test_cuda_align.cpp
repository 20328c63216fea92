// Forced alignment on the cuda backend (docs/crf.md "Forced alignment")
// against the float64 reference and the cpu backend, through the host runner
// (crf::align_host) and a kept Session. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/support/align_bruteforce.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The cuda backend computes the cpu backend's float64 expressions in the same
// order: equal bits. Against the reference: scores to 1e-9, spans equal up to
// ties within rounding (then both score the same).
void check_against_host(const Problem& pb, int64_t N, const std::vector<int32_t>& phones,
                        const std::vector<int32_t>& nph, const std::vector<int32_t>& optional = {}) {
  auto ref = make_backend(BackendKind::reference);
  auto cpu = make_backend(BackendKind::cpu);
  auto gpu = make_backend(BackendKind::cuda);
  const int32_t* opt = optional.empty() ? nullptr : optional.data();
  const AlignResult r = align_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data(), opt);
  const AlignResult c = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt);
  const AlignResult g = align_host(*gpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt);
  EXPECT_EQ(g.spans, c.spans);
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    SCOPED_TRACE(::testing::Message() << "utterance " << b);
    EXPECT_EQ(g.score[b], c.score[b]);
    if (r.score[b] == -kInf) {
      EXPECT_EQ(g.score[b], -kInf);
      continue;
    }
    EXPECT_NEAR(g.score[b], r.score[b], 1e-9 * std::max(1.0, std::fabs(r.score[b])));
    const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + nph[b]);
    const std::vector<int32_t> sg(g.spans.begin() + b * N * 2, g.spans.begin() + b * N * 2 + 2 * nph[b]);
    EXPECT_NEAR(segmentation_score(pb, b, split_spans(ph, sg, pb.dims.K)), r.score[b],
                1e-9 * std::max(1.0, std::fabs(r.score[b])));
  }
  // A second run on the same inputs gives the same bits.
  const AlignResult g2 = align_host(*gpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt);
  EXPECT_EQ(g2.spans, g.spans);
  EXPECT_EQ(g2.score, g.score);
}

TEST(CudaAlign, TinyProblemsAgainstEnumerationAndReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(123);
  uint32_t seed = 40;
  for (int64_t K : {1, 2, 3})
    for (int64_t T : {1, 3, 6})
      for (bool onset : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "K=" << K << " T=" << T << " onset=" << onset);
        Problem pb = random_problem(Dims{3, T, K, 3}, ++seed, {static_cast<int32_t>(T),
                                    static_cast<int32_t>(std::max<int64_t>(1, T - 1)), 1});
        if (onset) add_onset(pb, seed);
        const int64_t N = T + 1;
        std::vector<int32_t> phones, nph;
        random_phones(rng, 3, N, 3, phones, nph);
        check_against_host(pb, N, phones, nph);
        auto gpu = make_backend(BackendKind::cuda);
        const AlignResult g = align_host(*gpu, pb.dims, pb.params(), N, phones.data(), nph.data());
        for (int64_t b = 0; b < 3; ++b) {
          const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + nph[b]);
          double best = -kInf;
          for (const AlignPath& a : enumerate_alignments(pb, b, ph)) best = std::max(best, a.score);
          if (best == -kInf)
            EXPECT_EQ(g.score[b], -kInf);
          else
            EXPECT_NEAR(g.score[b], best, 1e-9 * std::max(1.0, std::fabs(best)));
        }
      }
}

TEST(CudaAlign, ExactTiesAndForbiddenEntries) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  for (const Problem& pb : tiny_exact_problems({3, 5}, {1, 2}, {1, 2, 4}, 300, true)) {
    std::vector<int32_t> phones, nph;
    random_phones(rng, pb.dims.B, pb.dims.T, pb.dims.C, phones, nph);
    check_against_host(pb, pb.dims.T, phones, nph);
  }
  std::bernoulli_distribution forbid(0.3);
  for (int rep = 0; rep < 10; ++rep) {
    Problem pb = random_problem(Dims{3, 6, 2, 3}, 600 + rep, {6, 5, 3});
    for (float& a : pb.A)
      if (forbid(rng)) a = -std::numeric_limits<float>::infinity();
    for (float& d : pb.D)
      if (forbid(rng)) d = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> phones, nph;
    random_phones(rng, 3, 4, 3, phones, nph);
    check_against_host(pb, 4, phones, nph);
  }
}

TEST(CudaAlign, RealisticBatchMatchesCpuBitwise) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 16, T = 400, K = 60, C = 39, N = 70;
  ProblemOptions o;
  o.first_full = true;
  o.poison_padding = true;
  Problem pb = random_problem_with(Dims{B, T, K, C}, 77, o);
  add_onset(pb, 77, 1.0, false, true);
  std::mt19937 rng(1);
  std::vector<int32_t> phones, nph;
  random_phones(rng, B, N, C, phones, nph, 10);
  nph[3] = N;  // more phones than frames when that utterance is short
  check_against_host(pb, N, phones, nph);
  // A kept session: the second batch of the same size allocates nothing.
  auto gpu = make_backend(BackendKind::cuda);
  Session session(*gpu);
  const AlignResult a = session.align_host(pb.dims, pb.params(), N, phones.data(), nph.data());
  const size_t held = session.bytes_reserved();
  const AlignResult b = session.align_host(pb.dims, pb.params(), N, phones.data(), nph.data());
  EXPECT_EQ(session.bytes_reserved(), held);
  EXPECT_EQ(a.spans, b.spans);
}

TEST(CudaAlign, OptionalPhonesAgainstEnumerationAndCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  uint32_t seed = 70;
  for (int64_t K : {1, 2, 4})
    for (int rep = 0; rep < 4; ++rep) {
      Problem pb = random_problem(Dims{3, 7, K, 3}, ++seed, {7, 5, 2});
      if (rep % 2) add_onset(pb, seed);
      std::vector<int32_t> phones, nph;
      random_phones(rng, 3, 6, 3, phones, nph, 2);
      const std::vector<int32_t> opt = random_optional(rng, 3, 6, nph, 0.5);
      check_against_host(pb, 6, phones, nph, opt);
      auto gpu = make_backend(BackendKind::cuda);
      const AlignResult g = align_host(*gpu, pb.dims, pb.params(), 6, phones.data(), nph.data(), opt.data());
      for (int64_t b = 0; b < 3; ++b) {
        const std::vector<int32_t> ph(phones.begin() + b * 6, phones.begin() + b * 6 + nph[b]);
        const std::vector<int32_t> ob(opt.begin() + b * 6, opt.begin() + b * 6 + nph[b]);
        double best = -kInf;
        for (const AlignPath& a : enumerate_alignments(pb, b, ph, ob)) best = std::max(best, a.score);
        if (best == -kInf)
          EXPECT_EQ(g.score[b], -kInf);
        else
          EXPECT_NEAR(g.score[b], best, 1e-9 * std::max(1.0, std::fabs(best)));
      }
    }
  // A realistic batch with optional silences between "words".
  const int64_t B = 8, T = 300, C = 39, N = 60;
  Problem pb = random_problem(Dims{B, T, 30, C}, 99, {300, 280, 250, 200, 150, 120, 90, 61});
  std::vector<int32_t> phones, nph;
  random_phones(rng, B, N, C, phones, nph, 30);
  check_against_host(pb, N, phones, nph, random_optional(rng, B, N, nph, 0.3));
}

TEST(CudaAlign, InvalidPhonesAreErrors) {
  SKIP_WITHOUT_GPU();
  Problem pb = random_problem(Dims{2, 5, 2, 3}, 3, {5, 5});
  auto gpu = make_backend(BackendKind::cuda);
  Session session(*gpu);
  // Through the device path directly (align_host validates on the host first).
  const int64_t N = 3;
  std::vector<int32_t> phones{0, 1, 2, 0, 3, 1}, nph{3, 2};
  Buffer cum = to_device(pb.cum), A = to_device(pb.A), D = to_device(pb.D), s = to_device(pb.s),
         e = to_device(pb.e), len = to_device(pb.lengths), ph = to_device(phones), np = to_device(nph);
  Buffer score = device_buffer(2 * sizeof(double)), spans = device_buffer(2 * N * 2 * sizeof(int32_t));
  Params p{cum.as<float>(), A.as<float>(), D.as<float>(), s.as<float>(), e.as<float>(), len.as<int32_t>()};
  try {
    session.align(pb.dims, p, N, ph.as<int32_t>(), np.as<int32_t>(), nullptr, score.as<double>(),
                  spans.as<int32_t>());
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& ex) {
    EXPECT_STREQ(ex.what(), "cuda backend: align: phones[1][1] = 3 is outside [0, C=3)");
  }
  nph = {3, 0};
  np.upload(nph);
  try {
    session.align(pb.dims, p, N, ph.as<int32_t>(), np.as<int32_t>(), nullptr, score.as<double>(),
                  spans.as<int32_t>());
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& ex) {
    EXPECT_STREQ(ex.what(), "cuda backend: align: num_phones[1] = 0 is outside [1, N=3]");
  }
  // Optional flags, checked on the device too.
  nph = {3, 3};
  phones = {0, 1, 2, 0, 2, 1};
  np.upload(nph);
  ph.upload(phones);
  auto device_error = [&](const std::vector<int32_t>& o) {
    Buffer od = to_device(o);
    try {
      session.align(pb.dims, p, N, ph.as<int32_t>(), np.as<int32_t>(), od.as<int32_t>(), score.as<double>(),
                    spans.as<int32_t>());
    } catch (const std::invalid_argument& ex) {
      return std::string(ex.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(device_error({0, 0, 0, 0, 1, 1}),
            "cuda backend: align: optional[1][2] = 1 follows another optional phone (two optional phones in a row are "
            "not supported)");
  EXPECT_EQ(device_error({0, 0, 0, 0, 3, 0}), "cuda backend: align: optional[1][1] = 3 is not 0 or 1");
  nph = {3, 1};
  np.upload(nph);
  EXPECT_EQ(device_error({0, 0, 0, 1, 0, 0}), "cuda backend: align: utterance 1 has only optional phones");
  EXPECT_EQ(device_error({1, 0, 1, 0, 7, 7}), "(no error)");  // flags past num_phones are never read
}

}  // namespace
}  // namespace timitseg::crf::testing
