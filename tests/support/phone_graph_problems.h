// Random phone graphs for the transcript NLL's tests (crf/phone_graph.h):
// words of one to three pronunciations between optional silences, built with
// crf::PhoneGraphBuilder. Header-only, test code only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "crf/phone_graph.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {

struct Graph {
  int64_t N = 0;
  std::vector<int32_t> phones, num_phones, links;  // [B][N], [B], [B][N]
};

// A word slot: 1..3 alternatives of 1..2 labels each (equal alternatives merged by the builder).
std::vector<std::vector<int32_t>> random_word(std::mt19937& rng, int64_t C, int max_alts) {
  std::uniform_int_distribution<int32_t> lab(0, static_cast<int32_t>(C - 1));
  std::uniform_int_distribution<int> na(1, max_alts), len(1, 2);
  std::vector<std::vector<int32_t>> alts(static_cast<size_t>(na(rng)));
  for (auto& a : alts) {
    const int n = len(rng);
    for (int i = 0; i < n; ++i) a.push_back(lab(rng));
  }
  return alts;
}

// Random graphs per utterance: [sil?] word ([sil?] word)* [sil?] (silence label 0,
// optional slots kept with probability p_sil), at most N phones, feasible for its length.
Graph random_graph(const Problem& pb, int64_t N, uint32_t seed, double p_sil, int max_alts = 3) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution sil(p_sil);
  Graph g;
  g.N = N;
  g.phones.assign(pb.dims.B * N, 0);
  g.links.assign(pb.dims.B * N, 0);
  g.num_phones.assign(pb.dims.B, 0);
  for (int64_t b = 0; b < pb.dims.B; ++b)
    for (int attempt = 0;; ++attempt) {
      PhoneGraphBuilder gb;
      if (sil(rng)) gb.add({{0}}, true);
      gb.add(random_word(rng, pb.dims.C, max_alts), false);
      if (attempt % 2 == 0) {
        if (sil(rng)) gb.add({{0}}, true);
        gb.add(random_word(rng, pb.dims.C, max_alts), false);
      }
      if (sil(rng)) gb.add({{0}}, true);
      const std::vector<int32_t> l = gb.links();
      const int64_t n = static_cast<int64_t>(l.size());
      if (n > N || !graph_feasible(pb.lengths[b], l.data(), static_cast<int32_t>(n))) continue;
      std::copy(gb.labels().begin(), gb.labels().end(), g.phones.begin() + b * N);
      std::copy(l.begin(), l.end(), g.links.begin() + b * N);
      g.num_phones[b] = static_cast<int32_t>(n);
      break;
    }
  return g;
}

}  // namespace timitseg::crf::testing
