// The enum-like config keys as enums (docs/config.md): the YAML/JSON/--set
// text is parsed into these at the config boundary (config/config.cpp) and
// written back from them, so config.yaml, run.json and the checkpoints keep
// the same words while nothing below the config compares strings.
//
// One enum per key and one table of names per enum (common/enum_names.h:
// to_string, parse_enum, enum_choices, enum_value). A new value is one line
// of its table.
#pragma once

#include "common/enum_names.h"

namespace timitseg::config {

// crf.backend: the CRF's host or device implementation (auto: options/device_choice.h).
enum class CrfBackendSetting { reference, cpu, cuda, automatic };
// crf.loss_normalization: the loss per utterance or per frame.
enum class LossNormalization { utterance, frame };
// crf.duration_init: duration_bias from init_scale only, or + log p(d | label) of the train split.
enum class DurationInit { random, data };
// crf.onset_features: written false | true | auto (Config::onset_enabled resolves auto).
enum class OnsetFeatures { off, on, automatic };
// crf.duration_model: a free [K][C] table, or per label log-normal parameters.
enum class DurationModel { table, lognormal };
// crf.decode: Viterbi, or the per-frame argmax of the label marginals.
enum class DecodeMode { viterbi, posterior };
// crf.supervision: what the loss learns from (docs/training.md "Training from transcripts"): the phone
// times where an utterance has them and its phone sequence where it has only that (auto), the times only
// (segments), or the phone sequences only, times ignored where present (transcript).
enum class Supervision { automatic, segments, transcript };
// data.cmvn: the feature normalization (with features.cmvn): the train split's statistics, each utterance's own, or each speaker's own over the split read.
enum class CmvnMode { global, utterance, speaker };
// train.lr_schedule: cosine per update, cosine per epoch, or constant.
enum class LrSchedule { cosine, cosine_epoch, constant };
// train.device: cpu | cuda | auto (the resolved device is model/encoder.h's Device).
enum class DeviceSetting { cpu, cuda, automatic };
// train.rnn_algo: cuDNN's algorithms, the own fused kernel, or auto.
enum class RnnAlgo { standard, persist_static, persist_dynamic, fused, automatic };
// debug.inject_exit's ACTION (config/config.h InjectExit): an exception, SIGKILL, or a hang.
enum class ExitAction { throw_exception, kill, hang };

TIMITSEG_ENUM_NAMES(CrfBackendSetting, 4, {CrfBackendSetting::reference, "reference"}, {CrfBackendSetting::cpu, "cpu"},
                    {CrfBackendSetting::cuda, "cuda"}, {CrfBackendSetting::automatic, "auto"});
TIMITSEG_ENUM_NAMES(LossNormalization, 2, {LossNormalization::utterance, "utterance"},
                    {LossNormalization::frame, "frame"});
TIMITSEG_ENUM_NAMES(DurationInit, 2, {DurationInit::random, "random"}, {DurationInit::data, "data"});
TIMITSEG_ENUM_NAMES(OnsetFeatures, 3, {OnsetFeatures::off, "false"}, {OnsetFeatures::on, "true"},
                    {OnsetFeatures::automatic, "auto"});
TIMITSEG_ENUM_NAMES(DurationModel, 2, {DurationModel::table, "table"}, {DurationModel::lognormal, "lognormal"});
TIMITSEG_ENUM_NAMES(DecodeMode, 2, {DecodeMode::viterbi, "viterbi"}, {DecodeMode::posterior, "posterior"});
TIMITSEG_ENUM_NAMES(Supervision, 3, {Supervision::automatic, "auto"}, {Supervision::segments, "segments"},
                    {Supervision::transcript, "transcript"});
TIMITSEG_ENUM_NAMES(CmvnMode, 3, {CmvnMode::global, "global"}, {CmvnMode::utterance, "utterance"}, {CmvnMode::speaker, "speaker"});
TIMITSEG_ENUM_NAMES(LrSchedule, 3, {LrSchedule::cosine, "cosine"}, {LrSchedule::cosine_epoch, "cosine_epoch"},
                    {LrSchedule::constant, "constant"});
TIMITSEG_ENUM_NAMES(DeviceSetting, 3, {DeviceSetting::cpu, "cpu"}, {DeviceSetting::cuda, "cuda"},
                    {DeviceSetting::automatic, "auto"});
TIMITSEG_ENUM_NAMES(RnnAlgo, 5, {RnnAlgo::standard, "standard"}, {RnnAlgo::persist_static, "persist_static"},
                    {RnnAlgo::persist_dynamic, "persist_dynamic"}, {RnnAlgo::fused, "fused"},
                    {RnnAlgo::automatic, "auto"});
TIMITSEG_ENUM_NAMES(ExitAction, 3, {ExitAction::throw_exception, "throw"}, {ExitAction::kill, "kill"},
                    {ExitAction::hang, "hang"});
// The machinery is common/'s (common/enum_names.h); config/ and its callers name it as before.
using common::EnumNames;
using common::enum_choices;
using common::enum_value;
using common::parse_enum;
using common::to_string;

}  // namespace timitseg::config
