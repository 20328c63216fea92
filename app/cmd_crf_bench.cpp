// timitseg bench crf: times the semi-CRF forward, forward+backward and
// Viterbi of one backend on random inputs (crf::time_calls), then checks it
// against the reference backend.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cmd_crf.h"
#include "common/buffer.h"
#include "common/cuda.h"
#include "common/parallel.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/cumsum.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "crf/timing.h"
#include "crf/validate.h"

#include "app/bench_inputs.h"

namespace timitseg::app::crf_cmd {
namespace {

using crf::Dims;
using crf::HostResult;
using crf::Params;

struct BenchOptions {
  int64_t batch = 32, frames = 200, max_duration = 30, classes = 39;
  std::string backend = "cpu";
  int warmup = 1, repeats = 5, threads = 0, check_utterances = 4;
  uint32_t seed = 0;
  bool json = false;
};

struct Inputs : RandomCrfInputs {
  std::vector<int32_t> labels;  // [B][T]
};

// app/bench_inputs.h's random inputs, then labels as random runs of 1..2K frames.
Inputs make_inputs(const Dims& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  fill_random_crf_inputs(dims, rng, in);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
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

struct NamedTiming {
  std::string op;
  crf::Timing t;
};

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
double bench_host_bytes(const Dims& d, crf::BackendKind backend, bool dev, int threads_option) {
  const double B = static_cast<double>(d.B), T = static_cast<double>(d.T), K = static_cast<double>(d.K),
               C = static_cast<double>(d.C);
  const double params = 4.0 * (C * C + K * C + 2.0 * C);
  const double inputs = 4.0 * B * (T + 1) * C + 4.0 * B * T + 4.0 * B + params;
  const double frames = 4.0 * B * T * C;
  if (dev) return inputs + frames;
  double rest = inputs /* copies */ + 4.0 * B * (T + 1) * C + params /* gradients */ + 12.0 * B * T /* segments */ +
                24.0 * B;
  if (backend == crf::BackendKind::reference) {
    rest += 24.0 * B * (T + 1) * C + 16.0 * (T + 1) * C + 8.0 * K * C;  // float64 copies, gradients, alpha/beta
  } else {  // cpu layout (crf/cpu/cpu.cpp): shared + per thread + per utterance, float64
    const double threads = std::max(1.0, std::min(B, static_cast<double>(resolve_threads(threads_option))));
    rest += 8.0 * (2 * C + 2 * C * C + threads * (5 * (T + 1) * C + std::max(K, C) + 2 * C) +
                   B * (C * C + K * C + 2 * C));
  }
  return inputs + std::max(frames, rest);
}

// What one run of `bench crf` measured: each operation's times, the
// workspace and device memory (MiB), the check against the reference.
struct BenchFigures {
  std::vector<NamedTiming> times;
  size_t ws_fwd, ws_all;  // bytes
  bool dev;
  double used_fwd, used_all;  // MiB of device memory in use
  nlohmann::json check;       // check_against_reference's, or null
  int64_t nc;                 // utterances checked
  bool ok;
};

void print_json(const BenchOptions& o, const std::string& name, const Dims& dims, const BenchFigures& f) {
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  const double mib = 1.0 / 1048576.0;
  nlohmann::json j;
  j["backend"] = name;
  j["batch"] = B, j["frames"] = T, j["max_duration"] = K, j["classes"] = C;
  j["warmup"] = o.warmup, j["repeats"] = o.repeats, j["seed"] = o.seed;
  j["hardware_threads"] = resolve_threads(0);
  for (const NamedTiming& t : f.times)
    j["timings_ms"][t.op] = {{"median", t.t.median_ms},
                             {"min", t.t.min_ms},
                             {"frames_per_s", static_cast<double>(B * T) / (t.t.median_ms / 1000.0)}};
  j["check"] = f.check;
  j["workspace_mib"] = {{"forward", static_cast<double>(f.ws_fwd) * mib}, {"all", static_cast<double>(f.ws_all) * mib}};
  if (f.dev) j["device_memory_mib"] = {{"forward", f.used_fwd}, {"all", f.used_all}};
  std::printf("%s\n", j.dump(2).c_str());
}

void print_text(const BenchOptions& o, const std::string& name, const Dims& dims, const BenchFigures& f) {
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  const double mib = 1.0 / 1048576.0;
  std::printf("bench crf: backend=%s B=%lld T=%lld K=%lld C=%lld, warm-up %d, repeats %d (median, ms)\n",
              name.c_str(), static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(K),
              static_cast<long long>(C), o.warmup, o.repeats);
  std::printf("%-18s %12s %12s %14s\n", "operation", "median ms", "min ms", "frames/s");
  for (const NamedTiming& t : f.times)
    std::printf("%-18s %12.3f %12.3f %14.0f\n", t.op.c_str(), t.t.median_ms, t.t.min_ms,
                static_cast<double>(B * T) / (t.t.median_ms / 1000.0));
  std::printf("workspace: forward %.3f MiB, forward+backward/viterbi %.3f MiB\n", static_cast<double>(f.ws_fwd) * mib,
              static_cast<double>(f.ws_all) * mib);
  if (f.dev)
    std::printf("device memory in use (cudaMemGetInfo, MiB): forward (inputs, log Z, workspace) %.1f; "
                "all operations %.1f\n",
                f.used_fwd, f.used_all);
  if (f.nc > 0)
    std::printf("check vs reference (%lld utterances): log Z max rel err %.3g, grads max rel err %.3g, "
                "viterbi segments %s: %s\n",
                static_cast<long long>(f.nc), f.check["log_z_max_rel_err"].get<double>(),
                f.check["grad_max_rel_err"].get<double>(), f.check["viterbi_segments_identical"].get<bool>() ? "identical" : "DIFFER",
                f.ok ? "ok" : "MISMATCH");
  else
    std::printf("check vs reference: skipped (--check-utterances 0)\n");
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
  const double need = bench_host_bytes(dims, crf::backend_kind(o.backend), be->on_device(), o.threads), have = physical_memory_bytes();
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

// The first nc utterances of `in` on `be` against the reference backend:
// log Z, the gradients and the Viterbi segments; ok = within 1e-5 relative
// and the same segments.
nlohmann::json check_against_reference(const Inputs& in, int64_t nc, crf::Backend& be, bool& ok) {
  const Inputs sub = head(in, nc);
  crf::HostRunOptions run_opts;
  run_opts.scale = 1.0 / static_cast<double>(nc);
  auto ref = crf::make_backend(crf::BackendKind::reference);
  const HostResult want = crf::run_host(*ref, sub.dims, sub.params(), sub.labels.data(), run_opts);
  const HostResult got = crf::run_host(be, sub.dims, sub.params(), sub.labels.data(), run_opts);
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
  return {{"utterances", nc},
          {"log_z_max_rel_err", logz},
          {"grad_max_rel_err", grad},
          {"viterbi_segments_identical", same_segments},
          {"ok", ok}};
}

void run_bench_sized(const BenchOptions& o, const Dims& dims, crf::Backend& backend) {
  crf::Backend* be = &backend;
  const Inputs in = make_inputs(dims, o.seed);
  crf::validate_host(dims, in.params(), in.labels.data());
  const bool dev = be->on_device();
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  // Inputs and outputs in the backend's memory space, allocated once; the
  // session holds the workspace.
  const Memory mem = dev ? Memory::device : Memory::host;
  auto upload = [&](const auto& v) {
    Buffer buf(mem, 0);
    buf.upload(v);
    return buf;
  };
  // Device memory in use (cudaMemGetInfo) is read before any allocation,
  // after the forward's (inputs, log Z, its workspace) and after all of them.
  size_t free0 = 0, free_fwd = 0, free_all = 0, total = 0;
  if (dev) cuda::memory_info(&free0, &total);
  Buffer cum = upload(in.cum), A = upload(in.A), D = upload(in.D), s = upload(in.s), e = upload(in.e),
         len = upload(in.lengths);
  Buffer lz(mem, B * sizeof(double));
  const Params p{cum.as<float>(), A.as<float>(), D.as<float>(), s.as<float>(), e.as<float>(), len.as<int32_t>()};
  crf::Session session(*be);
  spdlog::info("bench crf: backend {} B={} T={} K={} C={} (warm-up {}, repeats {})", be->name(), B, T, K, C, o.warmup,
               o.repeats);
  std::vector<NamedTiming> times;
  auto time_op = [&](const std::string& op, const std::function<void()>& fn) {
    times.push_back(NamedTiming{op, crf::time_calls(*be, o.warmup, o.repeats, [&](int) { fn(); })});
  };
  time_op("forward", [&] { session.log_partition(dims, p, lz.as<double>()); });
  if (dev) cuda::memory_info(&free_fwd, &total);
  const size_t ws_fwd = be->log_partition_workspace_bytes(dims), ws_all = be->workspace_bytes(dims);

  Buffer lab = upload(in.labels);
  Buffer gold(mem, B * sizeof(double)), vs(mem, B * sizeof(double));
  Buffer gc(mem, B * (T + 1) * C * sizeof(float)), ga(mem, C * C * sizeof(float)), gd(mem, K * C * sizeof(float)),
      gs(mem, C * sizeof(float)), ge(mem, C * sizeof(float));
  Buffer segs(mem, B * T * 3 * sizeof(int32_t)), nseg(mem, B * sizeof(int32_t));
  const crf::Grads g{gc.as<float>(), ga.as<float>(), gd.as<float>(), gs.as<float>(), ge.as<float>()};
  session.workspace(dims);
  if (dev) cuda::memory_info(&free_all, &total);
  const double mib = 1.0 / 1048576.0;
  const double used_fwd = static_cast<double>(free0 - free_fwd) * mib, used_all = static_cast<double>(free0 - free_all) * mib;
  time_op("forward+backward", [&] {
    session.backward(dims, p, lab.as<int32_t>(), 1.0 / static_cast<double>(B), lz.as<double>(), gold.as<double>(), g);
  });
  time_op("viterbi", [&] { session.viterbi(dims, p, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>()); });

  // Check against the reference backend on the first utterances.
  bool ok = true;
  const int64_t nc = std::min<int64_t>(B, o.check_utterances);
  const nlohmann::json check = nc > 0 ? check_against_reference(in, nc, *be, ok) : nlohmann::json(nullptr);

  const BenchFigures f{times, ws_fwd, ws_all, dev, used_fwd, used_all, check, nc, ok};
  if (o.json)
    print_json(o, be->name(), dims, f);
  else
    print_text(o, be->name(), dims, f);
  std::fflush(stdout);
  if (!ok)
    throw std::runtime_error("bench crf: backend " + be->name() +
                             " does not match the reference backend (tolerance 1e-5 relative; see the check line)");
}

}  // namespace

void add_bench_command(CLI::App& bench_parent) {
  auto bench_opts = std::make_shared<BenchOptions>();
  CLI::App* bench = bench_parent.add_subcommand(
      "crf",
      "Time the semi-CRF forward, forward+backward and Viterbi (median after warm-up) on random zero-centered\n"
      "inputs, then check the backend against the reference backend. Prints a table (or JSON with --json),\n"
      "the workspace of the forward and of the other operations and, on cuda, the device memory in use\n"
      "(cudaMemGetInfo) after the forward's allocations and after all of them;\n"
      "exits with an error when the check fails. Refuses dims whose host memory (inputs, gradients, workspace)\n"
      "would exceed the machine's physical memory.");
  bench->add_option("--batch,-B", bench_opts->batch, "Batch size B")->capture_default_str();
  bench->add_option("--frames,-T", bench_opts->frames, "Frames per utterance T (every utterance has full length)")
      ->capture_default_str();
  bench->add_option("--max-duration,-K", bench_opts->max_duration, "Maximum segment duration K")->capture_default_str();
  bench->add_option("--classes,-C", bench_opts->classes, "Number of labels C")->capture_default_str();
  bench->add_option("--backend", bench_opts->backend, "CRF backend: reference | cpu | cuda")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  bench->add_option("--warmup", bench_opts->warmup, "Untimed runs of each operation before timing")->capture_default_str();
  bench->add_option("--repeats", bench_opts->repeats, "Timed runs of each operation (the median is reported)")
      ->capture_default_str();
  bench->add_option("--threads", bench_opts->threads, "Threads of the cpu backend, >= 0 (0 = all hardware threads)")
      ->capture_default_str();
  bench->add_option("--check-utterances", bench_opts->check_utterances,
                    "Compare log Z, all gradients and Viterbi with the reference backend on the first N utterances "
                    "(>= 0; 0 = skip the check)")
      ->capture_default_str();
  bench->add_option("--seed", bench_opts->seed, "Seed of the random inputs")->capture_default_str();
  bench->add_flag("--json", bench_opts->json, "Print one JSON object instead of the table");
  bench->callback([bench_opts] { run_bench(*bench_opts); });
}

}  // namespace timitseg::app::crf_cmd
