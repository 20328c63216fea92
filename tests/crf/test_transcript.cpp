// The transcript NLL (docs/crf.md "Training from transcripts") on the host
// backends: log Z, log Z_c and every gradient against brute-force enumeration
// of the segmentations and of the transcript's alignments
// (tests/support/transcript_bruteforce.h), central differences in float64,
// cpu against the reference, the supervised loss where the transcript has one
// alignment, infeasible utterances and transcript_feasible.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "crf/segments.h"
#include "crf/session.h"
#include "crf/validate.h"
#include "tests/crf/helpers.h"
#include "tests/support/transcript_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

struct Transcript {
  int64_t N = 0;
  std::vector<int32_t> phones, num_phones, optional;  // [B][N], [B], [B][N] or empty
  const int32_t* opt() const { return optional.empty() ? nullptr : optional.data(); }
};

// Random feasible transcripts: num_phones[b] in [1, min(N, L_b)], labels in [0, C),
// optional phones with probability p_opt (align()'s rules).
Transcript random_transcript(const Problem& pb, int64_t N, uint32_t seed, double p_opt) {
  std::mt19937 rng(seed);
  Transcript tr;
  tr.N = N;
  const int64_t B = pb.dims.B, C = pb.dims.C;
  random_phones(rng, B, N, C, tr.phones, tr.num_phones);
  for (int64_t b = 0; b < B; ++b)
    tr.num_phones[b] = std::max<int32_t>(1, std::min<int32_t>(tr.num_phones[b], pb.lengths[b]));
  if (p_opt > 0) tr.optional = random_optional(rng, B, N, tr.num_phones, p_opt);
  return tr;
}

TranscriptResult run(BackendKind kind, const Problem& pb, const Transcript& tr, double scale) {
  auto be = make_backend(kind, BackendOptions{2, nullptr});
  return transcript_host(*be, pb.dims, pb.params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(), scale);
}

// K = 1, K < T, K > T; padded batches (lengths T and T-2); with and without
// start/end, optional phones and onset; C = 1 and 2 make repeated labels frequent.
TEST(Transcript, BothBackendsMatchBruteForce) {
  int cases = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({1, 3, 5}, {1, 2, 3}, {1, 2, 7}, 900 + (onset ? 100 : 0), onset))
      for (double p_opt : {0.0, 0.4}) {
        const Transcript tr = random_transcript(pb, 3, 17 * cases + 5, p_opt);
        const double scale = 0.75;
        const TranscriptExpected ex =
            transcript_brute_force(pb, tr.N, tr.phones, tr.num_phones, tr.optional, scale);
        const std::string what = "case " + std::to_string(cases) + " T=" + std::to_string(pb.dims.T) +
                                 " C=" + std::to_string(pb.dims.C) + " K=" + std::to_string(pb.dims.K);
        expect_matches(run(BackendKind::reference, pb, tr, scale), ex, onset, 1e-6, "reference " + what);
        expect_matches(run(BackendKind::cpu, pb, tr, scale), ex, onset, 1e-5, "cpu " + what);
        ++cases;
      }
  EXPECT_EQ(cases, 2 * 3 * 3 * 3 * 2 * 2);
}

// Float64 end to end: the reference's gradients against central differences
// of its own sum_b scale * (log Z_b - log Z_c_b), every input entry.
TEST(Transcript, ReferenceGradientsMatchCentralDifferences) {
  Problem pb = random_problem(Dims{2, 6, 3, 3}, 71, {6, 4});
  add_onset(pb, 71, 0.5);
  const Transcript tr = random_transcript(pb, 4, 72, 0.4);
  const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  std::vector<double> cum(pb.cum.begin(), pb.cum.end()), A(pb.A.begin(), pb.A.end()), D(pb.D.begin(), pb.D.end()),
      s(pb.s.begin(), pb.s.end()), e(pb.e.begin(), pb.e.end()), o(pb.o.begin(), pb.o.end());
  const double scale = 1.3;
  auto params = [&] {
    return reference::ParamsF64{cum.data(), A.data(), D.data(), s.data(), e.data(), pb.lengths.data(), o.data()};
  };
  auto loss = [&] {
    std::vector<double> lz(B), lzc(B);
    reference::transcript_backward_f64(pb.dims, params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(),
                                       nullptr, scale, lz.data(), lzc.data(), reference::GradsF64{});
    double sum = 0.0;
    for (int64_t b = 0; b < B; ++b) sum += scale * (lz[b] - lzc[b]);
    return sum;
  };
  std::vector<double> gc(cum.size()), gA(A.size()), gD(D.size()), gs(C), ge(C), go(o.size());
  reference::transcript_backward_f64(pb.dims, params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(),
                                     nullptr, scale, nullptr, nullptr,
                                     reference::GradsF64{gc.data(), gA.data(), gD.data(), gs.data(), ge.data(),
                                                         go.data()});
  const double h = 1e-5;
  int checked = 0;
  auto check = [&](std::vector<double>& x, const std::vector<double>& g, const std::string& name,
                   auto valid) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (!valid(static_cast<int64_t>(i))) continue;
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss();
      x[i] = keep - h;
      const double down = loss();
      x[i] = keep;
      EXPECT_NEAR(g[i], (up - down) / (2 * h), 1e-7) << name << "[" << i << "]";
      ++checked;
    }
  };
  auto all = [](int64_t) { return true; };
  check(cum, gc, "cum", [&](int64_t i) { return i % ((T + 1) * C) / C <= pb.lengths[i / ((T + 1) * C)]; });
  check(A, gA, "A", all);
  check(D, gD, "D", all);
  check(s, gs, "start", all);
  check(e, ge, "end", all);
  check(o, go, "onset", [&](int64_t i) { return i % (T * C) / C < pb.lengths[i / (T * C)]; });
  EXPECT_EQ(checked, (7 + 5) * C + C * C + K * C + 2 * C + (6 + 4) * C);
}

// Larger random problems: cpu against the reference (phones longer than K,
// optional phones, onset, padding), and a second run bitwise equal.
TEST(Transcript, CpuMatchesReference) {
  for (uint32_t seed : {3u, 4u, 5u}) {
    Problem pb = random_problem(Dims{4, 40, 5, 4}, seed, {40, 31, 7, 18});
    if (seed != 4) add_onset(pb, seed, 0.5);
    const Transcript tr = random_transcript(pb, 12, seed + 10, seed == 5 ? 0.0 : 0.3);
    const TranscriptResult ref = run(BackendKind::reference, pb, tr, 0.25);
    const TranscriptResult cpu = run(BackendKind::cpu, pb, tr, 0.25);
    const std::string what = "seed " + std::to_string(seed);
    expect_close(cpu.log_z, ref.log_z, 1e-10, 1e-10, what + " log_z");
    expect_close(cpu.log_z_c, ref.log_z_c, 1e-10, 1e-10, what + " log_z_c");
    expect_close(cpu.grad_cum_scores, ref.grad_cum_scores, 1e-5, 1e-6, what + " grad cum");
    expect_close(cpu.grad_transition, ref.grad_transition, 1e-5, 1e-6, what + " grad A");
    expect_close(cpu.grad_duration_bias, ref.grad_duration_bias, 1e-5, 1e-6, what + " grad D");
    expect_close(cpu.grad_start, ref.grad_start, 1e-5, 1e-6, what + " grad start");
    expect_close(cpu.grad_end, ref.grad_end, 1e-5, 1e-6, what + " grad end");
    if (!pb.o.empty()) expect_close(cpu.grad_onset, ref.grad_onset, 1e-5, 1e-6, what + " grad onset");
    const TranscriptResult again = run(BackendKind::cpu, pb, tr, 0.25);
    EXPECT_EQ(again.grad_transition, cpu.grad_transition);
    EXPECT_EQ(again.grad_cum_scores, cpu.grad_cum_scores);
  }
}

// Frame scores hundreds apart (x ~ N(0, 150^2)) and transcripts with one or
// two frames to spare: the cpu backend's blocked linear-domain sums underflow
// for cells that hold the whole posterior mass (a phone whose only room is
// where its window's scores are far below the block's best) and take the
// exact logsumexp; with a -inf duration, a -inf self-transition and onset.
// cpu against the reference, every log Z_c finite.
TEST(Transcript, CpuMatchesReferenceWithScoresFarApartAndForbiddenEntries) {
  const float ninf = -std::numeric_limits<float>::infinity();
  int finite = 0;
  for (uint32_t seed : {21u, 22u, 23u, 24u}) {
    const int64_t K = seed == 23 ? 1 : 3 + seed % 3;
    Problem pb = random_problem(Dims{3, 24, K, 4}, seed, {24, 20, 17}, true, 150.0, 2.0);
    if (seed != 22) add_onset(pb, seed, 20.0);
    if (K > 1) pb.D[1 * 4 + 1] = ninf;  // label 1: no piece of 2 frames
    pb.A[2 * 4 + 2] = ninf;              // label 2: one piece, K frames at most
    Transcript tr = random_transcript(pb, 23, seed + 30, seed % 2 ? 0.3 : 0.0);
    for (int64_t b = 0; b < 3; ++b)
      tr.num_phones[b] = pb.lengths[b] - 1 - static_cast<int32_t>((b + seed) % 2);
    for (int32_t& y : tr.phones) y = y == 2 ? 0 : y;  // label 2 stays out of the transcripts
    const TranscriptResult ref = run(BackendKind::reference, pb, tr, 0.5);
    const TranscriptResult cpu = run(BackendKind::cpu, pb, tr, 0.5);
    const std::string what = "seed " + std::to_string(seed);
    for (double v : ref.log_z_c) finite += std::isfinite(v) ? 1 : 0;
    expect_close(cpu.log_z, ref.log_z, 1e-12, 1e-9, what + " log_z");
    expect_close(cpu.log_z_c, ref.log_z_c, 1e-12, 1e-9, what + " log_z_c");
    expect_close(cpu.grad_cum_scores, ref.grad_cum_scores, 1e-5, 1e-6, what + " grad cum");
    expect_close(cpu.grad_transition, ref.grad_transition, 1e-5, 1e-6, what + " grad A");
    expect_close(cpu.grad_duration_bias, ref.grad_duration_bias, 1e-5, 1e-6, what + " grad D");
    expect_close(cpu.grad_start, ref.grad_start, 1e-5, 1e-6, what + " grad start");
    expect_close(cpu.grad_end, ref.grad_end, 1e-5, 1e-6, what + " grad end");
    if (!pb.o.empty()) expect_close(cpu.grad_onset, ref.grad_onset, 1e-5, 1e-6, what + " grad onset");
  }
  EXPECT_EQ(finite, 12);
}

// One frame per phone: the transcript's only alignment is the frame labels'
// gold segmentation, so the transcript NLL and its gradients are the
// supervised NLL's (labels with no two equal neighbours: each run one frame).
TEST(Transcript, OneAlignmentEqualsTheSupervisedLoss) {
  for (int64_t K : {1, 3}) {
    Problem pb = random_problem(Dims{2, 6, K, 3}, 41 + static_cast<uint32_t>(K), {6, 4});
    add_onset(pb, 41, 0.5);
    Transcript tr;
    tr.N = 6;
    tr.phones.assign(12, 0);
    tr.num_phones = {6, 4};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 6; ++t) {
        const int32_t lab = static_cast<int32_t>((t * 2 + b) % 3);  // consecutive labels differ
        pb.labels[b * 6 + t] = lab;
        tr.phones[b * 6 + t] = lab;
      }
    for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
      auto be = make_backend(kind);
      const TranscriptResult tr_r = transcript_host(*be, pb.dims, pb.params(), tr.N, tr.phones.data(),
                                                    tr.num_phones.data(), nullptr, 0.5);
      HostRunOptions opt;
      opt.viterbi = false;
      opt.scale = 0.5;
      const HostResult sup = run_host(*be, pb.dims, pb.params(), pb.labels.data(), opt);
      for (int64_t b = 0; b < 2; ++b) EXPECT_NEAR(tr_r.log_z_c[b], sup.gold[b], 1e-9) << to_string(kind);
      expect_close(tr_r.grad_cum_scores, sup.grad_cum_scores, 1e-6, 1e-6, "grad cum");
      expect_close(tr_r.grad_transition, sup.grad_transition, 1e-6, 1e-6, "grad A");
      expect_close(tr_r.grad_duration_bias, sup.grad_duration_bias, 1e-6, 1e-6, "grad D");
      expect_close(tr_r.grad_start, sup.grad_start, 1e-6, 1e-6, "grad start");
      expect_close(tr_r.grad_end, sup.grad_end, 1e-6, 1e-6, "grad end");
      expect_close(tr_r.grad_onset, sup.grad_onset, 1e-6, 1e-6, "grad onset");
    }
  }
}

// NLL >= 0 when no two phones that can meet share a label (Z_c a sub-sum of Z).
TEST(Transcript, NllIsNonNegativeWithoutRepeatedNeighbours) {
  int checked = 0;
  for (uint32_t seed = 0; seed < 12; ++seed) {
    Problem pb = random_problem(Dims{3, 12, 1 + seed % 4, 4}, 300 + seed, {}, true, 2.0, 1.0);
    Transcript tr = random_transcript(pb, 6, 400 + seed, seed % 2 ? 0.3 : 0.0);
    for (int64_t b = 0; b < 3; ++b)  // labels cycle: neighbours and neighbours-but-one differ
      for (int64_t i = 0; i < tr.N; ++i) tr.phones[b * tr.N + i] = static_cast<int32_t>((i + seed) % 4);
    const TranscriptResult r = run(BackendKind::cpu, pb, tr, 1.0);
    for (int64_t b = 0; b < 3; ++b, ++checked) EXPECT_GE(r.log_z[b] - r.log_z_c[b], -1e-12) << "seed " << seed;
  }
  EXPECT_EQ(checked, 36);
}

// Repeated neighbours with pieces: two alignments give one segmentation, which
// Z_c counts twice (docs/crf.md). C = 1, K = 1, "a a", L = 3: NLL = -log 2.
TEST(Transcript, RepeatedNeighboursCountASegmentationTwice) {
  Problem pb = random_problem(Dims{1, 3, 1, 1}, 5, {3});
  const Transcript tr{2, {0, 0}, {2}, {}};
  const TranscriptExpected ex = transcript_brute_force(pb, 2, tr.phones, tr.num_phones, tr.optional, 1.0);
  EXPECT_NEAR(ex.log_z[0] - ex.log_z_c[0], -std::log(2.0), 1e-12);
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    const TranscriptResult r = run(kind, pb, tr, 1.0);
    EXPECT_NEAR(r.log_z[0] - r.log_z_c[0], -std::log(2.0), 1e-9) << to_string(kind);
  }
}

TEST(Transcript, InfeasibleUtteranceThrowsNamingIt) {
  Problem pb = random_problem(Dims{3, 5, 2, 3}, 8, {5, 2, 5});
  Transcript tr{3, {0, 1, 2, 0, 1, 2, 0, 1, 2}, {3, 3, 3}, {}};  // utterance 1: 3 phones, 2 frames
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    try {
      run(kind, pb, tr, 1.0);
      ADD_FAILURE() << to_string(kind) << ": no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("utterance 1: its transcript of 3 phones needs at least 3 frames, it has 2"),
                std::string::npos)
          << e.what();
    }
  }
  // With phone 1 optional it fits in 2 frames.
  tr.optional = {0, 0, 0, 0, 1, 0, 0, 0, 0};
  EXPECT_NO_THROW(run(BackendKind::cpu, pb, tr, 1.0));
  // A forbidden transition between the only two phones of utterance 2: Z is finite, Z_c is not.
  Problem pf = random_problem(Dims{3, 5, 2, 3}, 9, {5, 4, 5});
  pf.A[0 * 3 + 1] = -std::numeric_limits<float>::infinity();
  const Transcript t2{2, {1, 2, 2, 0, 0, 1}, {2, 2, 2}, {}};
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    try {
      run(kind, pf, t2, 1.0);
      ADD_FAILURE() << to_string(kind) << ": no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("utterance 2: no alignment of its transcript has finite score"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Transcript, FeasibleCountsTheNonOptionalPhones) {
  const int32_t ph[4] = {0, 1, 2, 3};
  const int32_t opt[4] = {1, 0, 1, 0};
  EXPECT_TRUE(transcript_feasible(4, ph, nullptr, 4));
  EXPECT_FALSE(transcript_feasible(3, ph, nullptr, 4));
  EXPECT_TRUE(transcript_feasible(2, ph, opt, 4));
  EXPECT_FALSE(transcript_feasible(1, ph, opt, 4));
  EXPECT_FALSE(transcript_feasible(5, ph, nullptr, 0));
  EXPECT_TRUE(transcript_feasible(1, ph, nullptr, 1));
}

TEST(Transcript, SessionKeepsItsBuffersAndRejectsFrameGrads) {
  const Problem pb = random_problem(Dims{2, 9, 3, 3}, 12, {9, 6});
  const Transcript tr = random_transcript(pb, 4, 13, 0.3);
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  Session session(*cpu);
  const TranscriptResult a =
      session.transcript_host(pb.dims, pb.params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(), 0.5);
  const size_t bytes = session.bytes_reserved();
  const TranscriptResult b =
      session.transcript_host(pb.dims, pb.params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(), 0.5);
  EXPECT_EQ(session.bytes_reserved(), bytes);
  EXPECT_EQ(a.grad_cum_scores, b.grad_cum_scores);
  EXPECT_EQ(a.log_z_c, b.log_z_c);
  std::vector<double> lz(2), lzc(2);
  std::vector<float> frames(2 * 9 * 3);
  Grads g;
  g.frame_scores = frames.data();
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    auto be = make_backend(kind);
    Session s(*be);
    EXPECT_THROW(s.transcript_backward(pb.dims, pb.params(), tr.N, tr.phones.data(), tr.num_phones.data(), tr.opt(),
                                       nullptr, 1.0, lz.data(), lzc.data(), g),
                 std::invalid_argument);
  }
}

}  // namespace
}  // namespace timitseg::crf::testing

namespace timitseg::crf::testing {
namespace {

TEST(Transcript, MergeRepeatedPhonesAsFrameRuns) {
  std::vector<int32_t> ph{3, 3, 1, 2, 2, 2, 0}, opt{0, 0, 0, 1, 0, 0, 0};
  ASSERT_EQ(merge_repeated_phones(ph.data(), opt.data(), 7), 4);
  EXPECT_EQ(std::vector<int32_t>(ph.begin(), ph.begin() + 4), (std::vector<int32_t>{3, 1, 2, 0}));
  EXPECT_EQ(std::vector<int32_t>(opt.begin(), opt.begin() + 4), (std::vector<int32_t>{0, 0, 0, 0}));
  std::vector<int32_t> p2{5, 1, 1, 4, 1}, o2{1, 0, 1, 0, 1};  // "5? 1 1? 4 1?"
  ASSERT_EQ(merge_repeated_phones(p2.data(), o2.data(), 5), 4);
  EXPECT_EQ(std::vector<int32_t>(p2.begin(), p2.begin() + 4), (std::vector<int32_t>{5, 1, 4, 1}));
  EXPECT_EQ(std::vector<int32_t>(o2.begin(), o2.begin() + 4), (std::vector<int32_t>{1, 0, 0, 1}));
  std::vector<int32_t> p3{2, 0, 2};  // around an optional phone: unchanged
  std::vector<int32_t> o3{0, 1, 0};
  EXPECT_EQ(merge_repeated_phones(p3.data(), o3.data(), 3), 3);
  std::vector<int32_t> p4{1, 1, 1};
  EXPECT_EQ(merge_repeated_phones(p4.data(), nullptr, 3), 1);
  // The double-counted example, merged: "a a" -> "a", whose one alignment is Z's one segmentation (C = 1, K = 1).
  Problem pb = random_problem(Dims{1, 3, 1, 1}, 5, {3});
  std::vector<int32_t> ph5{0, 0}, np5{2};
  np5[0] = merge_repeated_phones(ph5.data(), nullptr, 2);
  auto cpu = make_backend(BackendKind::cpu);
  const TranscriptResult r = transcript_host(*cpu, pb.dims, pb.params(), 2, ph5.data(), np5.data(), nullptr);
  EXPECT_NEAR(r.log_z[0] - r.log_z_c[0], 0.0, 1e-12);
}

}  // namespace
}  // namespace timitseg::crf::testing
