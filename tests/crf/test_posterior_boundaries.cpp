// crf::posterior_boundaries and crf::increasing_boundaries (docs/crf.md
// "Boundaries from the posteriors"): the programme against every increasing
// placement, and the whole step against brute-force enumeration of the
// alignments (tests/support/align_bruteforce.h), optional phones included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "crf/backend_kind.h"
#include "crf/posterior_boundaries.h"
#include "tests/support/align_bruteforce.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf {
namespace {

using testing::AlignPath;
using testing::Problem;

// The best sum_j W[j][b_j] over every 0 < b_1 < ... < b_m < L, by enumeration.
double best_by_enumeration(const std::vector<double>& W, int64_t m, int64_t L) {
  double best = -INFINITY;
  std::vector<int64_t> b(static_cast<size_t>(m));
  std::function<void(int64_t, int64_t, double)> rec = [&](int64_t j, int64_t from, double sum) {
    if (j == m) {
      best = std::max(best, sum);
      return;
    }
    for (int64_t u = from; u <= L - (m - j); ++u) rec(j + 1, u + 1, sum + W[j * L + u]);
  };
  rec(0, 1, 0.0);
  return best;
}

TEST(PosteriorBoundaries, ProgrammeFindsTheBestIncreasingPlacement) {
  std::mt19937 rng(15);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::uniform_int_distribution<int> coarse(0, 3);  // many exact ties
  int cases = 0;
  for (int64_t L = 2; L <= 9; ++L)
    for (int64_t m = 1; m < L && m <= 5; ++m)
      for (int rep = 0; rep < 6; ++rep) {
        std::vector<double> W(static_cast<size_t>(m * L), 0.0);
        for (double& w : W) w = rep % 2 ? coarse(rng) / 4.0 : u01(rng);
        const std::vector<int64_t> b = increasing_boundaries(W.data(), m, L);
        ASSERT_EQ(static_cast<int64_t>(b.size()), m);
        double sum = 0.0;
        for (int64_t j = 0; j < m; ++j) {
          EXPECT_GT(b[j], j == 0 ? 0 : b[j - 1]) << "L " << L << " m " << m;
          EXPECT_LT(b[j], L);
          sum += W[j * L + b[j]];
        }
        EXPECT_NEAR(sum, best_by_enumeration(W, m, L), 1e-12) << "L " << L << " m " << m << " rep " << rep;
        ++cases;
      }
  EXPECT_EQ(cases, 6 * 30);  // m = 1..min(L - 1, 5) for L = 2..9
  // Ties: every frame equal, so each boundary takes its earliest frame.
  const std::vector<double> flat(3 * 6, 0.5);
  EXPECT_EQ(increasing_boundaries(flat.data(), 3, 6), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_THROW(increasing_boundaries(flat.data(), 3, 3), std::invalid_argument);
}

// P_c(phone n starts at u) of utterance b, by enumeration of its alignments: [n][L].
std::vector<double> start_posteriors(const Problem& pb, int64_t b, const std::vector<int32_t>& phones,
                                     const std::vector<int32_t>& opt) {
  const std::vector<AlignPath> all = testing::enumerate_alignments(pb, b, phones, opt);
  const int64_t L = pb.lengths[b], n = static_cast<int64_t>(phones.size());
  double m = -INFINITY;
  for (const AlignPath& a : all) m = std::max(m, a.score);
  double z = 0.0;
  for (const AlignPath& a : all) z += std::exp(a.score - m);
  std::vector<double> P(static_cast<size_t>(n * L), 0.0);
  for (const AlignPath& a : all)
    for (int64_t i = 0; i < n; ++i)
      if (a.spans[2 * i + 1] > 0 && a.spans[2 * i] < L) P[i * L + a.spans[2 * i]] += std::exp(a.score - m) / z;
  return P;
}

TEST(PosteriorBoundaries, AgainstEnumerationOfTheAlignments) {
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  std::mt19937 rng(41);
  int utterances = 0, moved = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : testing::tiny_exact_problems({3, 5, 7}, {2, 3}, {1, 2, 3}, 500, onset))
      for (int variant = 0; variant < 2; ++variant) {  // without, then with optional phones
        const int64_t N = 4, B = pb.dims.B;
        std::vector<int32_t> phones, nph;
        testing::random_phones(rng, B, N, pb.dims.C, phones, nph);
        const std::vector<int32_t> opt =
            variant == 0 ? std::vector<int32_t>() : testing::random_optional(rng, B, N, nph, 0.5);
        const int32_t* o = opt.empty() ? nullptr : opt.data();
        const AlignResult viterbi = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), o);
        AlignResult r = viterbi;
        posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), o, &r, 2);
        int64_t count_moved = 0, count_boundaries = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t L = pb.lengths[b], n = nph[b];
          const int32_t* vs = viterbi.spans.data() + b * N * 2;
          const int32_t* ps = r.spans.data() + b * N * 2;
          if (!(viterbi.score[b] > -INFINITY)) {  // infeasible: left alone
            for (int64_t i = 0; i < 2 * N; ++i) EXPECT_EQ(ps[i], vs[i]);
            continue;
          }
          const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + n);
          const std::vector<int32_t> op = opt.empty() ? std::vector<int32_t>()
                                                      : std::vector<int32_t>(opt.begin() + b * N, opt.begin() + b * N + n);
          std::vector<int64_t> kept;
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(ps[2 * i + 1] > 0, vs[2 * i + 1] > 0) << "phone " << i << ": the path decides which are kept";
            if (vs[2 * i + 1] > 0) kept.push_back(i);
          }
          // the spans tile [0, L): kept phones in order, a skipped one at the next kept phone's start (L at the end)
          int64_t t = 0;
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(ps[2 * i], t) << "phone " << i;
            t += ps[2 * i + 1];
          }
          EXPECT_EQ(t, L);
          const int64_t m = static_cast<int64_t>(kept.size()) - 1;
          if (m < 1) continue;
          // the objective reached equals the best over every increasing placement of the kept phones' starts
          const std::vector<double> P = start_posteriors(pb, b, ph, op);
          std::vector<double> W(static_cast<size_t>(m * L), 0.0);
          for (int64_t j = 0; j < m; ++j)
            for (int64_t u = 1; u < L; ++u) W[j * L + u] = P[kept[j + 1] * L + u];
          double got = 0.0;
          for (int64_t j = 0; j < m; ++j) got += P[kept[j + 1] * L + ps[2 * kept[j + 1]]];
          EXPECT_NEAR(got, best_by_enumeration(W, m, L), 1e-9) << "utterance " << b << " L " << L;
          ++utterances;
          count_boundaries += m;
          for (int64_t j = 1; j <= m; ++j) count_moved += ps[2 * kept[j]] != vs[2 * kept[j]];
        }
        EXPECT_EQ(r.posterior.boundaries - viterbi.posterior.boundaries, count_boundaries);
        EXPECT_EQ(r.posterior.moved, count_moved);
        EXPECT_EQ(r.posterior.over_limit, 0);
        moved += static_cast<int>(count_moved);
      }
  EXPECT_GT(utterances, 150);
  EXPECT_GT(moved, 10) << "no boundary moved: the test would show nothing";
}

// Between frames (docs/crf.md): where the log posterior is a parabola, as a sampled Gaussian's is,
// the offset is the Gaussian's mean exactly; clamped at half a frame; 0 without a maximum.
TEST(PosteriorBoundaries, BetweenFramesOffsetIsTheParabolasVertex) {
  for (double mu : {-0.5, -0.37, -0.1, 0.0, 0.05, 0.25, 0.49}) {
    for (double sigma : {0.4, 1.0, 3.0}) {
      auto p = [&](double u) { return 0.2 * std::exp(-(u - mu) * (u - mu) / (2 * sigma * sigma)); };
      EXPECT_NEAR(between_frames_offset(p(-1), p(0), p(1)), mu, 1e-12) << "mu " << mu << " sigma " << sigma;
    }
  }
  auto g = [](double u) { return std::exp(-(u - 0.8) * (u - 0.8)); };  // a mode past half a frame: clamped
  EXPECT_EQ(between_frames_offset(g(-1), g(0), g(1)), 0.5);
  EXPECT_EQ(between_frames_offset(g(1), g(0), g(-1)), -0.5);
  EXPECT_EQ(between_frames_offset(0.3, 0.3, 0.3), 0.0);   // flat: no maximum
  EXPECT_EQ(between_frames_offset(0.4, 0.1, 0.4), 0.0);   // a minimum
  EXPECT_EQ(between_frames_offset(0.0, 0.5, 0.2), 0.0);   // a neighbour of probability 0 (or outside the utterance)
  EXPECT_EQ(between_frames_offset(0.2, 0.5, 0.0), 0.0);
  EXPECT_EQ(between_frames_offset(0.2, 0.5, 0.2), 0.0);   // symmetric
  EXPECT_LT(between_frames_offset(0.3, 0.5, 0.1), 0.0);   // toward the likelier neighbour
  EXPECT_GT(between_frames_offset(0.1, 0.5, 0.3), 0.0);
}

// The step with offsets: the same boundaries as without; each placed boundary's offset is
// between_frames_offset of its enumerated start posteriors at the frames around it; 0 for the
// first kept phone and the skipped ones; the counts add up.
TEST(PosteriorBoundaries, OffsetsBetweenFramesAgainstEnumeration) {
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  std::mt19937 rng(43);
  int64_t placed = 0, nonzero = 0;
  std::vector<Problem> problems = testing::tiny_exact_problems({3, 5, 7}, {2, 3}, {1, 2, 3}, 500, true);
  for (uint32_t seed = 600; seed < 612; ++seed)  // longer utterances: more boundaries with both neighbours inside
    problems.push_back(testing::random_problem(Dims{3, 12, 4, 4}, seed, {12, 10, 11}));
  for (const Problem& pb : problems) {
    const int64_t N = 4, B = pb.dims.B;
    std::vector<int32_t> phones, nph;
    testing::random_phones(rng, B, N, pb.dims.C, phones, nph);
    const std::vector<int32_t> opt = testing::random_optional(rng, B, N, nph, 0.4);
    const AlignResult viterbi = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data());
    AlignResult frames = viterbi, between = viterbi;
    posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &frames, 2);
    posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &between, 2, 0.0,
                         PosteriorWindows(), /*between_frames=*/true);
    EXPECT_TRUE(frames.start_offset.empty());
    ASSERT_EQ(between.start_offset.size(), static_cast<size_t>(B * N));
    EXPECT_EQ(between.spans, frames.spans);
    double abs_sum = 0.0;
    int64_t count = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = pb.lengths[b], n = nph[b];
      const double* off = between.start_offset.data() + b * N;
      const int32_t* sp = between.spans.data() + b * N * 2;
      if (!(viterbi.score[b] > -INFINITY)) {
        for (int64_t i = 0; i < N; ++i) EXPECT_EQ(off[i], 0.0);
        continue;
      }
      const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + n);
      const std::vector<int32_t> op(opt.begin() + b * N, opt.begin() + b * N + n);
      const std::vector<double> P = start_posteriors(pb, b, ph, op);
      bool first = true;
      for (int64_t i = 0; i < n; ++i) {
        if (sp[2 * i + 1] == 0 || first || n < 2) {
          EXPECT_EQ(off[i], 0.0) << "utterance " << b << " phone " << i;
          first = first && sp[2 * i + 1] == 0;
          continue;
        }
        const int64_t u = sp[2 * i];
        const double want = between_frames_offset(u - 1 >= 1 ? P[i * L + u - 1] : 0.0, P[i * L + u],
                                                  u + 1 <= L - 1 ? P[i * L + u + 1] : 0.0);
        EXPECT_NEAR(off[i], want, 1e-9) << "utterance " << b << " phone " << i << " at " << u << " of " << L;
        EXPECT_LE(std::fabs(off[i]), 0.5);
        ++placed;
        nonzero += off[i] != 0.0;
        count += off[i] != 0.0;
        abs_sum += std::fabs(off[i]);
      }
    }
    EXPECT_EQ(between.posterior.between_frames, count);
    EXPECT_NEAR(between.posterior.offset_abs_sum, abs_sum, 1e-12);
    EXPECT_EQ(frames.posterior.between_frames, 0);
  }
  EXPECT_GT(placed, 100);
  EXPECT_GT(nonzero, placed / 4) << "few offsets: the test would show little";
}

TEST(PosteriorBoundaries, OverTheLimitKeepsTheViterbiBoundaries) {
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{1, nullptr});
  const Problem pb = testing::random_problem(Dims{3, 30, 4, 5}, 11, {30, 17, 24});
  std::mt19937 rng(13);
  std::vector<int32_t> phones, nph;
  testing::random_phones(rng, 3, 6, 5, phones, nph, 3);
  const AlignResult viterbi = align_host(*cpu, pb.dims, pb.params(), 6, phones.data(), nph.data());
  AlignResult r = viterbi;
  posterior_boundaries(pb.dims, pb.params(), 6, phones.data(), nph.data(), nullptr, &r, 1, /*limit=*/1.0);
  EXPECT_EQ(r.spans, viterbi.spans);
  EXPECT_EQ(r.posterior.over_limit, 3);
  EXPECT_EQ(r.posterior.first_over_limit, 0);
  EXPECT_EQ(r.posterior.utterances, 0);
  // and under it: the same utterances decided, their results independent of the thread count
  AlignResult one = viterbi, two = viterbi;
  posterior_boundaries(pb.dims, pb.params(), 6, phones.data(), nph.data(), nullptr, &one, 1);
  posterior_boundaries(pb.dims, pb.params(), 6, phones.data(), nph.data(), nullptr, &two, 2);
  EXPECT_EQ(one.spans, two.spans);
  EXPECT_EQ(one.posterior.utterances, 3);
  EXPECT_EQ(one.posterior.boundaries, nph[0] + nph[1] + nph[2] - 3);
}


// An utterance over the limit is decided by windows of its transcript: windows whose context covers the
// whole transcript give the exact decision bitwise; small ones (conditioned on the aligned phones outside
// them) keep every phone, tile the frames, and agree with the exact decision on most boundaries.
TEST(PosteriorBoundaries, WindowsOfTheTranscript) {
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{1, nullptr});
  Problem pb = testing::random_problem(Dims{2, 90, 6, 5}, 21, {90, 71});
  testing::add_onset(pb, 22);
  std::mt19937 rng(23);
  const int64_t N = 26;
  std::vector<int32_t> phones, nph;
  testing::random_phones(rng, 2, N, 5, phones, nph, 20);
  const std::vector<int32_t> opt = testing::random_optional(rng, 2, N, nph, 0.2);
  const AlignResult viterbi = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data());
  ASSERT_TRUE(viterbi.score[0] > -INFINITY && viterbi.score[1] > -INFINITY);
  AlignResult exact = viterbi, covering = viterbi, small = viterbi;
  posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &exact, 1);
  EXPECT_EQ(exact.posterior.windowed, 0);
  posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &covering, 1, 0.0,
                       PosteriorWindows{5, 100, true});
  EXPECT_EQ(covering.spans, exact.spans);
  EXPECT_EQ(covering.posterior.windowed, 2);
  {  // and the offsets between frames alike, bitwise
    AlignResult exact_between = viterbi, covering_between = viterbi;
    posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &exact_between, 1, 0.0,
                         PosteriorWindows(), true);
    posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &covering_between, 1, 0.0,
                         PosteriorWindows{5, 100, true}, true);
    EXPECT_EQ(covering_between.start_offset, exact_between.start_offset);
    EXPECT_GT(exact_between.posterior.between_frames, 10);
  }
  posterior_boundaries(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), &small, 1, 0.0,
                       PosteriorWindows{6, 3, true});
  EXPECT_EQ(small.posterior.windowed, 2);
  EXPECT_EQ(small.posterior.boundaries, exact.posterior.boundaries);
  int64_t same = 0, total = 0;
  for (int64_t b = 0; b < 2; ++b) {
    int64_t t = 0;
    for (int64_t i = 0; i < nph[b]; ++i) {
      const int32_t* sp = small.spans.data() + (b * N + i) * 2;
      const int32_t* ex = exact.spans.data() + (b * N + i) * 2;
      EXPECT_EQ(sp[0], t) << "utterance " << b << " phone " << i;
      EXPECT_EQ(sp[1] > 0, viterbi.spans[(b * N + i) * 2 + 1] > 0) << "utterance " << b << " phone " << i;
      t += sp[1];
      if (i > 0 && sp[1] > 0) ++total, same += sp[0] == ex[0];
    }
    EXPECT_EQ(t, pb.lengths[b]);
  }
  std::printf("windows of 6 phones with 3 of context: %lld of %lld boundaries as the exact decision\n",
              static_cast<long long>(same), static_cast<long long>(total));
  EXPECT_GE(same * 10, total * 8);
}

}  // namespace
}  // namespace timitseg::crf
