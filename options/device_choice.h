// The `auto` values of train.device, train.rnn_algo and crf.backend
// (docs/config.md "auto"): what each resolves to on this machine.
//
//   train.device   auto -> cuda when a CUDA device is present, else cpu
//   train.rnn_algo auto -> fused on the GPU of compute capability 9.x (Hopper,
//                          sm_90) when the model's units per direction are a
//                          size the fused kernel has (64, 128, 256), else
//                          standard (cuDNN); on the CPU it is not used and
//                          resolves to standard
//   crf.backend    auto -> cuda on the GPU, cpu on the CPU
//
// An explicit value is kept as given. The choose_* functions are pure (the
// machine comes in as DeviceFacts, so tests can pose as any GPU);
// resolve_choices() probes the machine, resolves a Config and logs one info
// line per `auto` it resolved. The saved config (config.yaml, checkpoints)
// keeps `auto`; run.json records the resolved values (train/run_folder.h).
//
// In options/, the room above model/, because the picks are model/'s own
// types (model::Device) and checks (resolve_device, the fused kernel's
// fused_lstm_supported); config/ below model/ holds only the settings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "crf/backend_kind.h"
#include "config/config.h"
#include "model/encoder.h"

namespace timitseg::options {

// The machine as the `auto` values see it: its first CUDA device.
struct DeviceFacts {
  int gpus = 0;                    // CUDA devices (0: none, no driver, or a build without CUDA)
  int cc_major = 0, cc_minor = 0;  // compute capability of the current device (when gpus > 0)
  std::string gpu_name;            // "NVIDIA H100 80GB HBM3" (when gpus > 0)
  std::string no_gpu_reason;       // cuda::no_device_message() (when gpus == 0)
};
// This machine's facts; never throws.
DeviceFacts probe_device_facts();

// auto -> cuda when facts.gpus > 0, else cpu; cpu and cuda as they are.
model::Device choose_device(config::DeviceSetting device, const DeviceFacts& facts);
// auto -> fused when device is cuda, facts.cc_major == 9 and per_direction
// is 64, 128 or 256, else standard; the others unchanged.
config::RnnAlgo choose_rnn_algo(config::RnnAlgo rnn_algo, model::Device device, int per_direction,
                                const DeviceFacts& facts);
// auto -> cuda when device is cuda, else cpu; the others as they are.
crf::BackendKind choose_crf_backend(config::CrfBackendSetting crf_backend, model::Device device);
// The kind of an explicit crf.backend (reference, cpu, cuda); auto throws std::logic_error (choose it first).
crf::BackendKind backend_kind(config::CrfBackendSetting crf_backend);
// The settings that name a resolved choice (cuda -> DeviceSetting::cuda, ...): a config of resolved values.
config::CrfBackendSetting backend_setting(crf::BackendKind kind);
config::DeviceSetting device_setting(model::Device device);

// One run's device choices, resolved (their words: device_name, to_string).
struct DeviceChoice {
  model::Device device = model::Device::cpu;
  config::RnnAlgo rnn_algo = config::RnnAlgo::standard;                   // never automatic
  crf::BackendKind crf_backend = crf::BackendKind::cpu;  // reference | cpu | cuda
  // One line per `auto` resolved: "train.device = auto: cuda (NVIDIA H100 80GB HBM3)".
  std::vector<std::string> picks;
};

// The choices of cfg on the machine of `facts` (pure): explicit values kept,
// `auto` resolved. device_override (when set): used instead of
// cfg.train_device (evaluate --device, replay-step --device).
DeviceChoice choose_all(const config::Config& cfg, const DeviceFacts& facts,
                        std::optional<config::DeviceSetting> device_override = std::nullopt);

// The same on this machine: explicit cuda without a CUDA device throws
// resolve_device's one line (with `hint`), a fused pick that the kernel cannot
// run here (model/fused_lstm.h fused_lstm_supported()) falls back to standard with
// the reason, and each `auto` pick is logged (one info line each) when `log`.
DeviceChoice resolve_choices(const config::Config& cfg, bool log = true,
                             std::optional<config::DeviceSetting> device_override = std::nullopt, const std::string& hint = "");

// cfg with each `auto` of the three keys replaced by its pick on `facts`
// (explicit values unchanged): the form `compare` compares, so that a run
// saved with `auto` and one asking `cpu` on the CPU are the same run.
config::Config with_choices(const config::Config& cfg, const DeviceFacts& facts);

}  // namespace timitseg::options
