// Metrics on hand-made cases with known answers; config parsing and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "eval/formats.h"
#include "eval/infer.h"
#include "eval/metrics.h"
#include "model/optim.h"

using namespace timitseg::model;

using namespace timitseg::config;
using namespace timitseg::eval;

TEST(Metrics, Levenshtein) {
  EXPECT_EQ(levenshtein({1, 2, 3}, {1, 2, 3}), 0);
  EXPECT_EQ(levenshtein({1, 2, 3}, {1, 3}), 1);       // deletion
  EXPECT_EQ(levenshtein({1, 2, 3}, {1, 4, 2, 3}), 1); // insertion
  EXPECT_EQ(levenshtein({1, 2, 3}, {3, 2, 1}), 2);    // two substitutions
  EXPECT_EQ(levenshtein({}, {1, 2}), 2);
}

TEST(Metrics, HandMadeUtterance) {
  Metrics m({"a", "b", "c"});
  // ref runs: a[0,3) b[3,5) c[5,8)      boundaries 3, 5
  // pred runs: a[0,2) b[2,5) a[5,6) c[6,8)  boundaries 2, 5, 6
  const std::vector<int> ref{0, 0, 0, 1, 1, 2, 2, 2};
  const std::vector<int> pred{0, 0, 1, 1, 1, 0, 2, 2};
  m.add(ref, pred);
  // phones: ref a b c, pred a b a c -> 1 insertion
  EXPECT_DOUBLE_EQ(m.per(), 1.0 / 3.0);
  // frames: wrong at 2 (b for a) and 5 (a for c): 6/8
  EXPECT_DOUBLE_EQ(m.frame_accuracy(), 6.0 / 8.0);
  // tol 0: only boundary 5 matches -> P 1/3, R 1/2
  EXPECT_DOUBLE_EQ(m.boundary(0).precision(), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.boundary(0).recall(), 0.5);
  EXPECT_DOUBLE_EQ(m.boundary(0).f1(), 2 * (1.0 / 3) * 0.5 / (1.0 / 3 + 0.5));
  // tol 1: 2<->3 and 5<->5 match (6 cannot take 5 again) -> P 2/3, R 1
  EXPECT_DOUBLE_EQ(m.boundary(1).precision(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.boundary(1).recall(), 1.0);
  EXPECT_DOUBLE_EQ(m.boundary(2).f1(), 0.8);
  // segments: only none match exactly? ref a(0,3) b(3,2) c(5,3); pred a(0,2) b(2,3) a(5,1) c(6,2) -> 0
  EXPECT_DOUBLE_EQ(m.segment().f1(), 0.0);
  const auto j = m.to_json();
  EXPECT_EQ(j["confusion"][0][1].get<int64_t>(), 1);  // ref a, pred b at frame 2
  EXPECT_EQ(j["confusion"][2][0].get<int64_t>(), 1);  // ref c, pred a at frame 5
  EXPECT_EQ(j["confusion"][1][1].get<int64_t>(), 2);
  EXPECT_DOUBLE_EQ(j["durations"]["a"]["reference_mean"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["durations"]["a"]["predicted_mean"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["boundary_f1"]["1"].get<double>(), 0.8);
}

TEST(Metrics, PerfectAndSegments) {
  Metrics m({"x", "y"});
  m.add({0, 0, 1, 1, 1, 0}, {0, 0, 1, 1, 1, 0});
  m.add({1, 1, 1, 1}, {1, 1, 0, 1});  // ref one segment; pred y x y: 2 insertions
  EXPECT_DOUBLE_EQ(m.per(), 2.0 / 4.0);
  // segments: utt1 3/3 match; utt2 pred 3 segs, 0 match -> P 3/6, R 3/4
  EXPECT_DOUBLE_EQ(m.segment().precision(), 0.5);
  EXPECT_DOUBLE_EQ(m.segment().recall(), 0.75);
  EXPECT_DOUBLE_EQ(m.frame_accuracy(), 9.0 / 10.0);
  EXPECT_THROW(m.add({0, 1}, {0}), std::invalid_argument);
}

TEST(Metrics, Divergences) {
  EXPECT_DOUBLE_EQ(js_divergence({1, 0}, {0, 1}), std::log(2.0));  // disjoint: ln 2
  EXPECT_DOUBLE_EQ(js_divergence({3, 1}, {6, 2}), 0.0);             // same distribution
  EXPECT_NEAR(kl_divergence_smoothed({2, 0}, {2, 0}), 0.0, 1e-15);
  // add-half smoothing: p = (2.5, .5)/3, q = (.5, 2.5)/3
  const double a = 2.5 / 3, b = 0.5 / 3;
  EXPECT_NEAR(kl_divergence_smoothed({2, 0}, {0, 2}), a * std::log(a / b) + b * std::log(b / a), 1e-15);
}

TEST(Optim, ClipAndSchedule) {
  std::vector<float> g{3.f, 4.f};
  EXPECT_DOUBLE_EQ(clip_global_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g[0], 0.6, 1e-6);
  EXPECT_NEAR(g[1], 0.8, 1e-6);
  // cosine over 10 updates (torch CosineAnnealingLR, T_max = 10): 1 at update 0,
  // 0.5 at update 5, the last update (9) still > min_lr, min_lr after it
  EXPECT_DOUBLE_EQ(scheduled_lr(LrSchedule::cosine, 1.0, 0.0, 0, 10), 1.0);
  EXPECT_NEAR(scheduled_lr(LrSchedule::cosine, 1.0, 0.0, 5, 10), 0.5, 1e-15);
  EXPECT_NEAR(scheduled_lr(LrSchedule::cosine, 1.0, 0.1, 9, 10), 0.1 + 0.45 * (1 + std::cos(0.9 * M_PI)), 1e-15);
  EXPECT_GT(scheduled_lr(LrSchedule::cosine, 1.0, 0.1, 9, 10), 0.1 + 1e-3);
  EXPECT_NEAR(scheduled_lr(LrSchedule::cosine, 1.0, 0.1, 10, 10), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(scheduled_lr(LrSchedule::constant, 1.0, 0.1, 9, 10), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(LrSchedule::cosine, 1.0, 0.1, 0, 1), 1.0);  // a single update uses lr
  // AdamW first step: p -= lr * (wd * p) then lr * g / (|g| + eps) (bias-corrected)
  AdamW opt;
  opt.weight_decay = 0.1;
  opt.reset(1);
  std::vector<float> p{1.f};
  opt.update(p, {0.5f}, 0.01);
  EXPECT_NEAR(p[0], 1.0 * (1 - 0.01 * 0.1) - 0.01 * 0.5 / (0.5 + 1e-8), 1e-7);
}

TEST(Decode, BoundariesAndTextGrid) {
  timitseg::data::FeatureOptions o;  // 400 / 160
  EXPECT_EQ(boundary_sample(0, o), 0);
  // centres of frames 2 and 3: 520 and 680 -> 600
  EXPECT_EQ(boundary_sample(3, o), 600);
  const std::string tg = textgrid_tiers({{"phones", {{0, 600, "h#"}, {600, 1600, "aa"}}}}, 1600, 16000);
  EXPECT_NE(tg.find("intervals: size = 2"), std::string::npos);
  EXPECT_NE(tg.find("xmax = 0.1"), std::string::npos);
  EXPECT_NE(tg.find("text = \"aa\""), std::string::npos);
}

namespace {
std::string write_yaml(const std::string& name, const std::string& text) {
  // per process: ctest runs the tests of this file in parallel, each in its own process
  const auto path =
      std::filesystem::temp_directory_path() / ("timitseg_cfg_" + name + "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}
std::string error_of(const std::string& yaml, std::vector<std::string> sets = {}) {
  try {
    Config::load(write_yaml("t", yaml), sets);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, LoadsAndOverrides) {
  const Config c = Config::load(write_yaml("ok", "data:\n  workdir: w\ntrain:\n  lr: 3e-4\n  epochs: 5\n"),
                                {"model.hidden_dim=32", "crf.backend=reference", "debug.fixed_length=200"});
  // data.workdir: absolute from the current folder (docs/config.md), also "a/../b/" given by --set
  EXPECT_EQ(c.data_workdir, (std::filesystem::current_path() / "w").string());
  EXPECT_EQ(Config::load("", {"data.workdir=a/../b/"}).data_workdir, (std::filesystem::current_path() / "b").string());
  EXPECT_EQ(Config::load("", {"data.workdir=/x/y"}).data_workdir, "/x/y");
  EXPECT_DOUBLE_EQ(c.train_lr, 3e-4);
  EXPECT_EQ(c.train_epochs, 5);
  EXPECT_EQ(c.model_hidden_dim, 32);
  EXPECT_EQ(c.crf_backend, timitseg::config::CrfBackendSetting::reference);
  EXPECT_EQ(c.debug_fixed_length, 200);
  EXPECT_EQ(c.model_num_layers, 3);  // default
  // round trip through JSON (checkpoint metadata) and YAML (run dir)
  const Config j = Config::from_json(c.to_json(), "test");
  EXPECT_EQ(j.to_json(), c.to_json());
  const Config y = Config::load(write_yaml("rt", c.to_yaml()), {});
  EXPECT_EQ(y.to_json(), c.to_json());
}

TEST(Config, Errors) {
  std::string e = error_of("train:\n  learning_rate: 0.1\n");
  EXPECT_NE(e.find("unknown config key 'train.learning_rate'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'train.lr"), std::string::npos) << e;  // closest
  e = error_of("modle:\n  hidden_dim: 4\n");
  EXPECT_NE(e.find("unknown config section 'modle' (did you mean section 'model'?"), std::string::npos) << e;
  e = error_of("", {"crf.max_durration=3"});
  EXPECT_NE(e.find("did you mean 'crf.max_duration'"), std::string::npos) << e;
  e = error_of("train:\n  epochs: many\n");
  EXPECT_NE(e.find(":2: train.epochs: expected an integer, got 'many'"), std::string::npos) << e;
  e = error_of("train:\n  epochs: 2.5\n");
  EXPECT_NE(e.find("train.epochs"), std::string::npos) << e;
  e = error_of("model:\n  dropout: 1.5\n");
  EXPECT_NE(e.find("'model.dropout' = 1.5 is out of range"), std::string::npos) << e;
  e = error_of("crf:\n  backend: triton\n");
  EXPECT_NE(e.find("one of reference, cpu, cuda"), std::string::npos) << e;
  e = error_of("model:\n  hidden_dim: 33\n");
  EXPECT_NE(e.find("model.hidden_dim"), std::string::npos) << e;
  e = error_of("features:\n  cmvn: maybe\n");
  EXPECT_NE(e.find("features.cmvn: expected true or false"), std::string::npos) << e;
  e = error_of("train:\n  lr: [1, 2]\n");
  EXPECT_NE(e.find("single value"), std::string::npos) << e;
  e = error_of("train:\n  lr: nan\n");
  EXPECT_NE(e.find("finite number"), std::string::npos) << e;
  e = error_of("", {"train.epochs"});
  EXPECT_NE(e.find("expected key=value"), std::string::npos) << e;
  EXPECT_EQ(error_of("train:\n  lr: 0.01\n"), "");
  EXPECT_EQ(Config::closest_key("crf.regg"), "crf.reg");
}

// Suggestions for names without a dot and for dotted top-level YAML keys;
// range errors name where the value came from.
TEST(Config, SuggestionsAndOrigins) {
  const std::string yaml = write_yaml("t", "");
  std::string e = error_of("train.lr: 0.1\n");
  EXPECT_NE(e.find("top-level key 'train.lr'"), std::string::npos) << e;
  EXPECT_NE(e.find("write 'train:' then '  lr: VALUE'"), std::string::npos) << e;
  EXPECT_EQ(e.find("did you mean 'train.lr'"), std::string::npos) << e;  // it is valid, only misplaced
  e = error_of("train.lrr: 0.1\n");
  EXPECT_NE(e.find("no such key (did you mean 'train.lr'?)"), std::string::npos) << e;
  e = error_of("lr: 0.1\n");
  EXPECT_NE(e.find("unknown config section 'lr' (did you mean 'train.lr'? write it inside its section"),
            std::string::npos)
      << e;
  e = error_of("", {"model=3"});
  EXPECT_NE(e.find("--set model=3: unknown config key 'model' (keys are SECTION.KEY; 'model' is a section"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("crf.reg"), std::string::npos) << e;
  e = error_of("", {"modle=3"});
  EXPECT_NE(e.find("did you mean section 'model'?"), std::string::npos) << e;
  e = error_of("", {"epochs=3"});
  EXPECT_NE(e.find("did you mean 'train.epochs'?"), std::string::npos) << e;
  // origins of range errors
  e = error_of("model:\n  dropout: 1.5\n");
  EXPECT_EQ(e.rfind(yaml + ": 'model.dropout' = 1.5 is out of range", 0), 0u) << e;
  e = error_of("model:\n  dropout: 0.5\n", {"model.dropout=2"});
  EXPECT_EQ(e.rfind("--set model.dropout=2: 'model.dropout' = 2 is out of range", 0), 0u) << e;
  nlohmann::json j = Config().to_json();
  j["train"]["epochs"] = 0;
  try {
    Config::from_json(j, "run/checkpoints/epoch-1.safetensors (config metadata)");
    ADD_FAILURE() << "train.epochs = 0 accepted";
  } catch (const std::invalid_argument& ex) {
    EXPECT_EQ(std::string(ex.what()).rfind("run/checkpoints/epoch-1.safetensors (config metadata): 'train.epochs' = 0", 0),
              0u)
        << ex.what();
  }
}

#include "model/model.h"

TEST(Batching, FixedLengthTruncatesAndPads) {
  using timitseg::data::Utterance;
  const LabelSet ls = LabelSet::make(39);
  const auto& ps = timitseg::data::PhoneSet::timit();
  const int aa = ps.index61("aa"), iy = ps.index61("iy");
  Utterance a, b;
  a.id = "a";
  a.num_frames = 5;
  a.dim = 2;
  a.features = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  a.labels = {aa, aa, iy, iy, iy};
  b = a;
  b.id = "b";
  b.num_frames = 2;
  b.features = {1, 1, 2, 2};
  b.labels = {iy, aa};
  const Batch n = make_batch({&a, &b}, nullptr, ls, 0);
  EXPECT_EQ(n.input.T, 5);
  EXPECT_EQ(n.input.lengths, (std::vector<int32_t>{5, 2}));
  const Batch f = make_batch({&a, &b}, nullptr, ls, 3);
  EXPECT_EQ(f.input.T, 3);
  EXPECT_EQ(f.input.lengths, (std::vector<int32_t>{3, 3}));  // N reported as the length
  const int AA = ls.class_of_label(aa), IY = ls.class_of_label(iy);
  EXPECT_EQ(f.labels, (std::vector<int32_t>{AA, AA, IY, IY, AA, AA}));  // truncated; padded with the last label
  EXPECT_EQ(f.input.features, (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 1, 2, 2, 0, 0}));
  EXPECT_EQ(f.frames, 6);
  EXPECT_EQ(ls.scoring_names[ls.scoring_index[AA]], "aa");
}
