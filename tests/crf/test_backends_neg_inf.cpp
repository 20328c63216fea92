// -inf parameters ("forbidden" transitions, durations, first/last labels), as
// the cuda backend accepts them: brute-force enumeration on tiny problems with
// -inf entries (paths through a -inf entry have probability 0), exact zero
// gradients of forbidden entries, Viterbi never on a forbidden path, no NaN,
// and the errors for "no path of finite score" and "gold segmentation
// forbidden", on the reference and cpu backends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "crf/backend_kind.h"
#include "crf/cpu/cpu.h"
#include "crf/cumsum.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "crf/validate.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();


// Every gradient entry of a forbidden parameter is exactly 0; everything finite.
void expect_forbidden_grads_zero(const Problem& pb, const std::vector<float>& gA, const std::vector<float>& gD,
                                 const std::vector<float>& gs, const std::vector<float>& ge, const std::string& who) {
  auto check = [&](const std::vector<float>& param, const std::vector<float>& grad, const char* name) {
    ASSERT_EQ(param.size(), grad.size()) << who << " " << name;
    for (size_t i = 0; i < param.size(); ++i) {
      EXPECT_TRUE(std::isfinite(grad[i])) << who << " " << name << "[" << i << "] = " << grad[i];
      if (param[i] == kNegInfF) EXPECT_EQ(grad[i], 0.0f) << who << " " << name << "[" << i << "] is forbidden";
    }
  };
  check(pb.A, gA, "grad_transition");
  check(pb.D, gD, "grad_duration_bias");
  if (!pb.s.empty()) check(pb.s, gs, "grad_start");
  if (!pb.e.empty()) check(pb.e, ge, "grad_end");
}

// Tiny problems (T <= 6, C <= 3, K <= 3) with -inf entries, four kinds:
// 0: transition -inf except one entry; 1: some duration_bias -inf;
// 2: start/end -inf for some labels; 3: all of these at once.
struct Masked {
  Problem pb;
  int kind;
  std::string describe() const {
    return "kind=" + std::to_string(kind) + " T=" + std::to_string(pb.dims.T) + " C=" + std::to_string(pb.dims.C) +
           " K=" + std::to_string(pb.dims.K) + " lengths=" + std::to_string(pb.lengths[0]) + "," +
           std::to_string(pb.lengths[1]);
  }
};

std::vector<Masked> masked_problems() {
  std::vector<Masked> out;
  uint32_t seed = 100;
  for (int kind = 0; kind < 4; ++kind)
    for (int64_t T : {1, 2, 3, 5, 6})
      for (int64_t C : {1, 2, 3})
        for (int64_t K : {1, 2, 3}) {
          std::mt19937 rng(seed);
          std::vector<int32_t> lengths{static_cast<int32_t>(T), static_cast<int32_t>(std::max<int64_t>(1, T - 2))};
          Problem pb = random_problem(Dims{2, T, K, C}, seed++, lengths, true, 1.0, 0.7);
          for (auto* v : {&pb.cum, &pb.A, &pb.D, &pb.s, &pb.e})
            for (float& x : *v) x = std::round(x * 16.0f) / 16.0f;  // exact path scores: exact Viterbi ties
          std::bernoulli_distribution coin(0.35);
          if (kind == 0 || kind == 3) {
            const size_t keep = std::uniform_int_distribution<size_t>(0, pb.A.size() - 1)(rng);
            for (size_t i = 0; i < pb.A.size(); ++i)
              if (i != keep) pb.A[i] = kNegInfF;
          }
          if (kind == 1 || kind == 3)
            for (float& x : pb.D)
              if (coin(rng)) x = kNegInfF;
          if (kind == 2 || kind == 3) {
            for (float& x : pb.s)
              if (coin(rng)) x = kNegInfF;
            for (float& x : pb.e)
              if (coin(rng)) x = kNegInfF;
          }
          out.push_back(Masked{pb, kind});
        }
  return out;
}

// Frame labels whose gold segmentation has finite score, from the finite
// paths of each utterance (returns false when some utterance has none).
bool finite_gold_labels(Problem& pb) {
  const int64_t T = pb.dims.T;
  pb.labels.assign(pb.dims.B * T, 0);
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    bool found = false;
    for (const Path& p : enumerate_paths(pb, b)) {
      if (!std::isfinite(p.score)) continue;
      for (const Segment& g : p.segs)
        for (int32_t t = g.start; t < g.start + g.duration; ++t) pb.labels[b * T + t] = g.label;
      const auto gold = gold_by_hand(pb.labels.data() + b * T, pb.lengths[b], pb.dims.K, static_cast<int32_t>(b));
      if (std::isfinite(segmentation_score(pb, b, gold))) {
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return true;
}

bool every_utterance_has_a_finite_path(const Problem& pb) {
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    bool any = false;
    for (const Path& p : enumerate_paths(pb, b)) any = any || std::isfinite(p.score);
    if (!any) return false;
  }
  return true;
}

TEST(NegInf, BruteForceWithForbiddenEntries) {
  const double scale = 0.75;
  int checked = 0, with_labels = 0, no_path = 0;
  for (Masked& m : masked_problems()) {
    SCOPED_TRACE(m.describe());
    Problem& pb = m.pb;
    const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
    if (!every_utterance_has_a_finite_path(pb)) {
      // Covered by the error tests; here just: both backends refuse, no output.
      ++no_path;
      for (const std::string name : {"reference", "cpu"}) {
        auto be = make_backend(backend_kind(name));
        EXPECT_THROW(run_host(*be, pb.dims, pb.params(), nullptr), std::runtime_error) << name;
      }
      continue;
    }
    const bool labels = finite_gold_labels(pb);
    with_labels += labels;
    ++checked;
    const Expected ex = brute_force(pb, scale, labels);
    // Reference, float64 entry points.
    std::vector<double> cum(pb.cum.begin(), pb.cum.end()), A(pb.A.begin(), pb.A.end()), D(pb.D.begin(), pb.D.end()),
        s(pb.s.begin(), pb.s.end()), e(pb.e.begin(), pb.e.end());
    reference::ParamsF64 p{cum.data(), A.data(), D.data(), s.data(), e.data(), pb.lengths.data()};
    std::vector<double> lz(B), gold(B), gc(B * (T + 1) * C), ga(C * C), gd(K * C), gs(C), ge(C);
    reference::backward_f64(pb.dims, p, labels ? pb.labels.data() : nullptr, scale, lz.data(), gold.data(),
                            reference::GradsF64{gc.data(), ga.data(), gd.data(), gs.data(), ge.data()});
    expect_close(lz, ex.log_z, 1e-9, 1e-12, "reference log_z");
    if (labels) expect_close(gold, ex.gold, 1e-9, 1e-12, "reference gold");
    expect_close(gc, ex.g_cum, 1e-9, 1e-12, "reference grad_cum");
    expect_close(ga, ex.g_A, 1e-9, 1e-12, "reference grad_transition");
    expect_close(gd, ex.g_D, 1e-9, 1e-12, "reference grad_duration_bias");
    expect_close(gs, ex.g_s, 1e-9, 1e-12, "reference grad_start");
    expect_close(ge, ex.g_e, 1e-9, 1e-12, "reference grad_end");
    for (size_t i = 0; i < pb.A.size(); ++i)
      if (pb.A[i] == kNegInfF) EXPECT_EQ(ga[i], 0.0) << "reference grad_transition[" << i << "]";
    for (size_t i = 0; i < pb.D.size(); ++i)
      if (pb.D[i] == kNegInfF) EXPECT_EQ(gd[i], 0.0) << "reference grad_duration_bias[" << i << "]";
    // Both backends through run_host (float32 in/out).
    for (const std::string name : {"reference", "cpu"}) {
      auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
      HostRunOptions opt;
      opt.scale = scale;
      opt.boundary_posteriors = true;
      const HostResult r = run_host(*be, pb.dims, pb.params(), labels ? pb.labels.data() : nullptr, opt);
      expect_close(r.log_z, ex.log_z, 1e-5, 1e-9, name + " log_z");
      if (labels) expect_close(r.gold, ex.gold, 1e-5, 1e-9, name + " gold");
      expect_close(r.grad_cum_scores, ex.g_cum, 1e-5, 1e-7, name + " grad_cum");
      expect_close(r.grad_transition, ex.g_A, 1e-5, 1e-7, name + " grad_transition");
      expect_close(r.grad_duration_bias, ex.g_D, 1e-5, 1e-7, name + " grad_duration_bias");
      expect_close(r.grad_start, ex.g_s, 1e-5, 1e-7, name + " grad_start");
      expect_close(r.grad_end, ex.g_e, 1e-5, 1e-7, name + " grad_end");
      expect_close(r.viterbi_score, ex.vscore, 1e-5, 1e-9, name + " viterbi_score");
      EXPECT_EQ(r.segments, ex.vsegs) << name;
      expect_close(r.boundary_posteriors, ex.bpost, 1e-5, 1e-9, name + " boundary_posteriors");
      EXPECT_TRUE(all_finite(r.log_z) && all_finite(r.viterbi_score) && all_finite(r.grad_cum_scores) &&
                  all_finite(r.boundary_posteriors))
          << name;
      expect_forbidden_grads_zero(pb, r.grad_transition, r.grad_duration_bias, r.grad_start, r.grad_end, name);
      // The decoded path uses no forbidden entry.
      for (int64_t b = 0; b < B; ++b) {
        std::vector<Segment> mine;
        for (const Segment& g : r.segments)
          if (g.batch == b) mine.push_back(g);
        EXPECT_TRUE(std::isfinite(segmentation_score(pb, b, mine))) << name << " viterbi path of utterance " << b;
      }
    }
  }
  // The generator must exercise every branch (numbers depend only on the seeds).
  EXPECT_GT(checked, 100);
  EXPECT_GT(with_labels, 50);
  EXPECT_GT(no_path, 5);
}

// Random problem with -inf entries at training size and labels that avoid
// them: 50% of transitions -inf, column 11 (no transition into 11) and row 12
// (none out of 12) entirely -inf, 20% of durations -inf, start -inf for labels
// 0..4, end -inf for labels 5..9. Gold segments never repeat a label, so the
// gold segmentation is exactly the generated one.
Problem forbidden_problem(Dims dims, uint32_t seed, std::vector<int32_t> lengths) {
  Problem pb = random_problem(dims, seed, lengths, true, 1.0, 0.5);
  const int64_t T = dims.T, K = dims.K, C = dims.C;
  std::mt19937 rng(seed + 1);
  std::bernoulli_distribution half(0.5), fifth(0.2);
  for (float& x : pb.A)
    if (half(rng)) x = kNegInfF;
  for (int64_t c = 0; c < C; ++c) pb.A[c * C + 11] = kNegInfF, pb.A[12 * C + c] = kNegInfF;
  for (float& x : pb.D)
    if (fifth(rng)) x = kNegInfF;
  for (int c = 0; c < 5; ++c) pb.s[c] = kNegInfF;
  for (int c = 5; c < 10; ++c) pb.e[c] = kNegInfF;
  std::uniform_int_distribution<int32_t> ulab(0, static_cast<int32_t>(C - 1));
  for (int64_t b = 0; b < dims.B; ++b) {
    const int64_t L = pb.lengths[b];
    for (int attempt = 0;; ++attempt) {
      if (attempt > 100000) throw std::runtime_error("forbidden_problem: no labels found");
      std::vector<int32_t> lab(T, 0);
      int64_t t = 0;
      int32_t prev = -1;
      bool ok = true;
      while (ok && t < L) {
        bool placed = false;
        for (int tries = 0; tries < 200 && !placed; ++tries) {
          const int32_t c = ulab(rng);
          const int64_t d = std::uniform_int_distribution<int64_t>(1, std::min(K, L - t))(rng);
          if (c == prev || pb.D[(d - 1) * C + c] == kNegInfF) continue;
          if (prev < 0 ? pb.s[c] == kNegInfF : pb.A[prev * C + c] == kNegInfF) continue;
          if (t + d == L && pb.e[c] == kNegInfF) continue;
          for (int64_t i = t; i < t + d; ++i) lab[i] = c;
          t += d, prev = c, placed = true;
        }
        ok = placed;
      }
      if (!ok) continue;
      std::copy(lab.begin(), lab.end(), pb.labels.begin() + b * T);
      break;
    }
  }
  return pb;
}

TEST(NegInf, CpuMatchesReferenceB4T300K30C39) {
  const Problem pb = forbidden_problem(Dims{4, 300, 30, 39}, 7, {300, 211, 57, 1});
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  auto ref = make_backend(BackendKind::reference);
  const HostResult want = run_host(*ref, pb.dims, pb.params(), pb.labels.data(), opt);
  for (int threads : {1, 2}) {
    auto cpu = cpu::make_cpu_backend(threads);
    const HostResult got = run_host(*cpu, pb.dims, pb.params(), pb.labels.data(), opt);
    const std::string who = "cpu threads=" + std::to_string(threads);
    expect_close(got.log_z, want.log_z, 1e-5, 0.0, who + " log_z");
    expect_close(got.gold, want.gold, 1e-5, 0.0, who + " gold");
    expect_close(got.grad_cum_scores, want.grad_cum_scores, 1e-5, 1e-9, who + " grad_cum_scores");
    expect_close(got.grad_transition, want.grad_transition, 1e-5, 1e-9, who + " grad_transition");
    expect_close(got.grad_duration_bias, want.grad_duration_bias, 1e-5, 1e-9, who + " grad_duration_bias");
    expect_close(got.grad_start, want.grad_start, 1e-5, 1e-9, who + " grad_start");
    expect_close(got.grad_end, want.grad_end, 1e-5, 1e-9, who + " grad_end");
    expect_close(got.viterbi_score, want.viterbi_score, 1e-5, 0.0, who + " viterbi_score");
    EXPECT_EQ(got.segments, want.segments) << who;
    expect_close(got.boundary_posteriors, want.boundary_posteriors, 1e-5, 1e-9, who + " boundary_posteriors");
    EXPECT_TRUE(all_finite(got.log_z) && all_finite(got.gold) && all_finite(got.grad_cum_scores) &&
                all_finite(got.viterbi_score) && all_finite(got.boundary_posteriors))
        << who;
    expect_forbidden_grads_zero(pb, got.grad_transition, got.grad_duration_bias, got.grad_start, got.grad_end, who);
    for (int64_t b = 0; b < 4; ++b) {
      EXPECT_GE(got.log_z[b] - got.gold[b], 0.0) << who << " NLL of utterance " << b;
      std::vector<Segment> mine;
      for (const Segment& g : got.segments)
        if (g.batch == b) mine.push_back(g);
      EXPECT_TRUE(std::isfinite(segmentation_score(pb, b, mine))) << who << " viterbi path of utterance " << b;
    }
  }
  expect_forbidden_grads_zero(pb, want.grad_transition, want.grad_duration_bias, want.grad_start, want.grad_end,
                              "reference");
  // Columns/rows that are entirely -inf were really exercised: label 11 never
  // follows another segment, label 12 is never followed by one.
  for (const Segment& g : want.segments)
    if (g.label == 12) EXPECT_EQ(g.start + g.duration, pb.lengths[g.batch]) << "label 12 can only be last";
}

// Utterance 1 (length 1) and 3 (length 1) have no path: every duration-1
// segment is forbidden. The others (lengths 6, 4) do.
Problem no_path_problem() {
  Problem pb = random_problem(Dims{4, 6, 3, 3}, 11, {6, 1, 4, 1});
  for (int64_t c = 0; c < 3; ++c) pb.D[0 * 3 + c] = kNegInfF;
  pb.labels = {0, 0, 1, 1, 2, 2, /**/ 0, 0, 0, 0, 0, 0, /**/ 2, 2, 1, 1, 0, 0, /**/ 1, 0, 0, 0, 0, 0};
  return pb;
}

template <class Fn>
void expect_runtime_error(Fn&& fn, const std::string& needle, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error, expected one containing '" << needle << "'";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": message was: " << e.what();
  }
}

TEST(NegInf, NoValidPathIsAnErrorNamingTheUtterance) {
  const Problem pb = no_path_problem();
  for (const std::string name : {"reference", "cpu"}) {
    auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
    const std::string needle = name + " backend: utterance 1 has no segmentation of finite score (log Z = -inf)";
    std::vector<uint64_t> ws((be->workspace_bytes(pb.dims) + 7) / 8 + 1);
    std::vector<double> lz(4), gold(4), vs(4), bp(4 * 7);
    std::vector<int32_t> segs(4 * 6 * 3), ns(4);
    std::vector<float> gc(pb.cum.size()), ga(9), gd(9), gs(3), ge(3);
    const Grads g{gc.data(), ga.data(), gd.data(), gs.data(), ge.data()};
    expect_runtime_error([&] { be->log_partition(pb.dims, pb.params(), lz.data(), ws.data()); }, needle,
                         name + " log_partition");
    expect_runtime_error([&] { be->backward(pb.dims, pb.params(), nullptr, 1.0, lz.data(), nullptr, g, ws.data()); },
                         needle, name + " backward");
    // With labels: utterance 0's gold is fine, utterance 1 has no path at all.
    expect_runtime_error(
        [&] { be->backward(pb.dims, pb.params(), pb.labels.data(), 1.0, lz.data(), gold.data(), g, ws.data()); },
        needle, name + " backward with labels");
    expect_runtime_error(
        [&] { be->viterbi(pb.dims, pb.params(), vs.data(), segs.data(), ns.data(), ws.data()); }, needle,
        name + " viterbi");
    expect_runtime_error([&] { be->boundary_posteriors(pb.dims, pb.params(), bp.data(), ws.data()); }, needle,
                         name + " boundary_posteriors");
    expect_runtime_error([&] { run_host(*be, pb.dims, pb.params(), pb.labels.data()); }, needle, name + " run_host");
    // Without the offending utterances the same parameters work.
    Problem ok = pb;
    ok.lengths = {6, 2, 4, 3};
    ok.labels = {0, 0, 1, 1, 2, 2, /**/ 1, 1, 0, 0, 0, 0, /**/ 2, 2, 1, 1, 0, 0, /**/ 2, 2, 2, 0, 0, 0};
    const HostResult r = run_host(*be, ok.dims, ok.params(), ok.labels.data());
    EXPECT_TRUE(all_finite(r.log_z) && all_finite(r.gold) && all_finite(r.grad_cum_scores)) << name;
    expect_forbidden_grads_zero(ok, r.grad_transition, r.grad_duration_bias, r.grad_start, r.grad_end, name);
  }
}

TEST(NegInf, ForbiddenGoldSegmentationIsAnError) {
  // Transition 0 -> 1 forbidden; utterance 2's gold segmentation uses it.
  Problem pb = random_problem(Dims{3, 6, 3, 3}, 12, {6, 5, 4});
  pb.A[0 * 3 + 1] = kNegInfF;
  pb.labels = {2, 2, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 2, 0, /**/ 2, 0, 1, 1, 0, 0};
  for (const std::string name : {"reference", "cpu"}) {
    auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
    const std::string needle = name +
                               " backend: utterance 2: the gold segmentation has score -inf (it uses a -inf entry "
                               "of transition/duration_bias/start/end), so its NLL would be +inf";
    std::vector<uint64_t> ws((be->workspace_bytes(pb.dims) + 7) / 8 + 1);
    std::vector<double> gold(3), lz(3);
    std::vector<float> gc(pb.cum.size());
    expect_runtime_error([&] { be->gold_score(pb.dims, pb.params(), pb.labels.data(), gold.data(), ws.data()); },
                         needle, name + " gold_score");
    expect_runtime_error(
        [&] {
          be->backward(pb.dims, pb.params(), pb.labels.data(), 1.0, lz.data(), gold.data(), Grads{gc.data()},
                       ws.data());
        },
        needle, name + " backward");
    expect_runtime_error([&] { run_host(*be, pb.dims, pb.params(), pb.labels.data()); }, needle, name + " run_host");
    // log Z, Viterbi and the gradients of log Z alone are fine.
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    const HostResult r = run_host(*be, pb.dims, pb.params(), nullptr, opt);
    EXPECT_TRUE(all_finite(r.log_z) && all_finite(r.grad_cum_scores) && all_finite(r.boundary_posteriors)) << name;
    EXPECT_EQ(r.grad_transition[1], 0.0f) << name;
    // A "no path" error of a later utterance takes precedence (as in the cuda backend).
    Problem both = pb;
    both.dims.B = 3;
    both.lengths = {6, 1, 4};
    both.labels = {0, 1, 1, 1, 0, 0, /**/ 0, 0, 0, 0, 0, 0, /**/ 2, 2, 2, 2, 0, 0};  // utterance 0 uses 0 -> 1
    for (int64_t c = 0; c < 3; ++c) both.D[c] = kNegInfF;                          // no duration 1: utt 1 has no path
    expect_runtime_error([&] { run_host(*be, both.dims, both.params(), both.labels.data()); },
                         name + " backend: utterance 1 has no segmentation of finite score", name + " precedence");
  }
}

TEST(NegInf, ValidationAcceptsOnlyMinusInfInParameters) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Problem base = random_problem(Dims{2, 5, 2, 3}, 13, {5, 3});
  auto expect_invalid = [](const Problem& pb, const std::string& needle) {
    try {
      validate_host(pb.dims, pb.params(), pb.labels.data());
      ADD_FAILURE() << "no error, expected '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Problem pb = base;
  pb.A[4] = -inf, pb.D[5] = -inf, pb.s[0] = -inf, pb.e[2] = -inf;
  EXPECT_NO_THROW(validate_host(pb.dims, pb.params(), pb.labels.data()));
  pb = base, pb.A[1 * 3 + 2] = inf;
  expect_invalid(pb, "crf: transition[1][2] = inf is NaN or +inf (entries must be finite, or -inf to forbid");
  pb = base, pb.D[1 * 3 + 0] = nan;
  expect_invalid(pb, "crf: duration_bias[1][0] = nan is NaN or +inf");
  pb = base, pb.s[2] = inf;
  expect_invalid(pb, "crf: start[2] = inf is NaN or +inf");
  pb = base, pb.e[0] = nan;
  expect_invalid(pb, "crf: end[0] = nan is NaN or +inf");
  pb = base, pb.cum[(1 * 6 + 2) * 3 + 1] = -inf;  // cum_scores must stay finite
  expect_invalid(pb, "crf: cum_scores[1][2][1] = -inf is not finite");
}

TEST(NegInf, PenaltySkipsForbiddenEntries) {
  // reg * (sum A^2 + sum D^2) over the finite entries only; their gradients only.
  const std::vector<float> A{1.0f, kNegInfF, -2.0f, 0.5f}, D{kNegInfF, 3.0f};
  std::vector<float> gA(4, 1.0f), gD(2, 1.0f);
  const double v = l2_penalty<float>(0.1, 2, 1, A.data(), D.data(), gA.data(), gD.data());
  EXPECT_NEAR(v, 0.1 * (1.0 + 4.0 + 0.25 + 9.0), 1e-12);
  EXPECT_FLOAT_EQ(gA[0], 1.2f);
  EXPECT_EQ(gA[1], 1.0f);  // forbidden: untouched
  EXPECT_FLOAT_EQ(gA[2], 0.6f);
  EXPECT_FLOAT_EQ(gA[3], 1.1f);
  EXPECT_EQ(gD[0], 1.0f);  // forbidden: untouched
  EXPECT_FLOAT_EQ(gD[1], 1.6f);
}

}  // namespace
}  // namespace timitseg::crf::testing
