// Forced alignment (docs/crf.md "Forced alignment") on the host backends:
// the reference and cpu backends against brute-force enumeration of every
// alignment (tests/support/align_bruteforce.h), against each other, against
// the gold score of the loss, and their infeasible and invalid inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/segments.h"
#include "crf/session.h"
#include "tests/crf/helpers.h"
#include "tests/support/align_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct BothRuns {
  AlignResult ref, cpu;
};

BothRuns run_both(const Problem& pb, int64_t N, const std::vector<int32_t>& phones, const std::vector<int32_t>& nph,
                  const std::vector<int32_t>& optional = {}) {
  auto ref = make_backend(BackendKind::reference);
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  const int32_t* opt = optional.empty() ? nullptr : optional.data();
  return BothRuns{align_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data(), opt),
                  align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt)};
}

std::vector<int32_t> phones_of(const std::vector<int32_t>& phones, const std::vector<int32_t>& nph, int64_t N,
                               int64_t b) {
  return std::vector<int32_t>(phones.begin() + b * N, phones.begin() + b * N + nph[b]);
}

std::vector<int32_t> spans_of(const AlignResult& r, int64_t N, int64_t b, int64_t n) {
  return std::vector<int32_t>(r.spans.begin() + b * N * 2, r.spans.begin() + b * N * 2 + 2 * n);
}

// cpu spans equal to the reference's, except for alignments tied up to
// rounding: consecutive phones of one label can give the very same
// segmentation with different spans (e.g. K = 1), and the backends sum the
// same terms in different orders. Then both must score the same (both are
// checked to be argmaxes by expect_matches_enumeration).
void expect_same_spans_or_tied(const Problem& pb, const std::vector<int32_t>& phones, const std::vector<int32_t>& nph,
                               int64_t N, const AlignResult& a, const AlignResult& ref) {
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    const std::vector<int32_t> sa = spans_of(a, N, b, N), sr = spans_of(ref, N, b, N);
    if (sa == sr) continue;
    const std::vector<int32_t> ph = phones_of(phones, nph, N, b);
    const double x = segmentation_score(pb, b, split_spans(ph, spans_of(a, N, b, nph[b]), pb.dims.K));
    const double y = segmentation_score(pb, b, split_spans(ph, spans_of(ref, N, b, nph[b]), pb.dims.K));
    EXPECT_NEAR(x, y, 1e-12 * std::max(1.0, std::fabs(y))) << "utterance " << b << ": different spans, not a tie";
  }
}

// Checks one backend's result for utterance b against the enumeration: the
// max score, and the returned spans score that max (so they are an argmax).
void expect_matches_enumeration(const Problem& pb, int64_t b, const std::vector<int32_t>& ph, const AlignResult& r,
                                int64_t N, const char* who, double tol, const std::vector<int32_t>& opt = {}) {
  SCOPED_TRACE(::testing::Message() << who << " utterance " << b << " L=" << pb.lengths[b] << " n=" << ph.size());
  const std::vector<AlignPath> all = enumerate_alignments(pb, b, ph, opt);
  double best = -kInf;
  for (const AlignPath& a : all) best = std::max(best, a.score);
  if (best == -kInf) {  // infeasible (no composition, or every one forbidden)
    EXPECT_EQ(r.score[b], -kInf);
    for (int64_t i = 0; i < 2 * N; ++i) EXPECT_EQ(r.spans[b * N * 2 + i], 0);
    return;
  }
  ASSERT_TRUE(std::isfinite(r.score[b]));
  EXPECT_NEAR(r.score[b], best, tol * std::max(1.0, std::fabs(best)));
  const std::vector<int32_t> sp = spans_of(r, N, b, static_cast<int64_t>(ph.size()));
  int64_t t = 0;
  for (size_t n = 0; n < ph.size(); ++n) {
    EXPECT_EQ(sp[2 * n], t) << "phone " << n;
    EXPECT_GE(sp[2 * n + 1], !opt.empty() && opt[n] == 1 ? 0 : 1) << "phone " << n;
    t += sp[2 * n + 1];
  }
  EXPECT_EQ(t, pb.lengths[b]);
  const double got = segmentation_score(pb, b, split_spans(ph, sp, pb.dims.K));
  EXPECT_NEAR(got, best, tol * std::max(1.0, std::fabs(best)));
  for (int64_t i = 2 * static_cast<int64_t>(ph.size()); i < 2 * N; ++i) EXPECT_EQ(r.spans[b * N * 2 + i], 0);
}

// Random tiny problems (K = 1, K > 1, phones longer than K, repeated labels,
// N from 1 to L + 1, with and without start/end and onset).
TEST(Align, BruteForceRandomTiny) {
  std::mt19937 rng(23);
  uint32_t seed = 2300;
  for (int64_t K : {1, 2, 3, 5})
    for (int64_t T : {1, 2, 4, 7})
      for (int64_t C : {1, 2, 3})
        for (bool onset : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "K=" << K << " T=" << T << " C=" << C << " onset=" << onset);
          Problem pb = random_problem(Dims{3, T, K, C}, ++seed, {static_cast<int32_t>(T),
                                      static_cast<int32_t>(std::max<int64_t>(1, T - 1)), static_cast<int32_t>((T + 1) / 2)},
                                      onset);
          if (onset) add_onset(pb, seed);
          const int64_t N = T + 1;
          std::vector<int32_t> phones, nph;
          random_phones(rng, 3, N, C, phones, nph);
          const BothRuns r = run_both(pb, N, phones, nph);
          for (int64_t b = 0; b < 3; ++b) {
            const std::vector<int32_t> ph = phones_of(phones, nph, N, b);
            expect_matches_enumeration(pb, b, ph, r.ref, N, "reference", 1e-9);
            expect_matches_enumeration(pb, b, ph, r.cpu, N, "cpu", 1e-9);
          }
          expect_same_spans_or_tied(pb, phones, nph, N, r.cpu, r.ref);
        }
}

// Inputs rounded to 1/16: every score is exact and ties are frequent; both
// backends pick the same alignment by the tie rule (smallest final piece,
// then the fewest pieces) and score exactly the brute-force max.
TEST(Align, ExactTiesSameSpansAsReference) {
  std::mt19937 rng(77);
  for (const Problem& pb : tiny_exact_problems({3, 5, 6}, {1, 2}, {1, 2, 4}, 900, true)) {
    const int64_t N = pb.dims.T;
    std::vector<int32_t> phones, nph;
    random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph);
    const BothRuns r = run_both(pb, N, phones, nph);
    EXPECT_EQ(r.cpu.spans, r.ref.spans);
    for (int64_t b = 0; b < pb.dims.B; ++b) {
      const std::vector<int32_t> ph = phones_of(phones, nph, N, b);
      expect_matches_enumeration(pb, b, ph, r.ref, N, "reference", 0.0);
      expect_matches_enumeration(pb, b, ph, r.cpu, N, "cpu", 0.0);
      EXPECT_EQ(r.cpu.score[b], r.ref.score[b]);
    }
  }
}

// -inf entries: random forbidden transitions and durations (some utterances
// become infeasible), checked against the enumeration.
TEST(Align, BruteForceWithForbiddenEntries) {
  std::mt19937 rng(5);
  std::bernoulli_distribution forbid(0.3);
  uint32_t seed = 7000;
  int infeasible = 0, feasible = 0;
  for (int rep = 0; rep < 30; ++rep)
    for (int64_t K : {1, 2, 3}) {
      const int64_t T = 6, C = 3, B = 3;
      Problem pb = random_problem(Dims{B, T, K, C}, ++seed, {6, 5, 3});
      for (float& a : pb.A)
        if (forbid(rng)) a = -std::numeric_limits<float>::infinity();
      for (float& d : pb.D)
        if (forbid(rng)) d = -std::numeric_limits<float>::infinity();
      if (forbid(rng)) pb.s[0] = -std::numeric_limits<float>::infinity();
      const int64_t N = 4;
      std::vector<int32_t> phones, nph;
      random_phones(rng, B, N, C, phones, nph);
      const BothRuns r = run_both(pb, N, phones, nph);
      expect_same_spans_or_tied(pb, phones, nph, N, r.cpu, r.ref);
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> ph = phones_of(phones, nph, N, b);
        expect_matches_enumeration(pb, b, ph, r.ref, N, "reference", 1e-9);
        expect_matches_enumeration(pb, b, ph, r.cpu, N, "cpu", 1e-9);
        (r.ref.score[b] == -kInf ? infeasible : feasible)++;
      }
    }
  EXPECT_GT(infeasible, 10);  // the test exercises both outcomes
  EXPECT_GT(feasible, 10);
}

// N = L: one frame per phone; N > L: infeasible, spans (0, 0), no exception;
// the other utterances of the batch are aligned as usual.
TEST(Align, EveryPhoneOneFrameAndTooManyPhones) {
  Problem pb = random_problem(Dims{2, 5, 3, 4}, 11, {5, 4});
  const int64_t N = 5;
  std::vector<int32_t> phones{0, 1, 1, 3, 2, /*b=1*/ 2, 2, 0, 1, 3};
  std::vector<int32_t> nph{5, 5};
  const BothRuns r = run_both(pb, N, phones, nph);
  for (const AlignResult* a : {&r.ref, &r.cpu}) {
    ASSERT_TRUE(std::isfinite(a->score[0]));
    for (int32_t n = 0; n < 5; ++n) {
      EXPECT_EQ(a->spans[2 * n], n);
      EXPECT_EQ(a->spans[2 * n + 1], 1);
    }
    EXPECT_EQ(a->score[1], -kInf);
    for (int i = 0; i < 2 * N; ++i) EXPECT_EQ(a->spans[N * 2 + i], 0);
  }
  EXPECT_NEAR(r.ref.score[0], segmentation_score(pb, 0, split_spans(phones_of(phones, nph, N, 0),
                                                                     spans_of(r.ref, N, 0, 5), 3)), 1e-9);
}

// A phone longer than K is several segments of its label (pieces of K, then
// the remainder); with distinct consecutive labels the alignment's score is
// exactly the loss's gold score of the frame labels it defines.
TEST(Align, LongPhonesScoreAsTheGoldSegmentation) {
  const int64_t B = 2, T = 120, K = 7, C = 5, N = 6;
  Problem pb = random_problem(Dims{B, T, K, C}, 31, {120, 97});
  add_onset(pb, 31);
  // Strong frame evidence for long runs: phone n's label scores high on its frames.
  std::vector<int32_t> phones{0, 3, 1, 4, 2, 0, /*b=1*/ 4, 1, 3, 0, 2, 1};
  std::vector<int32_t> nph{6, 6};
  auto ref = make_backend(BackendKind::reference);
  auto cpu = make_backend(BackendKind::cpu);
  const AlignResult rr = align_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data());
  const AlignResult rc = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data());
  EXPECT_EQ(rc.spans, rr.spans);
  std::vector<int32_t> labels(B * T, 0);
  bool some_longer_than_k = false;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      const int32_t u = rr.spans[(b * N + n) * 2], r = rr.spans[(b * N + n) * 2 + 1];
      some_longer_than_k |= r > K;
      for (int32_t t = u; t < u + r; ++t) labels[b * T + t] = phones[b * N + n];
    }
    const std::vector<Segment> segs = align_segments(K, phones.data() + b * N, N, rr.spans.data() + b * N * 2,
                                                     static_cast<int32_t>(b));
    EXPECT_EQ(segs, gold_segments(labels.data() + b * T, pb.lengths[b], K, static_cast<int32_t>(b)));
  }
  EXPECT_TRUE(some_longer_than_k) << "the test needs a phone longer than K";
  HostRunOptions opt;
  opt.gradients = false;
  opt.viterbi = false;
  const HostResult g = run_host(*ref, pb.dims, pb.params(), labels.data(), opt);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_NEAR(rr.score[b], g.gold[b], 1e-9 * std::fabs(g.gold[b]));
    EXPECT_NEAR(rc.score[b], g.gold[b], 1e-9 * std::fabs(g.gold[b]));
    // The unconstrained Viterbi can only do better.
    EXPECT_LE(rr.score[b], run_host(*ref, pb.dims, pb.params(), nullptr, opt).log_z[b]);
  }
}

// cpu against the reference at a realistic size (T=300, K=30, C=39, ~40
// phones, onset, one utterance with padding poisoned by NaN): identical spans,
// scores to 1e-9; threads 1 and 2 bitwise equal; results independent of the batch.
TEST(Align, CpuMatchesReferenceRealisticSize) {
  const int64_t B = 4, T = 300, K = 30, C = 39, N = 48;
  ProblemOptions o;
  o.lengths = {300, 251, 120, 77};
  o.poison_padding = true;
  Problem pb = random_problem_with(Dims{B, T, K, C}, 2323, o);
  add_onset(pb, 2323, 1.0, false, true);
  std::mt19937 rng(4);
  std::vector<int32_t> phones, nph;
  random_phones(rng, B, N, C, phones, nph, 20);
  auto ref = make_backend(BackendKind::reference);
  auto cpu1 = make_backend(BackendKind::cpu, BackendOptions{1, nullptr});
  auto cpu2 = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  const AlignResult r = align_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data());
  const AlignResult c1 = align_host(*cpu1, pb.dims, pb.params(), N, phones.data(), nph.data());
  const AlignResult c2 = align_host(*cpu2, pb.dims, pb.params(), N, phones.data(), nph.data());
  EXPECT_EQ(c1.spans, r.spans);
  expect_close(c1.score, r.score, 1e-9, 0.0, "score");
  EXPECT_EQ(c1.spans, c2.spans);
  EXPECT_EQ(c1.score, c2.score);
  for (double s : r.score) EXPECT_TRUE(std::isfinite(s));
  // Utterance 2 alone (its own batch of one, T = its length) gives the same result.
  Session session(*cpu2);
  Problem one = pb;
  one.dims = Dims{1, 120, K, C};
  one.cum.assign(pb.cum.begin() + pb.row(2, 0), pb.cum.begin() + pb.row(2, 0) + 121 * C);
  one.o.assign(pb.o.begin() + 2 * T * C, pb.o.begin() + 2 * T * C + 120 * C);
  one.lengths = {120};
  std::vector<int32_t> ph1(phones.begin() + 2 * N, phones.begin() + 3 * N), n1{nph[2]};
  const AlignResult a1 = session.align_host(one.dims, one.params(), N, ph1.data(), n1.data());
  EXPECT_EQ(a1.score[0], c2.score[2]);
  EXPECT_EQ(std::vector<int32_t>(a1.spans.begin(), a1.spans.end()),
            std::vector<int32_t>(c2.spans.begin() + 2 * N * 2, c2.spans.begin() + 3 * N * 2));
}

// Optional phones (an optional silence between words): each may take 0
// frames; against the enumeration of every composition with 0 allowed there,
// K = 1 and K > 1, optional first and last phones, -inf entries.
TEST(Align, BruteForceOptionalPhones) {
  std::mt19937 rng(2024);
  std::bernoulli_distribution forbid(0.15);
  uint32_t seed = 8100;
  int skipped = 0, kept_optional = 0;
  for (int rep = 0; rep < 12; ++rep)
    for (int64_t K : {1, 2, 4}) {
      const int64_t T = 7, C = 3, B = 3, N = 6;
      Problem pb = random_problem(Dims{B, T, K, C}, ++seed, {7, 5, 2});
      if (rep % 3 == 1) add_onset(pb, seed);
      if (rep % 3 == 2)
        for (float& a : pb.A)
          if (forbid(rng)) a = -std::numeric_limits<float>::infinity();
      std::vector<int32_t> phones, nph;
      random_phones(rng, B, N, C, phones, nph, 2);
      const std::vector<int32_t> opt = random_optional(rng, B, N, nph, 0.5);
      const BothRuns r = run_both(pb, N, phones, nph, opt);
      expect_same_spans_or_tied(pb, phones, nph, N, r.cpu, r.ref);
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> ph = phones_of(phones, nph, N, b);
        const std::vector<int32_t> ob(opt.begin() + b * N, opt.begin() + b * N + nph[b]);
        expect_matches_enumeration(pb, b, ph, r.ref, N, "reference", 1e-9, ob);
        expect_matches_enumeration(pb, b, ph, r.cpu, N, "cpu", 1e-9, ob);
        if (r.ref.score[b] == -kInf) continue;
        for (int64_t i = 0; i < nph[b]; ++i)
          if (ob[i]) (r.ref.spans[(b * N + i) * 2 + 1] == 0 ? skipped : kept_optional)++;
      }
    }
  EXPECT_GT(skipped, 5);  // both outcomes of an optional phone occur
  EXPECT_GT(kept_optional, 5);
  // Exact inputs: ties resolved alike (phone kept before skipped).
  for (const Problem& pb : tiny_exact_problems({4, 6}, {2}, {1, 3}, 950)) {
    const int64_t N = pb.dims.T;
    std::vector<int32_t> phones, nph;
    random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph);
    const std::vector<int32_t> opt = random_optional(rng, pb.dims.B, N, nph, 0.5);
    const BothRuns r = run_both(pb, N, phones, nph, opt);
    EXPECT_EQ(r.cpu.spans, r.ref.spans);
    EXPECT_EQ(r.cpu.score, r.ref.score);
  }
}

// Every phone optional but one, N > L with optional phones that make it fit,
// and the validation of the flags.
TEST(Align, OptionalPhonesFitAndValidation) {
  Problem pb = random_problem(Dims{1, 3, 2, 3}, 5, {3});
  // 5 phones, 2 optional: 3 kept phones fit in 3 frames.
  std::vector<int32_t> phones{0, 1, 2, 1, 0}, nph{5}, opt{1, 0, 1, 0, 0};
  const BothRuns r = run_both(pb, 5, phones, nph, opt);
  for (const AlignResult* a : {&r.ref, &r.cpu}) {
    ASSERT_TRUE(std::isfinite(a->score[0]));
    EXPECT_EQ(a->spans, (std::vector<int32_t>{0, 0, 0, 1, 1, 0, 1, 1, 2, 1}));
  }
  opt = {1, 0, 0, 0, 0};  // 4 kept phones, 3 frames: infeasible
  EXPECT_EQ(run_both(pb, 5, phones, nph, opt).cpu.score[0], -kInf);
  for (const char* name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    auto err = [&](std::vector<int32_t> o) {
      try {
        align_host(*be, pb.dims, pb.params(), 5, phones.data(), nph.data(), o.data());
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string("(no error)");
    };
    EXPECT_EQ(err({0, 1, 1, 0, 0}),
              "crf: align: optional[0][2] = 1 follows another optional phone (two optional phones in a row are not "
              "supported)");
    EXPECT_EQ(err({0, 2, 0, 0, 0}), "crf: align: optional[0][1] = 2 is not 0 or 1");
    std::vector<int32_t> one{2}, n1{1}, o1{1};
    try {
      align_host(*be, pb.dims, pb.params(), 1, one.data(), n1.data(), o1.data());
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "crf: align: utterance 0 has only optional phones");
    }
  }
}

// Invalid phone inputs are std::invalid_argument naming the tensor and index.
TEST(Align, InvalidPhonesAreErrors) {
  Problem pb = random_problem(Dims{2, 5, 2, 3}, 3, {5, 5});
  for (const char* name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    std::vector<int32_t> phones{0, 1, 2, 0, 3, 1}, nph{3, 2};
    try {
      align_host(*be, pb.dims, pb.params(), 3, phones.data(), nph.data());
      ADD_FAILURE() << name << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "crf: align: phones[1][1] = 3 is outside [0, C=3)");
    }
    nph = {3, 0};
    try {
      align_host(*be, pb.dims, pb.params(), 3, phones.data(), nph.data());
      ADD_FAILURE() << name << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "crf: align: num_phones[1] = 0 is outside [1, N=3]");
    }
    // Phones past num_phones are never read.
    phones = {0, 1, 2, 0, -5, 99};
    nph = {3, 1};
    const AlignResult r = align_host(*be, pb.dims, pb.params(), 3, phones.data(), nph.data());
    EXPECT_TRUE(std::isfinite(r.score[0]) && std::isfinite(r.score[1]));
    EXPECT_EQ(r.spans[3 * 2 + 0], 0);
    EXPECT_EQ(r.spans[3 * 2 + 1], 5);
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
