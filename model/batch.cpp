#include "model/batch.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "crf/phone_graph.h"

namespace timitseg::model {
namespace {

int class_of(const LabelSet& ls, const data::Utterance& u, int label, const char* what, size_t at) {
  const int c = ls.class_of_label(label);
  if (c < 0)
    throw std::invalid_argument("utterance " + u.id + " " + what + " " + std::to_string(at) + ": label index " +
                                std::to_string(label) + " has no class in the " +
                                (ls.is_timit() ? std::to_string(ls.set) + "-phone set" : "phone set " + ls.spec.name));
  return c;
}

// Appends phone c (optional or not) so that no segmentation is read twice:
// a phone equal to the last one is merged into it (frame labels would merge
// the two runs), also across an optional phone between them, which is then
// dropped (skipped, it would leave two equal phones side by side, the same
// segmentations as the merged phone: docs/crf.md "Training from transcripts").
void push_phone(PhoneSequence& s, int32_t c, bool optional) {
  const size_t n = s.phones.size();
  if (!optional) {
    if (n >= 1 && s.phones[n - 1] == c) {  // an optional phone equal to c becomes c itself
      s.optional[n - 1] = 0;
      return;
    }
    if (n >= 2 && s.optional[n - 1] && s.phones[n - 2] == c) {
      s.phones.pop_back();
      s.optional.pop_back();
      return;
    }
  }
  if (optional && n >= 1 && s.optional[n - 1]) return;  // never two optional phones in a row
  if (optional && n >= 1 && s.phones[n - 1] == c) return;  // silence after silence: merged
  s.phones.push_back(c);
  s.optional.push_back(optional ? 1 : 0);
}

}  // namespace

int PhoneSequence::required() const {
  if (!links.empty()) {
    const int32_t m = crf::graph_min_phones(links.data(), static_cast<int32_t>(links.size()));
    return m < 0 ? std::numeric_limits<int>::max() : m;
  }
  return static_cast<int>(std::count(optional.begin(), optional.end(), 0));
}

std::vector<int32_t> PhoneSequence::graph() const {
  if (!links.empty()) return links;
  return crf::chain_links(optional.data(), static_cast<int32_t>(phones.size()));
}

namespace {

// Whether u offers several pronunciations of a word: some transcript_slot names an alternative k > 0.
bool has_alternatives(const data::Utterance& u) {
  if (u.transcript_slot.empty() || u.transcript_slot.size() != u.transcript.size()) return false;
  for (int32_t v : u.transcript_slot)
    if ((v & 255) != 0) return true;
  return false;
}

// Each slot of u (transcript_slot = (slot << 8) | k), in order: its alternatives as [begin, end)
// ranges of u.transcript, alternative 0 first.
std::vector<std::vector<std::pair<size_t, size_t>>> slot_alternatives(const data::Utterance& u) {
  std::vector<std::vector<std::pair<size_t, size_t>>> slots;
  const size_t n = u.transcript.size();
  for (size_t k = 0; k < n;) {
    std::vector<std::pair<size_t, size_t>> alts;
    size_t e = k;
    for (; e < n && u.transcript_slot[e] >> 8 == u.transcript_slot[k] >> 8; ++e)
      if (e == k || u.transcript_slot[e] != u.transcript_slot[e - 1])
        alts.emplace_back(e, e + 1);
      else
        alts.back().second = e + 1;
    slots.push_back(std::move(alts));
    k = e;
  }
  return slots;
}

// The graph of an utterance with alternatives (transcript_slot): each slot's
// alternatives mapped into classes, added to a crf::PhoneGraphBuilder.
PhoneSequence graph_of(const data::Utterance& u, const LabelSet& ls) {
  crf::PhoneGraphBuilder g;
  for (const auto& ranges : slot_alternatives(u)) {
    std::vector<std::vector<int32_t>> alts;
    const size_t k = ranges.front().first;
    const bool optional = k < u.transcript_optional.size() && u.transcript_optional[k] != 0;
    for (const auto& [b, e] : ranges) {
      alts.emplace_back();
      for (size_t i = b; i < e; ++i) alts.back().push_back(class_of(ls, u, u.transcript[i], "transcript phone", i));
    }
    if (!g.add(alts, optional) && !g.add({alts.front()}, optional))
      throw std::invalid_argument("utterance " + u.id + ": a word's pronunciations put a phone more than " +
                                  std::to_string(crf::kMaxLinkBack) + " phones after one it follows");
  }
  PhoneSequence s;
  s.phones = g.labels();
  s.links = g.links();
  s.primary = g.primary();
  s.optional.assign(g.optional().begin(), g.optional().end());
  return s;
}

}  // namespace

std::vector<int32_t> Batch::graph_links() const {
  if (!links.empty() || !transcript()) return links;
  std::vector<int32_t> out(static_cast<size_t>(num_phones.size()) * N, 0);
  for (size_t b = 0; b < num_phones.size(); ++b) {
    const std::vector<int32_t> l =
        crf::chain_links(optional.empty() ? nullptr : optional.data() + b * N, num_phones[b]);
    std::copy(l.begin(), l.end(), out.begin() + static_cast<ptrdiff_t>(b * N));
  }
  return out;
}

PhoneSequence transcript_of(const data::Utterance& u, const LabelSet& ls) {
  if (has_alternatives(u)) return graph_of(u, ls);
  PhoneSequence s;
  if (!u.transcript.empty()) {
    for (size_t i = 0; i < u.transcript.size(); ++i) {
      const bool opt = i < u.transcript_optional.size() && u.transcript_optional[i] != 0;
      push_phone(s, class_of(ls, u, u.transcript[i], "transcript phone", i), opt);
    }
  } else {  // the frame labels' maximal runs: the phone sequence with its times hidden
    for (int t = 0; t < u.num_frames && t < static_cast<int>(u.labels.size()); ++t)
      push_phone(s, class_of(ls, u, u.labels[t], "frame", static_cast<size_t>(t)), false);
  }
  if (s.phones.empty()) throw std::invalid_argument("utterance " + u.id + " has an empty phone sequence");
  if (s.required() == 0) {  // silence alone: the silence is the transcript
    s.phones.assign(1, s.phones.front());
    s.optional.assign(1, 0);
  }
  return s;
}

std::vector<int32_t> flat_start_labels(const PhoneSequence& s, int T) {
  std::vector<int32_t> req;  // the required phones of the primary path, in order
  for (size_t i = 0; i < s.phones.size(); ++i)
    if ((i >= s.optional.size() || s.optional[i] == 0) && s.on_primary(i) &&
        (req.empty() || req.back() != s.phones[i] || s.primary.empty()))
      req.push_back(s.phones[i]);
  const int64_t n = static_cast<int64_t>(req.size());
  if (n == 0) throw std::invalid_argument("flat_start_labels: the phone sequence has no required phone");
  if (T < n)
    throw std::invalid_argument("flat_start_labels: " + std::to_string(T) + " frames cannot hold " +
                                std::to_string(n) + " required phones (one frame each at least)");
  std::vector<int32_t> y(static_cast<size_t>(T));
  for (int64_t i = 0; i < n; ++i)
    std::fill(y.begin() + i * T / n, y.begin() + (i + 1) * T / n, req[static_cast<size_t>(i)]);
  return y;
}

std::vector<data::Utterance> pronunciation_chains(const data::Utterance& u, int max_chains) {
  if (max_chains < 1) throw std::invalid_argument("pronunciation_chains: max_chains must be >= 1");
  if (!has_alternatives(u)) return {u};
  const std::vector<std::vector<std::pair<size_t, size_t>>> slots = slot_alternatives(u);
  std::vector<size_t> choices(slots.size(), 1);  // alternatives offered per slot
  int64_t count = 1;
  for (size_t i = 0; i < slots.size(); ++i)
    if (count * static_cast<int64_t>(slots[i].size()) <= max_chains) {
      choices[i] = slots[i].size();
      count *= static_cast<int64_t>(slots[i].size());
    }
  std::vector<data::Utterance> out;
  std::vector<size_t> pick(slots.size(), 0);
  for (int64_t c = 0; c < count; ++c) {
    int64_t rest = c;  // mixed radix, the last slot fastest
    for (size_t i = slots.size(); i-- > 0;) {
      pick[i] = static_cast<size_t>(rest % static_cast<int64_t>(choices[i]));
      rest /= static_cast<int64_t>(choices[i]);
    }
    data::Utterance v = u;
    v.transcript.clear(), v.transcript_optional.clear(), v.transcript_slot.clear();
    for (size_t i = 0; i < slots.size(); ++i)
      for (size_t e = slots[i][pick[i]].first; e < slots[i][pick[i]].second; ++e) {  // transcript_of merges equal neighbours
        v.transcript.push_back(u.transcript[e]);
        v.transcript_optional.push_back(e < u.transcript_optional.size() ? u.transcript_optional[e] : 0);
      }
    out.push_back(std::move(v));
  }
  return out;
}

Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length, BatchSupervision supervision) {
  if (utts.empty()) throw std::invalid_argument("make_batch: empty batch");
  const bool by_transcript = supervision == BatchSupervision::transcript;
  Batch batch;
  const int B = static_cast<int>(utts.size());
  const int D = utts[0]->dim;
  int T = 0;
  for (const data::Utterance* u : utts) {
    if (u->dim != D)
      throw std::invalid_argument("utterance " + u->id + " has feature dim " + std::to_string(u->dim) + ", expected " +
                                  std::to_string(D));
    if (u->num_frames < 1) throw std::invalid_argument("utterance " + u->id + " has no frames");
    if (!by_transcript && !u->has_times())
      throw std::invalid_argument("utterance " + u->id + " has no phone times (only a transcript): it trains with "
                                  "crf.supervision auto or transcript");
    if (by_transcript && fixed_length > 0 && fixed_length < u->num_frames)
      throw std::invalid_argument("utterance " + u->id + ": debug.fixed_length " + std::to_string(fixed_length) +
                                  " would cut its " + std::to_string(u->num_frames) +
                                  " frames, and a transcript cannot be cut");
    T = std::max(T, fixed_length > 0 ? fixed_length : u->num_frames);
  }
  batch.input.B = B;
  batch.input.T = T;
  batch.input.features.assign(static_cast<size_t>(B) * T * D, 0.f);
  batch.input.lengths.assign(B, 0);
  batch.labels.assign(static_cast<size_t>(B) * T, 0);
  std::vector<PhoneSequence> seqs;
  for (int b = 0; b < B; ++b) {
    const data::Utterance& u = *utts[b];
    batch.ids.push_back(u.id);
    batch.source_frames.push_back(u.num_frames);
    const int L = fixed_length > 0 ? fixed_length : u.num_frames;
    const int copy = std::min(L, u.num_frames);
    float* f = batch.input.features.data() + static_cast<size_t>(b) * T * D;
    std::copy(u.features.begin(), u.features.begin() + static_cast<size_t>(copy) * D, f);
    if (cmvn) cmvn->apply(f, copy, u.id);
    batch.input.lengths[b] = L;
    batch.frames += L;
    if (by_transcript) {
      seqs.push_back(transcript_of(u, ls));
      batch.N = std::max(batch.N, static_cast<int>(seqs.back().phones.size()));
      continue;
    }
    int32_t* lab = batch.labels.data() + static_cast<size_t>(b) * T;
    for (int t = 0; t < copy; ++t) lab[t] = class_of(ls, u, u.labels[t], "frame", static_cast<size_t>(t));
    for (int t = copy; t < T; ++t) lab[t] = lab[copy - 1];  // padding (and --fixed-length) repeats the last label
  }
  if (by_transcript) {
    batch.phones.assign(static_cast<size_t>(B) * batch.N, 0);
    batch.optional.assign(static_cast<size_t>(B) * batch.N, 0);
    batch.links.assign(static_cast<size_t>(B) * batch.N, 0);
    batch.num_phones.assign(B, 0);
    for (int b = 0; b < B; ++b) {
      const PhoneSequence& s = seqs[b];
      std::copy(s.phones.begin(), s.phones.end(), batch.phones.begin() + static_cast<size_t>(b) * batch.N);
      std::copy(s.optional.begin(), s.optional.end(), batch.optional.begin() + static_cast<size_t>(b) * batch.N);
      const std::vector<int32_t> l = s.graph();
      std::copy(l.begin(), l.end(), batch.links.begin() + static_cast<size_t>(b) * batch.N);
      batch.num_phones[b] = static_cast<int32_t>(s.phones.size());
    }
  }
  return batch;
}

}  // namespace timitseg::model
