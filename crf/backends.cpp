// Backend registry, host-side validation, gold segmentation, and the host
// runner that drives any backend (host or device) from host arrays.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "crf/cpu/cpu.h"
#include "crf/detail.h"
#include "crf/reference/reference.h"
#include "crf/semicrf.h"

namespace timitseg::crf {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "reference") return reference::make_reference_backend();
  if (name == "cpu") return cpu::make_cpu_backend();
  if (name == "cuda") {
#ifdef TIMITSEG_HAVE_CUDA
    return make_cuda_backend();
#else
    throw std::runtime_error("cuda backend: this build of timitseg has no CUDA support (rebuild with -DTIMITSEG_CUDA=ON)");
#endif
  }
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown crf backend '" + name + "' (known: " + known + ")");
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names{"reference", "cpu"};
#ifdef TIMITSEG_HAVE_CUDA
  names.push_back("cuda");
#endif
  return names;
}

void validate_host(const Dims& dims, const Params& p, const int32_t* labels) {
  detail::validate_inputs<float>(dims, p.cum_scores, p.transition, p.duration_bias, p.start, p.end, p.lengths,
                                 labels);
}

std::vector<Segment> gold_segments(const int32_t* labels, int32_t length, int64_t K, int32_t batch) {
  std::vector<Segment> out;
  detail::for_each_gold_segment(labels, length, K, [&](int64_t u, int64_t d, int64_t c) {
    out.push_back(Segment{batch, static_cast<int32_t>(u), static_cast<int32_t>(d), static_cast<int32_t>(c)});
  });
  return out;
}

std::vector<Segment> collect_segments(const Dims& dims, const int32_t* segments, const int32_t* num_segments) {
  std::vector<Segment> out;
  for (int64_t b = 0; b < dims.B; ++b) {
    const int32_t* rows = segments + b * dims.T * 3;
    if (num_segments[b] < 1 || num_segments[b] > dims.T)
      throw std::runtime_error("crf: viterbi returned " + std::to_string(num_segments[b]) + " segments for utterance " +
                               std::to_string(b) + " (expected 1..T=" + std::to_string(dims.T) + ")");
    for (int32_t i = 0; i < num_segments[b]; ++i)
      out.push_back(Segment{static_cast<int32_t>(b), rows[3 * i], rows[3 * i + 1], rows[3 * i + 2]});
  }
  return out;
}

namespace {

// A buffer in the backend's memory space (host vector or device allocation).
class Buffer {
 public:
  Buffer(bool device, size_t bytes) : device_(device), bytes_(bytes) {
    if (bytes == 0) return;
    if (device_) {
#ifdef TIMITSEG_HAVE_CUDA
      dev_ = device_alloc(bytes);
#else
      throw std::runtime_error("crf: device buffer requested in a build without CUDA");
#endif
    } else {
      host_.resize((bytes + 7) / 8);
    }
  }
  ~Buffer() {
#ifdef TIMITSEG_HAVE_CUDA
    if (dev_) device_free(dev_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() { return bytes_ == 0 ? nullptr : (device_ ? dev_ : static_cast<void*>(host_.data())); }
  template <class T>
  T* as() {
    return static_cast<T*>(get());
  }
  void upload(const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (device_) {
#ifdef TIMITSEG_HAVE_CUDA
      copy_to_device(dev_, src, bytes);
#endif
    } else {
      std::memcpy(get(), src, bytes);
    }
  }
  void download(void* dst, size_t bytes) {
    if (bytes == 0) return;
    if (device_) {
#ifdef TIMITSEG_HAVE_CUDA
      copy_to_host(dst, dev_, bytes);
#endif
    } else {
      std::memcpy(dst, get(), bytes);
    }
  }

 private:
  bool device_;
  size_t bytes_;
  void* dev_ = nullptr;
  std::vector<uint64_t> host_;  // 8-byte aligned
};

}  // namespace

HostResult run_host(Backend& backend, const Dims& dims, const Params& hp, const int32_t* labels,
                    const HostRunOptions& opt) {
  validate_host(dims, hp, labels);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  const bool dev = backend.on_device();
  HostResult r;
  if (!dev) {  // host backend: use the host arrays directly
    std::vector<uint64_t> ws((backend.workspace_bytes(dims) + 7) / 8);
    void* w = ws.empty() ? nullptr : ws.data();
    r.log_z.resize(B);
    if (opt.gradients) {
      r.grad_cum_scores.resize(B * (T + 1) * C);
      r.grad_transition.resize(C * C);
      r.grad_duration_bias.resize(K * C);
      r.grad_start.resize(C);
      r.grad_end.resize(C);
      if (labels) r.gold.resize(B);
      Grads g{r.grad_cum_scores.data(), r.grad_transition.data(), r.grad_duration_bias.data(), r.grad_start.data(),
              r.grad_end.data()};
      backend.backward(dims, hp, labels, opt.scale, r.log_z.data(), labels ? r.gold.data() : nullptr, g, w);
    } else {
      backend.log_partition(dims, hp, r.log_z.data(), w);
      if (labels) {
        r.gold.resize(B);
        backend.gold_score(dims, hp, labels, r.gold.data(), w);
      }
    }
    if (opt.viterbi) {
      r.viterbi_score.resize(B);
      std::vector<int32_t> segs(B * T * 3), nseg(B);
      backend.viterbi(dims, hp, r.viterbi_score.data(), segs.data(), nseg.data(), w);
      r.segments = collect_segments(dims, segs.data(), nseg.data());
    }
    if (opt.boundary_posteriors) {
      r.boundary_posteriors.resize(B * (T + 1));
      backend.boundary_posteriors(dims, hp, r.boundary_posteriors.data(), w);
    }
    return r;
  }
  // Device backend: copy inputs, run, copy results back.
  const size_t f = sizeof(float);
  Buffer cum(true, B * (T + 1) * C * f), A(true, C * C * f), D(true, K * C * f), s(true, hp.start ? C * f : 0),
      e(true, hp.end ? C * f : 0), len(true, B * sizeof(int32_t)), lab(true, labels ? B * T * sizeof(int32_t) : 0),
      ws(true, backend.workspace_bytes(dims));
  // Padding rows of cum_scores may hold anything on the host; only valid rows
  // were validated, so copy a sanitized version (padding zeroed).
  std::vector<float> cum_host(hp.cum_scores, hp.cum_scores + B * (T + 1) * C);
  for (int64_t b = 0; b < B; ++b)
    std::fill(cum_host.begin() + b * (T + 1) * C + (hp.lengths[b] + 1) * C, cum_host.begin() + (b + 1) * (T + 1) * C,
              0.0f);
  cum.upload(cum_host.data(), cum_host.size() * f);
  A.upload(hp.transition, C * C * f);
  D.upload(hp.duration_bias, K * C * f);
  if (hp.start) s.upload(hp.start, C * f);
  if (hp.end) e.upload(hp.end, C * f);
  len.upload(hp.lengths, B * sizeof(int32_t));
  if (labels) lab.upload(labels, B * T * sizeof(int32_t));
  Params dp{cum.as<float>(), A.as<float>(), D.as<float>(), hp.start ? s.as<float>() : nullptr,
            hp.end ? e.as<float>() : nullptr, len.as<int32_t>()};
  const int32_t* dlab = labels ? lab.as<int32_t>() : nullptr;
  Buffer lz(true, B * sizeof(double)), gold(true, labels ? B * sizeof(double) : 0);
  r.log_z.resize(B);
  if (opt.gradients) {
    Buffer gc(true, B * (T + 1) * C * f), ga(true, C * C * f), gd(true, K * C * f), gs(true, C * f), ge(true, C * f);
    Grads g{gc.as<float>(), ga.as<float>(), gd.as<float>(), gs.as<float>(), ge.as<float>()};
    backend.backward(dims, dp, dlab, opt.scale, lz.as<double>(), labels ? gold.as<double>() : nullptr, g, ws.get());
    backend.synchronize();
    r.grad_cum_scores.resize(B * (T + 1) * C);
    r.grad_transition.resize(C * C);
    r.grad_duration_bias.resize(K * C);
    r.grad_start.resize(C);
    r.grad_end.resize(C);
    gc.download(r.grad_cum_scores.data(), r.grad_cum_scores.size() * f);
    ga.download(r.grad_transition.data(), r.grad_transition.size() * f);
    gd.download(r.grad_duration_bias.data(), r.grad_duration_bias.size() * f);
    gs.download(r.grad_start.data(), C * f);
    ge.download(r.grad_end.data(), C * f);
  } else {
    backend.log_partition(dims, dp, lz.as<double>(), ws.get());
    if (labels) backend.gold_score(dims, dp, dlab, gold.as<double>(), ws.get());
    backend.synchronize();
  }
  lz.download(r.log_z.data(), B * sizeof(double));
  if (labels) {
    r.gold.resize(B);
    gold.download(r.gold.data(), B * sizeof(double));
  }
  if (opt.viterbi) {
    Buffer vs(true, B * sizeof(double)), segs(true, B * T * 3 * sizeof(int32_t)), nseg(true, B * sizeof(int32_t));
    backend.viterbi(dims, dp, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>(), ws.get());
    backend.synchronize();
    r.viterbi_score.resize(B);
    std::vector<int32_t> hs, hn;
    hs.resize(static_cast<size_t>(B * T * 3));
    hn.resize(static_cast<size_t>(B));
    vs.download(r.viterbi_score.data(), B * sizeof(double));
    segs.download(hs.data(), hs.size() * sizeof(int32_t));
    nseg.download(hn.data(), B * sizeof(int32_t));
    r.segments = collect_segments(dims, hs.data(), hn.data());
  }
  if (opt.boundary_posteriors) {
    Buffer bp(true, B * (T + 1) * sizeof(double));
    backend.boundary_posteriors(dims, dp, bp.as<double>(), ws.get());
    backend.synchronize();
    r.boundary_posteriors.resize(B * (T + 1));
    bp.download(r.boundary_posteriors.data(), r.boundary_posteriors.size() * sizeof(double));
  }
  return r;
}

}  // namespace timitseg::crf
