// `timitseg compare`: the linear CRF (crf.max_duration = 1) against the
// semi-CRF (K from the config), trained with the same encoder, data, seed(s)
// and schedule, each in its own run folder under train.run_dir, evaluated on
// dev and core-test, printed as one table with the paired significance of
// the differences, and overlaid in RUN_DIR/report.html (docs/training.md
// "Comparing the linear CRF and the semi-CRF"); --variant and --ablation add
// semi-CRF variants, each tested against the semi-CRF. A folder is reused only when
// its saved config equals the requested one; --force retrains it; --jobs runs
// several trainings at once in this process.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cmd_compare.h"
#include "app/commands.h"
#include "app/enum_flags.h"
#include "common/enum_names.h"
#include "common/files.h"
#include "common/run_lock.h"
#include "common/walk.h"
#include "config/config.h"
#include "model/executor.h"  // resolve_device
#include "train/compare_plan.h"
#include "train/interrupt.h"

namespace fs = std::filesystem;

namespace timitseg::app {

namespace {

struct CompareArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string json_out;
  std::string seeds;  // --seeds: "" = train.seed; "N" = N seeds from train.seed; "1,2,3" = these (train::parse_compare_seeds)
  bool force = false;  // --force: retrain runs whose folder holds another configuration
  int jobs = 0;        // --jobs: runs at once (0: the default of train::default_compare_jobs)
  std::string device;  // --device: train.device for every run ("" = the config's)
  std::vector<train::VariantSpec> variants;  // --variant NAME:KEY=VALUE,...: extra semi-CRF runs, in order
  std::vector<train::AblationKind> ablations;  // --ablation KIND: their variants after those of --variant
};

// --set KEY=VALUE of every run, --device as train.device=NAME last.
std::vector<std::string> config_sets(const CompareArgs& a) {
  std::vector<std::string> sets = a.sets;
  if (!a.device.empty()) sets.push_back("train.device=" + a.device);
  return sets;
}

// The driver: the plan (train/compare_plan.h), its folders checked, the
// training, then evaluation, table, overlay report and JSON (app/cmd_compare_results.cpp).
void run_compare(const CompareArgs& a) {
  if (a.config.empty()) throw std::invalid_argument("compare: --config FILE.yaml is required");
  const config::Config base = config::Config::load(a.config, config_sets(a));
  std::vector<train::VariantSpec> extra = a.variants;
  for (const train::AblationKind kind : a.ablations) {
    std::string note;
    const train::AugmentedCopies copies = train::augmented_copies(base.data_workdir);
    for (train::VariantSpec& v : train::ablation_variants(kind, base, copies, &note)) extra.push_back(std::move(v));
    if (!note.empty()) spdlog::warn("{}", note);
  }
  train::ComparePlan plan = train::plan_compare(base, a.config, a.seeds, extra);
  const std::vector<uint64_t>& seeds = plan.seeds;
  const std::vector<compare::Variant>& variants = plan.variants;
  if (!a.json_out.empty()) check_output_file("--json", a.json_out, "compare.json");
  if (base.crf_max_duration == 1)
    spdlog::warn("compare: crf.max_duration is 1 in {}: the semi-CRF run is a linear CRF too", a.config);
  // no GPU for train.device=cuda: one line, before anything is written
  const model::Device device = model::resolve_device(base.train_device);
  train::install_stop_handlers();

  // one writer per run folder (common/run_lock.h): compare holds the parent of its runs, train() each run's
  InputSet inputs;
  inputs.add(base.data_workdir);
  refuse_output("train.run_dir", base.train_run_dir, inputs, "data.workdir, the prepared data");
  const RunLock lock(base.train_run_dir, "train.run_dir");
  train::plan_folders(plan, a.force);
  const train::CompareTraining done = train::train_compare_runs(plan, device, a.jobs, train_report_refresher);
  const std::vector<std::vector<config::Config>> cfgs = plan.configs();  // [v][s]

  compare::CompareResults res = compare::collect_results(base, variants, cfgs);
  const std::string seeds_text =
      seeds.size() == 1 ? "1 seed (" + std::to_string(seeds[0]) + "): a single run, no spread; use --seeds N"
                        : std::to_string(seeds.size()) + " seeds, mean ± std";
  std::ostringstream title;
  std::string names = "linear,semicrf";
  title << "compare: " << variants[0].title << " vs " << variants[1].title;
  for (size_t v = 2; v < variants.size(); ++v) {
    title << (v == 2 ? "; variants: " : "; ") << variants[v].title;
    names += "," + variants[v].name;
  }
  title << ", " << base.train_epochs << " epochs, " << seeds_text << "\n";
  compare::SigRows sig_rows;
  std::vector<compare::SigRows> variant_sig_rows;
  std::vector<std::string> cols;
  std::ostringstream os;
  os << compare::compare_table(res, variants, seeds.size(), title.str(), &sig_rows, &variant_sig_rows, &cols);
  os << "\nrun folders: " << (fs::path(base.train_run_dir) / ("{" + names + "}")).string()
     << (plan.seed_dirs ? " under seed-S/" : "") << "\n";
  if (done.to_train > 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "training wall time: %.1f s for %d run(s), %d at a time (--jobs %d)\n",
                  done.wall_seconds, done.to_train, done.jobs_used, done.jobs_used);
    os << buf;
  } else {
    os << "training wall time: 0 s (every run reused)\n";
  }

  const std::string report_path = compare::write_compare_report(res, base, variants, seeds_text, cols, sig_rows,
                                                                 variant_sig_rows);
  os << "report: " << report_path << "\n";
  std::printf("%s", os.str().c_str());
  std::fflush(stdout);
  if (!a.json_out.empty()) {
    compare::CompareJsonInfo info;
    info.config = a.config;
    info.report_path = report_path;
    info.epochs = base.train_epochs;
    info.jobs = done.jobs_used;
    info.runs_trained = done.to_train;
    info.train_wall_seconds = done.wall_seconds;
    info.seeds = seeds;
    compare::write_compare_json(a.json_out, res, variants, cfgs, info);
  }
}

// --variant and --ablation: read into a's lists when given; a malformed
// variant or a name given twice is a usage error (exit 2) naming the flag.
void add_variant_options(CLI::App* c, CompareArgs* a) {
  c->add_option_function<std::vector<std::string>>(
      "--variant",
      [a](const std::vector<std::string>& texts) {
        a->variants.clear();
        for (const std::string& t : texts) {
          try {
            a->variants.push_back(train::parse_variant_spec(t));
          } catch (const std::invalid_argument& e) {
            throw CLI::ValidationError(e.what());
          }
          for (size_t i = 0; i + 1 < a->variants.size(); ++i)
            if (a->variants[i].name == a->variants.back().name)
              throw CLI::ValidationError("--variant " + t + ": the name '" + a->variants.back().name +
                                         "' is given twice (" + a->variants[i].origin + ")");
        }
      },
      "Also train a semi-CRF variant NAME: the config with KEY=VALUE set over it (after every --set; VALUE in "
      "YAML syntax, as for --set; several separated by ','), into TRAIN.RUN_DIR/NAME (TRAIN.RUN_DIR/seed-S/NAME "
      "with --seeds); the table, --json and report.html show it, with its differences from the semi-CRF paired by "
      "seed. NAME: letters, digits, '-' and '_'. Repeatable, e.g. --variant no-speed:augment.speed=false "
      "--variant k4:crf.max_duration=4");
  c->add_option_function<std::vector<std::string>>(
       "--ablation",
       [a](const std::vector<std::string>& words) {
         a->ablations.clear();
         for (const std::string& w : words) a->ablations.push_back(common::enum_value<train::AblationKind>(w, "--ablation"));
       },
       "Add the variants of an ablation (after those of --variant): augment = one per augmentation part the config "
       "has on, each with that part off: no-speed (augment.speed=false), no-noise (augment.noise=false), "
       "no-time-masks (augment.time_masks=0), no-freq-masks (augment.freq_masks=0); speed and noise count as on "
       "only where the WORKDIR holds such copies (timitseg augment), masks when their number and width are above "
       "0; heads = one per anchored head the semi-CRF has on: no-onset (crf.onset_features=false), no-end "
       "(crf.end_features=false); a part left out, or none on, is said in one warning line")
      ->check(enum_words<train::AblationKind>());
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = app.add_subcommand(
      "compare",
      "Train the linear CRF (crf.max_duration=1) and the semi-CRF (K from the config) with the same encoder, data, "
      "seed(s) and schedule into TRAIN.RUN_DIR/linear and TRAIN.RUN_DIR/semicrf, evaluate both (best checkpoint) on "
      "dev and core-test (dev and test on a WORKDIR without core-test: other corpora) and print one table: PER, boundary F1 at 0/1/2 frames (and P/R/F1/R-value at 20 ms), "
      "segment F1, duration mean absolute error and KL, frame accuracy, forced alignment of the reference phones "
      "(fraction of boundaries within 10/20/25/50 ms, mean and median error; docs/align.md), training frames/s, "
      "decode time; then the "
      "semi-CRF minus linear CRF differences paired by seed with a t-test and a sign test, and "
      "TRAIN.RUN_DIR/report.html overlaying every run. A run folder is reused only when its saved config equals "
      "the requested one (resumed when unfinished); otherwise compare names the keys that differ and stops "
      "(docs/training.md). --variant and --ablation add semi-CRF variants (config keys set over the config), "
      "trained, tabled and tested against the semi-CRF alike");
  c->add_option("--config", a->config, "YAML config file, as for train (train.run_dir is the parent of the runs)")
      ->required();
  c->add_option("--set", a->sets,
                "Override one config key for both runs, KEY=VALUE with VALUE in YAML syntax (repeatable)");
  c->add_option("--json", a->json_out,
                "Also write the table as JSON (atomically): runs.{linear,semicrf}.{dev,core-test or test}.METRIC and "
                "train_frames_per_sec, each {mean, n, values, std (2 seeds or more)}; significance.SPLIT.METRIC "
                "{n, mean_difference, std, t_test {t, df, p}, sign_test {positive, negative, zero, p}}; jobs, "
                "train_wall_seconds, report; metrics of an empty split are left out. Each --variant or --ablation "
                "variant NAME: runs.NAME (with sets, its KEY=VALUE list) and variant_significance.NAME.SPLIT.METRIC, "
                "NAME minus the semi-CRF");
  c->add_option("--seeds", a->seeds,
                "Train every model with several seeds and show mean ± std: N (train.seed, train.seed+1, ...) or a "
                "list 1,2,3; the runs go into TRAIN.RUN_DIR/seed-S/{linear,semicrf}. Default: one run per model "
                "with train.seed (the table says '1 seed')");
  c->add_option("--device", a->device,
                "Same as --set train.device=NAME for every run (training and evaluation): cpu, cuda, or auto (cuda "
                "when a GPU is present)")
      ->check(enum_words<config::DeviceSetting>());
  add_variant_options(c, a.get());
  c->add_flag("--force", a->force,
              "Train afresh every run whose folder holds a run of another configuration (without it compare stops "
              "and names the keys that differ); the old folder moves to RUN.replaced and is deleted once the new "
              "run has finished its first epoch, or moved back if the new run fails before that");
  c->add_option("--jobs", a->jobs,
                "Runs trained at once, in this one process (one thread and one CUDA stream each). 0 = the default: "
                "on the GPU as many as fill its SMs (a fused run occupies ceil(batch/8)*2*4 SMs at H=128) and fit "
                "in free GPU memory (one run's use measured first); 1 on the CPU, where concurrent runs share one "
                "thread pool. Results do not depend on it")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  c->callback([a] { run_compare(*a); });
}

}  // namespace timitseg::app
