// `timitseg compare --jobs`'s default (train/compare_plan.h): how many runs
// train at once, from the GPU's SMs and one run's measured memory.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "common/parallel.h"
#include "model/batch.h"
#include "model/executor.h"
#include "model/fused_lstm.h"  // fused_grid_ctas
#include "model/labels.h"
#include "model/make_executor.h"
#include "model/optim.h"
#include "model/params.h"
#include "options/device_choice.h"
#include "options/options.h"
#include "train/compare_plan.h"

namespace timitseg::train {

namespace {

// One run's GPU footprint: the free memory before and after a probe executor
// made, given the parameters, one training step (lr 0) and one decode of the
// batch of the longest utterances of train and dev; its description.
struct RunFootprint {
  size_t free_before = 0, free_after = 0;  // bytes (cudaMemGetInfo)
  std::string executor;
};

RunFootprint measure_one_run(model::Device device, const model::ModelDims& dims, const model::ExecutorOptions& executor_opts,
                             const model::LabelSet& ls, const config::Config& cfg, const TrainData& data) {
  RunFootprint f;
  size_t total = 0;
  cuda::memory_info(&f.free_before, &total);
  {
    std::unique_ptr<model::Executor> exec = model::make_executor(device, dims, executor_opts);
    f.executor = exec->description();
    const model::ParamLayout layout(dims);
    std::mt19937_64 rng(cfg.train_seed);
    std::vector<float> params;
    model::init_params(layout, rng, params, cfg.crf_init_scale);
    model::AdamW opt;
    opt.reset(layout.total());
    exec->set_state(params, opt);
    // the batch of the longest utterances of train and dev
    std::vector<const data::Utterance*> utts;
    for (const auto& u : data.train.utterances) utts.push_back(&u);
    for (const auto& u : data.dev.utterances) utts.push_back(&u);
    std::stable_sort(utts.begin(), utts.end(), [](const data::Utterance* a, const data::Utterance* b) {
      return a->num_frames > b->num_frames;
    });
    utts.resize(std::min<size_t>(utts.size(), static_cast<size_t>(cfg.train_batch_size)));
    const model::Batch batch =
        model::make_batch(utts, data.has_cmvn ? &data.cmvn : nullptr, ls, cfg.debug_fixed_length);
    model::StepOptions step_opts;
    step_opts.lr = 0;  // the probe's parameters are thrown away; lr 0 keeps them finite
    step_opts.dropout = cfg.model_dropout;
    step_opts.rng = &rng;
    step_opts.seed = cfg.train_seed;
    step_opts.step = 1;
    step_opts.check_numerics = false;
    exec->train_step(batch, step_opts);
    exec->decode(batch, nullptr, nullptr);
    cuda::synchronize();
    cuda::memory_info(&f.free_after, &total);
  }
  return f;
}

}  // namespace

// The default --jobs: 1 on the CPU; on the GPU as many runs as fill its SMs twice
// (a fused run occupies fused::grid_ctas(B, H) SMs, one CTA each) and fit in
// its free memory, the memory of one run measured with one training step and
// one decode of the longest batch on a probe executor.
int default_compare_jobs(model::Device device, const config::Config& cfg, const TrainData& data, int to_train) {
  if (device != model::Device::cuda || to_train <= 1) return 1;
  const model::LabelSet ls = model::training_label_set(cfg, data.phone_set, cfg.data_workdir);
  model::ModelDims dims;
  dims = options::model_dims(cfg, data.train.utterances.at(0).dim, ls.size(),  // options/options.h
                             any_trains_on_transcript(cfg, data.train));
  const int threads = model::set_threads(cfg.train_threads);
  const options::DeviceChoice choice = options::resolve_choices(cfg, /*log=*/false);
  const model::ExecutorOptions executor_opts = options::executor_options(cfg, choice, threads);
  RunFootprint f;
  try {
    f = measure_one_run(device, dims, executor_opts, ls, cfg, data);
  } catch (const std::exception& e) {
    spdlog::warn("compare: measuring one run's GPU footprint failed ({}): --jobs 1 (set --jobs N to choose)",
                 e.what());
    return 1;
  }
  const double per_run = std::max<double>(1.0, static_cast<double>(f.free_before) - static_cast<double>(f.free_after));
  const int by_memory = std::max(1, static_cast<int>(0.9 * static_cast<double>(f.free_before) / per_run));
  const int sms = cuda::sm_count();
  const int ctas = model::fused_grid_ctas(cfg.train_batch_size, cfg.model_hidden_dim);
  const bool fused = f.executor.find("fused") != std::string::npos && ctas > 0;
  // fused: enough runs to cover every SM twice (a run keeps its SMs busy only part of each step: host read-back
  // of the step's scalars, batch staging, dev evaluation; measured on one H100, compare --seeds 3 of
  // configs/timit.yaml, 6 runs of 64 CTAs: --jobs 1/2/3/6 took 33.8/18.9/13.6/9.9 s, docs/training.md);
  // cuDNN's kernels: no per-run figure, memory decides
  const int by_sms = fused ? 2 * ((sms + ctas - 1) / ctas) : to_train;
  const int jobs = std::max(1, std::min({to_train, by_memory, by_sms}));
  spdlog::info("compare: --jobs {} by default ({} runs to train; {}; one run takes {:.0f} MiB of the {:.0f} MiB free "
               "GPU memory, room for {})",
               jobs, to_train,
               fused ? "a fused run occupies " + std::to_string(ctas) + " of " + std::to_string(sms) +
                           " SMs, " + std::to_string(by_sms) + " cover them twice"
                     : "cuDNN LSTM: no per-run SM figure",
               per_run / (1 << 20), f.free_before / double(1 << 20), by_memory);
  return jobs;
}

}  // namespace timitseg::train
