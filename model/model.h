// The trained model as a whole: label set, batch collation, the loss step
// (encoder -> projection -> centered cumsum -> semi-CRF NLL + L2 penalty),
// Viterbi decoding, and checkpoints (safetensors, PyTorch parameter names).
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/semicrf.h"
#include "data/dataset.h"
#include "model/config.h"
#include "model/cpu/network.h"
#include "model/optim.h"

namespace timitseg::model {

// The label set trained on and its map to 39 for scoring. data.label_set 39 and
// 48 give C = 39 and 48; data.label_set 61 gives C = 60: the 61 TIMIT labels
// without q, because prepared labels never contain q (the data layer merges q
// frames into their neighbours, docs/data.md) and q has no 39-phone target.
struct LabelSet {
  int set = 39;
  std::vector<std::string> names;    // [C]
  std::vector<int> to39;             // [C] index into names39
  std::vector<std::string> names39;  // [39]
  std::vector<int> idx61_to_class;   // [61] index of names61() -> class in names, -1 for q
  static LabelSet make(int set);
  int from61(int idx61) const;  // -1 for q (never in prepared labels)
  int size() const { return static_cast<int>(names.size()); }
};

// A padded batch, ready for the network and the CRF.
struct Batch {
  BatchInput<float> input;            // features [B][T][D] (normalized), lengths [B]
  std::vector<int32_t> labels;        // [B][T] label-set indices; padding repeats the last label
  std::vector<std::string> ids;       // [B] utterance ids
  std::vector<int32_t> source_frames; // [B] frames before --fixed-length
  int64_t frames = 0;                 // sum of lengths
};

// Collates utterances: CMVN applied when cmvn != nullptr; fixed_length > 0
// truncates or pads (zeros, label repeated) every utterance to exactly N frames
// and reports N as its length (the reference script's --fixed-length).
Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length);

// Everything a checkpoint carries: weights, what decode needs (feature options,
// CMVN, label set) and the training state for --resume.
struct ModelState {
  Config config;
  ModelDims dims;
  LabelSet labels;
  data::FeatureOptions features;
  bool has_cmvn = false;
  data::Cmvn cmvn;
  std::vector<float> params;  // ParamLayout(dims)
  // training state
  AdamW optimizer;
  int epoch = 0;  // epochs completed
  std::string rng_state;
  double best_dev_per = std::numeric_limits<double>::infinity();
  int best_epoch = 0;
  double dev_per = std::numeric_limits<double>::quiet_NaN();
};

// Atomic (safetensors temp file + rename). with_optimizer adds
// optimizer.exp_avg.NAME / optimizer.exp_avg_sq.NAME tensors.
void save_checkpoint(const std::string& path, const ModelState& s, bool with_optimizer = true);
// Throws naming the file on a missing tensor or a shape mismatch.
ModelState load_checkpoint(const std::string& path);

// A non-finite value found during a training step; `tensor` names the first one.
class NonFiniteError : public std::runtime_error {
 public:
  NonFiniteError(const std::string& tensor, const std::string& detail)
      : std::runtime_error(detail), tensor_(tensor) {}
  const std::string& tensor() const { return tensor_; }

 private:
  std::string tensor_;
};

struct StepTimes {
  double encoder_forward = 0, encoder_backward = 0, crf = 0;
};

struct StepResult {
  double loss = 0;       // mean NLL (per utterance or frame) + penalty
  double nll_sum = 0;    // sum over utterances
  double penalty = 0;
};

// One loss + gradient evaluation. grad is overwritten (layout of params).
// Throws NonFiniteError naming the first non-finite tensor (forward layers,
// log Z / gold, CRF gradients, parameter gradients); `act` keeps the batch's
// activations (cum_scores for the replay file).
StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Backend& backend, const Config& cfg, double dropout, std::mt19937_64* rng,
                         std::vector<float>& grad, Activations<float>& act, StepTimes* times = nullptr);

// Viterbi segments per utterance (label-set indices). act receives the
// activations (scores for --dump-scores).
std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Backend& backend,
                                                    Activations<float>& act);

// CRF inputs of a batch in `crf replay` format (cum_scores, transition,
// duration_bias, start, end, lengths, labels), written atomically.
void write_replay(const std::string& path, const Network<float>& net, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum);

// max |transition| and max |duration_bias|.
std::pair<double, double> crf_param_maxima(const ParamLayout& layout, const std::vector<float>& params);

nlohmann::json feature_options_to_json(const data::FeatureOptions& o);
data::FeatureOptions feature_options_from_json(const nlohmann::json& j);

}  // namespace timitseg::model
