// The evaluation pass (eval/evaluate.h).
#include "eval/evaluate.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace timitseg::eval {

std::vector<std::vector<const data::Utterance*>> evaluation_chunks(const std::vector<const data::Utterance*>& utts,
                                                                   int batch_size) {
  std::vector<const data::Utterance*> sorted = utts;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const data::Utterance* a, const data::Utterance* b) { return a->num_frames < b->num_frames; });
  std::vector<std::vector<const data::Utterance*>> chunks;
  for (size_t p = 0; p < sorted.size(); p += static_cast<size_t>(batch_size))
    chunks.emplace_back(sorted.begin() + p, sorted.begin() + std::min(sorted.size(), p + batch_size));
  return chunks;
}

void add_utterance_metrics(Metrics& metrics, const model::LabelSet& ls, const data::Utterance& u, const int32_t* ref_labels,
                           int length, const std::vector<crf::Segment>& segs) {
  std::vector<int> ref(length), pred(length, -1);
  for (int t = 0; t < length; ++t) ref[t] = ls.scoring_index[ref_labels[t]];
  for (const crf::Segment& s : segs)
    for (int t = s.start; t < s.start + s.duration; ++t) pred.at(t) = ls.scoring_index.at(s.label);
  for (int t = 0; t < length; ++t)
    if (pred[t] < 0)
      throw std::logic_error("Viterbi segments do not cover frame " + std::to_string(t) + " of " + u.id);
  metrics.add(ref, pred);
}

void add_transcript_metrics(Metrics& metrics, const model::LabelSet& ls, const data::Utterance& u,
                            const std::vector<crf::Segment>& segs) {
  std::vector<char> silent(ls.scoring_names.size(), 0);  // scoring labels that a silence class folds onto
  for (int c = 0; c < ls.size(); ++c)
    if (ls.spec.is_silence(c)) silent.at(ls.scoring_index.at(c)) = 1;
  const model::PhoneSequence seq = model::transcript_of(u, ls);
  std::vector<int> ref, pred;
  for (size_t i = 0; i < seq.phones.size(); ++i) {  // each word's most probable pronunciation
    const int32_t c = seq.phones[i];
    if (seq.on_primary(i) && !silent.at(ls.scoring_index.at(c)) && (ref.empty() || ref.back() != ls.scoring_index.at(c)))
      ref.push_back(ls.scoring_index.at(c));
  }
  for (const crf::Segment& s : segs)
    if (!silent.at(ls.scoring_index.at(s.label))) pred.insert(pred.end(), s.duration, ls.scoring_index.at(s.label));
  metrics.add_sequence(ref, pred);
}

void evaluate_utterances(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn,
                         const model::LabelSet& ls, int batch_size, Metrics& metrics, const UtteranceHook& hook,
                         bool want_scores, double* nll_sum, Progress* progress) {
  std::vector<float> scores;
  std::vector<double> nll;
  if (nll_sum) *nll_sum = 0;
  std::vector<const data::Utterance*> timed, untimed;
  for (const data::Utterance* u : utts) (u->has_times() ? timed : untimed).push_back(u);
  for (const std::vector<const data::Utterance*>& chunk : evaluation_chunks(untimed, batch_size)) {
    // no times: the PER against the transcript, no NLL (the loss of a transcript is not the dev loss)
    const model::Batch batch = model::make_batch(chunk, cmvn, ls, 0, model::BatchSupervision::transcript);
    const auto segs = exec.decode(batch, nullptr, nullptr);
    for (size_t b = 0; b < chunk.size(); ++b) add_transcript_metrics(metrics, ls, *chunk[b], segs[b]);
    if (progress) progress->advance(static_cast<int64_t>(chunk.size()));
  }
  for (const std::vector<const data::Utterance*>& chunk : evaluation_chunks(timed, batch_size)) {
    const model::Batch batch = model::make_batch(chunk, cmvn, ls, 0);
    const auto segs = exec.decode(batch, want_scores ? &scores : nullptr, nll_sum ? &nll : nullptr);
    if (nll_sum)
      for (double x : nll) *nll_sum += x;
    for (size_t b = 0; b < chunk.size(); ++b) {
      add_utterance_metrics(metrics, ls, *chunk[b], batch.labels.data() + b * batch.input.T, batch.input.lengths[b],
                            segs[b]);
      if (hook) hook(*chunk[b], batch, static_cast<int>(b), want_scores ? &scores : nullptr, segs[b]);
    }
    if (progress) progress->advance(static_cast<int64_t>(chunk.size()));
  }
}

}  // namespace timitseg::eval
