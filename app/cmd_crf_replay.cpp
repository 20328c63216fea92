// timitseg crf replay IN.safetensors --backend NAME --out OUT.safetensors
// Runs a stored semi-CRF batch on any backend and writes every result
// (docs/crf.md, "crf replay").
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cmd_crf.h"
#include "common/safetensors.h"
#include "crf/backend.h"
#include "crf/host_run.h"
#include "model/crf_params.h"

namespace timitseg::app::crf_cmd {
namespace {

using crf::Dims;
using crf::HostResult;
using crf::Params;

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

// OUT must not be a directory nor the input file itself (replay would
// overwrite its own input). Checked before any work.
void check_output_path(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  if (!out.empty() && out.back() == '/')
    throw std::invalid_argument("crf replay: --out " + out + " names a directory (it ends with '/'); give a file "
                                "name, e.g. --out " + (fs::path(out) / "replay.safetensors").string());
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

// A replay file's tensors (docs/training.md): the CRF's inputs; labels,
// onset scores, start and end optional.
struct ReplayInput {
  Dims dims;
  std::vector<float> cum, A, D, s, e;  // [B][T+1][C], [C][C], [K][C], [C], [C]
  std::vector<int32_t> lengths;        // [B]
  std::vector<int32_t> labels;         // [B][T] when has_labels
  std::vector<float> onset;            // [B][T][C] when has_onset
  bool has_labels = false, has_onset = false;
  Params params() const {
    Params p{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(), e.empty() ? nullptr : e.data(),
             lengths.data()};
    if (has_onset) p.onset = onset.data();
    return p;
  }
};

ReplayInput read_replay_input(const std::string& path, const st::File& f) {
  const st::Tensor& cum_t = f.get("cum_scores");
  if (cum_t.dtype != st::DType::F32 || cum_t.shape.size() != 3 || cum_t.shape[1] < 2)
    throw std::runtime_error(path + ": tensor 'cum_scores' must be F32 [B, T+1, C] with T >= 1, got " +
                             st::dtype_name(cum_t.dtype) + " " + cum_t.shape_str());
  ReplayInput in;
  Dims& dims = in.dims;
  dims.B = cum_t.shape[0];
  dims.T = cum_t.shape[1] - 1;
  dims.C = cum_t.shape[2];
  // the CRF tensors under the model's short names (model::write_replay writes them)
  const model::CrfParamView& n = model::CrfParamView::names();
  const char *transition = n.transition.short_name(), *duration = n.duration_bias.short_name(),
             *start = n.start.short_name(), *end = n.end.short_name();
  const st::Tensor& dur_t = f.get(duration);
  if (dur_t.shape.size() != 2)
    throw std::runtime_error(path + ": tensor '" + duration + "' must be F32 [K, C], got shape " + dur_t.shape_str());
  dims.K = dur_t.shape[0];
  in.cum = cum_t.to<float>();
  in.A = f.get(transition, st::DType::F32, {dims.C, dims.C}).to<float>();
  in.D = f.get(duration, st::DType::F32, {dims.K, dims.C}).to<float>();
  if (f.has(start)) in.s = f.get(start, st::DType::F32, {dims.C}).to<float>();
  if (f.has(end)) in.e = f.get(end, st::DType::F32, {dims.C}).to<float>();
  in.lengths = int32_tensor(f, "lengths", {dims.B});
  in.has_labels = f.has("labels");
  if (in.has_labels) in.labels = int32_tensor(f, "labels", {dims.B, dims.T});
  in.has_onset = f.has("onset");
  if (in.has_onset) in.onset = f.get("onset", st::DType::F32, {dims.B, dims.T, dims.C}).to<float>();
  return in;
}

// The results as the output file's tensors (gold, NLL and gradients with labels).
st::File replay_outputs(const std::string& input, const std::string& backend, const Dims& dims, const HostResult& r,
                        bool has_labels, bool has_onset) {
  st::File out;
  out.metadata["producer"] = "timitseg crf replay";
  out.metadata["backend"] = backend;
  out.metadata["input"] = input;
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
    if (has_onset) out.tensors["grad_onset"] = st::Tensor::from<float>({B, T, C}, r.grad_onset);
    double mean = 0.0;
    for (double v : nll) mean += v / static_cast<double>(B);
    spdlog::info("crf replay: mean NLL {:.6f} over {} utterances", mean, B);
  }
  return out;
}

// Never write non-finite results: name the first offender instead.
void check_finite_results(const std::string& input, const std::string& backend, const HostResult& r) {
  auto check = [&](const char* name, const auto& v) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(static_cast<double>(v[i])))
        throw std::runtime_error(input + ": backend " + backend + " produced non-finite " + name + "[" +
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
  check("grad_onset", r.grad_onset);
  check("boundary_posteriors", r.boundary_posteriors);
}

void run_replay(const ReplayOptions& o) {
  check_threads("crf replay", o.threads);
  check_output_path(o.in, o.out);
  const st::File f = st::load(o.in);
  const ReplayInput in = read_replay_input(o.in, f);
  const Dims& dims = in.dims;
  const bool has_labels = in.has_labels, has_onset = in.has_onset;
  const Params p = in.params();
  auto backend = backend_by_name(o.backend, o.threads);
  spdlog::info("crf replay: {} B={} T={} K={} C={} labels={} onset={} backend={}", o.in, dims.B, dims.T, dims.K,
               dims.C, has_labels ? "yes" : "no", has_onset ? "yes" : "no", backend->name());
  crf::HostRunOptions run_opts;
  run_opts.gradients = has_labels;
  run_opts.viterbi = true;
  run_opts.boundary_posteriors = true;
  HostResult r;
  try {
    r = crf::run_host(*backend, dims, p, has_labels ? in.labels.data() : nullptr, run_opts);
  } catch (const std::exception& ex) {
    throw std::runtime_error(o.in + ": " + ex.what());
  }

  const st::File out = replay_outputs(o.in, backend->name(), dims, r, has_labels, has_onset);
  check_finite_results(o.in, backend->name(), r);
  st::save(o.out, out);
  spdlog::info("crf replay: wrote {} ({} segments)", o.out, r.segments.size());
}

}  // namespace

void add_replay_command(CLI::App& crf) {
  auto replay_opts = std::make_shared<ReplayOptions>();
  CLI::App* replay = crf.add_subcommand(
      "replay",
      "Run a semi-CRF batch stored in a safetensors file on any backend and write every result.\n"
      "IN: cum_scores F32 [B,T+1,C], transition F32 [C,C], duration_bias F32 [K,C], optional start/end F32 [C]\n"
      "(absent = zeros), lengths I32|I64 [B], optional labels I32|I64 [B,T], optional onset F32 [B,T,C]\n"
      "(onset scores, docs/crf.md; absent = none).\n"
      "OUT: log_partition F64 [B], viterbi_score F64 [B], viterbi_segments I32 [N,4] rows (batch, start, duration,\n"
      "label), boundary_posteriors F64 [B,T+1]; with labels also gold_score F64 [B], nll F64 [B] and the gradients\n"
      "of sum_b nll_b: grad_cum_scores F32 [B,T+1,C], grad_transition, grad_duration_bias, grad_start, grad_end (F32),\n"
      "and grad_onset F32 [B,T,C] when IN has onset.\n"
      "On any error OUT is not written.");
  replay->add_option("input", replay_opts->in, "Input safetensors file (IN.safetensors)")->required()->check(CLI::ExistingFile);
  replay->add_option("--backend", replay_opts->backend, "CRF backend: reference | cpu | cuda")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  replay->add_option("--out", replay_opts->out,
                     "Output safetensors file (written atomically, only on success; must not be IN itself nor a "
                     "directory)")
      ->required();
  replay->add_option("--threads", replay_opts->threads, "Threads of the cpu backend, >= 0 (0 = all hardware threads)")
      ->capture_default_str();
  replay->callback([replay_opts] { run_replay(*replay_opts); });
}

}  // namespace timitseg::app::crf_cmd
