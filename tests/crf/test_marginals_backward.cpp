// reference::marginals_backward_f64, the gradient of sum(g * marginals)
// (docs/crf.md "Gradient of the marginals"), against two independent oracles:
// (1) brute-force enumeration of every segmentation: the marginals as sums of
// P(y) and the gradient of E[R] as the covariance sum_y P(y) (R(y) - E[R])
// times y's feature counts, no recurrence; (2) central differences of
// sum(g * marginals) computed by boundary_posteriors_f64 and
// segment_posteriors_f64 (frame posteriors as the sums of the segment posteriors
// covering each frame). K = 1, K < T, K > T, padded batches, onset, -inf entries.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/reference/reference.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

// A problem in float64 with upstream gradients g of the three marginals.
struct Case {
  Dims dims;
  std::vector<int32_t> lengths;
  std::vector<double> cum, A, D, s, e, o;  // o empty: no onset
  std::vector<double> gb, gf, gs;          // [B][T+1], [B][T][C], [B][T][K][C]
  reference::ParamsF64 params() const {
    return reference::ParamsF64{cum.data(), A.data(), D.data(), s.data(), e.data(), lengths.data(),
                                o.empty() ? nullptr : o.data()};
  }
  reference::MarginalGradsF64 up(bool b = true, bool f = true, bool sg = true) const {
    return reference::MarginalGradsF64{b ? gb.data() : nullptr, f ? gf.data() : nullptr, sg ? gs.data() : nullptr};
  }
};

Case make_case(const Problem& pb, uint32_t seed, bool onset) {
  Case k;
  k.dims = pb.dims;
  k.lengths = pb.lengths;
  k.cum.assign(pb.cum.begin(), pb.cum.end());
  k.A.assign(pb.A.begin(), pb.A.end());
  k.D.assign(pb.D.begin(), pb.D.end());
  k.s.assign(pb.s.begin(), pb.s.end());
  k.e.assign(pb.e.begin(), pb.e.end());
  if (k.s.empty()) k.s.assign(pb.dims.C, 0.0), k.e.assign(pb.dims.C, 0.0);
  const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  if (onset)
    for (int64_t i = 0; i < B * T * C; ++i) k.o.push_back(0.5 * n(rng));
  for (int64_t i = 0; i < B * (T + 1); ++i) k.gb.push_back(n(rng));
  for (int64_t i = 0; i < B * T * C; ++i) k.gf.push_back(n(rng));
  for (int64_t i = 0; i < B * T * K * C; ++i) k.gs.push_back(n(rng));
  return k;
}

struct Seg {
  int64_t v, d, c;
};

// Score(y) of docs/crf.md in float64, straight from the definition.
double path_score(const Case& k, int64_t b, const std::vector<Seg>& y) {
  const int64_t T = k.dims.T, C = k.dims.C;
  const double* cum = k.cum.data() + b * (T + 1) * C;
  double sc = k.s[y.front().c] + k.e[y.back().c];
  for (size_t i = 0; i < y.size(); ++i) {
    sc += cum[(y[i].v + y[i].d) * C + y[i].c] - cum[y[i].v * C + y[i].c] + k.D[(y[i].d - 1) * C + y[i].c];
    if (!k.o.empty()) sc += k.o[(b * T + y[i].v) * C + y[i].c];
    if (i > 0) sc += k.A[y[i - 1].c * C + y[i].c];
  }
  return sc;
}

// R(y) = sum(g * the marginals' indicators of y): each segment's boundary at its end, its frames' label, itself.
double path_r(const Case& k, int64_t b, const std::vector<Seg>& y) {
  const int64_t T = k.dims.T, K = k.dims.K, C = k.dims.C;
  double r = 0.0;
  for (const Seg& s : y) {
    r += k.gb[b * (T + 1) + s.v + s.d];
    for (int64_t t = s.v; t < s.v + s.d; ++t) r += k.gf[(b * T + t) * C + s.c];
    r += k.gs[((b * T + s.v + s.d - 1) * K + s.d - 1) * C + s.c];
  }
  return r;
}

void enumerate(int64_t L, int64_t K, int64_t C, std::vector<Seg>& cur, int64_t t,
               std::vector<std::vector<Seg>>& out) {
  if (t == L) return out.push_back(cur);
  for (int64_t d = 1; d <= K && t + d <= L; ++d)
    for (int64_t c = 0; c < C; ++c) {
      cur.push_back({t, d, c});
      enumerate(L, K, C, cur, t + d, out);
      cur.pop_back();
    }
}

// The gradients of sum(g * marginals) by enumeration: sum_y P(y) (R(y) - E[R]) dScore(y)/d input.
reference::GradsF64 brute_force(const Case& k, std::vector<std::vector<double>>& store) {
  const int64_t B = k.dims.B, T = k.dims.T, K = k.dims.K, C = k.dims.C;
  store = {std::vector<double>(B * (T + 1) * C, 0.0), std::vector<double>(C * C, 0.0),
           std::vector<double>(K * C, 0.0), std::vector<double>(C, 0.0), std::vector<double>(C, 0.0),
           std::vector<double>(B * T * C, 0.0)};
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<Seg>> paths;
    std::vector<Seg> cur;
    enumerate(k.lengths[b], K, C, cur, 0, paths);
    std::vector<double> sc, r;
    double m = -INFINITY, z = 0.0, er = 0.0;
    for (const auto& y : paths) sc.push_back(path_score(k, b, y)), r.push_back(path_r(k, b, y)), m = std::max(m, sc.back());
    for (double x : sc) z += std::exp(x - m);
    for (size_t i = 0; i < paths.size(); ++i) er += std::exp(sc[i] - m) / z * r[i];
    for (size_t i = 0; i < paths.size(); ++i) {
      const double w = std::exp(sc[i] - m) / z * (r[i] - er);
      const auto& y = paths[i];
      for (size_t j = 0; j < y.size(); ++j) {
        store[0][(b * (T + 1) + y[j].v + y[j].d) * C + y[j].c] += w;
        store[0][(b * (T + 1) + y[j].v) * C + y[j].c] -= w;
        store[2][(y[j].d - 1) * C + y[j].c] += w;
        store[5][(b * T + y[j].v) * C + y[j].c] += w;
        if (j > 0) store[1][y[j - 1].c * C + y[j].c] += w;
      }
      store[3][y.front().c] += w;
      store[4][y.back().c] += w;
    }
  }
  return reference::GradsF64{store[0].data(), store[1].data(), store[2].data(), store[3].data(), store[4].data(),
                             store[5].data()};
}

// sum(g * marginals) through the forward functions of the reference.
double objective(const Case& k) {
  const int64_t B = k.dims.B, T = k.dims.T, K = k.dims.K, C = k.dims.C;
  std::vector<double> bp(B * (T + 1)), sp(B * T * K * C);
  reference::boundary_posteriors_f64(k.dims, k.params(), bp.data());
  reference::segment_posteriors_f64(k.dims, k.params(), sp.data());
  double f = 0.0;
  for (int64_t i = 0; i < B * (T + 1); ++i) f += k.gb[i] * bp[i];
  for (int64_t i = 0; i < B * T * K * C; ++i) f += k.gs[i] * sp[i];
  for (int64_t b = 0; b < B; ++b)  // frame t lies in the segment ending at t2 >= t of duration d > t2 - t
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double fm = 0.0;
        for (int64_t t2 = t; t2 < T; ++t2)
          for (int64_t d = t2 - t + 1; d <= K; ++d) fm += sp[((b * T + t2) * K + d - 1) * C + c];
        f += k.gf[(b * T + t) * C + c] * fm;
      }
  return f;
}

struct Out {
  std::vector<double> cum, A, D, s, e, o;
  reference::GradsF64 grads(const Case& k) {
    const int64_t B = k.dims.B, T = k.dims.T, K = k.dims.K, C = k.dims.C;
    cum.assign(B * (T + 1) * C, 7.0), A.assign(C * C, 7.0), D.assign(K * C, 7.0), s.assign(C, 7.0), e.assign(C, 7.0);
    o.assign(B * T * C, 7.0);
    return reference::GradsF64{cum.data(), A.data(), D.data(), s.data(), e.data(), k.o.empty() ? nullptr : o.data()};
  }
};

TEST(MarginalsBackward, MatchesBruteForceEnumeration) {
  int cases = 0;
  for (int64_t T : {1, 3, 5})
    for (int64_t K : {1, 2, 4, 7})  // K = 1, K < T, K > T
      for (int64_t C : {1, 3})
        for (bool onset : {false, true}) {
          const Dims dims{2, T, K, C};
          const Problem pb = random_problem(dims, 100 + cases, {static_cast<int32_t>(T), static_cast<int32_t>(std::max<int64_t>(1, T - 2))});
          const Case k = make_case(pb, 7 + cases, onset);
          Out got;
          reference::marginals_backward_f64(k.dims, k.params(), k.up(), got.grads(k));
          std::vector<std::vector<double>> want;
          brute_force(k, want);
          const std::string at = "T=" + std::to_string(T) + " K=" + std::to_string(K) + " C=" + std::to_string(C) +
                                 (onset ? " onset" : "");
          expect_close(got.cum, want[0], 1e-9, 1e-11, at + " cum");
          expect_close(got.A, want[1], 1e-9, 1e-11, at + " transition");
          expect_close(got.D, want[2], 1e-9, 1e-11, at + " duration_bias");
          expect_close(got.s, want[3], 1e-9, 1e-11, at + " start");
          expect_close(got.e, want[4], 1e-9, 1e-11, at + " end");
          if (onset) expect_close(got.o, want[5], 1e-9, 1e-11, at + " onset");
          ++cases;
        }
  EXPECT_EQ(cases, 48);
}

// Each upstream gradient alone (the others absent) is the brute force of that part alone.
TEST(MarginalsBackward, EachUpstreamAloneAndLinear) {
  const Problem pb = random_problem(Dims{2, 5, 3, 2}, 31, {5, 4});
  Case k = make_case(pb, 5, true);
  Out all, parts[3];
  reference::marginals_backward_f64(k.dims, k.params(), k.up(), all.grads(k));
  reference::marginals_backward_f64(k.dims, k.params(), k.up(true, false, false), parts[0].grads(k));
  reference::marginals_backward_f64(k.dims, k.params(), k.up(false, true, false), parts[1].grads(k));
  reference::marginals_backward_f64(k.dims, k.params(), k.up(false, false, true), parts[2].grads(k));
  std::vector<double> sum(all.cum.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = parts[0].cum[i] + parts[1].cum[i] + parts[2].cum[i];
  expect_close(all.cum, sum, 1e-12, 1e-13, "cum as the sum of the parts");
  Case only_frames = k;
  std::fill(only_frames.gb.begin(), only_frames.gb.end(), 0.0);
  std::fill(only_frames.gs.begin(), only_frames.gs.end(), 0.0);
  std::vector<std::vector<double>> want;
  brute_force(only_frames, want);
  expect_close(parts[1].cum, want[0], 1e-9, 1e-11, "frames alone: cum");
  expect_close(parts[1].A, want[1], 1e-9, 1e-11, "frames alone: transition");
}

// Central differences of sum(g * marginals) w.r.t. every input, at K = 1, K < T and K > T on a padded batch.
TEST(MarginalsBackward, CentralDifferencesOfTheMarginals) {
  for (int64_t K : {1, 3, 9}) {
    const Dims dims{3, 7, K, 3};
    const Problem pb = random_problem(dims, 40 + static_cast<uint32_t>(K), {7, 4, 1});
    Case k = make_case(pb, 11, true);
    Out got;
    reference::marginals_backward_f64(k.dims, k.params(), k.up(), got.grads(k));
    const double h = 1e-5;
    auto check = [&](std::vector<double>& v, const std::vector<double>& g, const std::string& name) {
      for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        v[i] = keep + h;
        const double up = objective(k);
        v[i] = keep - h;
        const double down = objective(k);
        v[i] = keep;
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(g[i], fd, 1e-7 + 1e-6 * std::fabs(fd)) << "K=" << K << " " << name << "[" << i << "]";
      }
    };
    // cum rows past a length (and row 0) are not inputs of the marginals: their gradient is 0 and so is the FD
    check(k.cum, got.cum, "cum");
    check(k.A, got.A, "transition");
    check(k.D, got.D, "duration_bias");
    check(k.s, got.s, "start");
    check(k.e, got.e, "end");
    check(k.o, got.o, "onset");
  }
}

// -inf entries (forbidden transitions and durations): finite gradients, 0 for every forbidden entry, the brute force.
TEST(MarginalsBackward, ForbiddenEntries) {
  const Problem pb = random_problem(Dims{2, 5, 3, 3}, 77, {5, 3});
  Case k = make_case(pb, 3, false);
  k.A[0 * 3 + 1] = -INFINITY;
  k.A[2 * 3 + 2] = -INFINITY;
  k.D[2 * 3 + 0] = -INFINITY;
  k.s[1] = -INFINITY;
  Out got;
  reference::marginals_backward_f64(k.dims, k.params(), k.up(), got.grads(k));
  std::vector<std::vector<double>> want;
  brute_force(k, want);
  EXPECT_TRUE(all_finite(got.cum) && all_finite(got.A) && all_finite(got.D) && all_finite(got.s) && all_finite(got.e));
  EXPECT_EQ(got.A[1], 0.0);
  EXPECT_EQ(got.A[8], 0.0);
  EXPECT_EQ(got.D[6], 0.0);
  EXPECT_EQ(got.s[1], 0.0);
  expect_close(got.cum, want[0], 1e-9, 1e-11, "cum");
  expect_close(got.A, want[1], 1e-9, 1e-11, "transition");
  expect_close(got.D, want[2], 1e-9, 1e-11, "duration_bias");
  expect_close(got.s, want[3], 1e-9, 1e-11, "start");
  expect_close(got.e, want[4], 1e-9, 1e-11, "end");
}

// Only the valid entries of the upstream gradients are read: NaN elsewhere changes nothing; NaN inside is an error.
TEST(MarginalsBackward, ReadsOnlyValidUpstreamEntries) {
  const Problem pb = random_problem(Dims{2, 5, 2, 2}, 9, {5, 2});
  Case k = make_case(pb, 1, false);
  Out clean;
  reference::marginals_backward_f64(k.dims, k.params(), k.up(), clean.grads(k));
  Case poisoned = k;
  const int64_t T = 5, K = 2, C = 2;
  for (int64_t t = 3; t <= T; ++t) poisoned.gb[1 * (T + 1) + t] = NAN;
  for (int64_t t = 2; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) poisoned.gf[(1 * T + t) * C + c] = NAN;
  for (int64_t c = 0; c < C; ++c) poisoned.gs[((0 * T + 0) * K + 1) * C + c] = NAN;  // d = 2 ending at frame 0
  Out again;
  reference::marginals_backward_f64(poisoned.dims, poisoned.params(), poisoned.up(), again.grads(poisoned));
  EXPECT_EQ(again.cum, clean.cum);
  EXPECT_EQ(again.A, clean.A);
  poisoned.gf[(1 * T + 1) * C + 0] = NAN;
  try {
    reference::marginals_backward_f64(poisoned.dims, poisoned.params(), poisoned.up(), again.grads(poisoned));
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("grad_frames[1][1][0] = nan is not finite"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
