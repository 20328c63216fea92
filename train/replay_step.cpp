// Step dump folders and replay-step (train/replay_step.h).
#include "train/replay_step.h"
#include "options/device_choice.h"
#include "options/options.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/safetensors.h"
#include "model/make_executor.h"
#include "model/optim.h"

namespace fs = std::filesystem;

namespace timitseg::train {

namespace {

const std::string& meta(const st::File& f, const std::string& key) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) throw std::runtime_error(f.path + ": no metadata '" + key + "'");
  return it->second;
}

int64_t meta_int(const st::File& f, const std::string& key) {
  const std::string& v = meta(f, key);
  size_t pos = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size()) throw std::runtime_error(f.path + ": metadata '" + key + "' = '" + v + "' is not an integer");
  return x;
}

}  // namespace

void write_step_dump(const std::string& dir, const model::Batch& batch, const config::Config& cfg, const model::ModelState& state,
                     const StepDumpInfo& info, const model::NumericsHit& hit) {
  const int64_t B = batch.input.B, T = batch.input.T;
  const int64_t D = B * T > 0 ? static_cast<int64_t>(batch.input.features.size()) / (B * T) : 0;
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    st::File f;
    f.tensors["features"] = st::Tensor::from<float>({B, T, D}, batch.input.features);
    f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, batch.labels);
    f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, batch.input.lengths);
    if (batch.source_frames.size() == static_cast<size_t>(B))
      f.tensors["source_frames"] = st::Tensor::from<int32_t>({B}, batch.source_frames);
    std::string ids;
    for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : " ") + id;
    f.metadata["utterance_ids"] = ids;
    f.metadata["epoch"] = std::to_string(info.epoch);
    f.metadata["batch"] = std::to_string(info.batch);
    f.metadata["step"] = std::to_string(info.step);
    f.metadata["lr"] = config::format_double(info.lr);
    f.metadata["seed"] = std::to_string(cfg.train_seed);
    f.metadata["rng_state"] = info.rng_state;
    f.metadata["fault"] = info.fault.to_string();
    if (info.world_size > 1) {  // a rank's share of a global batch
      f.metadata["rank"] = std::to_string(info.rank);
      f.metadata["world_size"] = std::to_string(info.world_size);
      f.metadata["loss_norm"] = config::format_double(info.loss_norm);
      if (!batch.input.share_rows.empty()) {
        f.tensors["share_rows"] = st::Tensor::from<int32_t>({B}, batch.input.share_rows);
        f.metadata["global_B"] = std::to_string(batch.input.global_B);
        f.metadata["global_T"] = std::to_string(batch.input.global_T);
      }
    }
    st::save((tmp / "batch.safetensors").string(), f);
    model::save_checkpoint((tmp / "state.safetensors").string(), state);
    write_file_atomic((tmp / "config.yaml").string(), cfg.to_yaml());
    nlohmann::json r = {{"layer", hit.layer},
                        {"pass", config::pass_name(hit.pass)},
                        {"tensor", hit.tensor},
                        {"nan", hit.stats.nan},
                        {"inf", hit.stats.inf},
                        {"finite", hit.stats.finite},
                        {"min", hit.stats.finite ? nlohmann::json(hit.stats.min) : nlohmann::json(nullptr)},
                        {"max", hit.stats.finite ? nlohmann::json(hit.stats.max) : nlohmann::json(nullptr)},
                        {"epoch", info.epoch},
                        {"batch", info.batch},
                        {"step", info.step},
                        {"utterance_ids", batch.ids},
                        {"fault", info.fault.to_string()},
                        {"rank", info.rank},
                        {"world_size", info.world_size},
                        {"loss_norm", info.loss_norm},
                        {"message", hit.describe()}};
    write_file_atomic((tmp / "report.json").string(), r.dump(2) + "\n");
    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

model::Batch fix_batch_length(const model::Batch& in, int N, int D) {
  if (N <= 0) return in;
  model::Batch out;
  const int B = in.input.B, T = in.input.T;
  out.input.B = B;
  out.input.T = N;
  out.input.features.assign(static_cast<size_t>(B) * N * D, 0.f);
  out.input.lengths.assign(B, N);
  out.labels.assign(static_cast<size_t>(B) * N, 0);
  out.ids = in.ids;
  out.source_frames = in.source_frames;
  for (int b = 0; b < B; ++b) {
    const int copy = std::min(N, in.input.lengths[b]);
    std::copy(in.input.features.begin() + static_cast<size_t>(b) * T * D,
              in.input.features.begin() + (static_cast<size_t>(b) * T + copy) * D,
              out.input.features.begin() + static_cast<size_t>(b) * N * D);
    for (int t = 0; t < N; ++t)
      out.labels[static_cast<size_t>(b) * N + t] = in.labels[static_cast<size_t>(b) * T + std::min(t, copy - 1)];
  }
  out.frames = int64_t(B) * N;
  return out;
}

namespace {

// The dump's batch (features [B][T][D], labels, lengths, utterance ids),
// each length checked against T.
model::Batch read_dump_batch(const st::File& bf, int D) {
  const st::Tensor& feats = bf.get("features", st::DType::F32, {-1, -1, D});
  const int B = static_cast<int>(feats.shape[0]), T = static_cast<int>(feats.shape[1]);
  model::Batch batch;
  batch.input.B = B;
  batch.input.T = T;
  batch.input.features = feats.to<float>();
  batch.labels = bf.get("labels", st::DType::I32, {B, T}).to<int32_t>();
  batch.input.lengths = bf.get("lengths", st::DType::I32, {B}).to<int32_t>();
  if (bf.has("source_frames")) batch.source_frames = bf.get("source_frames", st::DType::I32, {B}).to<int32_t>();
  std::istringstream ids(meta(bf, "utterance_ids"));
  for (std::string id; ids >> id;) batch.ids.push_back(id);
  if (static_cast<int>(batch.ids.size()) != B)
    throw std::runtime_error(bf.path + ": metadata utterance_ids names " + std::to_string(batch.ids.size()) +
                             " utterances, the batch has " + std::to_string(B));
  for (int b = 0; b < B; ++b) {
    if (batch.input.lengths[b] < 1 || batch.input.lengths[b] > T)
      throw std::runtime_error(bf.path + ": lengths[" + std::to_string(b) + "] = " +
                               std::to_string(batch.input.lengths[b]) + " is outside [1, " + std::to_string(T) + "]");
    batch.frames += batch.input.lengths[b];
  }
  return batch;
}

// The executor of the replay, holding the dump's state before its step (a
// state after it, or from another step, is refused naming the file).
std::unique_ptr<model::Executor> replay_executor(const ReplayStepOptions& o, const config::Config& cfg,
                                                 model::ModelState& state, int64_t step, const fs::path& dir) {
  const options::DeviceChoice choice = options::resolve_choices(cfg, /*log=*/true, o.device, "; replay on the CPU with --device cpu");
  model::ExecutorOptions executor_opts = options::executor_options(cfg, choice, model::set_threads(o.threads >= 0 ? o.threads : cfg.train_threads));
  if (o.crf_backend) executor_opts.crf_backend = *o.crf_backend;
  std::unique_ptr<model::Executor> exec = model::make_executor(choice.device, state.dims, executor_opts);
  options::set_optimizer_settings(cfg, state.optimizer);
  if (state.optimizer.step == step)
    throw std::runtime_error((dir / "state.safetensors").string() + ": holds the state AFTER step " +
                             std::to_string(step) +
                             " (a hit in the optimizer layer is found after the update), so the step cannot be "
                             "re-run; the parameters and moments it wrote are in this checkpoint");
  if (state.optimizer.step != step - 1)
    throw std::runtime_error((dir / "state.safetensors").string() + ": optimizer step " +
                             std::to_string(state.optimizer.step) + " does not precede the dump's step " +
                             std::to_string(step));
  exec->set_state(state.params, state.optimizer);
  return exec;
}

}  // namespace

ReplayStepResult replay_step(const ReplayStepOptions& o) {
  const fs::path dir(o.dump);
  if (!fs::is_directory(dir)) throw std::runtime_error(o.dump + ": not a folder (expected RUN_DIR/nonfinite-step-N)");
  for (const char* name : {"batch.safetensors", "state.safetensors", "config.yaml"})
    if (!fs::exists(dir / name)) throw std::runtime_error((dir / name).string() + ": missing (not a complete dump folder)");
  config::Config cfg = config::Config::load((dir / "config.yaml").string(), {});
  // a dump holds the non-finite values on purpose: no range checks (the checksum still)
  model::ModelState state = model::load_checkpoint((dir / "state.safetensors").string(), /*check_values=*/false);
  const st::File bf = st::load((dir / "batch.safetensors").string());
  const int D = state.dims.input_dim;
  model::Batch batch = read_dump_batch(bf, D);
  const int B = batch.input.B;
  // A rank's share (several processes): the global batch's masks and the global normalization.
  const int rank = bf.metadata.count("rank") ? static_cast<int>(meta_int(bf, "rank")) : 0;
  const double loss_norm = bf.metadata.count("loss_norm") ? std::stod(meta(bf, "loss_norm")) : 0.0;
  if (bf.has("share_rows")) {
    batch.input.share_rows = bf.get("share_rows", st::DType::I32, {B}).to<int32_t>();
    batch.input.global_B = static_cast<int>(meta_int(bf, "global_B"));
    batch.input.global_T = static_cast<int>(meta_int(bf, "global_T"));
  }
  if (o.fixed_length > 0) {
    if (!batch.input.share_rows.empty())
      spdlog::warn("replay-step --fixed-length on a rank's share: its dropout masks are drawn as for a whole batch, "
                   "not as the run drew them");
    batch = fix_batch_length(batch, o.fixed_length, D);
  }

  std::mt19937_64 rng;
  {
    std::istringstream is(meta(bf, "rng_state"));
    is >> rng;
    if (!is) throw std::runtime_error(bf.path + ": corrupt rng_state metadata");
  }
  const int64_t step = meta_int(bf, "step");
  const double lr = std::stod(meta(bf, "lr"));
  const config::FaultSpec fault =
      config::FaultSpec::parse(meta(bf, "fault"), state.dims.num_layers, state.dims.onset_input());

  std::unique_ptr<model::Executor> exec = replay_executor(o, cfg, state, step, dir);

  model::StepOptions step_opts = options::step_options(cfg);
  step_opts.lr = lr;
  step_opts.check_numerics = o.check_numerics || cfg.debug_check_numerics;
  step_opts.step = step;
  step_opts.loss_norm = loss_norm;
  if (rank != 0) step_opts.crf_reg = 0.0;  // the penalty was rank 0's (model/dist_step.h)
  if (!o.without_fault) step_opts.fault = fault;
  step_opts.rng = &rng;
  spdlog::info("replaying step {} (epoch {}, batch {}) of {} on {}{}{}", step, meta(bf, "epoch"), meta(bf, "batch"),
               o.dump, exec->description(), o.fixed_length > 0 ? ", fixed length " + std::to_string(o.fixed_length) : "",
               step_opts.fault.empty() ? std::string() : ", fault " + step_opts.fault.to_string());
  ReplayStepResult r;
  r.step = step;
  r.executor = exec->description();
  r.result = exec->train_step(batch, step_opts);
  return r;
}

}  // namespace timitseg::train
