// Executor selection, and helpers shared by every executor.
#include "model/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include <Eigen/Core>

#include "common/cuda.h"
#include "common/safetensors.h"
#include "crf/posterior.h"
#include "model/cpu/cpu_executor.h"
#include "model/cpu/network.h"  // set_default_threads
#ifdef TIMITSEG_HAVE_CUDA  // the GPU executor is built (model/cuda/)
#include "model/cuda/cuda_executor.h"
#endif

namespace timitseg::model {

const char* device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

int set_threads(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The CPU encoder's own tasks (model/cpu/network.h); Eigen stays single-threaded.
  // Under a lock: `compare --jobs N` trains on several threads at once, and
  // Eigen's thread setting is a plain static.
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  set_default_threads(n);
  Eigen::setNbThreads(1);
  return n;
}

Device resolve_device(DeviceSetting device, const std::string& hint) {
  switch (device) {
    case DeviceSetting::cpu:
      return Device::cpu;
    case DeviceSetting::cuda:
      cuda::require_device(hint.empty() ? "; train on the CPU with train.device=cpu or auto (or --device cpu)" : hint);
      return Device::cuda;
    case DeviceSetting::automatic:
      return cuda::device_count() > 0 ? Device::cuda : Device::cpu;
  }
  throw std::logic_error("resolve_device: not a DeviceSetting");
}

std::unique_ptr<Executor> make_executor(Device device, const ModelDims& dims, const ExecutorOptions& options) {
  if (device == Device::cpu) return make_cpu_executor(dims, options);
#ifdef TIMITSEG_HAVE_CUDA
  cuda::require_device("; train on the CPU with train.device=cpu or auto (or --device cpu)");
  return make_cuda_executor(dims, options);
#else
  throw std::runtime_error(cuda::no_device_message());
#endif
}

AllreduceTiming time_gradient_allreduce(Device device, dist::Communicator& world, size_t n, int reps) {
  if (reps < 1) throw std::invalid_argument("time_gradient_allreduce: reps must be >= 1");
  if (device == Device::cuda) {
#ifdef TIMITSEG_HAVE_CUDA
    return cuda_allreduce_timing(world, n, reps);
#endif
  }
  std::vector<float> buf(n, 0.f);
  for (int i = 0; i < 3; ++i) world.allreduce_sum(buf.data(), n, "the all-reduce timing");
  world.barrier("the all-reduce timing");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) world.allreduce_sum(buf.data(), n, "the all-reduce timing");
  AllreduceTiming t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  t.seconds_queued = t.seconds;
  t.method = "mpi";
  return t;
}

crf::HostResult posterior_decode_on_host(crf::Session& session, const crf::Dims& dims, const crf::Params& p,
                                         const int32_t* labels) {
  crf::HostRunOptions opt;
  opt.gradients = true;  // d log Z / d cum (labels == nullptr, scale 1)
  opt.viterbi = false;
  crf::HostResult g = session.run_host(dims, p, nullptr, opt);
  crf::HostResult r;
  if (labels) {  // log Z and the gold score
    crf::HostRunOptions lo;
    lo.gradients = false;
    lo.viterbi = false;
    r = session.run_host(dims, p, labels, lo);
  } else {
    r.log_z = std::move(g.log_z);
  }
  std::vector<double> marginals(static_cast<size_t>(dims.B) * dims.T * dims.C);
  crf::frame_marginals(dims, g.grad_cum_scores.data(), p.lengths, marginals.data());
  r.segments = crf::posterior_segments(dims, marginals.data(), p.lengths);
  return r;
}

std::pair<double, double> crf_param_maxima(const ParamLayout& layout, const std::vector<float>& params) {
  auto maxabs = [&](const std::string& n) {
    const ParamInfo& p = layout.get(n);
    double m = 0;
    for (size_t i = 0; i < p.size; ++i) m = std::max(m, std::abs(double(params[p.offset + i])));
    return m;
  };
  // crf.duration_model = lognormal: the table is derived (its tails are large by design); its 3 x C parameters drift
  return {maxabs("crf.transition"),
          maxabs(layout.dims().duration_lognormal ? "crf.duration_lognormal" : "crf.duration_bias")};
}

void write_replay(const std::string& path, const ParamLayout& layout, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum) {
  const ModelDims& d = layout.dims();
  const int64_t B = batch.input.B, T = batch.input.T, C = d.num_classes, K = d.max_duration;
  auto P = [&](const char* name) { return params.data() + layout.get(name).offset; };
  st::File f;
  f.tensors["cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, cum);
  f.tensors["transition"] = st::Tensor::from<float>({C, C}, P("crf.transition"));
  f.tensors["duration_bias"] = st::Tensor::from<float>({K, C}, P("crf.duration_bias"));
  f.tensors["start"] = st::Tensor::from<float>({C}, P("crf.start"));
  f.tensors["end"] = st::Tensor::from<float>({C}, P("crf.end"));
  f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, batch.input.lengths);
  f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, batch.labels);
  std::string ids;
  for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : " ") + id;
  f.metadata["utterance_ids"] = ids;
  st::save(path, f);
}

}  // namespace timitseg::model
