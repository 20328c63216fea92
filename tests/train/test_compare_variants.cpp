// compare's extra variants (--variant NAME:KEY=VALUE,..., --ablation augment;
// train/compare_plan.h): the text read into a name and assignments, each
// variant's typed config (its keys over the base config, its folder, its
// place in the training order), the variants of an augment ablation, the
// flag errors, and end to end on a tiny synth corpus: the variant's runs,
// saved config, JSON numbers and its significance against the semi-CRF.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "tests/support/cli.h"
#include "train/compare_plan.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

namespace {

// The message of parse_variant_spec(text)'s std::invalid_argument ("" when it parses).
std::string spec_error(const std::string& text) {
  try {
    train::parse_variant_spec(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

config::Config base_config() {
  config::Config c;
  c.train_run_dir = "/tmp/variants_plan/runs";
  c.data_workdir = "/tmp/variants_plan/work";
  c.crf_max_duration = 6;
  c.train_lr = 0.01;
  c.train_seed = 5;
  c.validate();
  return c;
}

}  // namespace

TEST(CompareVariantSpec, ReadsNameAndAssignments) {
  const train::VariantSpec v = train::parse_variant_spec("lr_2-b:train.lr=0.02,augment.speed=false");
  EXPECT_EQ(v.name, "lr_2-b");
  ASSERT_EQ(v.sets.size(), 2u);
  EXPECT_EQ(v.sets[0], "train.lr=0.02");
  EXPECT_EQ(v.sets[1], "augment.speed=false");
  EXPECT_EQ(v.origin, "--variant lr_2-b:train.lr=0.02,augment.speed=false");
  // a ',' not followed by SECTION.KEY= stays in the value
  const train::VariantSpec f =
      train::parse_variant_spec("fault:debug.inject_fault=layer=crf,pass=forward,step=1,value=nan,train.epochs=3");
  ASSERT_EQ(f.sets.size(), 2u);
  EXPECT_EQ(f.sets[0], "debug.inject_fault=layer=crf,pass=forward,step=1,value=nan");
  EXPECT_EQ(f.sets[1], "train.epochs=3");
}

TEST(CompareVariantSpec, ErrorsNameTheFlagAndTheProblem) {
  const std::string no_colon = spec_error("nospeed");
  EXPECT_TRUE(has(no_colon, "--variant nospeed: expected NAME:KEY=VALUE")) << no_colon;
  EXPECT_TRUE(has(spec_error("a/b:train.lr=1"), "the variant's name 'a/b'")) << spec_error("a/b:train.lr=1");
  EXPECT_TRUE(has(spec_error(":train.lr=1"), "the variant's name ''"));
  for (const char* reserved : {"linear", "semicrf"}) {
    const std::string e = spec_error(std::string(reserved) + ":train.lr=0.1");
    EXPECT_TRUE(has(e, "--variant " + std::string(reserved) + ":train.lr=0.1: '" + reserved + "' is the name of "
                       "compare's own"))
        << e;
  }
  EXPECT_TRUE(has(spec_error("seed-3:train.lr=0.1"), "'seed-'"));
  EXPECT_TRUE(has(spec_error("x:"), "--variant x:: no KEY=VALUE after 'x:'")) << spec_error("x:");
  const std::string unknown = spec_error("x:augment.sped=false");
  EXPECT_TRUE(has(unknown, "--variant x:augment.sped=false: unknown config key 'augment.sped' (did you mean "
                           "'augment.speed'?)"))
      << unknown;
  const std::string bad_value = spec_error("x:augment.speed=maybe");
  EXPECT_TRUE(has(bad_value, "--variant x:augment.speed=maybe")) << bad_value;
  EXPECT_TRUE(has(bad_value, "augment.speed")) << bad_value;
  const std::string bad_word = spec_error("x:crf.backend=gpu");
  EXPECT_TRUE(has(bad_word, "crf.backend")) << bad_word;
  EXPECT_TRUE(has(bad_word, "gpu")) << bad_word;
  for (const char* key : {"train.seed", "train.run_dir", "data.workdir"}) {
    const std::string e = spec_error(std::string("x:") + key + "=7");
    EXPECT_TRUE(has(e, std::string(key) + " is set by compare for every run")) << e;
  }
  EXPECT_TRUE(has(spec_error("x:train.lr=0.1,train.lr=0.2"), "train.lr is set twice"));
}

// Each variant: the base config with its keys, after linear and semicrf, in
// its own folder; the seeds' order as before.
TEST(ComparePlanVariants, ConfigsFoldersAndOrder) {
  const config::Config base = base_config();
  const std::vector<train::VariantSpec> extra = {train::parse_variant_spec("no-speed:augment.speed=false"),
                                                 train::parse_variant_spec("k3:crf.max_duration=3,train.lr=0.5")};
  const train::ComparePlan one = train::plan_compare(base, "c.yaml", "", extra);
  ASSERT_EQ(one.variants.size(), 4u);
  const char* names[] = {"linear", "semicrf", "no-speed", "k3"};
  const int ks[] = {1, 6, 6, 3};
  ASSERT_EQ(one.jobs.size(), 4u);
  for (size_t v = 0; v < 4; ++v) {
    EXPECT_EQ(one.variants[v].name, names[v]);
    EXPECT_EQ(one.variants[v].max_duration, ks[v]);
    EXPECT_EQ(one.jobs[v].name, names[v]);
    EXPECT_EQ(one.jobs[v].cfg.train_run_dir, "/tmp/variants_plan/runs/" + std::string(names[v]));
    EXPECT_EQ(one.jobs[v].cfg.crf_max_duration, ks[v]);
    EXPECT_EQ(one.jobs[v].cfg.train_seed, 5u);
    EXPECT_EQ(one.jobs[v].cfg.augment_speed, v != 2) << names[v];
    EXPECT_DOUBLE_EQ(one.jobs[v].cfg.train_lr, v == 3 ? 0.5 : 0.01) << names[v];
  }
  EXPECT_TRUE(one.variants[0].sets.empty());
  EXPECT_TRUE(one.variants[1].sets.empty());
  EXPECT_EQ(one.variants[2].sets, std::vector<std::string>{"augment.speed=false"});
  EXPECT_EQ(one.variants[2].title, "no-speed: semi-CRF (K=6) with augment.speed=false");
  EXPECT_EQ(one.variants[3].title, "k3: semi-CRF (K=3) with crf.max_duration=3, train.lr=0.5");
  EXPECT_EQ(one.jobs[2].cfg.origins.at("augment.speed"), "--variant no-speed:augment.speed=false");
  EXPECT_EQ(one.jobs[3].cfg.origins.at("crf.max_duration"), "--variant k3:crf.max_duration=3,train.lr=0.5");
  EXPECT_EQ(one.jobs[3].cfg.origins.at("train.run_dir"), "compare (the run k3)");

  // two seeds: [s * 4 + v], seed folders
  const train::ComparePlan two = train::plan_compare(base, "c.yaml", "2", extra);
  ASSERT_EQ(two.jobs.size(), 8u);
  for (size_t s = 0; s < 2; ++s)
    for (size_t v = 0; v < 4; ++v) {
      const train::CompareJob& j = two.jobs[s * 4 + v];
      const std::string seed = "seed-" + std::to_string(5 + s);
      EXPECT_EQ(j.name, seed + "/" + names[v]);
      EXPECT_EQ(j.cfg.train_run_dir, "/tmp/variants_plan/runs/" + seed + "/" + names[v]);
      EXPECT_EQ(j.cfg.train_seed, 5 + s);
      EXPECT_EQ(j.cfg.crf_max_duration, ks[v]);
    }
  const auto cfgs = two.configs();
  ASSERT_EQ(cfgs.size(), 4u);
  EXPECT_EQ(cfgs[3][1].train_run_dir, "/tmp/variants_plan/runs/seed-6/k3");
  EXPECT_FALSE(cfgs[2][0].augment_speed);

  // no variant: the two runs as before
  const train::ComparePlan plain = train::plan_compare(base, "c.yaml", "");
  ASSERT_EQ(plain.variants.size(), 2u);
  EXPECT_EQ(plain.variants[1].title, "semi-CRF (K=6)");
}

TEST(ComparePlanVariants, RangeErrorsAndDuplicateNames) {
  const config::Config base = base_config();
  try {
    train::plan_compare(base, "c.yaml", "", {train::parse_variant_spec("m:augment.time_masks=-1")});
    FAIL() << "a negative augment.time_masks was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "augment.time_masks")) << e.what();
    EXPECT_TRUE(has(e.what(), "--variant m:augment.time_masks=-1")) << e.what();
  }
  std::string note;
  const auto ablation = train::ablation_variants(train::AblationKind::augment, base, {true, true}, &note);
  try {
    train::plan_compare(base, "c.yaml", "", {train::parse_variant_spec("no-speed:train.lr=0.1"), ablation[0]});
    FAIL() << "a name used twice was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--ablation augment: the name 'no-speed' is already used (by --variant "
                                     "no-speed:train.lr=0.1)");
  }
}

// One variant per augmentation part that is on, each with that part off;
// augment.speed and augment.noise only where the WORKDIR has such copies.
TEST(ComparePlanVariants, AugmentAblation) {
  config::Config base = base_config();
  base.augment_noise = false;
  base.augment_time_masks = 2;
  base.augment_time_mask_width = 5;
  base.augment_freq_masks = 1;
  base.augment_freq_mask_width = 0;  // masks of width 0 change nothing: off
  const train::AugmentedCopies both{true, true};
  std::string note = "stale";
  std::vector<train::VariantSpec> v = train::ablation_variants(train::AblationKind::augment, base, both, &note);
  EXPECT_EQ(note, "");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].name, "no-speed");
  EXPECT_EQ(v[0].sets, std::vector<std::string>{"augment.speed=false"});
  EXPECT_EQ(v[1].name, "no-time-masks");
  EXPECT_EQ(v[1].sets, std::vector<std::string>{"augment.time_masks=0"});
  const train::ComparePlan p = train::plan_compare(base, "c.yaml", "", v);
  ASSERT_EQ(p.jobs.size(), 4u);
  EXPECT_FALSE(p.jobs[2].cfg.augment_speed);
  EXPECT_EQ(p.jobs[2].cfg.augment_time_masks, 2);
  EXPECT_TRUE(p.jobs[3].cfg.augment_speed);
  EXPECT_EQ(p.jobs[3].cfg.augment_time_masks, 0);
  EXPECT_EQ(p.jobs[3].cfg.origins.at("augment.time_masks"), "--ablation augment");

  base.augment_freq_mask_width = 3;
  base.augment_noise = true;
  v = train::ablation_variants(train::AblationKind::augment, base, both, &note);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[1].name, "no-noise");
  EXPECT_EQ(v[3].name, "no-freq-masks");
  EXPECT_EQ(v[3].sets, std::vector<std::string>{"augment.freq_masks=0"});
  EXPECT_EQ(note, "");

  // a WORKDIR with speed copies only: augment.noise is on but acts on nothing, said in the note
  v = train::ablation_variants(train::AblationKind::augment, base, {true, false}, &note);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].name, "no-speed");
  EXPECT_EQ(v[1].name, "no-time-masks");
  EXPECT_TRUE(has(note, "augment.noise (no noisy copies)")) << note;
  EXPECT_FALSE(has(note, "augment.speed")) << note;

  base.augment_time_masks = base.augment_freq_masks = 0;
  v = train::ablation_variants(train::AblationKind::augment, base, {false, false}, &note);
  EXPECT_TRUE(v.empty());
  EXPECT_TRUE(has(note, "no augmentation part is on")) << note;
  EXPECT_TRUE(has(note, "augment.speed (no speed-perturbed copies), augment.noise (no noisy copies)")) << note;

  base.augment_speed = base.augment_noise = false;
  v = train::ablation_variants(train::AblationKind::augment, base, both, &note);
  EXPECT_TRUE(v.empty());
  EXPECT_TRUE(has(note, "no augmentation part is on")) << note;
  EXPECT_FALSE(has(note, "no noisy copies")) << note;
}

// One variant per anchored head the semi-CRF has on, each with that head off.
TEST(ComparePlanVariants, HeadsAblation) {
  config::Config base = base_config();
  base.set("crf.onset_features=auto", "test");
  base.set("crf.end_features=true", "test");
  base.set("crf.max_duration=10", "test");
  std::string note = "stale";
  std::vector<train::VariantSpec> v = train::ablation_variants(train::AblationKind::heads, base, {}, &note);
  EXPECT_EQ(note, "");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].name, "no-onset");
  EXPECT_EQ(v[0].sets, std::vector<std::string>{"crf.onset_features=false"});
  EXPECT_EQ(v[1].name, "no-end");
  EXPECT_EQ(v[1].sets, std::vector<std::string>{"crf.end_features=false"});
  const train::ComparePlan p = train::plan_compare(base, "c.yaml", "", v);
  ASSERT_EQ(p.jobs.size(), 4u);
  EXPECT_FALSE(p.jobs[2].cfg.onset_enabled());
  EXPECT_TRUE(p.jobs[2].cfg.end_enabled());
  EXPECT_TRUE(p.jobs[3].cfg.onset_enabled());
  EXPECT_FALSE(p.jobs[3].cfg.end_enabled());
  EXPECT_EQ(p.jobs[3].cfg.origins.at("crf.end_features"), "--ablation heads");
  EXPECT_FALSE(p.jobs[0].cfg.onset_enabled());  // the linear CRF: auto resolves to off at K = 1
  base.set("crf.end_features=false", "test");
  base.set("crf.onset_features=false", "test");
  v = train::ablation_variants(train::AblationKind::heads, base, {}, &note);
  EXPECT_TRUE(v.empty());
  EXPECT_TRUE(has(note, "no anchored head on")) << note;
}

namespace {

class CompareVariantsE2e : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_compare_variants");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string config(const std::string& name, const fs::path& run_dir) {
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path) << "data:\n  workdir: " << (dir_ / "work").string()
                        << "\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n"
                           "crf:\n  max_duration: 6\n"
                           "augment:\n  noise: false\n  time_masks: 1\n  time_mask_width: 2\n"
                           "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n  run_dir: "
                        << run_dir.string() << "\n";
    return path;
  }
};
fs::path CompareVariantsE2e::dir_;

size_t error_lines(const std::string& text) {
  size_t n = 0;
  for (size_t p = text.find("error: "); p != std::string::npos; p = text.find("error: ", p + 1)) ++n;
  return n;
}

}  // namespace

TEST_F(CompareVariantsE2e, FlagErrorsAreUsageErrors) {
  const fs::path runs = dir_ / "errors";
  const std::string cfg = config("errors", runs);
  Cmd reserved = run("compare --config " + cfg + " --variant linear:train.lr=0.1");
  EXPECT_EQ(reserved.rc, 2) << reserved.output;
  EXPECT_EQ(error_lines(reserved.output), 1u) << reserved.output;
  EXPECT_TRUE(has(reserved.output, "error: --variant linear:train.lr=0.1: 'linear' is the name")) << reserved.output;
  Cmd twice = run("compare --config " + cfg + " --variant a:train.lr=0.1 --variant a:train.lr=0.2");
  EXPECT_EQ(twice.rc, 2) << twice.output;
  EXPECT_TRUE(has(twice.output, "error: --variant a:train.lr=0.2: the name 'a' is given twice")) << twice.output;
  Cmd unknown = run("compare --config " + cfg + " --variant a:train.lrr=0.1");
  EXPECT_EQ(unknown.rc, 2) << unknown.output;
  EXPECT_TRUE(has(unknown.output, "did you mean 'train.lr'")) << unknown.output;
  Cmd kind = run("compare --config " + cfg + " --ablation speed");
  EXPECT_EQ(kind.rc, 2) << kind.output;
  EXPECT_TRUE(has(kind.output, "--ablation")) << kind.output;
  // a range error, found against the base config: one line naming the variant
  Cmd range = run("compare --config " + cfg + " --variant m:augment.time_masks=-2");
  EXPECT_EQ(range.rc, 1) << range.output;
  EXPECT_EQ(error_lines(range.output), 1u) << range.output;
  EXPECT_TRUE(has(range.output, "--variant m:augment.time_masks=-2")) << range.output;
  EXPECT_FALSE(fs::exists(runs / "linear")) << "nothing is trained after a flag error";
}

// One --variant with two seeds and --ablation augment: the variants' folders
// and saved configs, their numbers in the JSON, each one's differences from
// the semi-CRF paired by seed, the table and the overlay report. The
// WORKDIR has no augmented copies: augment.speed (on) gets no variant, said.
TEST_F(CompareVariantsE2e, VariantRunsAreTrainedTestedAndReported) {
  const fs::path runs = dir_ / "runs", json = dir_ / "runs.json";
  Cmd c = run("compare --config " + config("runs", runs) + " --seeds 3,4 --variant lr2:train.lr=0.03 "
              "--ablation augment --json " + json.string());
  ASSERT_EQ(c.rc, 0) << c.output;
  const char* extra[] = {"lr2", "no-time-masks"};  // augment.noise is off, augment.speed has no copies to act on
  for (const char* seed : {"seed-3", "seed-4"}) {
    for (const char* name : extra)
      EXPECT_TRUE(fs::exists(runs / seed / name / "checkpoints" / "epoch-1.safetensors")) << seed << "/" << name;
    EXPECT_FALSE(fs::exists(runs / seed / "no-noise"));
    EXPECT_FALSE(fs::exists(runs / seed / "no-speed"));
    const config::Config lr2 = config::Config::load((runs / seed / "lr2" / "config.yaml").string(), {});
    EXPECT_DOUBLE_EQ(lr2.train_lr, 0.03);
    EXPECT_EQ(lr2.crf_max_duration, 6);
    EXPECT_TRUE(lr2.augment_speed);
    const config::Config nomask = config::Config::load((runs / seed / "no-time-masks" / "config.yaml").string(), {});
    EXPECT_EQ(nomask.augment_time_masks, 0);
    EXPECT_EQ(nomask.augment_time_mask_width, 2);
    EXPECT_DOUBLE_EQ(nomask.train_lr, 0.01);
    const config::Config semi = config::Config::load((runs / seed / "semicrf" / "config.yaml").string(), {});
    EXPECT_DOUBLE_EQ(semi.train_lr, 0.01);
    EXPECT_EQ(semi.augment_time_masks, 1);
  }
  EXPECT_TRUE(has(c.output, "lr2 minus semi-CRF, paired by seed (2 seeds)")) << c.output;
  EXPECT_TRUE(has(c.output, "no-time-masks minus semi-CRF, paired by seed (2 seeds)")) << c.output;
  EXPECT_TRUE(has(c.output, "[warning] compare --ablation augment: no variant for augment.speed (no speed-perturbed copies) in " +
                                (dir_ / "work").string() + ": on, but with nothing to act on"))
      << c.output;
  EXPECT_TRUE(has(c.output, "lr2 dev")) << c.output;
  EXPECT_TRUE(has(c.output, "{linear,semicrf,lr2,no-time-masks} under seed-S/")) << c.output;

  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["runs"]["lr2"]["sets"], nlohmann::json::array({"train.lr=0.03"}));
  EXPECT_EQ(j["runs"]["lr2"]["max_duration"], 6);
  EXPECT_EQ(j["runs"]["lr2"]["run_dirs"][1], (runs / "seed-4" / "lr2").string());
  EXPECT_EQ(j["runs"]["no-time-masks"]["sets"], nlohmann::json::array({"augment.time_masks=0"}));
  EXPECT_FALSE(j["runs"]["semicrf"].contains("sets"));
  for (const char* name : extra)
    for (const char* key : {"per", "boundary_f1_tol1", "segment_f1"}) {
      const auto& var = j["runs"][name]["dev"][key]["values"];
      const auto& semi = j["runs"]["semicrf"]["dev"][key]["values"];
      ASSERT_EQ(var.size(), 2u) << name << " " << key;
      for (const auto& x : var) {  // PER may pass 1 (insertions), F1s may not
        EXPECT_GE(x.get<double>(), 0.0);
        if (std::string(key) != "per") EXPECT_LE(x.get<double>(), 1.0) << name << " " << key;
      }
      const double d0 = var[0].get<double>() - semi[0].get<double>(), d1 = var[1].get<double>() - semi[1].get<double>();
      const auto& s = j["variant_significance"][name]["dev"][key];
      EXPECT_EQ(s["n"], 2) << name << " " << key;
      EXPECT_NEAR(s["mean_difference"].get<double>(), (d0 + d1) / 2, 1e-12) << name << " " << key;
      EXPECT_NEAR(s["std"].get<double>(), std::abs(d0 - d1) / std::sqrt(2.0), 1e-12) << name << " " << key;
      EXPECT_EQ(s["sign_test"]["positive"], (d0 > 0) + (d1 > 0)) << name << " " << key;
    }
  // the learning rate changes the numbers: the variant is not the semi-CRF again
  EXPECT_NE(j["runs"]["lr2"]["dev"]["per"]["values"], j["runs"]["semicrf"]["dev"]["per"]["values"]);
  // semi-CRF minus linear, as without variants
  EXPECT_EQ(j["significance"]["dev"]["per"]["n"], 2);

  const std::string html = slurp(runs / "report.html");
  EXPECT_TRUE(has(html, "id=\"significance-lr2\""));
  EXPECT_TRUE(has(html, "id=\"significance-no-time-masks\""));
  EXPECT_TRUE(has(html, (runs / "seed-4" / "no-time-masks").string()));
}

// The copies of a WORKDIR's train split, from its header: none in the
// fixture's; speed copies after `augment --speed` and prepare.
TEST_F(CompareVariantsE2e, AugmentedCopiesOfAWorkdir) {
  const train::AugmentedCopies none = train::augmented_copies((dir_ / "work").string());
  EXPECT_FALSE(none.speed);
  EXPECT_FALSE(none.noise);
  const train::AugmentedCopies missing = train::augmented_copies((dir_ / "no-such-workdir").string());
  EXPECT_FALSE(missing.speed);
  Cmd a = run("augment --timit " + (dir_ / "synth").string() + " --out " + (dir_ / "synth-sp").string() +
              " --speed 0.9 --seed 1 --threads 2");
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd p = run("prepare --timit " + (dir_ / "synth-sp").string() + " --out " + (dir_ / "work-sp").string());
  ASSERT_EQ(p.rc, 0) << p.output;
  const train::AugmentedCopies sp = train::augmented_copies((dir_ / "work-sp").string());
  EXPECT_TRUE(sp.speed);
  EXPECT_FALSE(sp.noise);
  // a file that is not a prepared split: named
  fs::create_directories(dir_ / "bad");
  std::ofstream(dir_ / "bad" / "train.safetensors") << "not a safetensors file at all";
  try {
    train::augmented_copies((dir_ / "bad").string());
    FAIL() << "a corrupt train.safetensors was read";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), (dir_ / "bad" / "train.safetensors").string())) << e.what();
  }
}
