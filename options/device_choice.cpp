// The `auto` values of train.device, train.rnn_algo and crf.backend (options/device_choice.h).
#include "options/device_choice.h"

#include <spdlog/spdlog.h>

#include "common/cuda.h"
#include "model/executor.h"
#include "model/fused_lstm.h"
#include "settings/limits.h"

namespace timitseg::options {

DeviceFacts probe_device_facts() {
  DeviceFacts f;
  f.gpus = cuda::device_count();
  if (f.gpus == 0) {
    f.no_gpu_reason = cuda::no_device_message();
    return f;
  }
  try {
    cuda::compute_capability(&f.cc_major, &f.cc_minor);
    f.gpu_name = cuda::device_name();
  } catch (const std::exception& e) {
    f.gpu_name = std::string("(unknown: ") + e.what() + ")";
  }
  return f;
}

model::Device choose_device(config::DeviceSetting device, const DeviceFacts& facts) {
  if (device == config::DeviceSetting::cpu) return model::Device::cpu;
  if (device == config::DeviceSetting::cuda) return model::Device::cuda;
  return facts.gpus > 0 ? model::Device::cuda : model::Device::cpu;
}

config::RnnAlgo choose_rnn_algo(config::RnnAlgo rnn_algo, model::Device device, int per_direction,
                                const DeviceFacts& facts) {
  if (rnn_algo != config::RnnAlgo::automatic) return rnn_algo;
  const bool fused_size = limits::fused_lstm_units(per_direction);
  return device == model::Device::cuda && facts.cc_major == 9 && fused_size ? config::RnnAlgo::fused : config::RnnAlgo::standard;
}

crf::BackendKind backend_kind(config::CrfBackendSetting crf_backend) {
  switch (crf_backend) {
    case config::CrfBackendSetting::reference: return crf::BackendKind::reference;
    case config::CrfBackendSetting::cpu: return crf::BackendKind::cpu;
    case config::CrfBackendSetting::cuda: return crf::BackendKind::cuda;
    case config::CrfBackendSetting::automatic: break;
  }
  throw std::logic_error("backend_kind: crf.backend auto is resolved by choose_crf_backend first");
}

config::CrfBackendSetting backend_setting(crf::BackendKind kind) {
  switch (kind) {
    case crf::BackendKind::reference: return config::CrfBackendSetting::reference;
    case crf::BackendKind::cpu: return config::CrfBackendSetting::cpu;
    case crf::BackendKind::cuda: return config::CrfBackendSetting::cuda;
  }
  throw std::logic_error("backend_setting: not a BackendKind");
}

config::DeviceSetting device_setting(model::Device device) {
  return device == model::Device::cuda ? config::DeviceSetting::cuda : config::DeviceSetting::cpu;
}

crf::BackendKind choose_crf_backend(config::CrfBackendSetting crf_backend, model::Device device) {
  if (crf_backend != config::CrfBackendSetting::automatic) return backend_kind(crf_backend);
  return device == model::Device::cuda ? crf::BackendKind::cuda : crf::BackendKind::cpu;
}

DeviceChoice choose_all(const config::Config& cfg, const DeviceFacts& facts, std::optional<config::DeviceSetting> device_override) {
  const config::DeviceSetting asked = device_override.value_or(cfg.train_device);
  const int H = cfg.model_hidden_dim / 2;
  DeviceChoice c;
  c.device = choose_device(asked, facts);
  c.rnn_algo = choose_rnn_algo(cfg.train_rnn_algo, c.device, H, facts);
  c.crf_backend = choose_crf_backend(cfg.crf_backend, c.device);
  const bool gpu = c.device == model::Device::cuda;
  const std::string cc = std::to_string(facts.cc_major) + "." + std::to_string(facts.cc_minor);
  if (asked == config::DeviceSetting::automatic)
    c.picks.push_back(std::string("train.device = auto: ") + model::device_name(c.device) + " (" +
                      (gpu ? facts.gpu_name : facts.no_gpu_reason.empty() ? "no CUDA device" : facts.no_gpu_reason) +
                      ")");
  if (cfg.train_rnn_algo == config::RnnAlgo::automatic) {
    std::string why;
    if (!gpu) why = "on the CPU the GPU recurrence is not used";
    else if (c.rnn_algo == config::RnnAlgo::fused) why = "the own Hopper kernel: compute capability " + cc;
    else if (facts.cc_major != 9) why = "cuDNN: compute capability " + cc + ", the fused kernel needs 9.x";
    else why = "cuDNN: " + std::to_string(H) + " units per direction, the fused kernel has 64, 128, 256";
    c.picks.push_back(std::string("train.rnn_algo = auto: ") + to_string(c.rnn_algo) + " (" + why + ")");
  }
  if (cfg.crf_backend == config::CrfBackendSetting::automatic)
    c.picks.push_back(std::string("crf.backend = auto: ") + crf::to_string(c.crf_backend) +
                      (gpu ? " (on the GPU)" : " (on the CPU)"));
  return c;
}

DeviceChoice resolve_choices(const config::Config& cfg, bool log, std::optional<config::DeviceSetting> device_override,
                             const std::string& hint) {
  const config::DeviceSetting asked = device_override.value_or(cfg.train_device);
  if (asked == config::DeviceSetting::cuda) model::resolve_device(asked, hint);  // no GPU: one line naming the way out
  DeviceChoice c = choose_all(cfg, probe_device_facts(), device_override);
#ifdef TIMITSEG_HAVE_CUDA
  if (cfg.train_rnn_algo == config::RnnAlgo::automatic && c.rnn_algo == config::RnnAlgo::fused) {
    std::string why;
    if (!model::fused_lstm_supported(cfg.model_hidden_dim / 2, &why)) {
      c.rnn_algo = config::RnnAlgo::standard;
      for (std::string& p : c.picks)
        if (p.rfind("train.rnn_algo", 0) == 0) p = "train.rnn_algo = auto: standard (cuDNN: the fused kernel cannot run here: " + why + ")";
    }
  }
#endif
  if (log)
    for (const std::string& p : c.picks) spdlog::info("{}", p);
  return c;
}

config::Config with_choices(const config::Config& cfg, const DeviceFacts& facts) {
  const DeviceChoice c = choose_all(cfg, facts);
  config::Config out = cfg;
  out.train_device = device_setting(c.device);
  out.train_rnn_algo = c.rnn_algo;
  out.crf_backend = backend_setting(c.crf_backend);
  return out;
}

}  // namespace timitseg::options
