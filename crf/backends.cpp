// Backend registry, host-side validation and gold segmentation. The host
// runner (run_host) lives with crf::Session in crf/session.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "crf/cpu/cpu.h"
#include "crf/detail.h"
#include "crf/reference/reference.h"
#include "crf/semicrf.h"

namespace timitseg::crf {

namespace {
// The one table of backend names (to_string, parse_backend_kind).
constexpr std::pair<BackendKind, const char*> kBackendNames[] = {
    {BackendKind::reference, "reference"}, {BackendKind::cpu, "cpu"}, {BackendKind::cuda, "cuda"}};
}  // namespace

const char* to_string(BackendKind kind) {
  for (const auto& [k, name] : kBackendNames)
    if (k == kind) return name;
  return "?";  // unreachable: every kind has a name
}

bool parse_backend_kind(std::string_view name, BackendKind* out) {
  for (const auto& [k, word] : kBackendNames)
    if (name == word) {
      *out = k;
      return true;
    }
  return false;
}

BackendKind backend_kind(std::string_view name) {
  BackendKind k{};
  if (parse_backend_kind(name, &k)) return k;
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown crf backend '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> backend_kind_names() {
  std::vector<std::string> names;
  for (const auto& entry : kBackendNames) names.emplace_back(entry.second);
  return names;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::reference:
      return reference::make_reference_backend();
    case BackendKind::cpu:
      return cpu::make_cpu_backend(options.threads);
    case BackendKind::cuda: {
#ifdef TIMITSEG_HAVE_CUDA
      std::unique_ptr<Backend> be = make_cuda_backend();
      be->set_stream(options.stream);
      return be;
#else
      throw std::runtime_error(
          "cuda backend: this build of timitseg has no CUDA support (rebuild with -DTIMITSEG_CUDA=ON)");
#endif
    }
  }
  throw std::logic_error("make_backend: not a BackendKind");
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names{to_string(BackendKind::reference), to_string(BackendKind::cpu)};
#ifdef TIMITSEG_HAVE_CUDA
  names.push_back(to_string(BackendKind::cuda));
#endif
  return names;
}

void validate_host(const Dims& dims, const Params& p, const int32_t* labels) {
  detail::validate_inputs<float>(dims, p.cum_scores, p.transition, p.duration_bias, p.start, p.end, p.lengths,
                                 labels, p.onset);
}

std::vector<Segment> gold_segments(const int32_t* labels, int32_t length, int64_t K, int32_t batch) {
  std::vector<Segment> out;
  detail::for_each_gold_segment(labels, length, K, [&](int64_t u, int64_t d, int64_t c) {
    out.push_back(Segment{batch, static_cast<int32_t>(u), static_cast<int32_t>(d), static_cast<int32_t>(c)});
  });
  return out;
}

void validate_align_host(const Dims& dims, int64_t N, const int32_t* phones, const int32_t* num_phones,
                         const int32_t* optional) {
  auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (N < 1) bad("crf: align: phone stride N must be >= 1, got " + std::to_string(N));
  if (!phones) bad("crf: align: phones is null");
  if (!num_phones) bad("crf: align: num_phones is null");
  for (int64_t b = 0; b < dims.B; ++b) {
    if (num_phones[b] < 1 || num_phones[b] > N)
      bad("crf: align: num_phones[" + std::to_string(b) + "] = " + std::to_string(num_phones[b]) +
          " is outside [1, N=" + std::to_string(N) + "]");
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int32_t c = phones[b * N + i];
      if (c < 0 || c >= dims.C)
        bad("crf: align: phones[" + std::to_string(b) + "][" + std::to_string(i) + "] = " + std::to_string(c) +
            " is outside [0, C=" + std::to_string(dims.C) + ")");
    }
    if (!optional) continue;
    int64_t kept = 0;
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int32_t o = optional[b * N + i];
      const std::string at = "crf: align: optional[" + std::to_string(b) + "][" + std::to_string(i) + "] = ";
      if (o != 0 && o != 1) bad(at + std::to_string(o) + " is not 0 or 1");
      if (o == 1 && i > 0 && optional[b * N + i - 1] == 1)
        bad(at + "1 follows another optional phone (two optional phones in a row are not supported)");
      kept += o == 0;
    }
    if (kept == 0) bad("crf: align: utterance " + std::to_string(b) + " has only optional phones");
  }
}

void validate_align_spans_host(const Dims& dims, int64_t N, const int32_t* num_phones, const int32_t* lengths,
                               const int32_t* spans) {
  if (!spans) throw std::invalid_argument("crf: align_posteriors: spans is null");
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int64_t s = spans[(b * N + i) * 2], r = spans[(b * N + i) * 2 + 1];
      if (s < 0 || r < 0 || s + r > lengths[b])
        throw std::invalid_argument("crf: align_posteriors: spans[" + std::to_string(b) + "][" + std::to_string(i) +
                                    "] = (" + std::to_string(s) + ", " + std::to_string(r) +
                                    ") is not a span (start, duration >= 0) inside [0, length=" +
                                    std::to_string(lengths[b]) + "]");
    }
}

void validate_span_queries_host(const Dims& dims, int64_t Q, const int32_t* queries, const int32_t* num_queries,
                                const int32_t* lengths) {
  auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (Q < 1) bad("crf: span_marginals: query stride Q must be >= 1, got " + std::to_string(Q));
  if (!queries) bad("crf: span_marginals: queries is null");
  if (!num_queries) bad("crf: span_marginals: num_queries is null");
  for (int64_t b = 0; b < dims.B; ++b) {
    if (num_queries[b] < 0 || num_queries[b] > Q)
      bad("crf: span_marginals: num_queries[" + std::to_string(b) + "] = " + std::to_string(num_queries[b]) +
          " is outside [0, Q=" + std::to_string(Q) + "]");
    for (int64_t i = 0; i < num_queries[b]; ++i) {
      const int32_t* q = queries + (b * Q + i) * 3;
      if (q[0] < 0 || q[1] < 0 || static_cast<int64_t>(q[0]) + q[1] > lengths[b] || q[2] < 0 || q[2] >= dims.C)
        bad("crf: span_marginals: queries[" + std::to_string(b) + "][" + std::to_string(i) + "] = (" +
            std::to_string(q[0]) + ", " + std::to_string(q[1]) + ", " + std::to_string(q[2]) +
            ") is not (start, duration >= 0, label in [0, C=" + std::to_string(dims.C) +
            ")) inside [0, length=" + std::to_string(lengths[b]) + "]");
    }
  }
}

std::vector<Segment> align_segments(int64_t K, const int32_t* phones, int64_t n, const int32_t* spans, int32_t batch) {
  std::vector<Segment> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = spans[2 * i], r = spans[2 * i + 1];  // r = 0: a skipped optional phone
    for (int64_t pos = u; pos < u + r; pos += K)
      out.push_back(Segment{batch, static_cast<int32_t>(pos), static_cast<int32_t>(std::min(K, u + r - pos)),
                            phones[i]});
  }
  return out;
}

void add_phone_bonus(const float* transition, int64_t C, float beta, float* out) {
  for (int64_t from = 0; from < C; ++from)
    for (int64_t to = 0; to < C; ++to)
      out[from * C + to] = transition[from * C + to] + (from == to ? 0.f : beta);
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

void Backend::backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                             double* gold, const Grads& wanted, void* workspace) {
  (void)wanted;
  if (begun_.pending) throw std::logic_error(name() + " backend: backward_begin: the last begun backward is not finished");
  begun_ = BegunBackward{true, dims, p, labels, scale, log_z, gold, workspace};
}

void Backend::backward_finish(const Grads& grads) {
  if (!begun_.pending) throw std::logic_error(name() + " backend: backward_finish without backward_begin");
  const BegunBackward b = begun_;
  begun_.pending = false;
  backward(b.dims, b.p, b.labels, b.scale, b.log_z, b.gold, grads, b.workspace);
}

}  // namespace timitseg::crf
