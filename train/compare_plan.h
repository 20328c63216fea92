// The runs of `timitseg compare` (app/cmd_compare.cpp: its flags and what it
// prints): the linear CRF (crf.max_duration = 1) and the semi-CRF (K from the
// config), and any semi-CRF variants (--variant, --ablation: some keys set
// over the config), one run of each per seed, each with its own typed config and run
// folder under train.run_dir (train/compare_plan.cpp: the plan and what to do
// with each folder); training them, several at once (train/compare_runs.cpp);
// how many at once by default (train/compare_jobs.cpp). A folder is reused
// only when its saved config equals the requested one (docs/training.md
// "Comparing the linear CRF and the semi-CRF").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "config/config.h"
#include "model/encoder.h"  // model::Device
#include "train/train.h"
#include "train/train_data.h"

namespace timitseg::train {

// One model of the comparison: the linear CRF, the semi-CRF, or a semi-CRF
// variant (--variant, --ablation) with some keys set on top of the base config.
struct CompareVariant {
  std::string name;   // the run folder's name: "linear", "semicrf", a variant's NAME
  std::string title;  // "linear CRF (K=1)", "semi-CRF (K=8)", "no-speed: semi-CRF (K=8) with augment.speed=false"
  int max_duration;   // crf.max_duration of its runs
  std::vector<std::string> sets = {};  // a variant's "section.key=value" over the base config; empty for linear, semicrf
};

// A variant's text: --variant NAME:KEY=VALUE[,KEY=VALUE...] (or one that
// --ablation makes), read by parse_variant_spec.
struct VariantSpec {
  std::string name;               // its run folder's name
  std::vector<std::string> sets;  // "section.key=value", in order
  std::string origin;             // "--variant TEXT" or "--ablation augment": what its errors and config origins name
};

// Reads --variant TEXT: NAME (letters, digits, '-', '_', '.'; not linear or
// semicrf) then ':' then KEY=VALUE assignments separated by ',' (a ',' that
// is not followed by SECTION.KEY= stays in the value). Each is checked as
// --set checks it (known key, value of the key's type); compare's own keys
// (train.seed, train.run_dir, data.workdir) and a key set twice are refused.
// Throws std::invalid_argument naming "--variant TEXT".
VariantSpec parse_variant_spec(const std::string& text);

// The kinds of --ablation: augment, one variant per augmentation part that
// the base config has on (augment.speed, augment.noise, augment.time_masks,
// augment.freq_masks), each with that part off; heads, one per anchored head
// the semi-CRF has on (crf.onset_features, crf.end_features), each off.
enum class AblationKind { augment, heads };
TIMITSEG_ENUM_NAMES(AblationKind, 2, {AblationKind::augment, "augment"}, {AblationKind::heads, "heads"});

// Which augmented copies (`timitseg augment`, data/augment.h) a WORKDIR's
// train split holds, from its file's header (data/split_ids.h).
struct AugmentedCopies {
  bool speed = false, noise = false;
};
AugmentedCopies augmented_copies(const std::string& workdir);

// The variants of one ablation of `base`, in a fixed order (augment: no-speed,
// no-noise, no-time-masks, no-freq-masks, those whose part is on: augment.speed
// and augment.noise only where `copies` has such copies, the masks with a
// number and a width above 0; heads: no-onset, no-end, those on for base's
// crf.max_duration). *note: one line on what is left out (none
// added, or a part on in the config with no copies to act on), else "".
std::vector<VariantSpec> ablation_variants(AblationKind kind, const config::Config& base, const AugmentedCopies& copies,
                                           std::string* note);

// One run of the comparison and what compare does with its folder.
struct CompareJob {
  enum class Action { reuse, fresh, resume, replace };
  config::Config cfg;  // the base config with the variant's crf.max_duration, the seed and the run folder
  std::string name;    // "linear", "seed-3/semicrf": the log prefix with --jobs > 1
  Action action = Action::fresh;
  std::string why;    // replace: the differences (or the leftover) that --force overrides
  std::string error;  // after training: the failure, "" when it trained
  bool interrupted = false;
  int interrupt_code = 0;
};

// Every run of a comparison, before anything is trained.
struct ComparePlan {
  config::Config base;                   // the config with every --set (and --device)
  std::vector<uint64_t> seeds;           // in training order
  bool seed_dirs = false;                // runs in RUN_DIR/seed-S/NAME (any --seeds), else RUN_DIR/NAME
  std::vector<CompareVariant> variants;  // linear, semicrf, then the extra variants in the order given
  std::vector<CompareJob> jobs;          // [s * variants + v]: seed s, variant v (the training order of --jobs 1)
  // The runs' configs by variant: [v][s].
  std::vector<std::vector<config::Config>> configs() const;
};

// --seeds SPEC: "" -> {base}; "N" (no comma) -> base, base+1, ..., base+N-1;
// "a,b,c" -> {a, b, c}. Throws std::invalid_argument naming --seeds.
std::vector<uint64_t> parse_compare_seeds(const std::string& spec, uint64_t base);

// The plan of `compare --config CONFIG_PATH --seeds SEEDS_SPEC` from the loaded
// config `base`: train.run_dir and data.workdir are required (errors name
// CONFIG_PATH). Each run's config is `base` with the variant's
// crf.max_duration (an extra variant: its keys set over `base`), its seed and
// its folder set as values, then validated (errors name the variant's
// origin). A name used twice is refused, naming both origins.
ComparePlan plan_compare(const config::Config& base, const std::string& config_path, const std::string& seeds_spec,
                         const std::vector<VariantSpec>& extra = {});

// Every key (section.key) whose value differs between a run's saved config and
// the requested one, as "key: old -> new", leaving out the keys that only
// change how a run is logged, checked or kept. train.device, train.rnn_algo
// and crf.backend are compared resolved on this machine
// (options/device_choice.h).
std::vector<std::string> config_differences(const config::Config& saved, const config::Config& requested);

// The folder an old run waits in while `compare --force` trains its
// replacement's first epoch: RUN.replaced, beside RUN (docs/training.md).
std::filesystem::path replaced_run_path(const std::string& run_dir);

// Decides each job's action from its folder (reuse, resume, fresh, or with
// `force` replace), before anything is trained; the folders that hold a run
// of another configuration (without `force`): one error naming them all.
void plan_folders(ComparePlan& plan, bool force);

// Makes the per-epoch callback of one run (the app's report refresher), from the training data and train.threads.
using EpochCallbackMaker = std::function<AfterEpoch(const TrainData& data, int threads)>;

// The training part of compare: how many runs trained, how many at a time, how long.
struct CompareTraining {
  int to_train = 0, jobs_used = 1;
  double wall_seconds = 0;
};

// Trains the jobs that are not reused, `jobs` at a time (0: default_compare_jobs),
// one thread each; one error naming every run that did not finish
// (train::Interrupted when one was interrupted).
CompareTraining train_compare_runs(ComparePlan& plan, model::Device device, int jobs,
                                   const EpochCallbackMaker& after_epoch);

// The default --jobs: 1 on the CPU or for one run to train; on the GPU as many
// runs as fill its SMs twice (fused) and fit in its free memory, one run's
// measured on a probe executor (a failed probe: 1, with a warning).
int default_compare_jobs(model::Device device, const config::Config& cfg, const TrainData& data, int to_train);

}  // namespace timitseg::train
