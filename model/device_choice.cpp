// The `auto` values of train.device, train.rnn_algo and crf.backend (model/device_choice.h).
#include "model/device_choice.h"

#include <spdlog/spdlog.h>

#include "common/cuda.h"
#include "model/executor.h"
#ifdef TIMITSEG_HAVE_CUDA
#include "model/cuda/lstm_fused.h"
#endif

namespace timitseg::model {

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

std::string choose_device(const std::string& device, const DeviceFacts& facts) {
  if (device != "auto") return device;
  return facts.gpus > 0 ? "cuda" : "cpu";
}

std::string choose_rnn_algo(const std::string& rnn_algo, const std::string& device, int per_direction,
                            const DeviceFacts& facts) {
  if (rnn_algo != "auto") return rnn_algo;
  const bool fused_size = per_direction == 64 || per_direction == 128 || per_direction == 256;
  return device == "cuda" && facts.cc_major == 9 && fused_size ? "fused" : "standard";
}

std::string choose_crf_backend(const std::string& crf_backend, const std::string& device) {
  if (crf_backend != "auto") return crf_backend;
  return device == "cuda" ? "cuda" : "cpu";
}

DeviceChoice choose_all(const Config& cfg, const DeviceFacts& facts, const std::string& device_override) {
  const std::string asked = device_override.empty() ? to_string(cfg.train_device) : device_override;
  const int H = cfg.model_hidden_dim / 2;
  DeviceChoice c;
  c.device = choose_device(asked, facts);
  c.rnn_algo = choose_rnn_algo(to_string(cfg.train_rnn_algo), c.device, H, facts);
  c.crf_backend = choose_crf_backend(to_string(cfg.crf_backend), c.device);
  const std::string cc = std::to_string(facts.cc_major) + "." + std::to_string(facts.cc_minor);
  if (asked == "auto")
    c.picks.push_back("train.device = auto: " + c.device + " (" +
                      (c.device == "cuda" ? facts.gpu_name : facts.no_gpu_reason.empty() ? "no CUDA device"
                                                                                         : facts.no_gpu_reason) +
                      ")");
  if (cfg.train_rnn_algo == RnnAlgo::automatic) {
    std::string why;
    if (c.device != "cuda") why = "on the CPU the GPU recurrence is not used";
    else if (c.rnn_algo == "fused") why = "the own Hopper kernel: compute capability " + cc;
    else if (facts.cc_major != 9) why = "cuDNN: compute capability " + cc + ", the fused kernel needs 9.x";
    else why = "cuDNN: " + std::to_string(H) + " units per direction, the fused kernel has 64, 128, 256";
    c.picks.push_back("train.rnn_algo = auto: " + c.rnn_algo + " (" + why + ")");
  }
  if (cfg.crf_backend == CrfBackendSetting::automatic)
    c.picks.push_back("crf.backend = auto: " + c.crf_backend + (c.device == "cuda" ? " (on the GPU)" : " (on the CPU)"));
  return c;
}

DeviceChoice resolve_choices(const Config& cfg, bool log, const std::string& device_override, const std::string& hint) {
  const std::string asked = device_override.empty() ? to_string(cfg.train_device) : device_override;
  if (asked == "cuda") resolve_device("cuda", hint);  // no GPU: one line naming the way out
  else if (asked != "cpu" && asked != "auto") resolve_device(asked);  // unknown: resolve_device's error
  DeviceChoice c = choose_all(cfg, probe_device_facts(), device_override);
#ifdef TIMITSEG_HAVE_CUDA
  if (cfg.train_rnn_algo == RnnAlgo::automatic && c.rnn_algo == "fused") {
    std::string why;
    if (!fused::supported(cfg.model_hidden_dim / 2, &why)) {
      c.rnn_algo = "standard";
      for (std::string& p : c.picks)
        if (p.rfind("train.rnn_algo", 0) == 0) p = "train.rnn_algo = auto: standard (cuDNN: the fused kernel cannot run here: " + why + ")";
    }
  }
#endif
  if (log)
    for (const std::string& p : c.picks) spdlog::info("{}", p);
  return c;
}

Config with_choices(const Config& cfg, const DeviceFacts& facts) {
  const DeviceChoice c = choose_all(cfg, facts);
  Config out = cfg;
  parse_enum(c.device, &out.train_device);  // the resolved words are words of the keys
  parse_enum(c.rnn_algo, &out.train_rnn_algo);
  parse_enum(c.crf_backend, &out.crf_backend);
  return out;
}

int fused_grid_ctas(int B, int H) { return fused::grid_ctas(B, H); }

}  // namespace timitseg::model
