// The transcript NLL over a phone graph (docs/crf.md "Alternative
// pronunciations: the phone graph", crf/phone_graph.h) on the host backends:
// against brute-force enumeration of every path and every alignment
// (tests/support/transcript_bruteforce.h), log Z_c of a graph against the
// log-sum-exp of its paths' own chain log Z_c (and the gradient against their
// posterior-weighted mix), the chain's links against the optional flags
// (bitwise), and the helpers: the builder's links, the shortest path, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/phone_graph.h"
#include "crf/validate.h"
#include "tests/crf/helpers.h"
#include "tests/support/phone_graph_problems.h"
#include "tests/support/transcript_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

TranscriptResult run(BackendKind kind, const Problem& pb, const Graph& g, double scale) {
  auto be = make_backend(kind, BackendOptions{2, nullptr});
  return transcript_host(*be, pb.dims, pb.params(), g.N, g.phones.data(), g.num_phones.data(), nullptr, scale,
                         g.links.data());
}

// K = 1, K < T, K > T; padded batches; graphs with alternatives of one and two
// phones, optional silences; C = 1..3 makes equal labels on both sides of a link frequent.
TEST(PhoneGraph, BothBackendsMatchBruteForceOverEveryPath) {
  int cases = 0, with_alternatives = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({2, 4, 6}, {1, 2, 3}, {1, 2, 7}, 1300 + (onset ? 100 : 0), onset))
      for (double p_sil : {0.0, 0.6}) {
        const Graph g = random_graph(pb, 9, 31 * cases + 7, p_sil);
        for (int64_t b = 0; b < pb.dims.B; ++b)
          with_alternatives += graph_label_paths(g.phones.data() + b * g.N, g.links.data() + b * g.N,
                                                 g.num_phones[b]).size() > 1;
        const double scale = 0.75;
        const TranscriptExpected ex = transcript_brute_force(pb, g.N, g.phones, g.num_phones, {}, scale, g.links);
        const std::string what = "case " + std::to_string(cases) + " T=" + std::to_string(pb.dims.T) +
                                 " C=" + std::to_string(pb.dims.C) + " K=" + std::to_string(pb.dims.K);
        expect_matches(run(BackendKind::reference, pb, g, scale), ex, onset, 1e-6, "reference " + what);
        expect_matches(run(BackendKind::cpu, pb, g, scale), ex, onset, 1e-5, "cpu " + what);
        ++cases;
      }
  EXPECT_EQ(cases, 2 * 3 * 3 * 3 * 2 * 2);
  EXPECT_GT(with_alternatives, cases / 2);  // most utterances have more than one path
}

// Links that are not a builder's: random back links up to 3 phones, random
// start and end phones (some phones on no path). Both backends against brute force.
TEST(PhoneGraph, ArbitraryLinksMatchBruteForce) {
  int checked = 0;
  for (const Problem& pb : tiny_exact_problems({3, 5}, {2, 3}, {1, 2, 6}, 1700))
    for (uint32_t s = 0; s < 3; ++s) {
      std::mt19937 rng(1900 + 10 * checked + s);
      std::bernoulli_distribution coin(0.5);
      std::uniform_int_distribution<int32_t> lab(0, static_cast<int32_t>(pb.dims.C - 1));
      Graph g;
      g.N = 5;
      g.phones.assign(2 * 5, 0);
      g.links.assign(2 * 5, 0);
      g.num_phones.assign(2, 0);
      for (int64_t b = 0; b < 2; ++b) {
        do {
          const int32_t n = 1 + static_cast<int32_t>(rng() % 5);
          for (int32_t i = 0; i < n; ++i) {
            int32_t l = (i == 0 || coin(rng)) ? kLinkStart : 0;
            for (int j = 0; j < 3 && i - 1 - j >= 0; ++j) l |= coin(rng) ? 1 << j : 0;
            if (i == n - 1 || coin(rng)) l |= kLinkEnd;
            g.links[b * 5 + i] = l;
            g.phones[b * 5 + i] = lab(rng);
          }
          g.num_phones[b] = n;
        } while (!graph_feasible(pb.lengths[b], g.links.data() + b * 5, g.num_phones[b]));
      }
      const TranscriptExpected ex = transcript_brute_force(pb, g.N, g.phones, g.num_phones, {}, 1.0, g.links);
      const std::string what = "case " + std::to_string(checked);
      expect_matches(run(BackendKind::reference, pb, g, 1.0), ex, false, 1e-6, "reference " + what);
      expect_matches(run(BackendKind::cpu, pb, g, 1.0), ex, false, 1e-5, "cpu " + what);
      ++checked;
    }
  EXPECT_EQ(checked, 2 * 2 * 3 * 2 * 3);
}

// One code path: the chain's links (chain_links of the optional flags) give
// the optional-flag results bit for bit, on both backends.
TEST(PhoneGraph, ChainLinksGiveTheOptionalChainBitwise) {
  for (uint32_t seed : {51u, 52u}) {
    Problem pb = random_problem(Dims{3, 30, 4, 4}, seed, {30, 22, 9});
    add_onset(pb, seed, 0.5);
    std::mt19937 rng(seed);
    std::vector<int32_t> phones, nph;
    random_phones(rng, 3, 8, 4, phones, nph);
    for (int64_t b = 0; b < 3; ++b) nph[b] = std::min<int32_t>(nph[b], pb.lengths[b]);
    const std::vector<int32_t> opt = random_optional(rng, 3, 8, nph, 0.4);
    std::vector<int32_t> links(3 * 8, 0);
    for (int64_t b = 0; b < 3; ++b) {
      const std::vector<int32_t> l = chain_links(opt.data() + b * 8, nph[b]);
      std::copy(l.begin(), l.end(), links.begin() + b * 8);
    }
    for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
      auto be = make_backend(kind);
      const TranscriptResult a = transcript_host(*be, pb.dims, pb.params(), 8, phones.data(), nph.data(), opt.data(), 0.5);
      const TranscriptResult c =
          transcript_host(*be, pb.dims, pb.params(), 8, phones.data(), nph.data(), nullptr, 0.5, links.data());
      EXPECT_EQ(a.log_z_c, c.log_z_c) << to_string(kind);
      EXPECT_EQ(a.grad_cum_scores, c.grad_cum_scores) << to_string(kind);
      EXPECT_EQ(a.grad_transition, c.grad_transition) << to_string(kind);
      EXPECT_EQ(a.grad_duration_bias, c.grad_duration_bias) << to_string(kind);
      EXPECT_EQ(a.grad_start, c.grad_start) << to_string(kind);
      EXPECT_EQ(a.grad_end, c.grad_end) << to_string(kind);
      EXPECT_EQ(a.grad_onset, c.grad_onset) << to_string(kind);
    }
  }
}

// Larger problems (K < phone lengths): a transcript of three words with two
// pronunciations each and optional silences. log Z_c of the graph is the
// log-sum-exp over the 8 combinations of each one's chain log Z_c (the
// combination as a transcript with optional silences), and the graph's
// gradient is the combinations' gradients weighted by exp(log Z_c,k - log Z_c).
TEST(PhoneGraph, LogZcIsTheSumOverThePronunciationCombinations) {
  const std::vector<std::vector<std::vector<int32_t>>> words = {
      {{1, 2, 3}, {1, 4}}, {{2}, {3, 1, 2}}, {{4, 1}, {4, 2, 1, 3}}};
  for (uint32_t seed : {61u, 62u}) {
    Problem pb = random_problem(Dims{1, 48, 4, 5}, seed, {48});
    if (seed == 62) add_onset(pb, seed, 0.5);
    PhoneGraphBuilder gb;
    for (const auto& w : words) gb.add({{0}}, true), gb.add(w, false);
    gb.add({{0}}, true);
    const std::vector<int32_t> links = gb.links();
    const int32_t n = static_cast<int32_t>(links.size());
    auto be = make_backend(BackendKind::cpu);
    const TranscriptResult g = transcript_host(*be, pb.dims, pb.params(), n, gb.labels().data(), &n, nullptr, 1.0,
                                               links.data());
    std::vector<TranscriptResult> per;
    double m = -INFINITY;
    for (int k = 0; k < 8; ++k) {
      std::vector<int32_t> ph, opt;
      for (size_t w = 0; w < 3; ++w) {
        ph.push_back(0), opt.push_back(1);
        for (int32_t x : words[w][static_cast<size_t>(k >> w & 1)]) ph.push_back(x), opt.push_back(0);
      }
      ph.push_back(0), opt.push_back(1);
      const int32_t np = static_cast<int32_t>(ph.size());
      per.push_back(transcript_host(*be, pb.dims, pb.params(), np, ph.data(), &np, opt.data(), 1.0));
      m = std::max(m, per.back().log_z_c[0]);
    }
    double z = 0.0;
    for (const auto& r : per) z += std::exp(r.log_z_c[0] - m);
    EXPECT_NEAR(g.log_z_c[0], m + std::log(z), 1e-9) << "seed " << seed;
    std::vector<double> mix(g.grad_cum_scores.size(), 0.0);
    for (const auto& r : per) {
      const double w = std::exp(r.log_z_c[0] - g.log_z_c[0]);
      for (size_t i = 0; i < mix.size(); ++i) mix[i] += w * r.grad_cum_scores[i];
    }
    std::vector<float> mixf(mix.begin(), mix.end());
    expect_close(g.grad_cum_scores, mixf, 1e-5, 1e-5, "seed " + std::to_string(seed) + " grad cum");
    EXPECT_GE(g.log_z[0] - g.log_z_c[0], -1e-9);  // distinct paths: Z_c a sub-sum of Z
  }
}

// The builder's links by hand: sil? {a b | c} sil? {d}, sil? (slot phones 0..6).
TEST(PhoneGraph, BuilderLinksByHand) {
  PhoneGraphBuilder gb;
  EXPECT_TRUE(gb.add({{9}}, true));                   // 0: sil
  EXPECT_TRUE(gb.add({{1, 2}, {3}, {1, 1, 2}}, false));  // 1 2 | 3 (1 1 2 merges to 1 2: dropped)
  EXPECT_TRUE(gb.add({{9}}, true));                   // 4: sil
  EXPECT_TRUE(gb.add({{5}}, false));                  // 5
  EXPECT_TRUE(gb.add({{9}}, true));                   // 6: sil
  const std::vector<int32_t> l = gb.links();
  EXPECT_EQ(gb.labels(), (std::vector<int32_t>{9, 1, 2, 3, 9, 5, 9}));
  EXPECT_EQ(gb.primary(), (std::vector<uint8_t>{1, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(gb.optional(), (std::vector<uint8_t>{1, 0, 0, 0, 1, 0, 1}));
  EXPECT_EQ(l[0], kLinkStart);
  EXPECT_EQ(l[1], kLinkStart | 1);       // after phone 0, or first
  EXPECT_EQ(l[2], 1);                    // after 1
  EXPECT_EQ(l[3], kLinkStart | 1 << 2);  // after phone 0, or first
  EXPECT_EQ(l[4], 1 << 0 | 1 << 1);      // after 3 or 2
  EXPECT_EQ(l[5], 1 << 0 | 1 << 1 | 1 << 2 | kLinkEnd);  // after sil 4, or 3, or 2; last (sil 6 optional)
  EXPECT_EQ(l[6], 1 | kLinkEnd);
  EXPECT_EQ(l[5] & kLinkEnd, kLinkEnd);
  EXPECT_EQ(graph_min_phones(l.data(), 7), 2);  // "3 5"
  EXPECT_FALSE(graph_feasible(1, l.data(), 7));
  EXPECT_TRUE(graph_feasible(2, l.data(), 7));
  const std::vector<int32_t> opt{1, 0, 1, 0, 1};
  EXPECT_EQ(graph_min_phones(chain_links(opt.data(), 5).data(), 5), 2);
  // a slot whose alternatives reach back past kMaxLinkBack is refused, nothing added
  std::vector<std::vector<int32_t>> three(3);
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 20; ++i) three[static_cast<size_t>(k)].push_back((i + k) % 2 + 2 * k);  // no repeats
  PhoneGraphBuilder far;
  EXPECT_TRUE(far.add(three, false));
  EXPECT_FALSE(far.add({{7}}, false));  // phone 60 would follow phone 19
  EXPECT_EQ(far.labels().size(), 60u);
  PhoneGraphBuilder merged;  // 20 zeros and 20 ones: each merged into one phone, then near enough
  EXPECT_TRUE(merged.add({std::vector<int32_t>(20, 0), std::vector<int32_t>(20, 1)}, false));
  EXPECT_TRUE(merged.add({{2}}, false));
  EXPECT_EQ(merged.labels(), (std::vector<int32_t>{0, 1, 2}));
}

TEST(PhoneGraph, ValidationAndInfeasibleGraphs) {
  const int32_t num[1] = {3};
  const int32_t bad[3] = {kLinkStart, 1 << 1, kLinkEnd | 1};  // phone 1 names phone -1
  EXPECT_THROW(validate_links_host(1, 3, num, bad), std::invalid_argument);
  const int32_t high[3] = {kLinkStart, 1, static_cast<int32_t>(1u << 31) | 1};
  EXPECT_THROW(validate_links_host(1, 3, num, high), std::invalid_argument);
  const int32_t no_end[3] = {kLinkStart, 1, 1};
  EXPECT_EQ(graph_min_phones(no_end, 3), -1);
  Problem pb = random_problem(Dims{1, 6, 3, 3}, 81, {6});
  const int32_t ph[3] = {0, 1, 2};
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    auto be = make_backend(kind);
    try {
      transcript_host(*be, pb.dims, pb.params(), 3, ph, num, nullptr, 1.0, no_end);
      ADD_FAILURE() << "no error for a graph without a path";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("utterance 0"), std::string::npos) << e.what();
    }
    const int32_t opt[3] = {0, 0, 0};
    const int32_t good[3] = {kLinkStart, 1, 1 | kLinkEnd};
    EXPECT_THROW(transcript_host(*be, pb.dims, pb.params(), 3, ph, num, opt, 1.0, good), std::invalid_argument);
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
