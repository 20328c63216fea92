// `timitseg bench train`: training throughput of the whole step (encoder,
// CRF, optimizer) on a synthetic TIMIT-shaped corpus held in memory, through
// the same train() as `timitseg train` (bucketing, prefetching, AdamW, dev
// evaluation and checkpoints included; frames/s counts the training batches
// only, as train's own figure does). Then a per-part breakdown (each part
// synchronized and timed on its own) and the time to evaluate (Viterbi decode
// and every metric) a set of utterances. --supervision picks what the CRF
// stage learns from: the frame labels' segments, their phone sequence with the
// times hidden (the transcript NLL), or both, one after the other on the same
// corpus, batches and initial parameters, with the transcript / segments ratios.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "app/commands.h"
#include "app/enum_flags.h"
#include "common/dist.h"
#include "model/make_executor.h"
#include "settings/limits.h"
#include "common/files.h"
#include "common/atomic_file.h"
#include "common/progress.h"
#include "data/phones.h"
#include "options/device_choice.h"
#include "model/allreduce_timing.h"
#include "model/executor.h"
#include "options/options.h"
#include "eval/metrics.h"
#include "train/train.h"

namespace fs = std::filesystem;

namespace timitseg::app {
namespace {

struct BenchTrainOptions {
  std::string device = "auto", crf_backend, rnn_algo = "standard", json_out, work_dir;
  std::string supervision = "segments";  // segments, transcript or both
  int threads = 0, batch = 32, hidden = 256, layers = 3, input_dim = 39, max_duration = 30;
  int utterances = 1000, min_frames = 150, max_frames = 600, epochs = 2, bucket_batches = 50;
  int breakdown_steps = 20, eval_utterances = 1344;
  double dropout = 0.1;
  bool bucketing = true;
  bool check_numerics = false;  // debug.check_numerics: off by default, so that the figures are the plain ones
  uint64_t seed = 1;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A TIMIT-shaped split in memory: N(0,1) features [T][D] and 61-phone frame
// labels made of segments of 1..20 frames with random phones (not q).
data::Split synthetic_split(const std::string& name, int n, int min_frames, int max_frames, int dim,
                            std::mt19937_64& rng) {
  const data::PhoneSet& ps = data::PhoneSet::timit();
  std::vector<int> phones;
  for (int i = 0; i < static_cast<int>(ps.names61().size()); ++i)
    if (ps.map(i, 39) >= 0) phones.push_back(i);
  std::normal_distribution<float> normal(0.f, 1.f);
  data::Split s;
  s.name = name;
  for (int u = 0; u < n; ++u) {
    data::Utterance x;
    x.id = name + "-" + std::to_string(u);
    x.dim = dim;
    x.num_frames = min_frames + static_cast<int>(rng() % static_cast<uint64_t>(max_frames - min_frames + 1));
    x.features.resize(static_cast<size_t>(x.num_frames) * dim);
    for (float& f : x.features) f = normal(rng);
    x.labels.resize(x.num_frames);
    for (int t = 0; t < x.num_frames;) {
      const int d = 1 + static_cast<int>(rng() % 20), p = phones[rng() % phones.size()];
      for (int k = 0; k < d && t < x.num_frames; ++k) x.labels[t++] = p;
    }
    s.utterances.push_back(std::move(x));
  }
  return s;
}

// 2. Per-part breakdown: the same batches as train(), each part synchronized; into out["breakdown_ms"].
void step_breakdown(const BenchTrainOptions& o, model::Executor& exec, const config::Config& cfg,
                    const data::Split& train, const model::LabelSet& ls, model::BatchSupervision sup,
                    nlohmann::json& out) {
  std::vector<int32_t> lengths;
  for (const auto& u : train.utterances) lengths.push_back(u.num_frames);
  std::mt19937_64 brng(o.seed);
  const auto batches = train::make_epoch_batches(lengths, cfg, brng);
  const int steps = std::min<int>(o.breakdown_steps, static_cast<int>(batches.size()));
  model::StepTimes sum;
  double data_s = 0, step_s = 0;
  int64_t frames = 0;
  for (int i = 0; i < steps + 2; ++i) {  // 2 warm-up steps
    const auto t0 = Clock::now();
    std::vector<const data::Utterance*> chunk;
    for (int k : batches[i % batches.size()]) chunk.push_back(&train.utterances[k]);
    const model::Batch b = model::make_batch(chunk, nullptr, ls, 0, sup);
    const double dt = since(t0);
    model::StepOptions step_opts;
    step_opts.lr = 1e-4;
    step_opts.dropout = o.dropout;
    step_opts.clip_norm = 5.0;
    step_opts.crf_reg = 1e-3;
    step_opts.time_parts = true;
    step_opts.rng = &brng;
    step_opts.seed = o.seed;
    step_opts.check_numerics = o.check_numerics;
    step_opts.step = i + 1;
    const auto t1 = Clock::now();
    const model::StepResult r = exec.train_step(b, step_opts);
    const double st = since(t1);
    if (i < 2) continue;
    data_s += dt;
    step_s += st;
    frames += b.frames;
    sum.encoder_forward += r.times.encoder_forward;
    sum.crf += r.times.crf;
    sum.encoder_backward += r.times.encoder_backward;
    sum.optimizer += r.times.optimizer;
  }
  if (steps > 0) {
    auto ms = [&](double s) { return 1e3 * s / steps; };
    std::printf("per step, %s (mean of %d synchronized steps, %.0f frames each): data %.2f ms (background thread "
                "in train), encoder forward %.2f ms, CRF %.2f ms, encoder backward + penalty + norm %.2f ms, "
                "clip + AdamW %.2f ms; step total %.2f ms = %.0f frames/s when serialized\n",
                sup == model::BatchSupervision::transcript ? "transcript" : "segments", steps,
                double(frames) / steps, ms(data_s), ms(sum.encoder_forward), ms(sum.crf),
                ms(sum.encoder_backward), ms(sum.optimizer), ms(step_s), frames / std::max(1e-9, step_s));
    out["breakdown_ms"] = {{"steps", steps},
                           {"frames_per_step", double(frames) / steps},
                           {"data", ms(data_s)},
                           {"encoder_forward", ms(sum.encoder_forward)},
                           {"crf", ms(sum.crf)},
                           {"encoder_backward_penalty_norm", ms(sum.encoder_backward)},
                           {"clip_adamw", ms(sum.optimizer)},
                           {"step", ms(step_s)},
                           {"frames_per_sec", frames / std::max(1e-9, step_s)}};
  }
}

// 3. Evaluation: Viterbi decode and every metric of eval_utterances; into out["eval"].
void eval_timing(const BenchTrainOptions& o, model::Executor& exec, const model::LabelSet& ls, nlohmann::json& out) {
  if (o.eval_utterances > 0) {
    std::mt19937_64 erng(o.seed + 7);
    const data::Split ev = synthetic_split("eval", o.eval_utterances, o.min_frames, o.max_frames, o.input_dim, erng);
    std::vector<const data::Utterance*> utts;
    for (const auto& u : ev.utterances) utts.push_back(&u);
    eval::Metrics m(ls.scoring_names);
    eval::evaluate_utterances(exec, utts, nullptr, ls, o.batch, m);  // warm-up (plans, buffers)
    eval::Metrics m2(ls.scoring_names);
    const auto t0 = Clock::now();
    eval::evaluate_utterances(exec, utts, nullptr, ls, o.batch, m2);
    const double s = since(t0);
    std::printf("evaluation of %d utterances (decode + metrics, batch %d): %.2f s\n", o.eval_utterances, o.batch, s);
    out["eval"] = {{"utterances", o.eval_utterances}, {"seconds", s}};
  }
}

// Several processes: the gradient all-reduce alone, 50 times (the scaling
// model's t_ar, docs/multigpu.md), with nccl-tests' algorithm and bus bandwidth.
nlohmann::json time_allreduce(const BenchTrainOptions& o, const config::Config& cfg, model::Device device) {
  dist::Communicator& world = dist::world();
  // the trained model's layout (cfg carries --hidden, --layers, --max-duration)
  const model::ModelDims dims = options::model_dims(cfg, o.input_dim, model::LabelSet::make(39).size());
  const size_t n = model::ParamLayout(dims).total();
  const model::AllreduceTiming t = model::time_gradient_allreduce(device, world, n, 50);
  int64_t slowest_ns[2] = {static_cast<int64_t>(t.seconds * 1e9), static_cast<int64_t>(t.seconds_queued * 1e9)};
  world.allreduce_max(slowest_ns, 2, "the all-reduce timing");
  const double bytes = double(n) * sizeof(float), factor = 2.0 * (world.size() - 1) / world.size();
  nlohmann::json out = {{"method", t.method}, {"floats", n}};
  for (int k = 0; k < 2; ++k) {
    const double s = double(slowest_ns[k]) * 1e-9, algbw = bytes / s * 1e-9, busbw = algbw * factor;
    const std::string key = k == 0 ? "" : "_queued";
    out["seconds" + key] = s;
    out["algbw_gb_s" + key] = algbw;
    out["busbw_gb_s" + key] = busbw;
    if (world.rank() == 0)
      std::printf("gradient all-reduce (%s, %zu floats = %.2f MB, %d ranks), %s: %.3f ms (the slowest rank, mean "
                  "of 50); algbw %.2f GB/s, busbw %.2f GB/s (nccl-tests' definitions)\n",
                  t.method.c_str(), n, bytes * 1e-6, world.size(),
                  k == 0 ? "each waited for" : "50 queued back to back", s * 1e3, algbw, busbw);
  }
  return out;
}

// The config of the benchmark's run: the options' model and schedule, with
// the `auto` of --rnn-algo and the default --crf-backend resolved here.
config::Config bench_config(const BenchTrainOptions& o, model::Device device) {
  config::Config cfg;
  cfg.model_hidden_dim = o.hidden;
  cfg.model_num_layers = o.layers;
  cfg.model_dropout = o.dropout;
  cfg.crf_max_duration = o.max_duration;
  cfg.crf_backend = config::enum_value<config::CrfBackendSetting>(!o.crf_backend.empty() ? o.crf_backend : "auto",
                                                                "--crf-backend");  // cuda on the GPU, else cpu
  cfg.crf_reg = 1e-3;
  cfg.train_epochs = o.epochs;
  cfg.train_batch_size = o.batch;
  cfg.train_device = options::device_setting(device);
  cfg.train_threads = o.threads;
  cfg.train_rnn_algo = config::enum_value<config::RnnAlgo>(o.rnn_algo, "--rnn-algo");
  cfg.train_bucketing = o.bucketing;
  cfg.train_bucket_batches = o.bucket_batches;
  cfg.train_seed = o.seed;
  cfg.train_lr = 1e-3;
  cfg.debug_check_numerics = o.check_numerics;
  {  // `auto` of --rnn-algo and the default --crf-backend (options/device_choice.h)
    const options::DeviceChoice choice = options::resolve_choices(cfg, /*log=*/true);
    cfg.crf_backend = options::backend_setting(choice.crf_backend);
    cfg.train_rnn_algo = choice.rnn_algo;
  }
  return cfg;
}

// The first lines: what is trained, on how many ranks.
void print_bench_header(const BenchTrainOptions& o, const config::Config& cfg, model::Device device,
                        const train::TrainData& td, const dist::Communicator& world) {
  int64_t train_frames = 0;
  for (const auto& u : td.train.utterances) train_frames += u.num_frames;
  std::printf("bench train: %s, %d utterances of %d-%d frames (%lld frames), batch %d, %d x %d BiLSTM, K=%d, "
              "bucketing %s, %d epochs, rnn_algo %s, check_numerics %s, supervision %s\n",
              model::device_name(device), o.utterances, o.min_frames, o.max_frames, static_cast<long long>(train_frames), o.batch,
              o.layers, o.hidden, o.max_duration, o.bucketing ? "on" : "off", o.epochs, config::to_string(cfg.train_rnn_algo),
              o.check_numerics ? "on" : "off", o.supervision.c_str());
  if (world.size() > 1)
    std::printf("on %d ranks (%s, %s): --batch %d is the global batch, about %d utterances per rank\n", world.size(),
                common::to_string(world.launch().launcher), world.library().c_str(), o.batch, (o.batch + world.size() - 1) / world.size());
}

// The supervisions of --supervision, in the order they run.
std::vector<config::Supervision> supervisions(const BenchTrainOptions& o) {
  if (o.supervision == "both") return {config::Supervision::segments, config::Supervision::transcript};
  return {config::enum_value<config::Supervision>(o.supervision, "--supervision")};
}

model::BatchSupervision batch_supervision(config::Supervision s) {
  return s == config::Supervision::transcript ? model::BatchSupervision::transcript
                                              : model::BatchSupervision::segments;
}

// 2. and 3.: the per-part breakdown of a step under each supervision (into
// parts[i], each from the same initial parameters) and the evaluation timing
// (into `out`), on an executor of their own (one process).
void executor_parts(const BenchTrainOptions& o, const config::Config& cfg, model::Device device,
                    const train::TrainData& td, const std::vector<config::Supervision>& sups,
                    std::vector<nlohmann::json>& parts, nlohmann::json& out) {
  const model::LabelSet ls = model::LabelSet::make(39);
  const model::ModelDims dims = options::model_dims(cfg, o.input_dim, ls.size());  // options/options.h
  options::DeviceChoice choice;  // cfg's, resolved above
  choice.device = device;
  choice.crf_backend = options::backend_kind(cfg.crf_backend);  // resolved above: never auto
  choice.rnn_algo = cfg.train_rnn_algo;
  const model::ExecutorOptions executor_opts = options::executor_options(cfg, choice, o.threads);  // options/options.h
  auto exec = model::make_executor(device, dims, executor_opts);
  const model::ParamLayout layout(dims);
  std::vector<float> params;
  std::mt19937_64 prng(o.seed);
  model::init_params(layout, prng, params);
  for (size_t i = 0; i < sups.size(); ++i) {
    model::AdamW adam;
    adam.reset(layout.total());
    exec->set_state(params, adam);
    step_breakdown(o, *exec, cfg, td.train, ls, batch_supervision(sups[i]), parts[i]);
  }
  eval_timing(o, *exec, ls, out);
  out["executor"] = exec->description();
  std::printf("executor: %s\n", exec->description().c_str());
}

// 1.'s figures: each epoch's training frames/s and the best after the first, printed and into `out`.
void training_figures(const train::TrainResult& tr, const dist::Communicator& world, nlohmann::json& out) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const auto& e : tr.epochs) {
    std::printf("  epoch %d: %.0f training frames/s (%.2f s)\n", e.epoch, e.frames_per_sec, e.epoch_seconds);
    epochs.push_back({{"epoch", e.epoch}, {"frames_per_sec", e.frames_per_sec}, {"epoch_seconds", e.epoch_seconds}});
  }
  out["epochs"] = epochs;
  // The first epoch includes one-time set-up (cuDNN plans, allocations): the
  // figure is the best later epoch.
  double best = 0;
  for (size_t i = tr.epochs.size() > 1 ? 1 : 0; i < tr.epochs.size(); ++i)
    best = std::max(best, tr.epochs[i].frames_per_sec);
  out["frames_per_sec"] = best;
  std::printf("training throughput: %.0f frames/s%s\n", best,
              world.size() > 1 ? (" (all " + std::to_string(world.size()) + " ranks together)").c_str() : "");
}

// The figures of each supervision into `out`: with one, at the top (as
// without --supervision) and its name under "supervision"; with both, under
// "segments" and "transcript", and the transcript / segments time ratios
// (per frame: the batches are the same) printed and under
// "transcript_over_segments".
void supervision_figures(const std::vector<config::Supervision>& sups, const std::vector<nlohmann::json>& parts,
                         nlohmann::json& out) {
  if (sups.size() == 1) {
    out["supervision"] = config::to_string(sups[0]);
    for (const auto& kv : parts[0].items()) out[kv.key()] = kv.value();
    return;
  }
  nlohmann::json ratio;
  const nlohmann::json &seg = parts[0], &tra = parts[1];
  out["segments"] = seg;
  out["transcript"] = tra;
  if (seg.value("frames_per_sec", 0.0) > 0 && tra.value("frames_per_sec", 0.0) > 0)
    ratio["training"] = seg["frames_per_sec"].get<double>() / tra["frames_per_sec"].get<double>();
  if (seg.contains("breakdown_ms") && tra.contains("breakdown_ms"))
    for (const char* k : {"step", "crf", "encoder_forward", "encoder_backward_penalty_norm"})
      ratio[k] = tra["breakdown_ms"][k].get<double>() / std::max(1e-12, seg["breakdown_ms"][k].get<double>());
  out["transcript_over_segments"] = ratio;
  std::printf("transcript / segments time per frame:");
  if (ratio.contains("training")) std::printf(" training epoch %.2fx", ratio["training"].get<double>());
  if (ratio.contains("step"))
    std::printf("%s synchronized step %.2fx (CRF stage %.2fx)", ratio.contains("training") ? "," : "",
                ratio["step"].get<double>(), ratio["crf"].get<double>());
  std::printf("\n");
}

void run_bench_train(const BenchTrainOptions& o) {
  start_ranks();  // mpirun / srun: --batch is the global batch, split across the ranks (docs/multigpu.md)
  const dist::Communicator& world = dist::world();
  const bool rank0 = world.rank() == 0;
  if (o.min_frames < 1 || o.max_frames < o.min_frames)
    throw std::invalid_argument("bench train: need 1 <= --min-frames <= --max-frames");
  if (!o.json_out.empty()) check_output_file("--json", o.json_out, "bench.json");
  const model::Device device = model::resolve_device(config::enum_value<config::DeviceSetting>(o.device, "--device"));
  const std::vector<config::Supervision> sups = supervisions(o);
  config::Config cfg = bench_config(o, device);
  const fs::path work = o.work_dir.empty() ? fs::temp_directory_path() / ("timitseg-bench-train-" + std::to_string(::getpid()))
                                           : fs::path(o.work_dir);
  if (fs::exists(work) && !fs::is_empty(work))
    throw std::invalid_argument("bench train: --work-dir " + work.string() + " is not empty");
  cfg.crf_supervision = sups[0];
  cfg.train_run_dir = (work / "run").string();
  cfg.validate();

  std::mt19937_64 rng(o.seed);
  train::TrainData td;
  td.train = synthetic_split("train", o.utterances, o.min_frames, o.max_frames, o.input_dim, rng);
  td.dev = synthetic_split("dev", std::max(1, o.batch), o.min_frames, o.max_frames, o.input_dim, rng);
  td.has_cmvn = false;
  if (rank0) print_bench_header(o, cfg, device, td, world);
  std::fflush(stdout);

  // 1. train() as `timitseg train` runs it, once per supervision.
  std::vector<nlohmann::json> parts(sups.size());
  for (size_t i = 0; i < sups.size(); ++i) {
    config::Config c = cfg;
    c.crf_supervision = sups[i];
    if (sups.size() > 1) c.train_run_dir = (work / ("run-" + std::string(config::to_string(sups[i])))).string();
    if (rank0) std::printf("crf.supervision %s:\n", config::to_string(sups[i]));
    std::fflush(stdout);
    const train::TrainResult tr = train::train(c, td, false);
    if (rank0) training_figures(tr, world, parts[i]);
  }
  nlohmann::json out;
  if (world.size() > 1) out["allreduce"] = time_allreduce(o, cfg, device);  // every rank takes part
  if (!rank0) return;  // the other ranks' part ends here
  out["device"] = model::device_name(device);
  out["world_size"] = world.size();
  out["config"] = cfg.to_json();
  // The per-part breakdown and evaluation are one executor's: not repeated per rank.
  if (world.size() == 1) executor_parts(o, cfg, device, td, sups, parts, out);
  supervision_figures(sups, parts, out);
  std::error_code ec;
  if (o.work_dir.empty()) fs::remove_all(work, ec);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, out.dump(2) + "\n");
}

}  // namespace

void add_bench_train_command(CLI::App& app) {
  auto o = std::make_shared<BenchTrainOptions>();
  CLI::App* c = bench_command(app)->add_subcommand(
      "train",
      "Training throughput (frames/s) of the whole step on a synthetic corpus in memory, a per-part breakdown, and "
      "the time to evaluate a set of utterances; under mpirun or srun the training throughput of all the processes "
      "together, --batch being the global batch (the scaling benchmark of docs/multigpu.md)");
  c->add_option("--device", o->device, "cpu, cuda or auto (the GPU when one is present)")
      ->check(enum_words<config::DeviceSetting>())
      ->capture_default_str();
  c->add_option("--supervision", o->supervision,
                "What the CRF stage learns from: segments (the frame labels' times), transcript (their phone sequence, "
                "times hidden: the transcript NLL, docs/crf.md) or both (one after the other on the same corpus, "
                "batches and initial parameters, then the transcript / segments time ratios)")
      ->check(CLI::IsMember({"segments", "transcript", "both"}))
      ->capture_default_str();
  c->add_option("--crf-backend", o->crf_backend, "reference, cpu or cuda (default: cuda on the GPU, else cpu)")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}));
  c->add_option("--rnn-algo", o->rnn_algo,
                "GPU recurrence: cuDNN standard, persist_static, persist_dynamic, fused (own kernel, Hopper), or auto "
                "(fused on compute capability 9.x, else standard)")
      ->check(enum_words<config::RnnAlgo>())
      ->capture_default_str();
  c->add_option("--threads", o->threads, "CPU threads (0 = all cores)")
      ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi))
      ->capture_default_str();
  c->add_option("--batch", o->batch, "Utterances per batch")
      ->check(CLI::Range(limits::kBatchSize.lo, limits::kBatchSize.hi))
      ->capture_default_str();
  c->add_option("--hidden", o->hidden, "BiLSTM width (2 x per direction)")
      ->check(CLI::Range(limits::kHiddenDim.lo, limits::kHiddenDim.hi))
      ->capture_default_str();
  c->add_option("--layers", o->layers, "BiLSTM layers")->check(CLI::Range(1, 64))->capture_default_str();
  c->add_option("--input-dim", o->input_dim, "Feature dimension")->check(CLI::Range(1, 4096))->capture_default_str();
  c->add_option("--max-duration", o->max_duration, "CRF K (1 = linear CRF)")
      ->check(CLI::Range(limits::kMaxDuration.lo, limits::kMaxDuration.hi))
      ->capture_default_str();
  c->add_option("--utterances", o->utterances, "Training utterances per epoch")->check(CLI::Range(1, 10000000))->capture_default_str();
  c->add_option("--min-frames", o->min_frames, "Shortest utterance")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--max-frames", o->max_frames, "Longest utterance")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--epochs", o->epochs, "Epochs (the figure is the best epoch after the first)")->check(CLI::Range(1, 1000))->capture_default_str();
  c->add_option("--bucketing", o->bucketing, "Length bucketing as in train.bucketing (true/false)")->capture_default_str();
  c->add_option("--bucket-batches", o->bucket_batches, "train.bucket_batches")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--check-numerics", o->check_numerics,
                "debug.check_numerics: per-layer NaN/Inf checks in every step (true/false; the figure to compare "
                "with false is their cost)")
      ->capture_default_str();
  c->add_option("--dropout", o->dropout, "model.dropout")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  c->add_option("--breakdown-steps", o->breakdown_steps, "Synchronized steps timed part by part (0 = skip)")->check(CLI::Range(0, 100000))->capture_default_str();
  c->add_option("--eval-utterances", o->eval_utterances, "Utterances decoded for the evaluation timing (0 = skip)")->check(CLI::Range(0, 10000000))->capture_default_str();
  c->add_option("--seed", o->seed, "Seed of the synthetic corpus and the model")->capture_default_str();
  c->add_option("--work-dir", o->work_dir, "Empty folder for the run's checkpoints (default: a temporary folder, removed after)");
  c->add_option("--json", o->json_out, "Also write the figures as JSON to this file");
  c->callback([o] { run_bench_train(*o); });
}

}  // namespace timitseg::app
