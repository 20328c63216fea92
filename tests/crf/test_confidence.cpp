// Confidence (docs/crf.md "Confidence") on the host backends: the
// constrained posteriors (Backend::align_posteriors) and the span marginals
// (Backend::span_marginals) of the reference and cpu backends against
// brute-force enumeration (tests/support/confidence_bruteforce.h), against
// central differences of log Z_c and log Z, against each other on larger
// batches of mixed lengths, and their input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "tests/crf/helpers.h"
#include "tests/support/confidence_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Random query spans [B][N][2] inside each utterance (duration 0 allowed).
std::vector<int32_t> random_spans(std::mt19937& rng, const Problem& pb, int64_t N, const std::vector<int32_t>& nph) {
  std::vector<int32_t> spans(pb.dims.B * N * 2, 0);
  for (int64_t b = 0; b < pb.dims.B; ++b)
    for (int64_t n = 0; n < nph[b]; ++n) {
      const int32_t L = pb.lengths[b];
      const int32_t s = std::uniform_int_distribution<int32_t>(0, L)(rng);
      spans[(b * N + n) * 2] = s;
      spans[(b * N + n) * 2 + 1] = std::uniform_int_distribution<int32_t>(0, L - s)(rng);
    }
  return spans;
}

void expect_posteriors_match(const Problem& pb, int64_t N, const std::vector<int32_t>& phones,
                             const std::vector<int32_t>& nph, const std::vector<int32_t>& opt,
                             const std::vector<int32_t>& spans, const AlignPosteriorResult& r, const char* who) {
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    SCOPED_TRACE(::testing::Message() << who << " utterance " << b << " L=" << pb.lengths[b] << " n=" << nph[b]);
    const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + nph[b]);
    const std::vector<int32_t> op = opt.empty() ? std::vector<int32_t>()
                                                : std::vector<int32_t>(opt.begin() + b * N, opt.begin() + b * N + nph[b]);
    const std::vector<int32_t> sp(spans.begin() + b * N * 2, spans.begin() + b * N * 2 + 2 * nph[b]);
    const ExpectedPosteriors ex = brute_align_posteriors(pb, b, ph, op, sp);
    if (ex.log_z_c == -kInf) {
      EXPECT_EQ(r.log_z_c[b], -kInf);
    } else {
      EXPECT_NEAR(r.log_z_c[b], ex.log_z_c, 1e-9 * std::max(1.0, std::fabs(ex.log_z_c)));
    }
    for (int64_t i = 0; i < N * 3; ++i) {
      const double want = i < nph[b] * 3 ? ex.out[i] : 0.0;
      EXPECT_NEAR(r.posterior[b * N * 3 + i], want, 1e-9) << "phone " << i / 3 << " entry " << i % 3;
    }
  }
}

TEST(Confidence, AlignPosteriorsAgainstEnumeration) {
  auto ref = make_backend(timitseg::crf::BackendKind::reference);
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{2, nullptr});
  std::mt19937 rng(34);
  int cases = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({1, 3, 5, 7}, {2, 3}, {1, 2, 3}, 300, onset))
      for (int variant = 0; variant < 2; ++variant) {  // without, then with optional phones
        const int64_t N = 4;
        std::vector<int32_t> phones, nph;
        random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph);
        const std::vector<int32_t> opt = variant == 0 ? std::vector<int32_t>() : random_optional(rng, pb.dims.B, N, nph, 0.5);
        const int32_t* o = opt.empty() ? nullptr : opt.data();
        const std::vector<int32_t> spans = random_spans(rng, pb, N, nph);
        for (Backend* be : {ref.get(), cpu.get()}) {
          const AlignPosteriorResult r =
              align_posteriors_host(*be, pb.dims, pb.params(), N, phones.data(), nph.data(), o, spans.data());
          expect_posteriors_match(pb, N, phones, nph, opt, spans, r, be->name().c_str());
        }
        // The aligned spans themselves, the way `align` asks.
        const AlignResult al = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), o);
        const AlignPosteriorResult r =
            align_posteriors_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), o, al.spans.data());
        expect_posteriors_match(pb, N, phones, nph, opt, al.spans, r, "cpu, aligned spans");
        ++cases;
      }
  EXPECT_EQ(cases, 192);
}

TEST(Confidence, SpanMarginalsAgainstEnumeration) {
  auto ref = make_backend(timitseg::crf::BackendKind::reference);
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{2, nullptr});
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({1, 4, 6}, {2, 3}, {1, 2, 3}, 500, onset)) {
      // Every (start, duration, label) of each utterance, durations 0..L (longer than K too).
      const int64_t B = pb.dims.B, C = pb.dims.C, T = pb.dims.T;
      const int64_t Q = (T + 1) * (T + 1) * C;
      std::vector<int32_t> queries(B * Q * 3, 0), nq(B, 0);
      for (int64_t b = 0; b < B; ++b)
        for (int32_t s = 0; s <= pb.lengths[b]; ++s)
          for (int32_t r = 0; s + r <= pb.lengths[b]; ++r)
            for (int32_t c = 0; c < C; ++c) {
              int32_t* q = queries.data() + (b * Q + nq[b]++) * 3;
              q[0] = s, q[1] = r, q[2] = c;
            }
      for (Backend* be : {ref.get(), cpu.get()}) {
        const SpanMarginalResult r = span_marginals_host(*be, pb.dims, pb.params(), Q, queries.data(), nq.data());
        for (int64_t b = 0; b < B; ++b) {
          const std::vector<Path> paths = enumerate_paths(pb, b);
          std::vector<double> scores;
          for (const Path& p : paths) scores.push_back(p.score);
          const double lz = log_sum_exp_scores(scores);
          EXPECT_NEAR(r.log_z[b], lz, 1e-9 * std::max(1.0, std::fabs(lz)));
          for (int64_t i = 0; i < Q; ++i) {
            const int32_t* q = queries.data() + (b * Q + i) * 3;
            const double want = i < nq[b] ? brute_span_marginal(pb, paths, lz, q[0], q[1], q[2]) : 0.0;
            EXPECT_NEAR(r.marginal[b * Q + i], want, 1e-9)
                << be->name() << " utterance " << b << " query (" << q[0] << ", " << q[1] << ", " << q[2] << ")";
          }
        }
      }
    }
}

// Float64 copies of a problem for the reference's f64 entry points.
struct F64 {
  std::vector<double> cum, A, D, s, e, o;
  reference::ParamsF64 params(const Problem& pb) const {
    reference::ParamsF64 p{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(),
                           e.empty() ? nullptr : e.data(), pb.lengths.data()};
    if (!o.empty()) p.onset = o.data();
    return p;
  }
  explicit F64(const Problem& pb)
      : cum(pb.cum.begin(), pb.cum.end()), A(pb.A.begin(), pb.A.end()), D(pb.D.begin(), pb.D.end()),
        s(pb.s.begin(), pb.s.end()), e(pb.e.begin(), pb.e.end()), o(pb.o.begin(), pb.o.end()) {}
};

// With distinct labels, d log Z_c / d o[u, y_n] = P_c(phone n starts at u); the
// start window (entry 1) is the derivative for a bonus on o[s-1..s+1, y_n].
TEST(Confidence, StartPosteriorIsTheDerivativeOfLogZc) {
  Problem pb = random_problem(Dims{1, 9, 9, 5}, 71, {9});  // K >= L: a phone is one segment
  add_onset(pb, 72);
  const int64_t N = 4;
  const std::vector<int32_t> phones{3, 0, 4, 1}, nph{4};
  const std::vector<int32_t> spans{0, 2, 2, 3, 5, 1, 6, 3};
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{1, nullptr});
  const AlignPosteriorResult r = align_posteriors_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(),
                                                       nullptr, spans.data());
  F64 base(pb);
  auto log_zc = [&](const F64& f) {
    std::vector<double> out(N * 3), lz(1);
    reference::align_posteriors_f64(pb.dims, f.params(pb), N, phones.data(), nph.data(), nullptr, spans.data(),
                                    lz.data(), out.data());
    return lz[0];
  };
  const double h = 1e-5;
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    F64 plus(pb), minus(pb);
    for (int64_t u = spans[2 * n] - 1; u <= spans[2 * n] + 1; ++u) {
      if (u < 0 || u >= pb.lengths[0]) continue;
      plus.o[u * pb.dims.C + phones[n]] += h;
      minus.o[u * pb.dims.C + phones[n]] -= h;
    }
    const double fd = (log_zc(plus) - log_zc(minus)) / (2 * h);
    EXPECT_NEAR(r.posterior[n * 3 + 1], fd, 1e-7) << "phone " << n;
    total += r.posterior[n * 3 + 1];
  }
  EXPECT_GT(total, 0.5);  // the windows carry real mass (the check is not 0 = 0)
}

// sum_d P(segment (u, d, c)) = d log Z / d o[u, c] (every segment of label c starting at u).
TEST(Confidence, SpanMarginalsSumToTheDerivativeOfLogZ) {
  Problem pb = random_problem(Dims{1, 12, 5, 4}, 81, {12});
  add_onset(pb, 82);
  const int64_t K = pb.dims.K, C = pb.dims.C;
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{1, nullptr});
  F64 base(pb);
  for (int64_t u : {0, 3, 11})
    for (int64_t c = 0; c < C; ++c) {
      std::vector<int32_t> queries;
      for (int64_t d = 1; d <= std::min<int64_t>(K, 12 - u); ++d)
        queries.insert(queries.end(), {static_cast<int32_t>(u), static_cast<int32_t>(d), static_cast<int32_t>(c)});
      const int64_t Q = static_cast<int64_t>(queries.size() / 3);
      const std::vector<int32_t> nq{static_cast<int32_t>(Q)};
      const SpanMarginalResult r = span_marginals_host(*cpu, pb.dims, pb.params(), Q, queries.data(), nq.data());
      double sum = 0.0;
      for (double m : r.marginal) sum += m;
      F64 plus(pb), minus(pb);
      const double h = 1e-5;
      plus.o[u * C + c] += h;
      minus.o[u * C + c] -= h;
      double lp = 0, lm = 0;
      reference::log_partition_f64(pb.dims, plus.params(pb), &lp);
      reference::log_partition_f64(pb.dims, minus.params(pb), &lm);
      EXPECT_NEAR(sum, (lp - lm) / (2 * h), 1e-7) << "u=" << u << " c=" << c;
    }
}

// Mixed lengths, optional phones, phones longer than K: cpu against the
// reference, and each utterance's results independent of its batch.
TEST(Confidence, CpuAgainstReferenceMixedLengthsAndBatchInvariance) {
  std::mt19937 rng(7);
  Problem pb = random_problem(Dims{5, 40, 4, 6}, 91, {40, 13, 27, 6, 33});
  add_onset(pb, 92);
  const int64_t N = 9;
  std::vector<int32_t> phones, nph;
  random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph, 3);
  const std::vector<int32_t> opt = random_optional(rng, pb.dims.B, N, nph, 0.3);
  auto ref = make_backend(timitseg::crf::BackendKind::reference);
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{2, nullptr});
  const AlignResult al = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data());
  const AlignPosteriorResult r =
      align_posteriors_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), al.spans.data());
  const AlignPosteriorResult c =
      align_posteriors_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), al.spans.data());
  expect_close(c.posterior, r.posterior, 1e-9, 1e-12, "posterior");
  expect_close(c.log_z_c, r.log_z_c, 1e-12, 0.0, "log_z_c");
  int feasible = 0;
  for (double v : r.log_z_c) feasible += std::isfinite(v);
  EXPECT_GE(feasible, 4);
  // Utterance 2 alone (its own T): the same bits.
  Problem one = random_problem(Dims{1, 27, 4, 6}, 91, {27});
  one.cum.assign(pb.cum.begin() + pb.row(2, 0), pb.cum.begin() + pb.row(2, 28));
  one.o.assign(pb.o.begin() + 2 * 40 * 6, pb.o.begin() + 2 * 40 * 6 + 27 * 6);
  one.A = pb.A, one.D = pb.D, one.s = pb.s, one.e = pb.e;
  const std::vector<int32_t> ph1(phones.begin() + 2 * N, phones.begin() + 3 * N), n1{nph[2]};
  const std::vector<int32_t> op1(opt.begin() + 2 * N, opt.begin() + 3 * N);
  const std::vector<int32_t> sp1(al.spans.begin() + 2 * N * 2, al.spans.begin() + 3 * N * 2);
  const AlignPosteriorResult c1 =
      align_posteriors_host(*cpu, one.dims, one.params(), N, ph1.data(), n1.data(), op1.data(), sp1.data());
  EXPECT_EQ(c1.log_z_c[0], c.log_z_c[2]);
  for (int64_t i = 0; i < N * 3; ++i) EXPECT_EQ(c1.posterior[i], c.posterior[2 * N * 3 + i]) << i;
  // Span marginals of the aligned phones, cpu against the reference.
  std::vector<int32_t> queries(pb.dims.B * N * 3), nq(nph);
  for (int64_t b = 0; b < pb.dims.B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      queries[(b * N + n) * 3] = al.spans[(b * N + n) * 2];
      queries[(b * N + n) * 3 + 1] = al.spans[(b * N + n) * 2 + 1];
      queries[(b * N + n) * 3 + 2] = phones[b * N + n];
    }
  const SpanMarginalResult mr = span_marginals_host(*ref, pb.dims, pb.params(), N, queries.data(), nq.data());
  const SpanMarginalResult mc = span_marginals_host(*cpu, pb.dims, pb.params(), N, queries.data(), nq.data());
  expect_close(mc.marginal, mr.marginal, 1e-9, 1e-15, "span marginal");
  expect_close(mc.log_z, mr.log_z, 1e-12, 0.0, "log_z");
}

TEST(Confidence, BadQueriesAreOneClearError) {
  const Problem pb = random_problem(Dims{1, 6, 2, 3}, 5, {6});
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu, BackendOptions{1, nullptr});
  const std::vector<int32_t> phones{0, 1}, nph{2}, spans{0, 3, 4, 3};
  try {
    align_posteriors_host(*cpu, pb.dims, pb.params(), 2, phones.data(), nph.data(), nullptr, spans.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "crf: align_posteriors: spans[0][1] = (4, 3) is not a span (start, duration >= 0) inside [0, length=6]");
  }
  const std::vector<int32_t> queries{0, 2, 3}, nq{1};
  try {
    span_marginals_host(*cpu, pb.dims, pb.params(), 1, queries.data(), nq.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "crf: span_marginals: queries[0][0] = (0, 2, 3) is not (start, duration >= 0, label in [0, C=3)) "
                 "inside [0, length=6]");
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
