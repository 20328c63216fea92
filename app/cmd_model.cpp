// Subcommands of the model layer: train, evaluate, decode (docs/training.md).
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/enum_flags.h"
#include "app/inference_flags.h"
#include "app/long_flags.h"
#include "app/boundaries_flag.h"
#include "app/silence_edge_flags.h"
#include "settings/limits.h"
#include "app/report/phone_bias.h"
#include "app/report/reliability.h"
#include "app/report/report.h"
#include "common/files.h"
#include "common/atomic_file.h"
#include "config/config.h"
#include "model/executor.h"
#include "eval/formats.h"
#include "eval/infer.h"
#include "train/interrupt.h"
#include "train/train.h"

namespace timitseg::app {

namespace {

// evaluate's and score's --split words, in --help's order.
const std::vector<data::SplitName> kSplitChoices{data::SplitName::dev, data::SplitName::core_test, data::SplitName::test,
                                                 data::SplitName::train};

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string resume;
  double crf_reg = -1;
  std::string crf_backend;
  std::string device;
  int fixed_length = -1;
  bool check_numerics = false;
  std::string inject_fault;
  bool deterministic = false;
};

// Refreshes RUN_DIR/report.html after every epoch (docs/report.md). The dev
// predictions are the epoch's own dev decoding when the epoch is the best so
// far (no second decoding), else those kept from the best epoch; only a
// resumed run whose first epoch is not the best decodes best.safetensors once.
// A failure is a warning: training goes on.
// `workdir`: the run's data.workdir now (a resume may point at a moved one); "" = best.safetensors's.
train::AfterEpoch report_refresher(const train::TrainData& data, int threads, const std::string& workdir = "") {
  struct Cache {
    bool tried = false;  // predictions of best.safetensors looked for
    bool logged = false;
    report::RunReport run;
    std::vector<report::Spectrogram> drawn;
  };
  auto cache = std::make_shared<Cache>();
  return [cache, &data, threads, workdir](const train::EpochEnd& e) {
    const std::string path = (std::filesystem::path(e.run_dir) / "report.html").string();
    try {
      const auto t0 = std::chrono::steady_clock::now();
      report::RunReport& run = cache->run;
      run.run_dir = e.run_dir;
      if (e.best && !e.dev.empty()) {
        run.predictions = report::predictions_from_segments(
            *e.labels, e.dev,
            "checkpoints/best.safetensors (epoch " + std::to_string(e.epoch) + "), dev split, " +
                std::to_string(e.dev.size()) + " utterances");
        run.predictions.frame_shift_ms = data.features.frame_shift_ms;
        run.has_predictions = true;
        if (cache->drawn.empty()) {
          std::vector<const data::Utterance*> utts;
          for (const auto& d : e.dev) utts.push_back(d.first);
          cache->drawn = report::pick_drawn(utts, data.features);
        }
        cache->tried = true;
      } else if (!cache->tried) {
        cache->tried = true;
        run.has_predictions = report::predict_best(e.run_dir, threads, &run.predictions, &cache->drawn, &run.predictions_note,
                                                    workdir);
      }
      report::ReportInput in;
      in.scoring_names = e.labels->scoring_names;
      in.runs = {run};
      in.drawn = cache->drawn;
      report::write_report(in, path);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!cache->logged)
        cache->logged = true, spdlog::info("report: {} (refreshed after every epoch, {:.2f} s)", path, secs);
      else
        spdlog::debug("report: {} refreshed in {:.2f} s", path, secs);
    } catch (const std::exception& x) {
      spdlog::warn("could not write {}: {} (training goes on)", path, x.what());
    }
  };
}

// The set-up of `train` before the loop: the configuration (the run's own on
// --resume), its checks and the data. false: a finished run, nothing to do.
bool prepare_train(const TrainArgs& a, config::Config& cfg, bool& resume, train::TrainData& data) {
  using config::Config;
  std::vector<std::string> overrides = a.sets;
  if (a.crf_reg >= 0) overrides.push_back("crf.reg=" + config::format_double(a.crf_reg));
  if (!a.crf_backend.empty()) overrides.push_back("crf.backend=" + a.crf_backend);
  if (!a.device.empty()) overrides.push_back("train.device=" + a.device);
  if (a.fixed_length >= 0) overrides.push_back("debug.fixed_length=" + std::to_string(a.fixed_length));
  if (a.check_numerics) overrides.push_back("debug.check_numerics=true");
  if (!a.inject_fault.empty()) overrides.push_back("debug.inject_fault=\"" + a.inject_fault + "\"");
  if (a.deterministic) overrides.push_back("debug.deterministic=true");
  if (!a.resume.empty()) {
    // The run's own resolved config (as saved in its latest checkpoint), then overrides.
    const std::string ckpt = train::latest_checkpoint(a.resume);
    if (ckpt.empty()) throw std::runtime_error(a.resume + ": no checkpoints/epoch-N.safetensors to resume from");
    if (!a.config.empty())
      spdlog::warn("--resume: using the configuration saved in {}; --config {} is ignored", ckpt, a.config);
    const model::ModelState last = model::load_checkpoint(ckpt);
    cfg = last.config;
    // Only the keys of Config::resumable_keys() may change (docs/config.md).
    for (const std::string& o : overrides) cfg.set_on_resume(o, "--resume with --set " + o);
    cfg.train_run_dir = a.resume;
    cfg.validate();
    resume = true;
    if (last.epoch >= cfg.train_epochs) {
      // A finished run: one line, nothing loaded or written (docs/training.md); only the
      // temporaries of a write that was killed are cleared, as every train call does.
      if (dist::world().rank() == 0) {
        remove_stale_temporaries(a.resume);
        remove_stale_temporaries((std::filesystem::path(a.resume) / "checkpoints").string());
      }
      spdlog::info("{} is finished: it has trained {} of train.epochs = {} epoch(s); nothing to do. To train it "
                   "longer: timitseg train --resume {} --set train.epochs=N with N > {} (from epoch {} on the learning rate "
                   "follows the schedule of an N-epoch run; the epochs trained keep theirs); for an N-epoch schedule "
                   "from the start, train a new run: --set train.epochs=N --set train.run_dir=NEW_DIR",
                   a.resume, last.epoch, cfg.train_epochs, a.resume, last.epoch, last.epoch + 1);
      return false;
    }
  } else {
    if (a.config.empty()) throw std::invalid_argument("train: --config FILE.yaml is required (or --resume RUN_DIR)");
    cfg = Config::load(a.config, overrides);
    if (!cfg.train_run_dir.empty()) train::check_fresh_run_dir(cfg.train_run_dir);  // before loading data
  }
  model::resolve_device(cfg.train_device);  // no GPU for train.device=cuda: one line, before anything is read or written
  // SIGINT / SIGTERM from here on: stop after the current step with one line
  // saying how to resume (train/interrupt.h).
  train::install_stop_handlers();
  data = train::load_train_data(cfg);
  return true;
}

// The dev PER of RUN_DIR/metrics.jsonl's epoch-1 line, formatted; "n/a" when
// the file or the value is missing (no dev split).
std::string first_dev_per_of_run(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("epoch", 0) == 1 && j.contains("dev_per") && j["dev_per"].is_number())
      return train::format_metric(j["dev_per"].get<double>(), "%.2f%%", 100);
  }
  return "n/a";
}

void run_train(const TrainArgs& a) {
  start_ranks();  // mpirun / srun: this process's rank (common/dist.h); one process otherwise
  config::Config cfg;
  bool resume = false, go = false;
  train::TrainData data;
  // Every rank reads the configuration and the data; a failure on any rank
  // stops them all, reported once (dist::agree).
  dist::agree("the set-up", [&] { go = prepare_train(a, cfg, resume, data); });
  if (!go) return;
  const train::TrainResult r = train::train(cfg, data, resume, report_refresher(data, cfg.train_threads, cfg.data_workdir));
  if (r.epochs.empty()) return;
  const std::string last = train::format_metric(r.epochs.back().dev_per, "%.2f%%", 100);
  if (!resume) {
    spdlog::info("done: {} epoch(s); first dev PER {}, last dev PER {}; checkpoints in {}/checkpoints",
                 r.epochs.size(), train::format_metric(r.epochs.front().dev_per, "%.2f%%", 100), last, r.run_dir);
    return;
  }
  // A resumed run: this call's epochs within the run's, and the run's first dev PER (metrics.jsonl).
  spdlog::info("done: {} epoch(s) in this call (epochs {}-{} of the run's {}); the run's first dev PER {} (epoch 1), "
               "last dev PER {}; checkpoints in {}/checkpoints",
               r.epochs.size(), r.epochs.front().epoch, r.epochs.back().epoch, r.epochs.back().epoch,
               first_dev_per_of_run(r.run_dir), last, r.run_dir);
}

}  // namespace

train::AfterEpoch train_report_refresher(const train::TrainData& data, int threads) {
  return report_refresher(data, threads);
}

namespace {

// `timitseg train` and its options (docs/training.md).
void add_train_command(CLI::App& app) {
  auto ta = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train",
      "Train an encoder + semi-CRF phone segmenter on a prepared WORKDIR (docs/training.md, keys in docs/config.md); "
      "started by mpirun or srun, one run spread over the processes (docs/training.md \"Several processes\")");
  train->add_option("--config", ta->config, "YAML config file (sections data, features, model, crf, train, debug)");
  train->add_option("--set", ta->sets,
                    "Override one config key, KEY=VALUE with VALUE in YAML syntax (repeatable), e.g. --set train.lr=3e-4");
  std::string resumable;  // the keys --set may change on --resume: the one list, config::Config::resumable_keys()
  for (const std::string& k : config::Config::resumable_keys())
    resumable += (resumable.empty() ? "" : ", ") + k + (k == "data.workdir" ? " (a WORKDIR that moved)" : "");
  train->add_option("--resume", ta->resume,
                    "Continue RUN_DIR from its latest checkpoints/epoch-N.safetensors with the run's saved config "
                    "(bitwise identical to an uninterrupted run on the CPU); --set may change only " + resumable +
                        "; any number of processes may resume a run of any number");
  train->add_option("--crf-reg", ta->crf_reg, "Same as --set crf.reg=X: L2 penalty on transition and duration_bias")
      ->check(CLI::Range(0.0, 1e6));
  train->add_option("--crf-backend", ta->crf_backend,
                    "Same as --set crf.backend=NAME: reference (float64, slow, trustworthy; the old --no-triton), cpu, "
                    "cuda, or auto (cuda on the GPU, cpu on the CPU)")
      ->check(enum_words<config::CrfBackendSetting>());
  train->add_option("--device", ta->device,
                    "Same as --set train.device=NAME: cpu, cuda (the whole step on the GPU: cuDNN encoder, CRF, "
                    "optimizer), or auto (cuda when a GPU is present)")
      ->check(enum_words<config::DeviceSetting>());
  train->add_option("--fixed-length", ta->fixed_length,
                    "Same as --set debug.fixed_length=N: truncate or pad every training utterance to N frames and "
                    "report N as its length (0 = off); isolates boundary handling")
      ->check(CLI::Range(0, 1000000));
  train->add_flag("--check-numerics", ta->check_numerics,
                  "Same as --set debug.check_numerics=true: after every layer's forward and backward, test every "
                  "tensor for NaN/Inf; the first hit stops training with one report and a dump folder "
                  "RUN_DIR/nonfinite-step-N for `timitseg replay-step` (docs/debugging.md)");
  train->add_option("--inject-fault", ta->inject_fault,
                    "Same as --set debug.inject_fault=SPEC: plant one NaN/Inf, SPEC = "
                    "layer=NAME,pass=forward|backward,step=N,value=nan|inf (layers: input, input_proj, "
                    "lstm.K.fwd|bwd, projection, center, cumsum, crf, penalty, optimizer; N: global optimizer step "
                    "from 1)");
  train->add_flag("--deterministic", ta->deterministic,
                  "Same as --set debug.deterministic=true: fixed reduction orders everywhere (deterministic cuDNN "
                  "algorithms, no order-dependent atomics); the CPU is always deterministic");
  train->callback([ta] { run_train(*ta); });
}

// `timitseg evaluate`: decode a split with a checkpoint and print its metrics.
void add_evaluate_command(CLI::App& app) {
  auto eval_opts = std::make_shared<eval::EvaluateOptions>();
  CLI::App* ev = app.add_subcommand(
      "evaluate", "Viterbi-decode a split with a checkpoint and print 39-phone metrics (PER with its substitutions, deletions and insertions, boundaries, boundary precision/recall/F1/R-value at 20 ms one-to-one and lenient (SegFeat/UnsupSeg; docs/metrics.md), segments, ...)");
  ev->add_option("--checkpoint", eval_opts->checkpoint, "Checkpoint (.safetensors) written by train")->required();
  add_enum_option_of(ev, "--split", &eval_opts->split, kSplitChoices, "Split of the prepared WORKDIR: dev, core-test, test (or train)");
  ev->add_option("--workdir", eval_opts->workdir,
                 "Prepared WORKDIR (default: the checkpoint's data.workdir, an absolute path; give it when that "
                 "folder has moved)");
  auto no_progress = std::make_shared<bool>(false);  // a bool flag: "--no-progress=maybe" is a usage error, not a crash
  ev->add_flag("--no-progress", *no_progress,
               "No progress bar (stderr: a bar on a terminal, else a line at each 10% of the utterances)");
  ev->add_option("--json", eval_opts->json_out, "Also write the metrics as JSON to this file");
  ev->add_option("--max-utterances", eval_opts->max_utterances,
                 "Only the first N utterances of the split, in its order (0 = all): a quick look, or a calibration "
                 "from a few timed utterances with --fit-shifts; the JSON's \"utterances\" says how many were used")
      ->capture_default_str();
  ev->add_option("--dump-scores", eval_opts->dump_scores_dir,
                 "Write one safetensors per utterance into DIR: features F32 [T,D] (normalized encoder input), scores "
                 "F32 [T,C] (projection output before centering), segments I32 [N,3] (start, duration, label)");
  ev->add_option("--dump-predictions", eval_opts->dump_predictions,
                 "Write the predicted frame labels as JSONL, one line per utterance in split order: {\"index\": I, "
                 "\"utterance_id\": ID, \"phones\": [39-phone name per frame]} (the input of `timitseg score`)");
  const InferenceFlags flags{&eval_opts->backend, &eval_opts->device, &eval_opts->phone_bonus, &eval_opts->decode, &eval_opts->batch_size, &eval_opts->threads};
  add_inference_flags(ev, flags, kBackendFlag | kDeviceFlag | kPhoneBonusFlag | kDecodeFlag | kBatchSizeFlag,
                      InferenceUse::decoding);
  ev->add_flag("--align", eval_opts->align,
               "Also forced-align each utterance's reference phone sequence (its frame labels' runs in the label set) "
               "and report the fraction of reference boundaries within 10/20/25/50 ms and the mean and median "
               "absolute boundary error, boundaries matched by index, and the AUROC and calibration of the confidences "
               "(corrupted transcripts for label_confidence) (JSON \"align\"; docs/align.md)");
  CLI::Option* fit = ev->add_option(
      "--fit-shifts", eval_opts->fit_shifts,
      "With --align: write each phone's boundary shift to this JSON file: the median signed error (aligned minus "
      "reference, sample-accurate) of the boundaries into it on this split, for phones with at least "
      "--shift-min-boundaries of them. Fit it on a split whose times you trust (dev), apply it with --shifts or "
      "`align --shifts` (docs/align.md \"Calibrating to a labelling convention\")");
  CLI::Option* apply = ev->add_option(
      "--shifts", eval_opts->shifts,
      "With --align: move each aligned boundary by its shift (the phone pair's around it where the file has "
      "one, else the phone's after it; a file written by --fit-shifts with this checkpoint's phone set) before "
      "the sample-accurate scores; the frame-quantized row stays the model's own");
  fit->excludes(apply);
  apply->excludes(fit);
  ev->add_option("--shift-min-boundaries", eval_opts->shift_min_boundaries,
                 "With --fit-shifts: fit a phone (or a pair) only from at least this many boundaries (the others get "
                 "no shift)")
      ->capture_default_str();
  add_enum_option<eval::ShiftContext>(
      ev, "--shift-context", &eval_opts->shift_context,
      "With --fit-shifts: phone (default: one shift per phone after the boundary) or pair (also one per pair of "
      "phones around it, where the pair has --shift-min-boundaries; the phone's shift elsewhere)");
  add_boundaries_flag(ev, &eval_opts->boundaries, "With --align: ");
  add_silence_edge_flags(ev, &eval_opts->silence_edges, &eval_opts->silence_edge_options, "With --align: ");
  auto plot = std::make_shared<std::string>();
  ev->add_option("--reliability-plot", *plot,
                 "With --align: write the reliability plot of boundary_confidence and label_confidence (10 bins, "
                 "observed frequency against mean confidence, ECE in the legend) as an SVG file (docs/align.md)");
  auto phone_plot = std::make_shared<std::string>();
  ev->add_option("--phone-plot", *phone_plot,
                 "With --align: write the per-phone bias plot as an SVG file: one bar per phone, the mean signed error "
                 "of the boundaries into it (< 0: aligned early), with their number and share within 20 ms "
                 "(JSON \"by_phone\"; docs/align.md \"Per phone\")");
  add_inference_flags(ev, flags, kThreadsFlag, InferenceUse::decoding);
  ev->callback([ev, eval_opts, no_progress, plot, phone_plot] {
    if (*no_progress) eval_opts->progress = false;
    // Before any work, one line naming the first option given whose help starts "With --align:"
    // (--boundaries, --silence-*, the shifts, the plots): without --align it would do nothing.
    for (const CLI::Option* o : ev->get_options())
      if (!eval_opts->align && o->count() > 0 && o->get_description().rfind("With --align:", 0) == 0)
        throw std::invalid_argument("evaluate: " + o->get_name() + " needs --align");
    for (const auto& [flag, path, example] : {std::tuple{"--reliability-plot", plot, "reliability.svg"},
                                              std::tuple{"--phone-plot", phone_plot, "phone_bias.svg"}}) {
      if (path->empty()) continue;
      check_output_file(flag, *path, example);
      eval_opts->more_outputs.emplace_back(flag, *path);
    }
    const nlohmann::json j = eval::evaluate(*eval_opts);
    if (!plot->empty()) write_file_atomic(*plot, report::reliability_svg(j.at("align").at("confidence")));
    if (!phone_plot->empty()) write_file_atomic(*phone_plot, report::phone_bias_svg(j.at("align").at("samples")));
  });
}

// `timitseg score`: the metrics of frame predictions made by any program.
void add_score_command(CLI::App& app) {
  auto score_opts = std::make_shared<eval::ScoreOptions>();
  CLI::App* sc = app.add_subcommand(
      "score",
      "Score frame predictions made by any program (JSONL) against a split of a prepared WORKDIR with the metrics of "
      "evaluate (PER, boundary F1 at 0/1/2 frames, boundary precision/recall/F1/R-value at 20 ms one-to-one and lenient, segment F1, duration KL, ...), "
      "or phone spans of a forced aligner (--spans) with those of evaluate --align");
  sc->add_option("--workdir", score_opts->workdir, "Prepared WORKDIR holding the split")->required();
  add_enum_option_of(sc, "--split", &score_opts->split, kSplitChoices, "Split of the WORKDIR: dev, core-test, test (or train)");
  CLI::Option* pred = sc->add_option("--predictions", score_opts->predictions,
                 "JSONL, one line per utterance of the split in split order: {\"index\": I (0-based), "
                 "\"utterance_id\": ID, \"phones\": [39-phone name per frame]}; other fields are ignored "
                 "(evaluate --dump-predictions writes it)");
  CLI::Option* spans = sc->add_option("--spans", score_opts->spans,
                 "JSONL of phone spans from a forced aligner, one line per utterance of the split in any order: "
                 "{\"utterance_id\": ID, \"phones\": [[start_seconds, end_seconds, label], ...]} with the "
                 "utterance's reference phones (the runs of its frame labels, 39-phone names); scored with the "
                 "alignment figures of evaluate --align (boundaries within 10/20/25/50 ms, mean and median error; "
                 "the boundary between two phones is the second one's start; an optional \"phn_phones\" of the same form: the "
                 "spans of the .PHN's phone sequence where it differs from the frame runs, for the sample-accurate rows). "
                 "One of --predictions and --spans");
  pred->excludes(spans);
  spans->excludes(pred);
  sc->add_option("--json", score_opts->json_out, "Also write the metrics as JSON to this file");
  sc->callback([score_opts] {
    if (score_opts->predictions.empty() && score_opts->spans.empty())
      throw std::invalid_argument("score: give --predictions FILE (frame predictions) or --spans FILE (phone spans)");
    eval::score(*score_opts);
  });
}

// `timitseg decode`: segment audio files or TIMIT trees with a checkpoint.
void add_decode_command(CLI::App& app) {
  auto dec = std::make_shared<eval::DecodeOptions>();
  CLI::App* de = app.add_subcommand(
      "decode", "Segment audio files or TIMIT trees with a checkpoint: one TIMIT .PHN (samples of the file as "
                "given) + Praat TextGrid each. Audio at another rate or with several channels is resampled to the "
                "model's rate (libsoxr) and down-mixed (mean of the channels), with one line saying so. A bad file is "
                "reported and the others are still decoded; the exit is then non-zero, with a count.");
  de->add_option("inputs", dec->inputs, "Audio files (WAV / NIST SPHERE) or folders searched for *.wav / *.WAV")
      ->required();
  de->add_option("--checkpoint", dec->checkpoint, "Checkpoint (.safetensors) written by train")->required();
  de->add_option("--out", dec->out_dir,
                 "Output folder: OUT/NAME.PHN and OUT/NAME.TextGrid, and the other --format files (folders keep their "
                 "relative layout)")
      ->required();
  InferenceFlags flags;  // decode has no --batch-size: one recording at a time
  flags.backend = &dec->backend, flags.device = &dec->device, flags.phone_bonus = &dec->phone_bonus;
  flags.decode = &dec->decode, flags.threads = &dec->threads;
  add_inference_flags(de, flags, kBackendFlag | kDeviceFlag | kPhoneBonusFlag | kDecodeFlag, InferenceUse::decoding);
  add_enum_list_option(de, "--format", &dec->formats,
                 "Output formats, comma-separated, each file written atomically: phn (NAME.PHN), textgrid "
                 "(NAME.TextGrid), csv (NAME.csv: tier,start,end,start_sample,end_sample,label,posterior), json "
                 "(NAME.json, each phone with its \"posterior\"), ctm (NAME.ctm); posterior = the probability of "
                 "that segment, label and span, under the model (its segment marginal; docs/align.md)");
  add_inference_flags(de, flags, kThreadsFlag, InferenceUse::decoding);
  add_centre_frames_option(de, &dec->centre_frames);
  de->callback([dec] { eval::decode(*dec); });
}

}  // namespace

void add_model_commands(CLI::App& app) {
  add_train_command(app);
  add_evaluate_command(app);
  add_score_command(app);
  add_decode_command(app);
}

}  // namespace timitseg::app
