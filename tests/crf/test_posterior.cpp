// Posterior decoding (crf/posterior.h, crf::posterior_decode_on_host,
// crf.decode = posterior) against brute-force enumeration: the frame marginals
//   P(frame t has label c) = sum over segmentations y covering t with a
//                            segment of label c of P(y)
// computed by summing path probabilities directly, compared with the
// marginals that crf::frame_marginals derives from each host backend's
// d log Z / d cum (both the suffix form it uses and the prefix form
// -sum_{t' <= t} g of docs/crf.md); the per-frame argmax and its tie rule; the
// log Z / gold returned next to the segments.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "crf/posterior.h"
#include "crf/session.h"
#include "helpers.h"
#include "model/executor.h"

namespace timitseg::crf::testing {
namespace {

std::vector<Problem> tiny_problems() {
  std::vector<Problem> v = tiny_exact_problems({1, 3, 5, 6}, {2, 3}, {1, 2, 3}, 301);
  for (uint32_t seed : {7u, 8u, 9u}) v.push_back(random_problem(Dims{3, 6, 4, 3}, seed, {6, 4, 1}));
  return v;
}

// Brute-force frame marginals [B][T][C] (0 on padding).
std::vector<double> brute_marginals(const Problem& pb) {
  const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
  std::vector<double> m(B * T * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<Path> paths = enumerate_paths(pb, b);
    double mx = -INFINITY;
    for (const Path& p : paths) mx = std::max(mx, p.score);
    double z = 0;
    for (const Path& p : paths) z += std::exp(p.score - mx);
    const double lz = mx + std::log(z);
    for (const Path& p : paths) {
      const double P = std::exp(p.score - lz);
      for (const Segment& s : p.segs)
        for (int32_t t = s.start; t < s.start + s.duration; ++t) m[(b * T + t) * C + s.label] += P;
    }
  }
  return m;
}

std::string describe(const Problem& pb) {
  return "B=" + std::to_string(pb.dims.B) + " T=" + std::to_string(pb.dims.T) + " C=" + std::to_string(pb.dims.C) +
         " K=" + std::to_string(pb.dims.K) + (pb.s.empty() ? " (no start/end)" : " (start/end)");
}

}  // namespace

// The identity itself on the oracle's own gradient of log Z: the brute-force
// g (expectations of segment ends minus starts) turned into marginals by the
// prefix form and by the suffix form equals the enumerated marginals.
TEST(PosteriorDecoding, MarginalsFromTheGradientOfLogZIdentity) {
  for (const Problem& pb : tiny_problems()) {
    SCOPED_TRACE(describe(pb));
    const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
    const Expected ex = brute_force(pb, 1.0, /*with_labels=*/false);
    const std::vector<double> want = brute_marginals(pb);
    std::vector<double> prefix(B * T * C, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) {
        double run = 0;
        for (int64_t t = 0; t < pb.lengths[b]; ++t) {
          run -= ex.g_cum[(b * (T + 1) + t) * C + c];
          prefix[(b * T + t) * C + c] = run;
        }
      }
    expect_close(prefix, want, 0, 1e-12, "prefix form");
    const std::vector<float> g(ex.g_cum.begin(), ex.g_cum.end());
    std::vector<double> suffix(B * T * C);
    frame_marginals(pb.dims, g.data(), pb.lengths.data(), suffix.data());
    expect_close(suffix, want, 0, 1e-6, "crf::frame_marginals of the oracle's gradient");
    // each valid frame's marginals sum to 1
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < pb.lengths[b]; ++t) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += want[(b * T + t) * C + c];
        EXPECT_NEAR(s, 1.0, 1e-12);
      }
  }
}

// Every host backend's d log Z / d cum (backward without labels, scale 1),
// through crf::frame_marginals, gives the enumerated marginals; the backend's
// row 0 also satisfies the prefix form.
TEST(PosteriorDecoding, BackendMarginalsMatchBruteForce) {
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = make_backend(backend_kind(name));
    Session session(*backend);
    for (const Problem& pb : tiny_problems()) {
      SCOPED_TRACE(name + " " + describe(pb));
      const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
      HostRunOptions o;
      o.viterbi = false;
      const HostResult r = session.run_host(pb.dims, pb.params(), nullptr, o);
      std::vector<double> got(B * T * C);
      frame_marginals(pb.dims, r.grad_cum_scores.data(), pb.lengths.data(), got.data());
      const std::vector<double> want = brute_marginals(pb);
      expect_close(got, want, 0, 2e-6, "marginals");
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          double run = 0;
          for (int64_t t = 0; t < pb.lengths[b]; ++t) {
            run -= r.grad_cum_scores[(b * (T + 1) + t) * C + c];
            EXPECT_NEAR(run, want[(b * T + t) * C + c], 2e-6) << "prefix form b=" << b << " t=" << t << " c=" << c;
          }
        }
    }
  }
}

// The decoded frame labels are the argmax of the brute-force marginals
// wherever the best two differ by more than the float32 gradients' rounding;
// segments are the maximal runs, in time order.
TEST(PosteriorDecoding, SegmentsAreTheRunsOfTheArgmaxOfTheMarginals) {
  int frames_checked = 0;
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = make_backend(backend_kind(name));
    Session session(*backend);
    for (const Problem& pb : tiny_problems()) {
      SCOPED_TRACE(name + " " + describe(pb));
      const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
      const std::vector<double> m = brute_marginals(pb);
      const HostResult r = crf::posterior_decode_on_host(session, pb.dims, pb.params(), nullptr);
      // runs: contiguous, covering each utterance, adjacent labels differ
      std::vector<int32_t> frame(B * T, -1);
      int32_t prev_b = -1, prev_end = 0, prev_label = -1;
      for (const Segment& s : r.segments) {
        if (s.batch != prev_b) {
          if (prev_b >= 0) EXPECT_EQ(prev_end, pb.lengths[prev_b]);
          EXPECT_EQ(s.start, 0);
          prev_b = s.batch;
        } else {
          EXPECT_EQ(s.start, prev_end);
          EXPECT_NE(s.label, prev_label);
        }
        prev_end = s.start + s.duration;
        prev_label = s.label;
        for (int32_t t = s.start; t < s.start + s.duration; ++t) frame[s.batch * T + t] = s.label;
      }
      EXPECT_EQ(prev_b, B - 1);
      EXPECT_EQ(prev_end, pb.lengths[B - 1]);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < pb.lengths[b]; ++t) {
          const double* row = m.data() + (b * T + t) * C;
          int best = 0;
          for (int c = 1; c < C; ++c)
            if (row[c] > row[best]) best = c;
          double second = -1;
          for (int c = 0; c < C; ++c)
            if (c != best) second = std::max(second, row[c]);
          if (row[best] - second < 1e-5) continue;  // a (near) tie: the tie rule is tested below
          EXPECT_EQ(frame[b * T + t], best) << "b=" << b << " t=" << t;
          ++frames_checked;
        }
    }
  }
  EXPECT_GT(frames_checked, 100);
}

TEST(PosteriorDecoding, TiesGoToTheSmallestLabel) {
  // B = 1, T = 4, C = 3: exact ties at t = 0 (labels 1, 2), t = 2 (all three)
  const Dims dims{1, 4, 2, 3};
  const std::vector<double> m = {0.2, 0.4, 0.4, 0.1, 0.1, 0.8, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0.5, 0.25, 0.25};
  const int32_t len = 4;
  const std::vector<Segment> got = posterior_segments(dims, m.data(), &len);
  const std::vector<Segment> want = {{0, 0, 1, 1}, {0, 1, 1, 2}, {0, 2, 2, 0}};
  EXPECT_EQ(got, want);
}

// log Z and the gold score returned with the posterior segments are the
// oracle's (the dev loss), and the decoding differs from Viterbi somewhere.
TEST(PosteriorDecoding, LossReturnedWithTheSegmentsAndDifferenceFromViterbi) {
  auto backend = make_backend(BackendKind::cpu);
  Session session(*backend);
  int differ = 0;
  for (const Problem& pb : tiny_problems()) {
    SCOPED_TRACE(describe(pb));
    const Expected ex = brute_force(pb, 1.0);
    const HostResult r = crf::posterior_decode_on_host(session, pb.dims, pb.params(), pb.labels.data());
    expect_close(r.log_z, ex.log_z, 1e-6, 1e-6, "log_z");
    expect_close(r.gold, ex.gold, 1e-6, 1e-6, "gold");
    const HostResult v = session.decode_host(pb.dims, pb.params(), nullptr, 0.0);
    // Viterbi's segments as runs of frame labels
    std::vector<int32_t> fv(pb.dims.B * pb.dims.T, -1), fp(fv);
    for (const Segment& s : v.segments)
      for (int32_t t = s.start; t < s.start + s.duration; ++t) fv[s.batch * pb.dims.T + t] = s.label;
    for (const Segment& s : r.segments)
      for (int32_t t = s.start; t < s.start + s.duration; ++t) fp[s.batch * pb.dims.T + t] = s.label;
    differ += fv != fp;
  }
  EXPECT_GT(differ, 0) << "posterior decoding never differed from Viterbi on these problems";
}

}  // namespace timitseg::crf::testing
