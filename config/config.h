// Training configuration: the YAML file of `timitseg train --config` (sections
// data, features, model, crf, train, debug), --set overrides, validation and the
// resolved form saved in the run directory and in checkpoint metadata.
// Every key is documented in docs/config.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config_enums.h"
#include "config/fault_spec.h"

namespace timitseg::config {

// debug.inject_exit "RANK:STEP:ACTION" (rank < 0: not a valid spec).
struct InjectExit {
  int rank = -1;
  bool all = false;  // RANK "all": every rank
  int64_t step = 0;
  ExitAction action = ExitAction::throw_exception;  // throw | kill | hang
  static InjectExit parse(const std::string& text);
};

// debug.inject_nonfinite "EPOCH:BATCH": the step whose crf.transition gets a NaN.
struct NonfiniteStep {
  int epoch = 0, batch = 0;  // both >= 1 when set; 0 when the key is empty
};

struct Config {
  // data
  std::string data_workdir;          // data.workdir (required): a prepared WORKDIR
  int data_label_set = 39;           // data.label_set: 39 | 48 | 61 (classes trained), the shipped timit39/48/61
  std::string data_phone_set;        // data.phone_set: a shipped phone set (timit39, buckeye, ...) or a phone-set file; "" = label_set on TIMIT, else the WORKDIR's
  int64_t data_max_train_utterances = 0;  // data.max_train_utterances: 0 = all
  int64_t data_max_dev_utterances = 0;    // data.max_dev_utterances: 0 = all
  // features
  bool features_cmvn = true;         // features.cmvn: apply the WORKDIR's train CMVN
  // augment (docs/training.md "Augmentation and noise")
  CmvnMode data_cmvn = CmvnMode::global;  // data.cmvn: global (the train split's statistics) | utterance (each utterance's own)
                                          // | speaker (each speaker's own over the split read)
  bool augment_speed = true;         // augment.speed: train on the WORKDIR's speed-perturbed copies (NAME_augspNNN) when it has some
  bool augment_noise = true;         // augment.noise: train on the WORKDIR's noisy copies (NAME_augnoise) when it has some
  int augment_time_masks = 0;        // augment.time_masks: SpecAugment time masks per train utterance (0 = off)
  int augment_time_mask_width = 0;   // augment.time_mask_width: each one's width, uniform in [0, N] frames
  int augment_freq_masks = 0;        // augment.freq_masks: frequency masks (feature dimensions) per train utterance (0 = off)
  int augment_freq_mask_width = 0;   // augment.freq_mask_width: each one's width, uniform in [0, N] dimensions
  // model
  int model_hidden_dim = 256;        // model.hidden_dim: BiLSTM output width (2 x per-direction)
  int model_num_layers = 3;          // model.num_layers
  double model_dropout = 0.3;        // model.dropout
  // crf
  int crf_max_duration = 30;         // crf.max_duration (K)
  double crf_reg = 0.0;              // crf.reg: L2 penalty on transition and duration_bias
  CrfBackendSetting crf_backend = CrfBackendSetting::cpu;  // crf.backend: reference | cpu | cuda | auto (options/device_choice.h)
  LossNormalization crf_loss_normalization = LossNormalization::utterance;  // crf.loss_normalization: utterance | frame
  double crf_init_scale = 0.0;       // crf.init_scale: 0 = transition/duration_bias start at zero; > 0: N(0, scale^2), seeded
  DurationInit crf_duration_init = DurationInit::random;  // crf.duration_init: random (init_scale only) | data (+ log p(d | label) of the train split)
  // crf.flat_start: with crf.duration_init = data, the utterances that train on their transcript give the
  // flat start's durations (each one's frames split equally among its required phones) for the labels without
  // gold segments; false: they give none (such a label keeps the crf.init_scale draw alone).
  bool crf_flat_start = true;
  double crf_lr_scale = 1.0;         // crf.lr_scale: lr multiplier of crf.transition, duration_bias, start, end
  // crf.onset_features: false | true | auto (true for the semi-CRF, K > 1; false for the linear CRF, K = 1):
  // crf.onset_projection (Linear W -> C) gives the CRF's onset scores. onset_enabled() resolves it.
  OnsetFeatures crf_onset_features = OnsetFeatures::off;
  // crf.end_features: the same words; crf.end_projection (Linear W -> C) gives end scores, added at each
  // segment's last frame (docs/crf.md, folded into the CRF's inputs). end_enabled() resolves it.
  OnsetFeatures crf_end_features = OnsetFeatures::off;
  // crf.duration_model: table (crf.duration_bias [K][C] free) | lognormal (per label mu, log_sigma, offset:
  // crf.duration_lognormal [3][C], the table derived from it; crf/duration.h)
  DurationModel crf_duration_model = DurationModel::table;
  double crf_phone_bonus = 0.0;      // crf.phone_bonus: Viterbi only: log-score added at each label change (HTK's insertion log-prob)
  double crf_frame_ce_weight = 0.0;  // crf.frame_ce_weight: w * frame cross-entropy of the projection's scores added to the loss
  // crf.gaussian_head: false | true | auto (true when any train utterance trains on its transcript): the Gaussian
  // head, w x a per-class diagonal Gaussian log-likelihood of the features added to the frame scores, re-estimated
  // each epoch from the train split's labels and alignments (model/gaussian_head.h); crf.gaussian_weight: its w.
  // gaussian_head_enabled() resolves it.
  OnsetFeatures crf_gaussian_head = OnsetFeatures::off;
  double crf_gaussian_weight = 0.1;
  DecodeMode crf_decode = DecodeMode::viterbi;  // crf.decode: viterbi | posterior (per-frame argmax of the CRF's label marginals)
  // crf.supervision: auto (times where an utterance has them, its phone sequence where it has only that) |
  // segments (times only) | transcript (phone sequences only: the transcript NLL, times ignored)
  Supervision crf_supervision = Supervision::automatic;
  // train
  std::string train_run_dir;         // train.run_dir (required)
  int train_epochs = 20;             // train.epochs
  int train_batch_size = 32;         // train.batch_size
  double train_lr = 1e-3;            // train.lr
  double train_min_lr = 0.0;         // train.min_lr: end of the cosine schedule
  LrSchedule train_lr_schedule = LrSchedule::cosine;  // train.lr_schedule: cosine (per update) | cosine_epoch (per epoch) | constant
  double train_weight_decay = 1e-5;  // train.weight_decay (AdamW, decoupled)
  double train_beta1 = 0.9;          // train.beta1
  double train_beta2 = 0.999;        // train.beta2
  double train_eps = 1e-8;           // train.eps
  double train_clip_norm = 5.0;      // train.clip_norm: global gradient norm; 0 = off
  uint64_t train_seed = 0;           // train.seed
  DeviceSetting train_device = DeviceSetting::cpu;  // train.device: cpu | cuda | auto (options/device_choice.h)
  int train_threads = 0;             // train.threads: 0 = all cores
  RnnAlgo train_rnn_algo = RnnAlgo::standard;  // train.rnn_algo: the GPU recurrence: cuDNN (standard | persist_static | persist_dynamic) or fused (own Hopper kernel), or auto (options/device_choice.h)
  bool train_bucketing = true;       // train.bucketing: group similar lengths in a batch
  int train_bucket_batches = 50;     // train.bucket_batches: pool size (in batches) sorted by length
  int train_log_every = 10;          // train.log_every: batches between plain progress lines
  double train_dist_timeout = 300.0;  // train.dist_timeout: seconds a rank waits in one collective before it aborts the job (several processes, docs/multigpu.md)
  int train_keep_checkpoints = 3;    // train.keep_checkpoints: epoch-N checkpoints kept besides best + last (0 = only those two)
  // debug
  int debug_fixed_length = 0;        // debug.fixed_length: 0 = off, N = truncate/pad to N frames
  double debug_drift_threshold = 20.0;  // debug.drift_threshold
  bool debug_check_numerics = true;  // debug.check_numerics: per-layer finite checks every batch
  std::string debug_inject_nonfinite;   // debug.inject_nonfinite: "EPOCH:BATCH": NaN in crf.transition for that step (the older form of inject_fault)
  std::string debug_inject_fault;  // debug.inject_fault: "layer=NAME,pass=forward|backward,step=N,value=nan|inf" (config/fault_spec.h)
  bool debug_step_log = false;      // debug.step_log: RUN_DIR/steps.jsonl, the loss and gradient norm of every step to 17 digits (rank 0)
  int debug_fault_rank = -1;         // debug.fault_rank: the rank that debug.inject_fault / inject_nonfinite act on (-1 = every rank)
  std::string debug_inject_exit;     // debug.inject_exit: "RANK:STEP:throw|kill|hang" (RANK a number or all): that rank throws, kills itself (SIGKILL) or stops answering before that step (tests of the fault handling)
  bool debug_deterministic = false;  // debug.deterministic: fixed reduction orders (the CPU always is; docs/debugging.md)

  // Where each key's value was set ("FILE.yaml", "--set KEY=VALUE", "CKPT
  // (config metadata)"); keys left at their default are absent. Range errors
  // of validate() name it.
  std::map<std::string, std::string> origins;
  // The text of an enum-like key that is none of its words, by key, as read
  // (the key keeps its previous value): validate() reports it in its place
  // among the range checks, with the same words as every range error. A
  // later valid value of the key removes it.
  std::map<std::string, std::string> bad_words;

  // Loads FILE (YAML), applies overrides "key=value" (value parsed as YAML) and
  // validates. Throws std::invalid_argument naming the file/key and problem.
  static Config load(const std::string& path, const std::vector<std::string>& overrides);
  // From the resolved JSON saved in a checkpoint / run directory.
  static Config from_json(const nlohmann::json& j, const std::string& origin);
  // Applies one "section.key=value" override (value is YAML text).
  void set(const std::string& assignment, const std::string& origin);
  // The same for `train --resume`: only keys listed in resumable_keys() may
  // change; any other key (even a valid one) is refused, naming it, so a
  // resumed run keeps the configuration it was started with.
  void set_on_resume(const std::string& assignment, const std::string& origin);
  void validate() const;  // range / enum checks; throws std::invalid_argument
  void validate_augment() const;  // validate()'s checks of data.cmvn and the augment keys
  // crf.onset_features resolved: true, or auto with crf.max_duration > 1 (the semi-CRF).
  bool duration_lognormal() const { return crf_duration_model == DurationModel::lognormal; }
  bool onset_enabled() const {
    return crf_onset_features == OnsetFeatures::on || (crf_onset_features == OnsetFeatures::automatic && crf_max_duration > 1);
  }
  bool end_enabled() const {
    return crf_end_features == OnsetFeatures::on || (crf_end_features == OnsetFeatures::automatic && crf_max_duration > 1);
  }
  // crf.gaussian_head resolved for a train split in which some utterance trains on its transcript (any_transcript).
  bool gaussian_head_enabled(bool any_transcript) const {
    return crf_gaussian_head == OnsetFeatures::on || (crf_gaussian_head == OnsetFeatures::automatic && any_transcript);
  }
  // The debug.* strings parsed, each by its one parser (validate() and the train loop read these):
  // debug.inject_nonfinite as {EPOCH, BATCH} ({0, 0} when empty; std::nullopt when it is not
  // EPOCH:BATCH with both >= 1), debug.inject_exit (rank < 0: empty or malformed) and
  // debug.inject_fault (empty: no fault; a malformed one throws FaultSpec::parse's std::invalid_argument).
  std::optional<NonfiniteStep> inject_nonfinite() const;
  InjectExit inject_exit() const { return InjectExit::parse(debug_inject_exit); }
  FaultSpec inject_fault() const {
    return FaultSpec::parse(debug_inject_fault, model_num_layers, onset_enabled() || end_enabled());
  }
  nlohmann::json to_json() const;  // {"data": {...}, ...}
  std::string to_yaml() const;

  static std::vector<std::string> keys();  // every valid "section.key"
  // Keys that `train --resume --set` may change (docs/config.md): the length of
  // the run, logging, threads, numeric checks and the device/backend choices.
  static const std::vector<std::string>& resumable_keys();
  // The valid key closest to `key` (edit distance), for error messages.
  static std::string closest_key(const std::string& key);
};

int edit_distance(const std::string& a, const std::string& b);

// The documentation test (tests/docs/run_doc_blocks.py) shortens every training
// run it starts through one environment variable, read here and nowhere else:
// TIMITSEG_DOCTEST_MAX_EPOCHS=N (an integer >= 1) caps train.epochs at N and logs
// a warning saying so whenever it is set; unset (or empty), nothing changes.
// model::train calls it, so fresh runs, --resume and every command that trains
// through model::train are shortened alike; the capped value is the one written
// to config.yaml and the checkpoints. A malformed value throws
// std::invalid_argument naming the variable.
void apply_doctest_limits(Config& cfg);

// Shortest text that reads back as exactly v (std::to_chars).
std::string format_double(double v);

}  // namespace timitseg::config
