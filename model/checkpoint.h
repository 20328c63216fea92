// Checkpoints: safetensors files with the parameters under PyTorch names,
// what decode needs (feature options, CMVN, label set) and the training state
// for --resume.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "data/dataset.h"
#include "config/config.h"
#include "model/labels.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// Everything a checkpoint carries: weights, what decode needs (feature options,
// CMVN, label set) and the training state for --resume.
struct ModelState {
  timitseg::config::Config config;  // qualified in full: the member is named config
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
  // Whether any train utterance trained on its transcript (crf.supervision; metadata
  // "transcript_trained"; a checkpoint written before the key: crf.supervision = transcript).
  // `align` and `evaluate --align` put silence edges at the energy change by default for such a
  // model (eval/silence_edges.h).
  bool transcript_trained = false;
};

// Atomic (safetensors temp file + rename). with_optimizer adds
// optimizer.exp_avg.NAME / optimizer.exp_avg_sq.NAME tensors. The metadata key
// `tensor_sha256` holds checkpoint_tensor_sha256() of the tensors written.
void save_checkpoint(const std::string& path, const ModelState& s, bool with_optimizer = true);
// Throws naming the file on a missing tensor or a shape mismatch; on a
// `tensor_sha256` that does not match the tensors (checkpoints written before
// the key existed have none and are not checked); and, naming the tensor and
// the first bad index and value, on CMVN means that are not finite, CMVN
// variances that are not finite and > 0, and parameters or optimizer moments
// that are not finite (-inf is accepted in crf.transition, crf.duration_bias,
// crf.start and crf.end: forbidden entries of the CRF; exp_avg_sq must be >= 0).
// check_values = false skips the range checks (not the checksum): for the
// state dumps of --check-numerics, which hold the non-finite values on purpose.
ModelState load_checkpoint(const std::string& path, bool check_values = true);

// The phone set of a checkpoint's metadata: the shipped TIMIT sets as
// "label_set" (39, 48, 61; as before phone sets were data), any other as
// "phone_set" (PhoneSetSpec::to_json) with "phone_set_sha256" (its digest,
// checked on reading). Read back over the set's own phones as label table
// (TIMIT: the 61 .PHN labels); bind_workdir (model/labels.h) rebinds it to a WORKDIR.
void write_phone_set_metadata(const LabelSet& ls, std::map<std::string, std::string>& metadata);
LabelSet read_phone_set_metadata(const std::map<std::string, std::string>& metadata, const std::string& path);

// SHA-256 (hex) of the tensors of a checkpoint, in name order (byte order of
// the names, as std::map keeps them): per tensor, the name, a NUL byte, the
// dtype name ("F32"), a NUL byte, the shape as decimal sizes joined by ',', a
// NUL byte, the byte count as 8 bytes little-endian, then the raw
// (little-endian) bytes. Independent of the header layout and of the metadata.
std::string checkpoint_tensor_sha256(const st::File& f);

// The "dims" metadata of checkpoints and exported models: JSON text with
// input_dim, hidden_dim, num_layers, num_classes, max_duration.
std::string dims_json(const ModelDims& d);

}  // namespace timitseg::model
