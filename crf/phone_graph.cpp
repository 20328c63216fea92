// The phone graph of a transcript with alternatives (crf/phone_graph.h,
// docs/crf.md "Alternative pronunciations: the phone graph").
#include "crf/phone_graph.h"

#include <algorithm>
#include <stdexcept>

namespace timitseg::crf {

std::vector<int32_t> chain_links(const int32_t* optional, int32_t n) {
  std::vector<int32_t> l(static_cast<size_t>(std::max(n, 0)));
  for (int32_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = chain_link(i, n, optional);
  return l;
}

int32_t graph_min_phones(const int32_t* links, int32_t n) {
  std::vector<int32_t> dist(static_cast<size_t>(std::max(n, 0)), -1);  // fewest phones of a path from a start to i
  int32_t best = -1;
  for (int32_t i = 0; i < n; ++i) {
    int32_t d = (links[i] & kLinkStart) ? 1 : -1;
    for (int j = 0; j < kMaxLinkBack && i - 1 - j >= 0; ++j)
      if ((links[i] >> j & 1) && dist[static_cast<size_t>(i - 1 - j)] >= 0) {
        const int32_t via = dist[static_cast<size_t>(i - 1 - j)] + 1;
        d = d < 0 ? via : std::min(d, via);
      }
    dist[static_cast<size_t>(i)] = d;
    if (d >= 0 && (links[i] & kLinkEnd)) best = best < 0 ? d : std::min(best, d);
  }
  return best;
}

bool graph_feasible(int32_t length, const int32_t* links, int32_t n) {
  const int32_t m = n >= 1 ? graph_min_phones(links, n) : -1;
  return m >= 1 && m <= length;
}

void validate_links_host(int64_t B, int64_t N, const int32_t* num_phones, const int32_t* links) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int32_t l = links[b * N + i];
      const std::string at = "crf: links[" + std::to_string(b) + "][" + std::to_string(i) + "] = " + std::to_string(l);
      if (l < 0) throw std::invalid_argument(at + " has a bit above kLinkEnd (1 << 30)");
      const int32_t back = l & kLinkBackMask;
      if (i < kMaxLinkBack && (back >> i) != 0)
        throw std::invalid_argument(at + " names a predecessor before phone 0");
    }
}

bool PhoneGraphBuilder::add(const std::vector<std::vector<int32_t>>& alternatives, bool optional) {
  std::vector<std::vector<int32_t>> alts;
  for (const auto& a : alternatives) {  // equal labels in a row merged; empty and repeated alternatives dropped
    std::vector<int32_t> m;
    for (int32_t x : a)
      if (m.empty() || m.back() != x) m.push_back(x);
    if (!m.empty() && std::find(alts.begin(), alts.end(), m) == alts.end()) alts.push_back(std::move(m));
  }
  if (alts.empty()) return true;
  const int32_t base = static_cast<int32_t>(labels_.size());
  // the farthest link: the first phone of an alternative back to the oldest frontier phone
  int32_t first = base;
  for (size_t k = 0; k < alts.size(); ++k) {
    for (int32_t f : frontier_)
      if (first - 1 - f >= kMaxLinkBack) return false;
    first += static_cast<int32_t>(alts[k].size());
  }
  std::vector<int32_t> ends;
  for (size_t k = 0; k < alts.size(); ++k) {
    const int32_t start = static_cast<int32_t>(labels_.size());
    for (size_t p = 0; p < alts[k].size(); ++p) {
      const int32_t i = static_cast<int32_t>(labels_.size());
      int32_t l = 0;
      if (p == 0) {
        for (int32_t f : frontier_) l |= 1 << (i - 1 - f);
        if (may_start_) l |= kLinkStart;
      } else {
        l |= 1;
      }
      labels_.push_back(alts[k][p]);
      links_.push_back(l);
      optional_.push_back(optional ? 1 : 0);
      primary_.push_back(k == 0 ? 1 : 0);
    }
    ends.push_back(start + static_cast<int32_t>(alts[k].size()) - 1);
  }
  if (optional) {
    frontier_.insert(frontier_.end(), ends.begin(), ends.end());
  } else {
    frontier_ = ends;
    may_start_ = false;
  }
  std::sort(frontier_.begin(), frontier_.end());
  return true;
}

std::vector<int32_t> PhoneGraphBuilder::links() const {
  std::vector<int32_t> l = links_;
  for (int32_t f : frontier_) l[static_cast<size_t>(f)] |= kLinkEnd;
  return l;
}

}  // namespace timitseg::crf
