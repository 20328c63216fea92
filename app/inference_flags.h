// The inference flags that evaluate, decode and align share (--crf-backend,
// --device, --phone-bonus, --decode, --batch-size, --threads), added by one
// function with one help text each and the ranges of settings/limits.h. A
// command names the flags it has (`which`) and where each one is read into;
// it may add them in several calls to keep its own order in --help.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "app/enum_flags.h"
#include "config/config_enums.h"
#include "crf/backend_kind.h"
#include "settings/limits.h"

namespace timitseg::app {

// Where each flag is read into; a null pointer = the command lacks it.
struct InferenceFlags {
  std::optional<crf::BackendKind>* backend = nullptr;  // --crf-backend
  config::DeviceSetting* device = nullptr;            // --device
  std::optional<double>* phone_bonus = nullptr;       // --phone-bonus
  std::optional<config::DecodeMode>* decode = nullptr;  // --decode
  int* batch_size = nullptr;                          // --batch-size
  int* threads = nullptr;                             // --threads
};

// The flags of one add_inference_flags call (or-ed).
enum InferenceFlag : unsigned {
  kBackendFlag = 1u << 0,
  kDeviceFlag = 1u << 1,
  kPhoneBonusFlag = 1u << 2,
  kDecodeFlag = 1u << 3,
  kBatchSizeFlag = 1u << 4,
  kThreadsFlag = 1u << 5,
};

// What the command does with the scores: Viterbi decoding (evaluate, decode)
// or forced alignment (align); it words --crf-backend's and --batch-size's help.
enum class InferenceUse { decoding, alignment };

// Adds the flags of `which` to `cmd`, in the order of InferenceFlag.
inline void add_inference_flags(CLI::App* cmd, const InferenceFlags& f, unsigned which, InferenceUse use) {
  const bool decoding = use == InferenceUse::decoding;
  if ((which & kBackendFlag) && f.backend)
    add_backend_option(cmd, "--crf-backend", f.backend,
                       std::string(decoding ? "CRF backend for Viterbi" : "CRF backend") +
                           " (default: cuda on the GPU, else the checkpoint's crf.backend, cpu for cuda)");
  if ((which & kDeviceFlag) && f.device)
    add_enum_option<config::DeviceSetting>(cmd, "--device", f.device,
                                          "cpu, cuda or auto (default auto: the GPU when one is present)");
  if ((which & kPhoneBonusFlag) && f.phone_bonus)
    cmd->add_option("--phone-bonus", *f.phone_bonus,
                    "Log-score added at each change of label in Viterbi decoding (HTK's insertion log-probability, "
                    "for phones): > 0 decodes more, shorter phones, < 0 fewer; in " +
                        limits::to_string(limits::kPhoneBonus) + " (default: the checkpoint's crf.phone_bonus)");
  if ((which & kDecodeFlag) && f.decode)
    add_enum_option<config::DecodeMode>(
        cmd, "--decode", f.decode,
        "viterbi (the best segmentation) or posterior (each frame takes its most probable label under the "
        "CRF's marginals; --phone-bonus does not apply) (default: the checkpoint's crf.decode)");
  if ((which & kBatchSizeFlag) && f.batch_size)
    cmd->add_option("--batch-size", *f.batch_size,
                    decoding ? "Utterances per decoding batch" : "Utterances per alignment batch")
        ->check(CLI::Range(limits::kBatchSize.lo, limits::kBatchSize.hi))
        ->capture_default_str();
  if ((which & kThreadsFlag) && f.threads)
    cmd->add_option("--threads", *f.threads, "CPU threads (0 = all cores)")
        ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi))
        ->capture_default_str();
}

}  // namespace timitseg::app
