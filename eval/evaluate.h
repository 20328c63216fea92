// The evaluation pass shared by `timitseg evaluate` (eval/infer.cpp), the dev
// evaluation of every training epoch (train/train.cpp), `compare` and the
// report: decode on an executor, accumulate the metrics.
#pragma once

#include <functional>
#include <vector>

#include "common/progress.h"
#include "crf/backend.h"
#include "data/dataset.h"
#include "eval/metrics.h"
#include "model/batch.h"
#include "model/executor.h"
#include "model/labels.h"

namespace timitseg::eval {

// Decodes utterances batch by batch (sorted by length) on an executor and
// accumulates the 39-phone metrics. on_utterance (optional) sees each
// utterance's batch row, and with want_scores the batch's projection scores
// [B][T][C] (host).
using UtteranceHook = std::function<void(const data::Utterance&, const model::Batch&, int row,
                                         const std::vector<float>* scores, const std::vector<crf::Segment>&)>;
void evaluate_utterances(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn,
                         const model::LabelSet& ls, int batch_size, Metrics& metrics, const UtteranceHook& hook = nullptr,
                         bool want_scores = false, double* nll_sum = nullptr, Progress* progress = nullptr);
// nll_sum (optional): receives the sum over the utterances of log Z - gold
// score (their labels' NLL), from the decoding forward (Executor::decode).
// progress (optional): advanced by each batch's utterances (`evaluate`'s bar).

// The batches evaluate_utterances decodes, in its order: the utterances
// sorted by length (stable), batch_size at a time. The dev evaluation on
// several processes (train/distributed.h) gives chunk j to rank j mod N, so
// every utterance is decoded in the same batch as in one process.
std::vector<std::vector<const data::Utterance*>> evaluation_chunks(const std::vector<const data::Utterance*>& utts,
                                                                   int batch_size);
// Adds one utterance's 39-phone metrics: reference labels (row `row` of
// ref_labels [length] label-set indices) against the segments' labels; throws when the segments leave a frame uncovered.
void add_utterance_metrics(Metrics& metrics, const model::LabelSet& ls, const data::Utterance& u, const int32_t* ref_labels,
                           int length, const std::vector<crf::Segment>& segs);
// An utterance without phone times (data::Utterance::has_times() false):
// the PER of its decoded phones against its transcript (model::transcript_of),
// both folded onto the scoring set and with the silences left out (the
// transcript's silences are optional, so where they fall is not known).
void add_transcript_metrics(Metrics& metrics, const model::LabelSet& ls, const data::Utterance& u,
                            const std::vector<crf::Segment>& segs);

}  // namespace timitseg::eval
