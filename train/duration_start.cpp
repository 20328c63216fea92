#include "train/duration_start.h"

#include <stdexcept>

#include "crf/backend.h"
#include "crf/segments.h"
#include "model/batch.h"
#include "train/train_data.h"

namespace timitseg::train {

DurationStart duration_start(const config::Config& cfg, const std::vector<data::Utterance>& train,
                             const model::LabelSet& ls, int K) {
  if (K < 1) throw std::invalid_argument("duration_start: K must be >= 1, got " + std::to_string(K));
  const int C = static_cast<int>(ls.size());
  DurationStart out;
  out.flat_start = cfg.crf_flat_start;
  std::vector<int64_t> gold_of(static_cast<size_t>(C), 0);  // [C] gold pieces per label
  for (const data::Utterance& u : train) {
    if (trains_on_transcript(cfg, u)) continue;
    std::vector<int32_t> y;
    for (int32_t l : u.labels) y.push_back(ls.class_of_label(l));
    for (const crf::Segment& g : crf::gold_segments(y.data(), static_cast<int32_t>(y.size()), K)) {
      if (g.label >= 0 && g.label < C) ++gold_of[static_cast<size_t>(g.label)];
      ++out.gold;
    }
    out.classes.push_back(std::move(y));
  }
  std::vector<char> flat_used(static_cast<size_t>(C), 0);
  for (const data::Utterance& u : train) {
    if (!trains_on_transcript(cfg, u)) continue;
    const model::PhoneSequence s = model::transcript_of(u, ls);
    if (u.num_frames < s.required()) continue;  // cannot train (keep_trainable leaves it out)
    ++out.transcripts;
    if (!cfg.crf_flat_start) continue;  // crf.flat_start: false: no durations from the transcripts
    const std::vector<int32_t> y = model::flat_start_labels(s, u.num_frames);
    // transcript_of leaves no two equal required phones side by side: each run is one phone's segment
    for (size_t t = 0; t < y.size();) {
      size_t e = t;
      while (e < y.size() && y[e] == y[t]) ++e;
      const int32_t c = y[t];
      if (gold_of[static_cast<size_t>(c)] == 0) {
        out.flat += (static_cast<int64_t>(e - t) + K - 1) / K;  // gold_segments' pieces of a run of e - t frames
        flat_used[static_cast<size_t>(c)] = 1;
        out.classes.emplace_back(e - t, c);
      }
      t = e;
    }
  }
  for (char f : flat_used) out.flat_labels += f;
  return out;
}

std::string DurationStart::describe(int K) const {
  std::string s = "the " + std::to_string(segments()) + " segments of the train split (K = " + std::to_string(K) +
                  "): " + std::to_string(gold) + " gold";
  if (transcripts == 0) return s;
  if (!flat_start)
    return s + "; the " + std::to_string(transcripts) +
           " utterances that train on their transcript give none (crf.flat_start: false)";
  s += ", " + std::to_string(flat) + " from an equal split of the transcripts (flat start: each of the " +
       std::to_string(transcripts) + " utterances that train on their transcript divides its frames equally among "
       "its required phones, optional silences none";
  if (gold > 0) s += "; only for the " + std::to_string(flat_labels) + " labels without gold segments";
  return s + ")";
}

}  // namespace timitseg::train
