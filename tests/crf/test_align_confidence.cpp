// fill_align_confidence (crf/align_confidence.h): the confidences of aligned
// phones from a session, against the reference backend's own calls (the
// float64 definitions), the per-utterance path equal to the batched one, and
// the memory limit: not computed, with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "crf/align_confidence.h"
#include "crf/backend_kind.h"
#include "crf/session.h"
#include "tests/support/align_bruteforce.h"

namespace timitseg::crf {
namespace {

using crf::testing::Problem;

struct Case {
  Problem pb;
  int64_t N = 6;
  std::vector<int32_t> phones, nph, opt;
};

Case make_case() {
  Case c;
  c.pb = crf::testing::random_problem(crf::Dims{3, 30, 4, 5}, 11, {30, 17, 24});
  crf::testing::add_onset(c.pb, 12);
  std::mt19937 rng(13);
  crf::testing::random_phones(rng, 3, c.N, 5, c.phones, c.nph, 2);
  c.opt = crf::testing::random_optional(rng, 3, c.N, c.nph, 0.3);
  return c;
}

TEST(AlignConfidence, AgainstReferenceBatchedAndPerUtteranceAndLimit) {
  const Case c = make_case();
  auto cpu = crf::make_backend(timitseg::crf::BackendKind::cpu, crf::BackendOptions{2, nullptr});
  auto ref = crf::make_backend(timitseg::crf::BackendKind::reference);
  crf::Session session(*cpu);
  const crf::Params p = c.pb.params();
  const crf::AlignResult r = session.align_host(c.pb.dims, p, c.N, c.phones.data(), c.nph.data(), c.opt.data());
  AlignConfidence batched, single, none;
  fill_align_confidence(session, c.pb.dims, p, c.N, c.phones, c.nph, c.opt, r, &batched);
  fill_align_confidence(session, c.pb.dims, p, c.N, c.phones, c.nph, c.opt, r, &single, /*batch_limit=*/0.0);
  fill_align_confidence(session, c.pb.dims, p, c.N, c.phones, c.nph, c.opt, r, &none, 0.0, /*utterance_limit=*/1.0);
  // The oracle: the reference backend's two calls on the same spans.
  const crf::AlignPosteriorResult ap =
      crf::align_posteriors_host(*ref, c.pb.dims, p, c.N, c.phones.data(), c.nph.data(), c.opt.data(), r.spans.data());
  std::vector<int32_t> q(3 * c.N * 3, 0);
  for (int64_t i = 0; i < 3 * c.N; ++i) {
    q[3 * i] = r.spans[2 * i];
    q[3 * i + 1] = r.spans[2 * i + 1];
    q[3 * i + 2] = c.phones[i];
  }
  const crf::SpanMarginalResult sm = crf::span_marginals_host(*ref, c.pb.dims, p, c.N, q.data(), c.nph.data());
  double total = 0.0;
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(batched.computed[b], 1) << b;
    EXPECT_EQ(none.computed[b], 0) << b;
    EXPECT_NE(none.reason[b].find("over the 0 MiB limit"), std::string::npos) << none.reason[b];
    for (int64_t n = 0; n < c.nph[b]; ++n) {
      const int64_t i = b * c.N + n;
      EXPECT_NEAR(batched.boundary[i], ap.posterior[3 * i], 1e-9);
      EXPECT_NEAR(batched.start[i], ap.posterior[3 * i + 1], 1e-9);
      EXPECT_NEAR(batched.end[i], ap.posterior[3 * i + 2], 1e-9);
      EXPECT_NEAR(batched.label[i], sm.marginal[i], 1e-9);
      EXPECT_EQ(single.boundary[i], batched.boundary[i]);  // an utterance's results do not depend on its batch
      EXPECT_EQ(single.label[i], batched.label[i]);
      EXPECT_EQ(none.boundary[i], 0.0);
      total += batched.boundary[i] + batched.label[i];
    }
  }
  EXPECT_GT(total, 1.0);
}

}  // namespace
}  // namespace timitseg::crf

namespace timitseg::crf {
namespace {

// An utterance over the limit is scored by windows of its transcript: one
// window holding everything gives the exact values bitwise; smaller windows
// are conditioned on the aligned phones outside them, and their error
// against the exact values (printed: the figures of docs/align.md) vanishes
// once the context covers the transcript.
TEST(AlignConfidence, WindowsOfTheTranscript) {
  crf::testing::Problem pb = crf::testing::random_problem(crf::Dims{1, 240, 6, 7}, 21, {240});
  crf::testing::add_onset(pb, 22);
  const int64_t N = 48;
  std::mt19937 rng(23);
  std::vector<int32_t> phones, nph;
  crf::testing::random_phones(rng, 1, N, 7, phones, nph, N);
  const std::vector<int32_t> opt = crf::testing::random_optional(rng, 1, N, nph, 0.2);
  auto cpu = crf::make_backend(timitseg::crf::BackendKind::cpu, crf::BackendOptions{1, nullptr});
  crf::Session session(*cpu);
  const crf::Params p = pb.params();
  const crf::AlignResult r = session.align_host(pb.dims, p, N, phones.data(), nph.data(), opt.data());
  ASSERT_TRUE(std::isfinite(r.score[0]));
  AlignConfidence exact;
  fill_align_confidence(session, pb.dims, p, N, phones, nph, opt, r, &exact);
  const double whole = crf::align_posterior_table_bytes(240, N) + static_cast<double>(cpu->workspace_bytes(pb.dims));
  auto run = [&](int64_t core, int64_t margin, AlignConfidence* out) {
    fill_align_confidence(session, pb.dims, p, N, phones, nph, opt, r, out, 0.0, whole - 1.0,
                          WindowLimits{core, margin, whole + 1.0, 0});  // over; a window is not; no band
    ASSERT_EQ(out->computed[0], 1);
    ASSERT_EQ(out->windowed[0], 1);
    EXPECT_NE(out->reason[0].find("computed by windows of"), std::string::npos);
  };
  AlignConfidence one;
  run(N, 0, &one);  // one window: the utterance itself
  EXPECT_EQ(one.boundary, exact.boundary);
  EXPECT_EQ(one.label, exact.label);
  double err_full_context = -1.0;
  for (int64_t margin : {0, 2, 8, 48}) {
    AlignConfidence w;
    run(8, margin, &w);
    double eb = 0.0, el = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      eb = std::max(eb, std::fabs(w.boundary[i] - exact.boundary[i]));
      el = std::max(el, std::fabs(w.label[i] - exact.label[i]));
    }
    std::printf("windows of 8 phones, context %lld: max |error| boundary %.3g, label %.3g\n",
                static_cast<long long>(margin), eb, el);
    if (margin == 48) err_full_context = std::max(eb, el);
  }
  EXPECT_LT(err_full_context, 1e-12);  // context over the whole transcript: every window is the utterance
  // Even a window over the limit: not computed, zeros, the reason.
  AlignConfidence none;
  fill_align_confidence(session, pb.dims, p, N, phones, nph, opt, r, &none, 0.0, 1.0, WindowLimits{8, 2, 0.0});
  EXPECT_EQ(none.computed[0], 0);
  EXPECT_EQ(none.boundary[0], 0.0);
  EXPECT_NE(none.reason[0].find("over the 0 MiB limit"), std::string::npos) << none.reason[0];
}

}  // namespace
}  // namespace timitseg::crf

namespace timitseg::crf {
namespace {

// The windows' constrained pass in a band of +-B phones around the aligned
// path (WindowLimits::band, the default 8) against the exact windows (band
// 0) on a recording where windows apply, with peaked scores (as a trained
// model's): the boundary confidences within the tolerance of docs/align.md,
// bitwise once the band covers every window, and the label confidences (by
// windows of 8 cores with the same context) within 1e-9. A band of 1 phone
// moves them: the band is used.
TEST(AlignConfidence, BandedWindowsMatchTheExactWindows) {
  crf::testing::Problem pb = crf::testing::random_problem(crf::Dims{1, 480, 6, 7}, 31, {480});  // T = 480, C = 7
  crf::testing::add_onset(pb, 32);
  const int64_t N = 72, T = 480, C = 7;
  std::mt19937 rng(33);
  std::vector<int32_t> phones, nph;
  crf::testing::random_phones(rng, 1, N, 7, phones, nph, N);
  // Frames that say the transcript (as a trained model's scores): phone n's
  // frames [n T / N, (n + 1) T / N) get +3 for its label, so the posteriors are peaked.
  std::vector<double> bonus(C, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    bonus[phones[t * N / T]] += 3.0;
    for (int64_t c = 0; c < C; ++c) pb.cum[pb.row(0, t + 1) + c] += static_cast<float>(bonus[c]);
  }
  const std::vector<int32_t> opt = crf::testing::random_optional(rng, 1, N, nph, 0.2);
  auto cpu = crf::make_backend(timitseg::crf::BackendKind::cpu, crf::BackendOptions{1, nullptr});
  crf::Session session(*cpu);
  const crf::Params p = pb.params();
  const crf::AlignResult r = session.align_host(pb.dims, p, N, phones.data(), nph.data(), opt.data());
  ASSERT_TRUE(std::isfinite(r.score[0]));
  const double whole = crf::align_posterior_table_bytes(480, N) + static_cast<double>(cpu->workspace_bytes(pb.dims));
  auto run = [&](int64_t band) {
    AlignConfidence out;
    fill_align_confidence(session, pb.dims, p, N, phones, nph, opt, r, &out, 0.0, whole - 1.0,
                          WindowLimits{16, 16, whole + 1.0, band});
    EXPECT_EQ(out.windowed[0], 1);
    return out;
  };
  const AlignConfidence exact = run(0), wide = run(N), banded = run(8), narrow = run(1);
  EXPECT_EQ(wide.boundary, exact.boundary);
  EXPECT_EQ(wide.start, exact.start);
  double err8 = 0.0, err1 = 0.0, total = 0.0, err_label = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    err_label = std::max(err_label, std::fabs(banded.label[i] - exact.label[i]));
    for (std::vector<double> AlignConfidence::*f : {&AlignConfidence::boundary, &AlignConfidence::start, &AlignConfidence::end}) {
      err8 = std::max(err8, std::fabs((banded.*f)[i] - (exact.*f)[i]));
      err1 = std::max(err1, std::fabs((narrow.*f)[i] - (exact.*f)[i]));
    }
    total += exact.boundary[i];
  }
  std::printf("band of 8 phones: max |error| %.3g; band of 1: %.3g; labels (windows of 8 cores) %.3g; mean boundary "
              "confidence %.3f\n", err8, err1, err_label, total / N);
  EXPECT_LT(err_label, 1e-9);
  EXPECT_LT(err8, 1e-6);
  EXPECT_GT(err1, err8);
  EXPECT_GT(total / N, 0.3);  // peaked: the confidences are not all near 0
}

}  // namespace
}  // namespace timitseg::crf

namespace timitseg::crf {
namespace {

// batched_window_confidence (the device path of a long recording, here on the
// cpu backend) against fill_align_confidence's host windows without a band
// (the same windows, one at a time, the edge transitions as start/end
// vectors): the only difference is the float32 rounding of the folded edge
// scores (printed; docs/align.md), and the results do not depend on how the
// windows are batched. A window over the limit: nothing computed.
TEST(AlignConfidence, BatchedWindowsMatchTheHostWindows) {
  crf::testing::Problem pb = crf::testing::random_problem(crf::Dims{1, 600, 6, 7}, 41, {600});
  crf::testing::add_onset(pb, 42);
  const int64_t N = 90, T = 600, C = 7;
  std::mt19937 rng(43);
  std::vector<int32_t> phones, nph;
  crf::testing::random_phones(rng, 1, N, 7, phones, nph, N);
  std::vector<double> bonus(C, 0.0);  // peaked scores, as BandedWindowsMatchTheExactWindows
  for (int64_t t = 0; t < T; ++t) {
    bonus[phones[t * N / T]] += 3.0;
    for (int64_t c = 0; c < C; ++c) pb.cum[pb.row(0, t + 1) + c] += static_cast<float>(bonus[c]);
  }
  const std::vector<int32_t> opt = crf::testing::random_optional(rng, 1, N, nph, 0.2);
  auto cpu = crf::make_backend(timitseg::crf::BackendKind::cpu, crf::BackendOptions{2, nullptr});
  crf::Session session(*cpu);
  const crf::Params p = pb.params();
  ASSERT_NE(p.start, nullptr);  // the recording's own start and end are folded too
  ASSERT_NE(p.end, nullptr);
  const crf::AlignResult r = session.align_host(pb.dims, p, N, phones.data(), nph.data(), opt.data());
  ASSERT_TRUE(std::isfinite(r.score[0]));
  const double whole = crf::align_posterior_table_bytes(T, N) + static_cast<double>(cpu->workspace_bytes(pb.dims));
  const WindowLimits wl{16, 8, whole + 1.0, 0};
  AlignConfidence host;
  fill_align_confidence(session, pb.dims, p, N, phones, nph, opt, r, &host, 0.0, whole - 1.0, wl);
  ASSERT_EQ(host.windowed[0], 1);
  auto batched = [&](double limit, std::vector<double>& post3, std::vector<double>& label) {
    post3.assign(N * 3, -1.0);  // poisoned: every phone must be written
    label.assign(N, -1.0);
    return batched_window_confidence(session, pb.dims, p, N, phones.data(), opt.data(), r.spans.data(), post3.data(),
                                     label.data(), wl, limit);
  };
  std::vector<double> one3, one_label, many3, many_label;
  ASSERT_EQ(batched(1e12, one3, one_label), 1);  // every window in one batch
  // one or two windows a batch: the tables of two windows of at most 150 frames and 40 phones
  const double two = 2 * crf::align_posterior_table_bytes(150, 40) +
                     static_cast<double>(cpu->workspace_bytes(crf::Dims{2, 150, pb.dims.K, C}));
  ASSERT_GE(batched(two, many3, many_label), 3);
  double err = 0.0, err_label = 0.0, between = 0.0, total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    err = std::max({err, std::fabs(one3[3 * i] - host.boundary[i]), std::fabs(one3[3 * i + 1] - host.start[i]),
                    std::fabs(one3[3 * i + 2] - host.end[i])});
    err_label = std::max(err_label, std::fabs(one_label[i] - host.label[i]));
    between = std::max({between, std::fabs(one3[3 * i] - many3[3 * i]), std::fabs(one_label[i] - many_label[i])});
    total += one3[3 * i] + one_label[i];
  }
  std::printf("batched windows against the host windows: max |error| boundary/start/end %.3g, label %.3g; "
              "one batch against several %.3g\n", err, err_label, between);
  EXPECT_LT(err, 1e-5);
  EXPECT_LT(err_label, 1e-5);
  EXPECT_LT(between, 1e-12);
  EXPECT_GT(total / N, 0.3);  // not all near 0
  std::vector<double> none3, none_label;
  EXPECT_EQ(batched(1.0, none3, none_label), 0);  // a window over the limit
  EXPECT_EQ(none3[0], -1.0);                      // nothing written
}

}  // namespace
}  // namespace timitseg::crf
