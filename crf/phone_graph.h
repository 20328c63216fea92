// A transcript with alternatives as a phone graph (docs/crf.md "Alternative
// pronunciations: the phone graph"): the nodes are phones 0..n-1 in an order
// where every predecessor comes first, and links [n] int32 says, per node,
// which phones may come right before it and whether it may start or end the
// utterance:
//
//   bit j (0 <= j < kMaxLinkBack)  phone i - 1 - j may precede phone i
//   kLinkStart                     phone i may be the first phone
//   kLinkEnd                       phone i may be the last phone
//
// A chain of phones with optional ones (align()'s rules: phone i-2 precedes i
// when i-1 is optional and skipped) is the graph chain_links() writes; the
// backends read every transcript as a graph, so there is one code path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace timitseg::crf {

constexpr int kMaxLinkBack = 29;                    // how far back a predecessor may lie
constexpr int32_t kLinkBackMask = (1 << 29) - 1;    // bits 0..28
constexpr int32_t kLinkStart = 1 << 29;
constexpr int32_t kLinkEnd = 1 << 30;

#ifdef __CUDACC__
#define TIMITSEG_HOST_DEVICE __host__ __device__
#else
#define TIMITSEG_HOST_DEVICE
#endif

// Phone i's links in the chain of n phones with optional [n] (nullptr = none);
// host and device code (crf/cuda/constrained.cuh) share it.
TIMITSEG_HOST_DEVICE inline int32_t chain_link(int64_t i, int64_t n, const int32_t* optional) {
  const bool opt_before = i >= 1 && optional != nullptr && optional[i - 1] == 1;
  const bool opt_first = optional != nullptr && optional[0] == 1;
  const bool opt_last = n >= 1 && optional != nullptr && optional[n - 1] == 1;
  int32_t l = 0;
  if (i >= 1) l |= 1;
  if (i >= 2 && opt_before) l |= 2;
  if (i == 0 || (i == 1 && opt_first)) l |= kLinkStart;
  if (i == n - 1 || (i == n - 2 && opt_last)) l |= kLinkEnd;
  return l;
}
// links [n] of that chain.
std::vector<int32_t> chain_links(const int32_t* optional, int32_t n);

// The fewest phones on a path from a start phone to an end phone (each takes
// >= 1 frame, so an utterance of fewer frames cannot hold the transcript);
// -1 when no path exists.
int32_t graph_min_phones(const int32_t* links, int32_t n);
// True when an utterance of `length` frames can hold the graph: a path of at
// most `length` phones exists (false means log Z_c = -inf whatever the scores).
bool graph_feasible(int32_t length, const int32_t* links, int32_t n);

// links [B][N] over num_phones [B]: bit j set only where i - 1 - j >= 0, no bit
// above kLinkEnd. Throws std::invalid_argument naming the entry.
void validate_links_host(int64_t B, int64_t N, const int32_t* num_phones, const int32_t* links);

// A graph built slot by slot (a word's pronunciations, an optional silence):
// each slot is a list of alternatives (label strings of >= 1 phone, laid one
// after another); an optional slot may be skipped. Equal labels in a row
// inside an alternative are merged (as frame labels merge into runs).
class PhoneGraphBuilder {
 public:
  // Adds a slot; returns false (nothing added) when its alternatives would put a
  // predecessor more than kMaxLinkBack phones back (the caller retries with fewer).
  bool add(const std::vector<std::vector<int32_t>>& alternatives, bool optional);
  // The labels [n], the links [n], and per phone 1 when it lies on the first
  // alternative of every slot (the primary path: the transcript without the
  // other pronunciations), 0 when only another alternative reaches it.
  const std::vector<int32_t>& labels() const { return labels_; }
  std::vector<int32_t> links() const;  // end bits set on the last slot's ends
  const std::vector<uint8_t>& primary() const { return primary_; }
  const std::vector<uint8_t>& optional() const { return optional_; }  // 1: a phone of an optional slot

 private:
  std::vector<int32_t> labels_, links_;
  std::vector<uint8_t> primary_, optional_;
  std::vector<int32_t> frontier_;  // the phones the next slot's first phones follow
  bool may_start_ = true;          // nothing kept so far is possible (every slot optional)
};

}  // namespace timitseg::crf
