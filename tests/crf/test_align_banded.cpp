// The banded constrained Viterbi (crf/cpu/align_banded.h, docs/crf.md "Forced
// alignment of long recordings (banded)") against the cpu backend's full-table
// recurrence, bitwise (scores and spans): random inputs with narrow bands
// (the edge check and the widening passes forced), planted alignments of a
// few thousand frames, bands given by hand that cut the best path (the edge
// is seen), utterances joined into one aligned as each alone, the band
// covering every phone, the exact fallback and the one error line when no
// method fits the memory limit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/progress.h"
#include "crf/backend.h"
#include "crf/cpu/align_banded.h"
#include "crf/cumsum.h"
#include "crf/host_run.h"
#include "tests/support/align_cases.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A planted alignment: frame scores favour the labels of random runs (signal
// on the true label, N(0,1) noise), the phones are the runs. B utterances of T frames.
struct Planted {
  Problem pb;
  Phones ph;
};
Planted planted(int64_t B, int64_t T, int64_t K, int64_t C, double signal, uint32_t seed, int max_run) {
  Planted r;
  ProblemOptions o;
  o.lengths.assign(B, static_cast<int32_t>(T));
  o.max_run = max_run;
  r.pb = random_problem_with(Dims{B, T, K, C}, seed, o);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<double> nx(0.0, 1.0);
  std::vector<float> x(B * T * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        x[(b * T + t) * C + c] = static_cast<float>(nx(rng) + (r.pb.labels[b * T + t] == c ? signal : 0.0));
  centered_cumsum_forward<float>(B, T, C, x.data(), r.pb.lengths.data(), r.pb.cum.data());
  std::vector<std::vector<int32_t>> runs(B);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (t == 0 || r.pb.labels[b * T + t] != r.pb.labels[b * T + t - 1]) runs[b].push_back(r.pb.labels[b * T + t]);
  r.ph.N = 0;
  for (const auto& v : runs) r.ph.N = std::max<int64_t>(r.ph.N, static_cast<int64_t>(v.size()));
  r.ph.y.assign(B * r.ph.N, 0);
  r.ph.opt.assign(B * r.ph.N, 0);
  for (int64_t b = 0; b < B; ++b) {
    r.ph.nph.push_back(static_cast<int32_t>(runs[b].size()));
    std::copy(runs[b].begin(), runs[b].end(), r.ph.y.begin() + b * r.ph.N);
  }
  return r;
}

TEST(AlignBanded, NarrowBandsOnRandomScoresLoseLittle) {
  // Scores with no alignment in them (N(0,1) frames, random parameters) and
  // bands of 3 and 8 phones: the band is a heuristic (docs/crf.md), so here it
  // can miss the full table's path without touching its edge. It never finds
  // a better one (it searches a subset), its path is a real alignment of the
  // score it reports, and the misses stay rare (measured: 11 of 864).
  Progress::set_enabled(false);
  uint32_t seed = 500;
  int cases = 0, widened = 0, mismatches = 0;
  for (int64_t T : {7, 23, 61, 150})
    for (int64_t K : {1, 3, 8, 40})
      for (int64_t N : {3, 9, 30})
        for (int variant = 0; variant < 3; ++variant) {  // plain, onset, optional phones
          Problem pb = random_problem(Dims{3, T, K, 5}, ++seed, {});
          if (variant == 1) add_onset(pb, seed);
          const bool with_opt = variant == 2;
          const Phones ph = random_phones(3, N, 5, with_opt, seed);
          const AlignResult full = full_table(pb, ph, with_opt);
          const Params p = pb.params();
          for (int64_t b = 0; b < 3; ++b)
            for (int64_t W : {3, 8}) {
              SCOPED_TRACE(::testing::Message() << "seed=" << seed << " b=" << b << " L=" << pb.lengths[b]
                                                << " n=" << ph.nph[b] << " K=" << K << " W=" << W);
              std::vector<int32_t> spans(ph.nph[b] * 2, -1);
              cpu::BandedStats st;
              const double s = cpu::align_banded(utterance(pb, p, ph, b, with_opt), spans.data(), W,
                                                 cpu::kBandMaxBytes, &st);
              ++cases;
              widened += st.passes > 1;
              EXPECT_LE(s, full.score[b]);
              EXPECT_EQ(s == kNegInf, full.score[b] == kNegInf);  // feasible in the band when feasible at all
              if (s == full.score[b]) {
                EXPECT_EQ(spans, full_spans(full, ph, b));
              } else {
                ++mismatches;
                // the banded path is an alignment (in order, covering [0, L)) ...
                int64_t at = 0;
                for (int64_t n = 0; n < ph.nph[b]; ++n) {
                  if (spans[2 * n + 1] > 0) EXPECT_EQ(spans[2 * n], at);
                  at += spans[2 * n + 1];
                }
                EXPECT_EQ(at, pb.lengths[b]);
              }
            }
        }
  EXPECT_LE(mismatches, cases / 50);  // under 2 %
  EXPECT_GT(widened, 0);              // the widening passes ran
  std::printf("[ info ] random scores: %d cases, %d widened, %d missed the full table's path\n", cases, widened,
              mismatches);
  Progress::set_enabled(true);
}

TEST(AlignBanded, BandsThatCutThePathWidenToTheFullTable) {
  // A weak signal (0.6 against N(0,1) noise) and a first band that cuts the
  // path (4 phones either side of the full table's path moved 10 phones
  // later): the widening passes end on the full table's path, bitwise.
  Progress::set_enabled(false);
  for (uint32_t seed = 20; seed < 26; ++seed) {
    const Planted pl = planted(2, 600, 12, 6, 0.6, seed, 16);
    const AlignResult full = full_table(pl.pb, pl.ph, false);
    const Params p = pl.pb.params();
    for (int64_t b = 0; b < 2; ++b) {
      SCOPED_TRACE(::testing::Message() << "seed=" << seed << " b=" << b << " n=" << pl.ph.nph[b]);
      const int64_t np = pl.ph.nph[b], L = pl.pb.lengths[b];
      const std::vector<int32_t> want = full_spans(full, pl.ph, b);
      cpu::Band cut = cpu::band_around(want.data(), np, L, 4);
      for (int64_t t = 1; t < L; ++t) {
        cut.lo[t] = std::min<int32_t>(cut.lo[t] + 10, static_cast<int32_t>(np - 9));
        cut.hi[t] = std::min<int32_t>(cut.hi[t] + 10, static_cast<int32_t>(np));
      }
      std::vector<int32_t> spans(np * 2, -1);
      cpu::BandedStats st;
      const double s = cpu::align_banded(utterance(pl.pb, p, pl.ph, b, false), spans.data(), 4, cpu::kBandMaxBytes,
                                         &st, &cut);
      EXPECT_EQ(s, full.score[b]);
      EXPECT_EQ(spans, want);
      EXPECT_GT(st.passes, 1);
      EXPECT_FALSE(st.exact_fallback);
    }
  }
  Progress::set_enabled(true);
}

TEST(AlignBanded, WeakPlantedAlignmentsEqualTheFullTable) {
  // The same weak signal and the method's own band (passes of 4 phones): exact.
  Progress::set_enabled(false);
  for (uint32_t seed = 20; seed < 30; ++seed) {
    const Planted pl = planted(2, 600, 12, 6, 0.6, seed, 16);
    const AlignResult full = full_table(pl.pb, pl.ph, false);
    const Params p = pl.pb.params();
    for (int64_t b = 0; b < 2; ++b) {
      SCOPED_TRACE(::testing::Message() << "seed=" << seed << " b=" << b << " n=" << pl.ph.nph[b]);
      std::vector<int32_t> spans(pl.ph.nph[b] * 2, -1);
      EXPECT_EQ(cpu::align_banded(utterance(pl.pb, p, pl.ph, b, false), spans.data(), 4), full.score[b]);
      EXPECT_EQ(spans, full_spans(full, pl.ph, b));
    }
  }
  Progress::set_enabled(true);
}

TEST(AlignBanded, PlantedAlignmentsInOnePassEqualTheFullTable) {
  // 3000 frames, a few hundred phones, K = 20, a band of 16: one pass, the full table's path.
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Planted pl = planted(2, 3000, 20, 8, 1.5, seed, 30);
    const AlignResult full = full_table(pl.pb, pl.ph, false);
    const Params p = pl.pb.params();
    for (int64_t b = 0; b < 2; ++b) {
      SCOPED_TRACE(::testing::Message() << "seed=" << seed << " b=" << b << " n=" << pl.ph.nph[b]);
      ASSERT_GT(pl.ph.nph[b], 100);
      std::vector<int32_t> spans(pl.ph.nph[b] * 2, -1);
      cpu::BandedStats st;
      const double s = cpu::align_banded(utterance(pl.pb, p, pl.ph, b, false), spans.data(), 16, cpu::kBandMaxBytes, &st);
      EXPECT_EQ(s, full.score[b]);
      EXPECT_EQ(spans, full_spans(full, pl.ph, b));
      EXPECT_EQ(st.passes, 1);
      EXPECT_FALSE(st.exact_fallback);
    }
  }
}

// The forward centre pass written plainly (scalar, every row kept): the
// oracle of cpu::forward_centres (its blocks of phones, padded rings and two
// chains of d must not change a centre).
std::vector<int32_t> plain_centres(const cpu::AlignUtterance& u, int64_t width) {
  const int64_t L = u.L, np = u.np, K = u.K, C = u.C, W = std::max<int64_t>(1, std::min(width, np));
  const Params& p = *u.p;
  auto opt = [&](int64_t n) { return u.opt != nullptr && u.opt[n] == 1; };
  auto A = [&](int64_t a, int64_t b) { return static_cast<double>(p.transition[a * C + b]); };
  auto st = [&](int64_t c) { return p.start ? static_cast<double>(p.start[c]) : 0.0; };
  auto seg = [&](int64_t r, int64_t d, int64_t c) {
    const double v = static_cast<double>(u.cum[(r + d) * C + c]) - static_cast<double>(u.cum[r * C + c]) +
                     static_cast<double>(p.duration_bias[(d - 1) * C + c]);
    return u.onset ? v + static_cast<double>(u.onset[r * C + c]) : v;
  };
  std::vector<int64_t> lo(L + 1), hi(L + 1);
  std::vector<std::vector<double>> S(L + 1);  // [L+1][hi - lo]
  auto Sat = [&](int64_t t, int64_t n) { return n >= lo[t] && n < hi[t] ? S[t][n - lo[t]] : kNegInf; };
  lo[0] = 0, hi[0] = W;
  for (int64_t n = 0; n < W; ++n) S[0].push_back(n == 0 ? st(u.y[0]) : (n == 1 && opt(0) ? st(u.y[1]) : kNegInf));
  std::vector<int32_t> centre(L + 1, 0);
  int64_t c0 = 0;
  for (int64_t t = 1; t <= L; ++t) {
    const int64_t prev = lo[t - 1], cap = std::max<int64_t>(prev, np - W);
    lo[t] = std::max(prev, std::min({c0 - W / 2, prev + 2, cap}));
    hi[t] = std::min(np, lo[t] + W);
    std::vector<double> F(hi[t] - lo[t], kNegInf);
    for (int64_t n = lo[t]; n < hi[t]; ++n)
      for (int64_t d = 1; d <= std::min(K, t); ++d) {
        const double v = Sat(t - d, n) + seg(t - d, d, u.y[n]);
        if (v > F[n - lo[t]]) F[n - lo[t]] = v;
      }
    int64_t best = -1;
    for (int64_t n = lo[t]; n < hi[t]; ++n)
      if (F[n - lo[t]] > kNegInf && (best < 0 || F[n - lo[t]] > F[best - lo[t]])) best = n;
    if (best >= 0) c0 = best;
    centre[t] = static_cast<int32_t>(c0);
    for (int64_t n = lo[t]; n < hi[t] && t < L; ++n) {
      const int64_t c = u.y[n];
      double top = n == 0 || n - 1 < lo[t] ? kNegInf : F[n - 1 - lo[t]] + A(u.y[n - 1], c);
      if (n >= 2 && opt(n - 1)) top = std::max(top, (n - 2 >= lo[t] ? F[n - 2 - lo[t]] : kNegInf) + A(u.y[n - 2], c));
      if (t >= K) top = std::max(top, Sat(t - K, n) + seg(t - K, K, c) + A(c, c));
      S[t].push_back(top);
    }
  }
  return centre;
}

TEST(AlignBanded, CentresEqualThePlainPass) {
  Progress::set_enabled(false);
  for (uint32_t seed : {11u, 12u}) {
    for (const int variant : {0, 1, 2}) {  // plain, onset, optional phones
      Planted pl = planted(1, 2500, 17, 6, variant == 0 ? 0.4 : 1.2, seed, 14);
      if (variant == 1) add_onset(pl.pb, seed);
      if (variant == 2)
        for (int64_t n = 1; n < pl.ph.nph[0]; n += 5) pl.ph.opt[n] = 1;
      const Params p = pl.pb.params();
      const cpu::AlignUtterance u = utterance(pl.pb, p, pl.ph, 0, variant == 2);
      for (const int64_t width : {5, 16, 32}) {
        SCOPED_TRACE(::testing::Message() << "seed=" << seed << " variant=" << variant << " width=" << width);
        EXPECT_EQ(cpu::forward_centres(u, width), plain_centres(u, width));
      }
    }
  }
  Progress::set_enabled(true);
}

TEST(AlignBanded, TiesAndJaggedBandsGiveTheFullTablesBits) {
  // Scores on a grid of 1/4 (cum, transitions, duration biases; onset on
  // 1/16): many final pieces d of a cell tie exactly, and the band's ties must
  // go to the smaller d as the full table's do (the blocks of phones and the
  // two chains of odd and even d in crf/cpu/align_banded.cpp). K = 13 (odd:
  // one chain takes the last d). Bands: the method's own, and one around the
  // full table's path whose rows' ends jump back and forth by up to 7 phones
  // (lanes outside a row's band on either side of it).
  Progress::set_enabled(false);
  auto quarter = [](std::vector<float>& v) {
    for (float& x : v) x = std::round(x * 4.0f) / 4.0f;
  };
  for (uint32_t seed : {5u, 6u, 7u}) {
    for (const bool onset : {false, true}) {
      Planted pl = planted(2, 1500, 13, 5, 1.0, seed, 12);
      quarter(pl.pb.cum);
      quarter(pl.pb.A);
      quarter(pl.pb.D);
      if (onset) add_onset(pl.pb, seed, 1.0, true);
      const AlignResult full = full_table(pl.pb, pl.ph, false);
      const Params p = pl.pb.params();
      std::mt19937 rng(seed);
      std::uniform_int_distribution<int32_t> jump(0, 7);
      for (int64_t b = 0; b < 2; ++b) {
        SCOPED_TRACE(::testing::Message() << "seed=" << seed << " onset=" << onset << " b=" << b);
        const int64_t np = pl.ph.nph[b], L = pl.pb.lengths[b];
        ASSERT_GT(np, 100);
        const std::vector<int32_t> want = full_spans(full, pl.ph, b);
        std::vector<int32_t> spans(np * 2, -1);
        EXPECT_EQ(cpu::align_banded(utterance(pl.pb, p, pl.ph, b, false), spans.data(), 8), full.score[b]);
        EXPECT_EQ(spans, want);
        cpu::Band jagged = cpu::band_around(want.data(), np, L, 3);
        for (int64_t t = 0; t <= L; ++t) {
          jagged.lo[t] = std::max(0, jagged.lo[t] - jump(rng));
          jagged.hi[t] = std::min(static_cast<int32_t>(np), jagged.hi[t] + jump(rng));
        }
        std::fill(spans.begin(), spans.end(), -1);
        cpu::BandedStats st;
        const double s = cpu::align_banded(utterance(pl.pb, p, pl.ph, b, false), spans.data(), 8, cpu::kBandMaxBytes,
                                           &st, &jagged);
        EXPECT_EQ(s, full.score[b]);
        EXPECT_EQ(spans, want);
        EXPECT_FALSE(st.exact_fallback);
      }
    }
  }
  Progress::set_enabled(true);
}

TEST(AlignBanded, JoinedUtterancesAlignAsEachAlone) {
  // 40 planted utterances of 300 frames (a sharp model: signal 3 against
  // N(0,1) noise) joined into one of 12,000 frames (the
  // frame scores concatenated, the cumsum centred over the whole, the phone
  // sequences concatenated): the banded alignment of the whole equals the
  // exact (checkpointed) one, and its boundaries are those of each utterance
  // aligned alone for at least 99 % of them within one frame.
  Progress::set_enabled(false);
  const int64_t U = 40, T = 300, K = 20, C = 8;
  const Planted pl = planted(U, T, K, C, 3.0, 77, 24);
  const AlignResult alone = full_table(pl.pb, pl.ph, false);
  // the joined frame scores: differences of each utterance's (centred) cum, then centred again over the whole
  std::vector<float> x(static_cast<size_t>(U * T * C));
  for (int64_t b = 0; b < U; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        x[(b * T + t) * C + c] = pl.pb.cum[pl.pb.row(b, t + 1) + c] - pl.pb.cum[pl.pb.row(b, t) + c];
  const int32_t L = static_cast<int32_t>(U * T);
  std::vector<float> cum(static_cast<size_t>(L + 1) * C);
  centered_cumsum_forward<float>(1, L, C, x.data(), &L, cum.data());
  std::vector<int32_t> y, first;  // the joined phones; utterance b's first phone index
  for (int64_t b = 0; b < U; ++b) {
    first.push_back(static_cast<int32_t>(y.size()));
    y.insert(y.end(), pl.ph.y.begin() + b * pl.ph.N, pl.ph.y.begin() + b * pl.ph.N + pl.ph.nph[b]);
  }
  const int64_t np = static_cast<int64_t>(y.size());
  Params p = pl.pb.params();
  p.cum_scores = cum.data();
  const cpu::AlignUtterance u{L, np, K, C, y.data(), nullptr, cum.data(), nullptr, &p};
  std::vector<int32_t> banded(np * 2), exact(np * 2);
  cpu::BandedStats st;
  const double s = cpu::align_banded(u, banded.data(), 0, cpu::kBandMaxBytes, &st);
  EXPECT_EQ(s, cpu::align_bounded(u, exact.data()));
  EXPECT_EQ(banded, exact);
  EXPECT_LT(st.max_width, 64);  // a narrow band (with a signal of 1.5 the centres part: 637 phones a frame on average)
  int64_t boundaries = 0, within = 0;
  for (int64_t b = 0; b < U; ++b)
    for (int64_t i = 1; i < pl.ph.nph[b]; ++i) {  // internal boundaries: the start of phone i
      const int32_t own = alone.spans[(b * pl.ph.N + i) * 2];
      const int32_t joined = banded[(first[b] + i) * 2] - static_cast<int32_t>(b * T);
      ++boundaries;
      within += std::abs(own - joined) <= 1;
    }
  EXPECT_GE(within * 100, boundaries * 99) << within << " of " << boundaries;
  std::printf("[ info ] joined: %ld of %ld boundaries within one frame of the utterance aligned alone\n",
              static_cast<long>(within), static_cast<long>(boundaries));
  Progress::set_enabled(true);
}

TEST(AlignBanded, ABandThatCutsThePathTouchesItsEdge) {
  // A band given by hand around a path shifted by 20 phones: the best path in
  // it is not the full table's and touches the edge; the band around the full
  // table's own path (4 phones either side) does not, and gives it bitwise.
  const Planted pl = planted(1, 2000, 20, 8, 1.5, 9, 30);
  const AlignResult full = full_table(pl.pb, pl.ph, false);
  const Params p = pl.pb.params();
  const int64_t np = pl.ph.nph[0], L = pl.pb.lengths[0];
  const cpu::AlignUtterance u = utterance(pl.pb, p, pl.ph, 0, false);
  const std::vector<int32_t> want = full_spans(full, pl.ph, 0);
  const cpu::Band good = cpu::band_around(want.data(), np, L, 4);
  std::vector<int32_t> spans(np * 2);
  const cpu::BandPass in = cpu::align_in_band(u, good, spans.data());
  EXPECT_FALSE(in.touches_edge);
  EXPECT_EQ(in.score, full.score[0]);
  EXPECT_EQ(spans, want);
  cpu::Band bad = good;
  for (int64_t t = 1; t < L; ++t) {  // 20 phones later (rows 0 and L keep their phones)
    bad.lo[t] = std::min<int32_t>(bad.lo[t] + 20, static_cast<int32_t>(np - 9));
    bad.hi[t] = std::min<int32_t>(bad.hi[t] + 20, static_cast<int32_t>(np));
  }
  const cpu::BandPass out = cpu::align_in_band(u, bad, spans.data());
  EXPECT_TRUE(out.touches_edge);
  EXPECT_LT(out.score, full.score[0]);
}

TEST(AlignBanded, ABandOfEveryPhoneIsTheFullRecurrence) {
  const Planted pl = planted(1, 400, 10, 4, 0.5, 4, 12);
  const AlignResult full = full_table(pl.pb, pl.ph, false);
  const Params p = pl.pb.params();
  const int64_t np = pl.ph.nph[0];
  std::vector<int32_t> spans(np * 2);
  cpu::BandedStats st;
  EXPECT_EQ(cpu::align_banded(utterance(pl.pb, p, pl.ph, 0, false), spans.data(), np + 5, cpu::kBandMaxBytes, &st),
            full.score[0]);
  EXPECT_EQ(spans, full_spans(full, pl.ph, 0));
  EXPECT_EQ(st.passes, 1);
  EXPECT_EQ(st.max_width, np);
}

TEST(AlignBanded, ExactFallbackAndTheLimitLine) {
  // Random scores and a memory limit that lets no band widen: the checkpointed
  // method gives the full table's result; under a smaller limit, one line.
  Progress::set_enabled(false);
  Problem pb = random_problem(Dims{1, 300, 6, 5}, 31, {300});
  const Phones ph = random_phones(1, 60, 5, false, 31);
  const AlignResult full = full_table(pb, ph, false);
  const Params p = pb.params();
  const cpu::AlignUtterance u = utterance(pb, p, ph, 0, false);
  const int64_t np = ph.nph[0];
  std::vector<int32_t> spans(np * 2);
  cpu::BandedStats st;
  const size_t exact = cpu::bounded_align_bytes(300, np, 6, cpu::bounded_segment_frames(300, 6));
  cpu::Band all;  // a first band of every phone: more bytes than the exact method needs
  all.lo.assign(301, 0);
  all.hi.assign(301, static_cast<int32_t>(np));
  ASSERT_GT(static_cast<size_t>(all.cells()) * 3, exact);
  EXPECT_EQ(cpu::align_banded(u, spans.data(), 2, exact, &st, &all), full.score[0]);
  EXPECT_EQ(spans, full_spans(full, ph, 0));
  EXPECT_TRUE(st.exact_fallback);
  EXPECT_EQ(st.passes, 0);
  try {
    cpu::align_banded(u, spans.data(), 2, 1000, &st);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("crf: align: 300 frames and " + std::to_string(np) + " phones: "), 0u) << what;
    EXPECT_NE(what.find("over the limit of 1 MiB; check that the transcript matches the audio, or split the "
                        "recording (e.g. at long pauses) and align the parts"),
              std::string::npos)
        << what;
  }
  Progress::set_enabled(true);
}

TEST(AlignBanded, InfeasibleIsMinusInf) {
  Problem pb = random_problem(Dims{1, 5, 3, 4}, 8, {5});
  const Phones ph = random_phones(1, 9, 4, false, 8);
  Phones all = ph;
  all.nph[0] = 9;  // 9 phones, 5 frames
  const Params p = pb.params();
  std::vector<int32_t> spans(18, 7);
  EXPECT_EQ(cpu::align_banded(utterance(pb, p, all, 0, false), spans.data(), 2), kNegInf);
  EXPECT_EQ(spans, std::vector<int32_t>(18, 0));
}

}  // namespace
}  // namespace timitseg::crf::testing
