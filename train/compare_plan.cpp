// The plan of `timitseg compare` (train/compare_plan.h): the seeds, the
// variants (linear, semi-CRF, those of --variant and --ablation), each run's
// typed config and folder, and what to do with each folder.
#include "train/compare_plan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"
#include "data/split_ids.h"
#include "model/checkpoint.h"
#include "model/feature_check.h"
#include "options/device_choice.h"
#include "train/run_folder.h"

namespace fs = std::filesystem;

namespace timitseg::train {

std::vector<uint64_t> parse_compare_seeds(const std::string& spec, uint64_t base) {
  if (spec.empty()) return {base};
  auto number = [&](const std::string& t) -> uint64_t {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      if (t.empty() || t[0] == '-') throw std::invalid_argument("negative");
      v = std::stoull(t, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    if (used != t.size())
      throw std::invalid_argument("--seeds " + spec + ": '" + t +
                                  "' is not a non-negative integer (use --seeds N or --seeds 1,2,3)");
    return v;
  };
  std::vector<uint64_t> out;
  if (spec.find(',') == std::string::npos) {
    const uint64_t n = number(spec);
    if (n < 1 || n > 1000) throw std::invalid_argument("--seeds " + spec + ": the number of seeds must be in [1, 1000]");
    for (uint64_t i = 0; i < n; ++i) out.push_back(base + i);
  } else {
    std::istringstream in(spec);
    std::string t;
    while (std::getline(in, t, ',')) {
      const uint64_t s = number(t);
      for (uint64_t x : out)
        if (x == s) throw std::invalid_argument("--seeds " + spec + ": seed " + t + " is listed twice");
      out.push_back(s);
    }
  }
  return out;
}

namespace {

// SECTION.KEY= starts at text[at]: [A-Za-z_][A-Za-z0-9_]* '.' [A-Za-z0-9_]+ '='.
bool starts_assignment(const std::string& text, size_t at) {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  size_t i = at;
  if (i >= text.size() || std::isdigit(static_cast<unsigned char>(text[i])) || !word_char(text[i])) return false;
  while (i < text.size() && word_char(text[i])) ++i;
  if (i >= text.size() || text[i] != '.') return false;
  const size_t key = ++i;
  while (i < text.size() && word_char(text[i])) ++i;
  return i > key && i < text.size() && text[i] == '=';
}

// "a.b=1,c.d=x,y" -> {"a.b=1", "c.d=x,y"}: a ',' splits only before SECTION.KEY=.
std::vector<std::string> split_assignments(const std::string& body) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i)
    if (body[i] == ',' && starts_assignment(body, i + 1)) {
      out.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  out.push_back(body.substr(start));
  return out;
}

// The names compare gives its own runs, and the keys it sets for each run.
const char* const kReservedNames[] = {"linear", "semicrf"};
const char* const kCompareKeys[] = {"train.seed", "train.run_dir", "data.workdir"};

void check_variant_name(const std::string& name, const std::string& origin) {
  const bool chars_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (!chars_ok)
    throw std::invalid_argument(origin + ": the variant's name '" + name + "' (before ':') must be letters, digits, "
                                "'-' and '_' (it names the run folder RUN_DIR/NAME)");
  for (const char* r : kReservedNames)
    if (name == std::string(r))
      throw std::invalid_argument(origin + ": '" + name + "' is the name of compare's own " + r +
                                  " run; choose another name");
  if (name.rfind("seed-", 0) == 0)
    throw std::invalid_argument(origin + ": a name starting 'seed-' is taken by the seed folders (RUN_DIR/seed-S)");
}

}  // namespace

VariantSpec parse_variant_spec(const std::string& text) {
  VariantSpec v;
  v.origin = "--variant " + text;
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(v.origin + ": expected NAME:KEY=VALUE[,KEY=VALUE...] (e.g. no-speed:augment.speed=false)");
  v.name = text.substr(0, colon);
  check_variant_name(v.name, v.origin);
  const std::string body = text.substr(colon + 1);
  if (body.empty()) throw std::invalid_argument(v.origin + ": no KEY=VALUE after '" + v.name + ":'");
  config::Config probe;  // each key and value checked as --set checks them
  std::vector<std::string> keys;
  for (const std::string& a : split_assignments(body)) {
    probe.set(a, v.origin);
    const std::string key = a.substr(0, a.find('='));
    for (const char* k : kCompareKeys)
      if (key == std::string(k))
        throw std::invalid_argument(v.origin + ": " + key + " is set by compare for every run; a variant may not "
                                    "set it (--set sets it for every run)");
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      throw std::invalid_argument(v.origin + ": " + key + " is set twice");
    keys.push_back(key);
    v.sets.push_back(a);
  }
  if (!probe.bad_words.empty()) probe.validate();  // a word that is none of the key's: the usual message
  return v;
}

AugmentedCopies augmented_copies(const std::string& workdir) {
  AugmentedCopies c;
  for (const std::string& id : data::split_utterance_ids(workdir, "train")) {
    const data::Augmentation kind = data::augmentation_of(id);
    c.speed = c.speed || kind == data::Augmentation::speed;
    c.noise = c.noise || kind == data::Augmentation::noise;
  }
  return c;
}

std::vector<VariantSpec> ablation_variants(AblationKind kind, const config::Config& base, const AugmentedCopies& copies,
                                           std::string* note) {
  std::vector<VariantSpec> out;
  std::vector<std::string> idle;  // parts on in the config with nothing to act on
  const std::string origin = std::string("--ablation ") + common::to_string(kind);
  switch (kind) {
    case AblationKind::heads:
      if (base.onset_enabled()) out.push_back({"no-onset", {"crf.onset_features=false"}, origin});
      if (base.end_enabled()) out.push_back({"no-end", {"crf.end_features=false"}, origin});
      note->clear();
      if (out.empty())
        *note = "compare --ablation heads: the semi-CRF has no anchored head on (crf.onset_features, "
                "crf.end_features): no variant added";
      return out;
    case AblationKind::augment: {
      if (base.augment_speed && copies.speed) out.push_back({"no-speed", {"augment.speed=false"}, origin});
      if (base.augment_speed && !copies.speed) idle.push_back("augment.speed (no speed-perturbed copies)");
      if (base.augment_noise && copies.noise) out.push_back({"no-noise", {"augment.noise=false"}, origin});
      if (base.augment_noise && !copies.noise) idle.push_back("augment.noise (no noisy copies)");
      if (base.augment_time_masks > 0 && base.augment_time_mask_width > 0)
        out.push_back({"no-time-masks", {"augment.time_masks=0"}, origin});
      if (base.augment_freq_masks > 0 && base.augment_freq_mask_width > 0)
        out.push_back({"no-freq-masks", {"augment.freq_masks=0"}, origin});
      break;
    }
  }
  std::string idle_text;
  for (const std::string& i : idle) idle_text += (idle_text.empty() ? "" : ", ") + i;
  if (!idle.empty()) idle_text += " in " + base.data_workdir + ": on, but with nothing to act on";
  note->clear();
  if (out.empty())
    *note = "compare --ablation augment: no augmentation part is on (augment.speed and augment.noise with augmented "
            "copies in the WORKDIR, augment.time_masks or augment.freq_masks with a width above 0)" +
            (idle.empty() ? "" : "; " + idle_text) + ": no variant added";
  else if (!idle.empty())
    *note = "compare --ablation augment: no variant for " + idle_text + " (timitseg augment makes copies)";
  return out;
}

namespace {

// Keys that change how a run is logged, checked or kept, never what it
// computes: a run folder whose saved config differs from the requested one
// only in these is still the same run. train.run_dir is where the folder is
// (a moved folder holds the same run).
const char* kIgnoredKeys[] = {"train.run_dir",        "train.log_every",      "train.threads",
                              "train.keep_checkpoints", "debug.drift_threshold", "debug.check_numerics"};

}  // namespace

// `auto` stands for this machine's pick, so a run saved with `auto` and a
// request for `cpu` on the CPU (or the reverse) are the same run; an explicit
// value that differs from the pick is a difference.
std::vector<std::string> config_differences(const config::Config& saved_as_is, const config::Config& requested) {
  const options::DeviceFacts facts = options::probe_device_facts();
  // a saved run whose data.workdir is relative: the path is taken from here, as
  // the requested one was
  config::Config saved = saved_as_is;
  if (!saved.data_workdir.empty() && fs::path(saved.data_workdir).is_relative()) {
    fs::path abs = fs::absolute(saved.data_workdir).lexically_normal();
    if (!abs.has_filename()) abs = abs.parent_path();
    saved.data_workdir = abs.string();
  }
  nlohmann::json ja = options::with_choices(saved, facts).to_json();
  nlohmann::json jb = options::with_choices(requested, facts).to_json();
  std::vector<std::string> out;
  for (const std::string& k : config::Config::keys()) {
    if (std::find(std::begin(kIgnoredKeys), std::end(kIgnoredKeys), k) != std::end(kIgnoredKeys)) continue;
    const std::string sec = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
    const nlohmann::json va = ja.contains(sec) && ja[sec].contains(key) ? ja[sec][key] : nlohmann::json();
    const nlohmann::json vb = jb.contains(sec) && jb[sec].contains(key) ? jb[sec][key] : nlohmann::json();
    if (va != vb) out.push_back(k + ": " + va.dump() + " -> " + vb.dump());
  }
  return out;
}

fs::path replaced_run_path(const std::string& run_dir) {
  fs::path p = fs::path(run_dir);
  if (p.filename().empty()) p = p.parent_path();  // a trailing slash
  return p.parent_path() / (p.filename().string() + ".replaced");
}

namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

// What to do with job.cfg's folder: reuse it (same config, finished), resume it
// (same config, unfinished), train it (nothing there), or replace it (another
// config, --force). Returns the conflict ("" when none) when it may not be touched.
std::string folder_action(CompareJob& job, bool force) {
  const std::string& dir = job.cfg.train_run_dir;
  std::error_code ec;
  if (fs::exists(replaced_run_path(dir), ec))
    throw std::runtime_error(replaced_run_path(dir).string() + " exists: it holds the old run that a `compare --force` "
                             "was replacing when it was killed; delete it, or move it back to " + dir);
  const std::string ckpt = latest_checkpoint(dir);
  if (ckpt.empty()) {
    try {
      check_fresh_run_dir(dir);
      job.action = CompareJob::Action::fresh;
    } catch (const std::exception& e) {
      if (!force) return e.what();
      job.action = CompareJob::Action::replace;
      job.why = "metrics.jsonl without checkpoints";
    }
    return "";
  }
  // The requested config as train() would save it (the documentation test's epoch cap applied).
  config::Config requested = job.cfg;
  config::apply_doctest_limits(requested);
  const model::ModelState s = model::load_checkpoint(ckpt);
  std::vector<std::string> diff = config_differences(s.config, requested);
  // The same data.workdir path may hold features prepared anew with other options.
  if (const auto fd = model::feature_option_differences(s.features, data::load_feature_options(requested.data_workdir));
      !fd.empty())
    diff.push_back("trained on " + model::describe_feature_options(s.features, fd) + ", " + requested.data_workdir +
                   " holds " + model::describe_feature_options(data::load_feature_options(requested.data_workdir), fd));
  if (!diff.empty()) {
    if (!force) return dir + " (" + join(diff, ", ") + ")";
    job.action = CompareJob::Action::replace;
    job.why = join(diff, ", ");
    return "";
  }
  if (s.epoch >= requested.train_epochs) {
    job.action = CompareJob::Action::reuse;
    spdlog::info("compare: {} is finished (epoch {}/{}): reused", dir, s.epoch, requested.train_epochs);
  } else {
    job.action = CompareJob::Action::resume;
  }
  return "";
}

}  // namespace

std::vector<std::vector<config::Config>> ComparePlan::configs() const {
  std::vector<std::vector<config::Config>> out(variants.size());  // [v][s]
  for (size_t v = 0; v < variants.size(); ++v)
    for (size_t s = 0; s < seeds.size(); ++s) out[v].push_back(jobs[s * variants.size() + v].cfg);
  return out;
}

ComparePlan plan_compare(const config::Config& base, const std::string& config_path, const std::string& seeds_spec,
                         const std::vector<VariantSpec>& extra) {
  if (base.train_run_dir.empty()) throw std::invalid_argument(config_path + ": train.run_dir is required (the runs go "
                                                               "into RUN_DIR/linear and RUN_DIR/semicrf)");
  if (base.data_workdir.empty()) throw std::invalid_argument(config_path + ": data.workdir is required");
  ComparePlan plan;
  plan.base = base;
  plan.seeds = parse_compare_seeds(seeds_spec, base.train_seed);
  plan.seed_dirs = !(plan.seeds.size() == 1 && seeds_spec.empty());
  const int K = base.crf_max_duration;
  plan.variants = {{"linear", "linear CRF (K=1)", 1}, {"semicrf", "semi-CRF (K=" + std::to_string(K) + ")", K}};
  // each extra variant's config without its seed and folder: its keys over the base, checked once
  std::vector<config::Config> extra_cfgs;
  std::vector<std::string> origins = {"compare", "compare"};
  for (const VariantSpec& spec : extra) {
    for (size_t v = 0; v < plan.variants.size(); ++v)
      if (plan.variants[v].name == spec.name)
        throw std::invalid_argument(spec.origin + ": the name '" + spec.name + "' is already used (by " +
                                    origins[v] + ")");
    config::Config c = base;
    for (const std::string& a : spec.sets) c.set(a, spec.origin);
    c.validate();
    std::string keys;
    for (const std::string& a : spec.sets) keys += (keys.empty() ? "" : ", ") + a;
    plan.variants.push_back({spec.name,
                             spec.name + ": semi-CRF (K=" + std::to_string(c.crf_max_duration) + ") with " + keys,
                             c.crf_max_duration, spec.sets});
    origins.push_back(spec.origin);
    extra_cfgs.push_back(std::move(c));
  }
  for (uint64_t seed : plan.seeds)
    for (size_t v = 0; v < plan.variants.size(); ++v) {
      const CompareVariant& var = plan.variants[v];
      const std::string seed_dir = "seed-" + std::to_string(seed);
      const fs::path dir = plan.seed_dirs ? fs::path(base.train_run_dir) / seed_dir / var.name
                                          : fs::path(base.train_run_dir) / var.name;
      CompareJob job;
      job.name = plan.seed_dirs ? seed_dir + "/" + var.name : var.name;
      job.cfg = v < 2 ? base : extra_cfgs[v - 2];
      job.cfg.crf_max_duration = var.max_duration;
      job.cfg.train_seed = seed;
      job.cfg.train_run_dir = dir.string();
      for (const char* key : {"crf.max_duration", "train.seed", "train.run_dir"})
        if (v < 2 || std::string(key) != "crf.max_duration")  // a variant's K is the base's or its own key's
          job.cfg.origins[key] = "compare (the run " + job.name + ")";
      job.cfg.validate();
      plan.jobs.push_back(std::move(job));
    }
  return plan;
}

void plan_folders(ComparePlan& plan, bool force) {
  std::vector<std::string> conflicts;
  for (CompareJob& j : plan.jobs) {
    const std::string c = folder_action(j, force);
    if (!c.empty()) conflicts.push_back(c);
  }
  if (!conflicts.empty())
    throw std::runtime_error(
        "compare: " + std::string(conflicts.size() == 1 ? "a run folder holds" : "run folders hold") +
        " a run of another configuration, which compare never extends or mixes: " + join(conflicts, "; ") +
        ". Run again with --force to train " + (conflicts.size() == 1 ? "it" : "them") +
        " afresh (the old run is deleted once the new one has finished its first epoch), or choose another "
        "train.run_dir");
}

}  // namespace timitseg::train
