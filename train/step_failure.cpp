// The report of a failed training step (train/step_failure.h).
#include "train/step_failure.h"

#include <sstream>
#include <stdexcept>

#include "model/checkpoint.h"
#include "model/numerics.h"
#include "model/replay_file.h"

namespace timitseg::train {

namespace fs = std::filesystem;

std::string rng_to_string(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

namespace {

std::string utterance_ids(const model::Batch& batch) {
  std::string ids;
  for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : ", ") + id;
  return ids;
}

}  // namespace

// A step stopped by the per-layer checks (debug.check_numerics): the dump
// folder RUN_DIR/nonfinite-step-N for replay-step, then one error.
[[noreturn]] void stop_on_numerics(const FailedStep& r, const model::NumericsError& e, const model::Batch& batch, const model::StepOptions& step_opts,
                                   const std::mt19937_64& rng_before) {
  const int epoch = r.epoch;
  const size_t bi = r.bi, nbatches = r.nbatches;
  const model::NumericsHit& hit = e.hit();
  const std::string ids = utterance_ids(batch);
  const fs::path dump = r.run_dir / ("nonfinite-step-" + std::to_string(step_opts.step) +
                                     (r.world->size() > 1 ? "-rank" + std::to_string(r.world->rank()) : ""));
  std::string where;
  try {
    model::ModelState before = *r.state;  // dims, labels, features, cmvn, config, best so far
    r.exec->get_state(before.params, before.optimizer);  // the failed step updated nothing
    before.epoch = epoch - 1;
    before.rng_state = rng_to_string(rng_before);
    StepDumpInfo info;
    info.epoch = epoch;
    info.batch = static_cast<int>(bi + 1);
    info.step = step_opts.step;
    info.lr = step_opts.lr;
    info.rng_state = before.rng_state;
    info.fault = r.fault.step == step_opts.step ? r.fault : config::FaultSpec{};
    info.rank = r.world->rank();
    info.world_size = r.world->size();
    info.loss_norm = step_opts.loss_norm;
    write_step_dump(dump.string(), batch, *r.cfg, before, info, hit);
    where = "; dump: " + dump.string() + " (batch, state before the step, config, report.json); replay: "
            "`timitseg replay-step " + dump.string() + "` (docs/debugging.md)";
  } catch (const std::exception& w) {
    where = std::string("; writing the dump folder failed: ") + w.what();
  }
  std::ostringstream os;
  os.precision(6);
  os << "training stopped at epoch " << epoch << ", batch " << bi + 1 << "/" << nbatches << ", step " << step_opts.step
     << (r.world->size() > 1 ? " on " + r.world->who() : std::string()) << ": non-finite value in layer " << hit.layer << ", " << config::pass_name(hit.pass) << " pass, tensor " << hit.tensor
     << ": " << hit.stats.nan << " NaN, " << hit.stats.inf << " Inf, ";
  if (hit.stats.finite > 0)
    os << "finite min " << hit.stats.min << ", max " << hit.stats.max;
  else
    os << "no finite value";
  if (hit.layer == "optimizer") os << " (after the update)";
  os << "; utterances: " << ids << where;
  r.log_error(os.str());
  throw std::runtime_error(os.str());
}

// A step stopped by the older checks (CRF input, loss, gradients): the
// batch's CRF inputs in a `crf replay` file, then one error.
[[noreturn]] void stop_on_nonfinite(const FailedStep& r, const model::NonFiniteError& e, const model::Batch& batch, const model::StepOptions& step_opts) {
  const int epoch = r.epoch;
  const size_t bi = r.bi, nbatches = r.nbatches;
  const std::string replay =
      (r.run_dir / ("nonfinite-epoch" + std::to_string(epoch) + "-batch" + std::to_string(bi + 1) +
                    (r.world->size() > 1 ? "-rank" + std::to_string(r.world->rank()) : "") + ".safetensors"))
          .string();
  const std::string ids = utterance_ids(batch);
  std::string where;
  try {
    const std::vector<float> cum = r.exec->last_cum();
    if (cum.size() == static_cast<size_t>(batch.input.B) * (batch.input.T + 1) * r.num_classes) {
      std::vector<float> step_params;
      model::AdamW unused;
      r.exec->get_state(step_params, unused);
      for (const auto& [k, v] : step_opts.poison) step_params.at(k) = v;
      model::write_replay(replay, *r.layout, step_params, batch, cum);
      where = "; this batch's CRF inputs are in " + replay + " (reproduce with `timitseg crf replay " + replay +
              " --backend reference --out OUT.safetensors`)";
    } else {
      where = "; no CRF inputs exist yet for this batch (the forward stopped before cum_scores)";
    }
  } catch (const std::exception& w) {
    where = std::string("; writing the replay file failed: ") + w.what();
  }
  const std::string msg = "training stopped at epoch " + std::to_string(epoch) + ", batch " + std::to_string(bi + 1) +
                          "/" + std::to_string(nbatches) +
                          (r.world->size() > 1 ? " on " + r.world->who() : std::string()) + ": first non-finite tensor: " + e.tensor() + " (" +
                          e.what() + "); utterances: " + ids + where +
                          ". Debug: --crf-backend reference, --fixed-length N, --crf-reg, docs/training.md";
  r.log_error(msg);
  throw std::runtime_error(msg);
}

}  // namespace timitseg::train
