// Config::validate (every key's range, written once in settings/limits.h, or
// words; docs/config.md), the parsers of debug.inject_nonfinite and
// debug.inject_exit (validate() and the train loop call the same ones) and the
// documentation test's epoch cap; the keys' reading and writing: config/config.cpp.
#include "config/config.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "config/fault_spec.h"
#include "settings/env.h"
#include "settings/limits.h"

namespace timitseg::config {
namespace {

// A range error names where the value came from: the YAML file, `--set
// KEY=VALUE`, the checkpoint, or "config" for a default.
template <class T>
void check(const Config& cfg, bool ok, const char* key, const T& value, const std::string& rule) {
  if (!ok) {
    const auto it = cfg.origins.find(key);
    std::ostringstream os;
    os << (it == cfg.origins.end() ? std::string("config (default value)") : it->second) << ": '" << key << "' = ";
    if constexpr (std::is_same_v<T, std::string>) os << one_line(value);  // one line whatever the string holds
    else os << value;
    os << " is out of range: " << rule;
    throw std::invalid_argument(os.str());
  }
}

template <class E>  // an enum-like key's text that was none of its words (Config::bad_words)
void check_words(const Config& cfg, E /*value*/, const char* key) {
  if (cfg.bad_words.count(key)) check(cfg, false, key, cfg.bad_words.at(key), "one of " + enum_choices<E>());
}

}  // namespace

void apply_doctest_limits(Config& cfg) {
  const char* name = "TIMITSEG_DOCTEST_MAX_EPOCHS";
  const std::optional<long long> v = env::integer(name);  // [1, INT_MAX]: settings/env.cpp
  if (!v) return;
  const int cap = static_cast<int>(*v);
  spdlog::warn("{}={} is set: train.epochs {} -> {} (a shortened run for the documentation test, "
               "tests/docs/run_doc_blocks.py; unset it for real training)",
               name, cap, cfg.train_epochs, std::min(cfg.train_epochs, cap));
  cfg.train_epochs = std::min(cfg.train_epochs, cap);
}

void Config::validate() const {
  check(*this, data_label_set == 39 || data_label_set == 48 || data_label_set == 61, "data.label_set", data_label_set,
        "one of 39, 48, 61");
  check(*this, data_max_train_utterances >= 0, "data.max_train_utterances", data_max_train_utterances, ">= 0");
  check(*this, data_max_dev_utterances >= 0, "data.max_dev_utterances", data_max_dev_utterances, ">= 0");
  using limits::to_string;
  check(*this, limits::kHiddenDim.contains(model_hidden_dim) && model_hidden_dim % 2 == 0, "model.hidden_dim",
        model_hidden_dim, "an even number in " + to_string(limits::kHiddenDim) + " (split over two directions)");
  check(*this, limits::kNumLayers.contains(model_num_layers), "model.num_layers", model_num_layers,
        "in " + to_string(limits::kNumLayers));
  check(*this, limits::kDropout.contains(model_dropout), "model.dropout", model_dropout,
        "in " + to_string(limits::kDropout));
  check(*this, limits::kMaxDuration.contains(crf_max_duration), "crf.max_duration", crf_max_duration,
        "in " + to_string(limits::kMaxDuration));
  check(*this, crf_reg >= 0.0, "crf.reg", crf_reg, ">= 0");
  check_words(*this, crf_backend, "crf.backend");
  check_words(*this, crf_loss_normalization, "crf.loss_normalization");
  check(*this, train_epochs >= 1, "train.epochs", train_epochs, ">= 1");
  check(*this, train_batch_size >= 1, "train.batch_size", train_batch_size, ">= 1");
  check(*this, train_lr > 0.0, "train.lr", train_lr, "> 0");
  check(*this, train_min_lr >= 0.0 && train_min_lr <= train_lr, "train.min_lr", train_min_lr, "in [0, train.lr]");
  check(*this, limits::kInitScale.contains(crf_init_scale), "crf.init_scale", crf_init_scale,
        "in " + to_string(limits::kInitScale) + " (0 = zeros)");
  check_words(*this, crf_duration_init, "crf.duration_init");
  check(*this, limits::kLrScale.contains(crf_lr_scale), "crf.lr_scale", crf_lr_scale,
        "in " + to_string(limits::kLrScale));
  check(*this, limits::kPhoneBonus.contains(crf_phone_bonus), "crf.phone_bonus", crf_phone_bonus,
        "in " + to_string(limits::kPhoneBonus) + " (log-score per label change; 0 = plain Viterbi)");
  check(*this, limits::kFrameCeWeight.contains(crf_frame_ce_weight), "crf.frame_ce_weight", crf_frame_ce_weight,
        "in " + to_string(limits::kFrameCeWeight) + " (0 = the CRF loss alone)");
  check(*this, limits::kGaussianWeight.contains(crf_gaussian_weight), "crf.gaussian_weight", crf_gaussian_weight,
        "in " + to_string(limits::kGaussianWeight) + " (the Gaussian head's weight; crf.gaussian_head turns it on)");
  check_words(*this, crf_gaussian_head, "crf.gaussian_head");
  check_words(*this, crf_decode, "crf.decode");
  check_words(*this, crf_onset_features, "crf.onset_features");
  check_words(*this, crf_end_features, "crf.end_features");
  check_words(*this, crf_duration_model, "crf.duration_model");
  check_words(*this, crf_supervision, "crf.supervision");
  check_words(*this, train_lr_schedule, "train.lr_schedule");
  check(*this, train_weight_decay >= 0.0, "train.weight_decay", train_weight_decay, ">= 0");
  check(*this, limits::kAdamBeta.contains(train_beta1), "train.beta1", train_beta1, "in " + to_string(limits::kAdamBeta));
  check(*this, limits::kAdamBeta.contains(train_beta2), "train.beta2", train_beta2, "in " + to_string(limits::kAdamBeta));
  check(*this, train_eps > 0.0, "train.eps", train_eps, "> 0");
  check(*this, train_clip_norm >= 0.0, "train.clip_norm", train_clip_norm, ">= 0 (0 = off)");
  check_words(*this, train_device, "train.device");
  check_words(*this, train_rnn_algo, "train.rnn_algo");
  check(*this, limits::kThreads.contains(train_threads), "train.threads", train_threads,
        "in " + to_string(limits::kThreads) + " (0 = all cores)");
  check(*this, train_bucket_batches >= 1, "train.bucket_batches", train_bucket_batches, ">= 1");
  check(*this, train_log_every >= 1, "train.log_every", train_log_every, ">= 1");
  check(*this, train_keep_checkpoints >= 0, "train.keep_checkpoints", train_keep_checkpoints,
        ">= 0 (0 = only best and last)");
  validate_augment();
  check(*this, debug_fixed_length >= 0, "debug.fixed_length", debug_fixed_length, ">= 0 (0 = off)");
  check(*this, debug_drift_threshold > 0.0, "debug.drift_threshold", debug_drift_threshold, "> 0");
  check(*this, train_dist_timeout > 0.0, "train.dist_timeout", train_dist_timeout, "> 0 (seconds)");
  check(*this, debug_fault_rank >= -1, "debug.fault_rank", debug_fault_rank, ">= -1 (-1 = every rank)");
  if (!debug_inject_exit.empty()) {
    check(*this, inject_exit().rank >= 0, "debug.inject_exit", debug_inject_exit,
          "RANK:STEP:ACTION with RANK >= 0 or all, STEP >= 1 and ACTION one of " + enum_choices<ExitAction>() + ", or empty");
  }
  if (!inject_nonfinite())
    check(*this, false, "debug.inject_nonfinite", debug_inject_nonfinite, "EPOCH:BATCH with both >= 1, or empty");
  try {
    inject_fault();
  } catch (const std::invalid_argument& e) {
    const auto it = origins.find("debug.inject_fault");
    throw std::invalid_argument((it == origins.end() ? std::string("config (default value)") : it->second) +
                                ": 'debug.inject_fault': " + e.what());
  }
}

// data.cmvn and the augment keys (docs/config.md "augment").
void Config::validate_augment() const {
  check_words(*this, data_cmvn, "data.cmvn");
  check(*this, features_cmvn || data_cmvn == CmvnMode::global, "data.cmvn", to_string(data_cmvn),
        "global while features.cmvn is false (no normalization at all)");
  const std::pair<const char*, int> counts[] = {{"augment.time_masks", augment_time_masks},
                                                {"augment.time_mask_width", augment_time_mask_width},
                                                {"augment.freq_masks", augment_freq_masks},
                                                {"augment.freq_mask_width", augment_freq_mask_width}};
  for (const auto& [key, v] : counts) check(*this, v >= 0 && v <= 10000, key, v, "in [0, 10000] (0 = off)");
}

std::optional<NonfiniteStep> Config::inject_nonfinite() const {
  if (debug_inject_nonfinite.empty()) return NonfiniteStep{};
  int e = 0, b = 0;
  char c = 0;
  std::istringstream is(debug_inject_nonfinite);
  if (!(is >> e >> c >> b) || c != ':' || e < 1 || b < 1 || !is.eof()) return std::nullopt;
  return NonfiniteStep{e, b};
}

InjectExit InjectExit::parse(const std::string& text) {
  InjectExit x;
  const size_t a = text.find(':'), b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) return x;
  try {
    size_t used = 0;
    const bool all = text.substr(0, a) == "all";
    const int rank = all ? 0 : std::stoi(text.substr(0, a), &used);
    if (!all && used != a) return x;
    x.all = all;
    const std::string step_text = text.substr(a + 1, b - a - 1);
    const long long step = std::stoll(step_text, &used);
    if (used != step_text.size()) return x;
    ExitAction action{};
    if (step < 1 || !parse_enum(text.substr(b + 1), &action)) return x;
    x.rank = rank;
    x.step = step;
    x.action = action;
  } catch (const std::exception&) {
  }
  return x;
}

}  // namespace timitseg::config
