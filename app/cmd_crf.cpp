// Subcommands of the crf layer:
//   timitseg crf replay IN.safetensors --backend NAME --out OUT.safetensors
//   timitseg bench crf --batch B --frames T --max-duration K --classes C --backend NAME [--json]
// See docs/crf.md.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.h"
#include "crf/cpu/cpu.h"
#include "crf/cumsum.h"
#include "crf/semicrf.h"
#include "common/safetensors.h"

namespace timitseg::app {
namespace {

using crf::Dims;
using crf::HostResult;
using crf::Params;

std::unique_ptr<crf::Backend> backend_by_name(const std::string& name, int threads) {
  if (name == "cpu") return crf::cpu::make_cpu_backend(threads);
  return crf::make_backend(name);
}

// ---- crf replay ---------------------------------------------------------------

struct ReplayOptions {
  std::string in, out, backend = "cpu";
  int threads = 0;
};

// Integer tensor (I32 or I64) of the expected shape as int32; values that do
// not fit int32 are reported with their index.
std::vector<int32_t> int32_tensor(const st::File& f, const std::string& name, const std::vector<int64_t>& shape) {
  const st::Tensor& t = f.get(name);
  if (t.dtype != st::DType::I32 && t.dtype != st::DType::I64)
    throw std::runtime_error(f.path + ": tensor '" + name + "' has dtype " + st::dtype_name(t.dtype) +
                             ", expected I32 or I64");
  if (t.shape != shape) {
    st::Tensor want;
    want.shape = shape;
    throw std::runtime_error(f.path + ": tensor '" + name + "' has shape " + t.shape_str() + ", expected " +
                             want.shape_str());
  }
  const std::vector<int64_t> v = t.to_int64();
  std::vector<int32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < std::numeric_limits<int32_t>::min() || v[i] > std::numeric_limits<int32_t>::max())
      throw std::runtime_error(f.path + ": " + name + "[" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                               " does not fit in int32");
    out[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

// --threads N: 0 = all hardware threads, negative is an error.
void check_threads(const char* cmd, int threads) {
  if (threads < 0)
    throw std::invalid_argument(std::string(cmd) + ": --threads must be >= 0 (0 = all hardware threads), got " +
                                std::to_string(threads));
}

// OUT must not be a directory nor the input file itself (replay would
// overwrite its own input). Checked before any work.
void check_output_path(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (ec || !fs::exists(st)) return;  // a new file: st::save reports problems with its folder
  if (fs::is_directory(st))
    throw std::invalid_argument("crf replay: --out " + out +
                                " is a directory; give a file name, e.g. --out " +
                                (fs::path(out) / "replay.safetensors").string());
  if (fs::equivalent(in, out, ec) && !ec)
    throw std::invalid_argument("crf replay: --out " + out + " is the input file " + in +
                                " itself; refusing to overwrite the input (choose another OUT)");
}

void run_replay(const ReplayOptions& o) {
  check_threads("crf replay", o.threads);
  check_output_path(o.in, o.out);
  const st::File f = st::load(o.in);
  const st::Tensor& cum_t = f.get("cum_scores");
  if (cum_t.dtype != st::DType::F32 || cum_t.shape.size() != 3 || cum_t.shape[1] < 2)
    throw std::runtime_error(o.in + ": tensor 'cum_scores' must be F32 [B, T+1, C] with T >= 1, got " +
                             st::dtype_name(cum_t.dtype) + " " + cum_t.shape_str());
  Dims dims;
  dims.B = cum_t.shape[0];
  dims.T = cum_t.shape[1] - 1;
  dims.C = cum_t.shape[2];
  const st::Tensor& dur_t = f.get("duration_bias");
  if (dur_t.shape.size() != 2)
    throw std::runtime_error(o.in + ": tensor 'duration_bias' must be F32 [K, C], got shape " + dur_t.shape_str());
  dims.K = dur_t.shape[0];
  const std::vector<float> cum = cum_t.to<float>();
  const std::vector<float> A = f.get("transition", st::DType::F32, {dims.C, dims.C}).to<float>();
  const std::vector<float> D = f.get("duration_bias", st::DType::F32, {dims.K, dims.C}).to<float>();
  std::vector<float> s, e;
  if (f.has("start")) s = f.get("start", st::DType::F32, {dims.C}).to<float>();
  if (f.has("end")) e = f.get("end", st::DType::F32, {dims.C}).to<float>();
  const std::vector<int32_t> lengths = int32_tensor(f, "lengths", {dims.B});
  std::vector<int32_t> labels;
  const bool has_labels = f.has("labels");
  if (has_labels) labels = int32_tensor(f, "labels", {dims.B, dims.T});
  const Params p{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(), e.empty() ? nullptr : e.data(),
                 lengths.data()};
  auto backend = backend_by_name(o.backend, o.threads);
  spdlog::info("crf replay: {} B={} T={} K={} C={} labels={} backend={}", o.in, dims.B, dims.T, dims.K, dims.C,
               has_labels ? "yes" : "no", backend->name());
  crf::HostRunOptions ro;
  ro.gradients = has_labels;
  ro.viterbi = true;
  ro.boundary_posteriors = true;
  HostResult r;
  try {
    r = crf::run_host(*backend, dims, p, has_labels ? labels.data() : nullptr, ro);
  } catch (const std::exception& ex) {
    throw std::runtime_error(o.in + ": " + ex.what());
  }

  st::File out;
  out.metadata["producer"] = "timitseg crf replay";
  out.metadata["backend"] = backend->name();
  out.metadata["input"] = o.in;
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  out.tensors["log_partition"] = st::Tensor::from<double>({B}, r.log_z);
  out.tensors["viterbi_score"] = st::Tensor::from<double>({B}, r.viterbi_score);
  std::vector<int32_t> rows;
  for (const crf::Segment& sg : r.segments) rows.insert(rows.end(), {sg.batch, sg.start, sg.duration, sg.label});
  out.tensors["viterbi_segments"] = st::Tensor::from<int32_t>({static_cast<int64_t>(r.segments.size()), 4}, rows);
  out.tensors["boundary_posteriors"] = st::Tensor::from<double>({B, T + 1}, r.boundary_posteriors);
  if (has_labels) {
    std::vector<double> nll(B);
    for (int64_t b = 0; b < B; ++b) nll[b] = r.log_z[b] - r.gold[b];
    out.tensors["gold_score"] = st::Tensor::from<double>({B}, r.gold);
    out.tensors["nll"] = st::Tensor::from<double>({B}, nll);
    out.tensors["grad_cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, r.grad_cum_scores);
    out.tensors["grad_transition"] = st::Tensor::from<float>({C, C}, r.grad_transition);
    out.tensors["grad_duration_bias"] = st::Tensor::from<float>({K, C}, r.grad_duration_bias);
    out.tensors["grad_start"] = st::Tensor::from<float>({C}, r.grad_start);
    out.tensors["grad_end"] = st::Tensor::from<float>({C}, r.grad_end);
    double mean = 0.0;
    for (double v : nll) mean += v / static_cast<double>(B);
    spdlog::info("crf replay: mean NLL {:.6f} over {} utterances", mean, B);
  }
  // Never write non-finite results: name the first offender instead.
  auto check = [&](const char* name, const auto& v) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(static_cast<double>(v[i])))
        throw std::runtime_error(o.in + ": backend " + backend->name() + " produced non-finite " + name + "[" +
                                 std::to_string(i) + "] = " + std::to_string(static_cast<double>(v[i])));
  };
  check("log_partition", r.log_z);
  check("viterbi_score", r.viterbi_score);
  check("gold_score", r.gold);
  check("grad_cum_scores", r.grad_cum_scores);
  check("grad_transition", r.grad_transition);
  check("grad_duration_bias", r.grad_duration_bias);
  check("grad_start", r.grad_start);
  check("grad_end", r.grad_end);
  check("boundary_posteriors", r.boundary_posteriors);
  st::save(o.out, out);
  spdlog::info("crf replay: wrote {} ({} segments)", o.out, r.segments.size());
}

// ---- bench crf -----------------------------------------------------------------

struct BenchOptions {
  int64_t batch = 32, frames = 200, max_duration = 30, classes = 39;
  std::string backend = "cpu";
  int warmup = 1, repeats = 5, threads = 0, check_utterances = 4;
  uint32_t seed = 0;
  bool json = false;
};

// A buffer in the backend's memory space (host, or CUDA device memory through
// the helpers of crf/semicrf.h).
class Mem {
 public:
  Mem(bool device, size_t bytes) : device_(device), bytes_(bytes) {
    if (device_) {
#ifdef TIMITSEG_HAVE_CUDA
      ptr_ = bytes ? crf::device_alloc(bytes) : nullptr;
#else
      throw std::runtime_error("bench crf: device memory requested in a build without CUDA");
#endif
    } else {
      host_.resize((bytes + 7) / 8);
      ptr_ = host_.empty() ? nullptr : host_.data();
    }
  }
  template <class T>
  Mem(bool device, const std::vector<T>& src) : Mem(device, src.size() * sizeof(T)) {
    if (bytes_ == 0) return;
    if (device_) {
#ifdef TIMITSEG_HAVE_CUDA
      crf::copy_to_device(ptr_, src.data(), bytes_);
#endif
    } else {
      std::memcpy(ptr_, src.data(), bytes_);
    }
  }
  ~Mem() {
#ifdef TIMITSEG_HAVE_CUDA
    if (device_ && ptr_) crf::device_free(ptr_);
#endif
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  bool device_;
  size_t bytes_;
  void* ptr_ = nullptr;
  std::vector<uint64_t> host_;
};

struct Inputs {
  Dims dims;
  std::vector<float> cum, A, D, s, e;
  std::vector<int32_t> lengths, labels;
  Params params() const { return Params{cum.data(), A.data(), D.data(), s.data(), e.data(), lengths.data()}; }
};

// Random zero-centered inputs: frame scores ~ N(0,1) through the centered
// cumsum layer, parameters ~ N(0, 0.5^2), every utterance of full length T,
// labels as random runs of 1..2K frames.
Inputs make_inputs(const Dims& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nx(0.0, 1.0), np(0.0, 0.5);
  Inputs in;
  in.dims = dims;
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  in.lengths.assign(B, static_cast<int32_t>(T));
  std::vector<float> x(B * T * C);
  for (float& v : x) v = static_cast<float>(nx(rng));
  in.cum.assign(B * (T + 1) * C, 0.0f);
  crf::centered_cumsum_forward<float>(B, T, C, x.data(), in.lengths.data(), in.cum.data());
  for (int64_t i = 0; i < C * C; ++i) in.A.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < K * C; ++i) in.D.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < C; ++i) in.s.push_back(static_cast<float>(np(rng))), in.e.push_back(static_cast<float>(np(rng)));
  std::uniform_int_distribution<int32_t> ul(0, static_cast<int32_t>(C - 1)), ur(1, static_cast<int32_t>(2 * K));
  in.labels.assign(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T;) {
      const int32_t lab = ul(rng), r = ur(rng);
      for (int32_t i = 0; i < r && t < T; ++i, ++t) in.labels[b * T + t] = lab;
    }
  return in;
}

// The first n utterances of `in` as their own batch.
Inputs head(const Inputs& in, int64_t n) {
  Inputs out = in;
  const int64_t T = in.dims.T, C = in.dims.C;
  out.dims.B = n;
  out.cum.resize(n * (T + 1) * C);
  out.lengths.resize(n);
  out.labels.resize(n * T);
  return out;
}

struct Timing {
  std::string op;
  double median_ms, min_ms;
};

template <class Fn>
Timing time_op(const std::string& op, const BenchOptions& o, crf::Backend& be, Fn&& fn) {
  for (int i = 0; i < o.warmup; ++i) fn(), be.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < o.repeats; ++i) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    be.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  const double median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return Timing{op, median, ms.front()};
}

// max_i |a_i - b_i| / max_i |b_i|  (0 when both are all zero).
template <class T>
double max_rel(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
  return ref > 0 ? diff / ref : diff;
}

// "123456789 bytes (117.7 MiB)"; computed in double so that absurd dims
// cannot overflow.
std::string fmt_bytes(double bytes) {
  const char* unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  char buf[96];
  if (bytes < 9.0e15)
    std::snprintf(buf, sizeof(buf), "%.0f bytes (%.1f %s)", bytes, v, unit[u]);
  else
    std::snprintf(buf, sizeof(buf), "%.3g bytes (%.1f %s)", bytes, v, unit[u]);
  return buf;
}

// Physical memory of this machine in bytes (0 when unknown).
double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// Host memory `bench crf` needs (in double: no overflow for any dims): the
// random inputs [B][T+1][C] etc. plus the frame scores [B][T][C] they are made
// from; for a host backend also the inputs' copies, gradients, Viterbi output
// and the workspace (the reference backend also widens to float64 inside).
// Device memory of the cuda backend is that backend's business (a failed
// cudaMalloc is reported by it).
double bench_host_bytes(const Dims& d, const std::string& backend, bool dev, int threads_option) {
  const double B = static_cast<double>(d.B), T = static_cast<double>(d.T), K = static_cast<double>(d.K),
               C = static_cast<double>(d.C);
  const double params = 4.0 * (C * C + K * C + 2.0 * C);
  const double inputs = 4.0 * B * (T + 1) * C + 4.0 * B * T + 4.0 * B + params;
  const double frames = 4.0 * B * T * C;
  if (dev) return inputs + frames;
  double rest = inputs /* copies */ + 4.0 * B * (T + 1) * C + params /* gradients */ + 12.0 * B * T /* segments */ +
                24.0 * B;
  if (backend == "reference") {
    rest += 24.0 * B * (T + 1) * C + 16.0 * (T + 1) * C + 8.0 * K * C;  // float64 copies, gradients, alpha/beta
  } else {  // cpu layout (crf/cpu/cpu.cpp): shared + per thread + per utterance, float64
    const double hw = threads_option > 0 ? threads_option : std::max(1u, std::thread::hardware_concurrency());
    const double threads = std::max(1.0, std::min(B, hw));
    rest += 8.0 * (2 * C + 2 * C * C + threads * (5 * (T + 1) * C + std::max(K, C) + 2 * C) +
                   B * (C * C + K * C + 2 * C));
  }
  return inputs + std::max(frames, rest);
}

void run_bench_sized(const BenchOptions& o, const Dims& dims, crf::Backend& backend);

void run_bench(const BenchOptions& o) {
  if (o.batch < 1 || o.frames < 1 || o.max_duration < 1 || o.classes < 1)
    throw std::invalid_argument("bench crf: --batch, --frames, --max-duration and --classes must be >= 1");
  if (o.repeats < 1) throw std::invalid_argument("bench crf: --repeats must be >= 1");
  if (o.warmup < 0) throw std::invalid_argument("bench crf: --warmup must be >= 0");
  check_threads("bench crf", o.threads);
  if (o.check_utterances < 0)
    throw std::invalid_argument("bench crf: --check-utterances must be >= 0 (0 = skip the check), got " +
                                std::to_string(o.check_utterances));
  const Dims dims{o.batch, o.frames, o.max_duration, o.classes};
  const std::string dims_str = "B=" + std::to_string(dims.B) + " T=" + std::to_string(dims.T) +
                               " K=" + std::to_string(dims.K) + " C=" + std::to_string(dims.C);
  auto be = backend_by_name(o.backend, o.threads);
  const double need = bench_host_bytes(dims, o.backend, be->on_device(), o.threads), have = physical_memory_bytes();
  if (have > 0 && need > have)
    throw std::runtime_error("bench crf: " + dims_str + " on the " + be->name() + " backend needs about " +
                             fmt_bytes(need) + " of host memory (inputs, gradients and workspace), more than this "
                             "machine's physical memory of " + fmt_bytes(have) +
                             "; use a smaller --batch or --frames");
  try {
    run_bench_sized(o, dims, *be);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error("bench crf: out of host memory for " + dims_str + " on the " + be->name() +
                             " backend (estimated need " + fmt_bytes(need) + " of " + fmt_bytes(have) +
                             " physical); use a smaller --batch or --frames");
  }
}

void run_bench_sized(const BenchOptions& o, const Dims& dims, crf::Backend& backend) {
  crf::Backend* be = &backend;
  const Inputs in = make_inputs(dims, o.seed);
  crf::validate_host(dims, in.params(), in.labels.data());
  const bool dev = be->on_device();
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  // Inputs, outputs and workspace in the backend's memory space, allocated once.
  Mem cum(dev, in.cum), A(dev, in.A), D(dev, in.D), s(dev, in.s), e(dev, in.e), len(dev, in.lengths),
      lab(dev, in.labels);
  Mem ws(dev, be->workspace_bytes(dims));
  Mem lz(dev, B * sizeof(double)), gold(dev, B * sizeof(double)), vs(dev, B * sizeof(double));
  Mem gc(dev, B * (T + 1) * C * sizeof(float)), ga(dev, C * C * sizeof(float)), gd(dev, K * C * sizeof(float)),
      gs(dev, C * sizeof(float)), ge(dev, C * sizeof(float));
  Mem segs(dev, B * T * 3 * sizeof(int32_t)), nseg(dev, B * sizeof(int32_t));
  const Params p{cum.as<float>(), A.as<float>(), D.as<float>(), s.as<float>(), e.as<float>(), len.as<int32_t>()};
  const crf::Grads g{gc.as<float>(), ga.as<float>(), gd.as<float>(), gs.as<float>(), ge.as<float>()};
  spdlog::info("bench crf: backend {} B={} T={} K={} C={} (warm-up {}, repeats {})", be->name(), B, T, K, C, o.warmup,
               o.repeats);
  std::vector<Timing> times;
  times.push_back(time_op("forward", o, *be, [&] { be->log_partition(dims, p, lz.as<double>(), ws.as<void>()); }));
  times.push_back(time_op("forward+backward", o, *be, [&] {
    be->backward(dims, p, lab.as<int32_t>(), 1.0 / static_cast<double>(B), lz.as<double>(), gold.as<double>(), g,
                 ws.as<void>());
  }));
  times.push_back(time_op("viterbi", o, *be, [&] {
    be->viterbi(dims, p, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>(), ws.as<void>());
  }));

  // Check against the reference backend on the first utterances.
  nlohmann::json check = nullptr;
  bool ok = true;
  const int64_t nc = std::min<int64_t>(B, o.check_utterances);
  if (nc > 0) {
    const Inputs sub = head(in, nc);
    crf::HostRunOptions ro;
    ro.scale = 1.0 / static_cast<double>(nc);
    auto ref = crf::make_backend("reference");
    const HostResult want = crf::run_host(*ref, sub.dims, sub.params(), sub.labels.data(), ro);
    const HostResult got = crf::run_host(*be, sub.dims, sub.params(), sub.labels.data(), ro);
    double grad = 0.0;
    grad = std::max(grad, max_rel(got.grad_cum_scores, want.grad_cum_scores));
    grad = std::max(grad, max_rel(got.grad_transition, want.grad_transition));
    grad = std::max(grad, max_rel(got.grad_duration_bias, want.grad_duration_bias));
    grad = std::max(grad, max_rel(got.grad_start, want.grad_start));
    grad = std::max(grad, max_rel(got.grad_end, want.grad_end));
    double logz = 0.0;
    for (int64_t b = 0; b < nc; ++b) {
      const double r = std::fabs(got.log_z[b] - want.log_z[b]) / std::max(std::fabs(want.log_z[b]), 1e-300);
      logz = std::max(logz, std::isfinite(r) ? r : std::numeric_limits<double>::infinity());
    }
    const bool same_segments = got.segments == want.segments;
    ok = logz <= 1e-5 && grad <= 1e-5 && same_segments;
    check = {{"utterances", nc},
             {"log_z_max_rel_err", logz},
             {"grad_max_rel_err", grad},
             {"viterbi_segments_identical", same_segments},
             {"ok", ok}};
  }

  if (o.json) {
    nlohmann::json j;
    j["backend"] = be->name();
    j["batch"] = B, j["frames"] = T, j["max_duration"] = K, j["classes"] = C;
    j["warmup"] = o.warmup, j["repeats"] = o.repeats, j["seed"] = o.seed;
    j["hardware_threads"] = std::thread::hardware_concurrency();
    for (const Timing& t : times)
      j["timings_ms"][t.op] = {{"median", t.median_ms},
                               {"min", t.min_ms},
                               {"frames_per_s", static_cast<double>(B * T) / (t.median_ms / 1000.0)}};
    j["check"] = check;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("bench crf: backend=%s B=%lld T=%lld K=%lld C=%lld, warm-up %d, repeats %d (median, ms)\n",
                be->name().c_str(), static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(K),
                static_cast<long long>(C), o.warmup, o.repeats);
    std::printf("%-18s %12s %12s %14s\n", "operation", "median ms", "min ms", "frames/s");
    for (const Timing& t : times)
      std::printf("%-18s %12.3f %12.3f %14.0f\n", t.op.c_str(), t.median_ms, t.min_ms,
                  static_cast<double>(B * T) / (t.median_ms / 1000.0));
    if (nc > 0)
      std::printf("check vs reference (%lld utterances): log Z max rel err %.3g, grads max rel err %.3g, "
                  "viterbi segments %s: %s\n",
                  static_cast<long long>(nc), check["log_z_max_rel_err"].get<double>(),
                  check["grad_max_rel_err"].get<double>(), check["viterbi_segments_identical"].get<bool>() ? "identical" : "DIFFER",
                  ok ? "ok" : "MISMATCH");
    else
      std::printf("check vs reference: skipped (--check-utterances 0)\n");
  }
  std::fflush(stdout);
  if (!ok)
    throw std::runtime_error("bench crf: backend " + be->name() +
                             " does not match the reference backend (tolerance 1e-5 relative; see the check line)");
}

}  // namespace

void add_crf_commands(CLI::App& app) {
  CLI::App* crf = app.add_subcommand("crf", "Semi-Markov CRF tools (see docs/crf.md)");
  crf->require_subcommand(1);

  auto ro = std::make_shared<ReplayOptions>();
  CLI::App* replay = crf->add_subcommand(
      "replay",
      "Run a semi-CRF batch stored in a safetensors file on any backend and write every result.\n"
      "IN: cum_scores F32 [B,T+1,C], transition F32 [C,C], duration_bias F32 [K,C], optional start/end F32 [C]\n"
      "(absent = zeros), lengths I32|I64 [B], optional labels I32|I64 [B,T].\n"
      "OUT: log_partition F64 [B], viterbi_score F64 [B], viterbi_segments I32 [N,4] rows (batch, start, duration,\n"
      "label), boundary_posteriors F64 [B,T+1]; with labels also gold_score F64 [B], nll F64 [B] and the gradients\n"
      "of sum_b nll_b: grad_cum_scores F32 [B,T+1,C], grad_transition, grad_duration_bias, grad_start, grad_end (F32).\n"
      "On any error OUT is not written.");
  replay->add_option("input", ro->in, "Input safetensors file (IN.safetensors)")->required()->check(CLI::ExistingFile);
  replay->add_option("--backend", ro->backend, "CRF backend: reference | cpu | cuda")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  replay->add_option("--out", ro->out,
                     "Output safetensors file (written atomically, only on success; must not be IN itself nor a "
                     "directory)")
      ->required();
  replay->add_option("--threads", ro->threads, "Threads of the cpu backend, >= 0 (0 = all hardware threads)")
      ->capture_default_str();
  replay->callback([ro] { run_replay(*ro); });

  auto bo = std::make_shared<BenchOptions>();
  CLI::App* bench = bench_command(app)->add_subcommand(
      "crf",
      "Time the semi-CRF forward, forward+backward and Viterbi (median after warm-up) on random zero-centered\n"
      "inputs, then check the backend against the reference backend. Prints a table (or JSON with --json);\n"
      "exits with an error when the check fails. Refuses dims whose host memory (inputs, gradients, workspace)\n"
      "would exceed the machine's physical memory.");
  bench->add_option("--batch,-B", bo->batch, "Batch size B")->capture_default_str();
  bench->add_option("--frames,-T", bo->frames, "Frames per utterance T (every utterance has full length)")
      ->capture_default_str();
  bench->add_option("--max-duration,-K", bo->max_duration, "Maximum segment duration K")->capture_default_str();
  bench->add_option("--classes,-C", bo->classes, "Number of labels C")->capture_default_str();
  bench->add_option("--backend", bo->backend, "CRF backend: reference | cpu | cuda")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  bench->add_option("--warmup", bo->warmup, "Untimed runs of each operation before timing")->capture_default_str();
  bench->add_option("--repeats", bo->repeats, "Timed runs of each operation (the median is reported)")
      ->capture_default_str();
  bench->add_option("--threads", bo->threads, "Threads of the cpu backend, >= 0 (0 = all hardware threads)")
      ->capture_default_str();
  bench->add_option("--check-utterances", bo->check_utterances,
                    "Compare log Z, all gradients and Viterbi with the reference backend on the first N utterances "
                    "(>= 0; 0 = skip the check)")
      ->capture_default_str();
  bench->add_option("--seed", bo->seed, "Seed of the random inputs")->capture_default_str();
  bench->add_flag("--json", bo->json, "Print one JSON object instead of the table");
  bench->callback([bo] { run_bench(*bo); });
}

}  // namespace timitseg::app
