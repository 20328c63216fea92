// `timitseg score` with the built binary on a tiny synth corpus:
//   - scoring the predictions that `evaluate --dump-predictions` writes
//     reproduces evaluate's metrics exactly (one implementation for both);
//   - predictions written here from the split's own labels (the oracle) score
//     PER 0 and F1 1, and one changed frame inside a run costs exactly two
//     insertions (and, at 20 ms, two extra predicted boundaries: P, R and R-value
//     by hand);
//   - malformed files fail with the file, the line and the problem;
//   - crf.phone_bonus reaches evaluate's decoder from the checkpoint and from
//     --phone-bonus: at -100 every utterance is one phone, at +100 the label
//     changes at every frame (the decoder's limits, independent of the model).
//   - crf.decode = posterior (from the checkpoint and from --decode) after a
//     run trained with crf.frame_ce_weight > 0: the decoding differs from
//     Viterbi and ignores the phone bonus; run.json records both keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "model/labels.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::sh;
using testsupport::slurp;
using testsupport::run;

class ScoreE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_score_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 3, 4);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string work() { return (dir_ / "work").string(); }
  // Writes predictions of the split from its own 39-phone labels, with `edit` applied.
  static std::vector<std::vector<std::string>> reference_phones(const std::string& split) {
    const data::Split s = data::load_split(work(), split);
    const model::LabelSet ls = model::LabelSet::make(39);
    std::vector<std::vector<std::string>> out;
    for (const auto& u : s.utterances) {
      out.emplace_back();
      for (int32_t l : u.labels) out.back().push_back(ls.scoring_names[ls.scoring_index[ls.class_of_label(l)]]);
    }
    return out;
  }
  static std::vector<std::string> ids(const std::string& split) {
    std::vector<std::string> v;
    for (const auto& u : data::load_split(work(), split).utterances) v.push_back(u.id);
    return v;
  }
  static fs::path write_jsonl(const std::string& name, const std::vector<std::string>& lines) {
    const fs::path p = dir_ / name;
    std::ofstream f(p);
    for (const auto& l : lines) f << l << "\n";
    return p;
  }
  static std::string line(int64_t index, const std::string& id, const std::vector<std::string>& phones) {
    return nlohmann::json{{"index", index}, {"utterance_id", id}, {"phones", phones}}.dump();
  }
};
fs::path ScoreE2E::dir_;

}  // namespace

TEST_F(ScoreE2E, ReproducesEvaluateExactly) {
  const fs::path cfg = dir_ / "tiny.yaml";
  std::ofstream(cfg) << "data:\n  workdir: " << work()
                     << "\nmodel:\n  hidden_dim: 16\n  num_layers: 2\n  dropout: 0.1\n"
                        "crf:\n  max_duration: 8\n  reg: 0.001\n  init_scale: 0.1\n"
                        "train:\n  epochs: 2\n  batch_size: 4\n  lr: 0.01\n  seed: 2\n  threads: 2\n"
                        "  lr_schedule: cosine_epoch\n  run_dir: "
                     << (dir_ / "run").string() << "\n";
  Cmd t = run("train --config " + cfg.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string ckpt = (dir_ / "run" / "checkpoints" / "epoch-2.safetensors").string();
  for (const std::string split : {"core-test", "dev"}) {
    const fs::path ev = dir_ / ("ev-" + split + ".json"), pred = dir_ / ("pred-" + split + ".jsonl"),
                   sc = dir_ / ("sc-" + split + ".json");
    Cmd e = run("evaluate --checkpoint " + ckpt + " --split " + split + " --batch-size 3 --threads 2 --json " +
                ev.string() + " --dump-predictions " + pred.string());
    ASSERT_EQ(e.rc, 0) << e.output;
    Cmd s = run("score --workdir " + work() + " --split " + split + " --predictions " + pred.string() + " --json " +
                sc.string());
    ASSERT_EQ(s.rc, 0) << s.output;
    nlohmann::json a = nlohmann::json::parse(slurp(ev)), b = nlohmann::json::parse(slurp(sc));
    // one line per utterance, in split order, with index and id
    std::istringstream in(slurp(pred));
    std::string l;
    const auto want_ids = ids(split);
    size_t n = 0;
    while (std::getline(in, l)) {
      const auto j = nlohmann::json::parse(l);
      ASSERT_LT(n, want_ids.size());
      EXPECT_EQ(j["index"], n);
      EXPECT_EQ(j["utterance_id"], want_ids[n]);
      ++n;
    }
    EXPECT_EQ(n, want_ids.size());
    EXPECT_GT(a["per"].get<double>(), 0.0);  // a real model's errors, not a trivial case
    EXPECT_EQ(a["phone_bonus"].get<double>(), 0.0);  // the checkpoint's crf.phone_bonus (default)
    // evaluate --json carries the field's metrics at 20 ms (2 frames of the corpus's 10 ms), consistent
    // with their own counts and with the boundaries at tolerance 2
    const auto& b20 = a["boundary_20ms"];
    ASSERT_TRUE(b20.is_object()) << a.dump();
    EXPECT_EQ(b20["tolerance_ms"].get<int>(), 20);
    EXPECT_EQ(b20["tolerance_frames"].get<int>(), 2);
    const int64_t m = b20["matched"].get<int64_t>(), nr = b20["num_ref"].get<int64_t>(),
                  np = b20["num_pred"].get<int64_t>();
    EXPECT_GT(nr, 0);
    EXPECT_GT(np, 0);
    EXPECT_LE(m, std::min(nr, np));
    EXPECT_DOUBLE_EQ(b20["precision"].get<double>(), double(m) / double(np));
    EXPECT_DOUBLE_EQ(b20["recall"].get<double>(), double(m) / double(nr));
    EXPECT_DOUBLE_EQ(b20["f1"].get<double>(), a["boundary_f1"]["2"].get<double>());
    EXPECT_DOUBLE_EQ(b20["precision"].get<double>(), a["boundary_precision"]["2"].get<double>());
    for (const char* k : {"precision", "recall", "f1"}) {
      EXPECT_GE(b20[k].get<double>(), 0.0);
      EXPECT_LE(b20[k].get<double>(), 1.0);
    }
    EXPECT_LE(b20["r_value"].get<double>(), 1.0);
    EXPECT_NE(e.output.find("boundaries (20 ms, 2 fr)"), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("R-value"), std::string::npos) << e.output;
    for (const char* k : {"checkpoint", "epoch", "phone_bonus", "decode", "predictions", "split"}) {
      a.erase(k);
      b.erase(k);
    }
    EXPECT_EQ(a, b) << "evaluate:\n" << a.dump() << "\nscore:\n" << b.dump();
    // the tables printed agree too (after the first line)
    EXPECT_EQ(e.output.substr(e.output.find("utterances ")), s.output.substr(s.output.find("utterances ")));
  }
}

TEST_F(ScoreE2E, OracleValues) {
  const auto ref = reference_phones("core-test");
  const auto id = ids("core-test");
  std::vector<std::string> lines;
  int64_t phones = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    lines.push_back(line(static_cast<int64_t>(i), id[i], ref[i]));
    for (size_t t = 0; t < ref[i].size(); ++t) phones += t == 0 || ref[i][t] != ref[i][t - 1];
  }
  const fs::path perfect = write_jsonl("perfect.jsonl", lines), js = dir_ / "perfect.json";
  Cmd s = run("score --workdir " + work() + " --split core-test --predictions " + perfect.string() + " --json " +
              js.string());
  ASSERT_EQ(s.rc, 0) << s.output;
  const auto j = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(j["per"].get<double>(), 0.0);
  EXPECT_EQ(j["reference_phones"].get<int64_t>(), phones);
  EXPECT_EQ(j["segment_f1"].get<double>(), 1.0);
  for (const char* tol : {"0", "1", "2"}) EXPECT_EQ(j["boundary_f1"][tol].get<double>(), 1.0);
  EXPECT_EQ(j["frame_accuracy"].get<double>(), 1.0);
  // the field's metrics at 20 ms: every internal boundary (phones minus utterances) matched once
  const auto& b20 = j["boundary_20ms"];
  const int64_t internal = phones - static_cast<int64_t>(ref.size());
  EXPECT_EQ(b20["num_ref"].get<int64_t>(), internal);
  EXPECT_EQ(b20["num_pred"].get<int64_t>(), internal);
  EXPECT_EQ(b20["matched"].get<int64_t>(), internal);
  for (const char* k : {"precision", "recall", "f1", "r_value"}) EXPECT_EQ(b20[k].get<double>(), 1.0) << k;

  // one frame in the middle of a run of >= 3 frames changed to another phone:
  // the phone sequence gains two entries (2 insertions), nothing else changes
  auto edited = ref;
  bool done = false;
  for (size_t i = 0; i < edited.size() && !done; ++i)
    for (size_t t = 1; t + 1 < edited[i].size() && !done; ++t)
      if (edited[i][t - 1] == edited[i][t] && edited[i][t] == edited[i][t + 1]) {
        edited[i][t] = edited[i][t] == "aa" ? "ae" : "aa";
        lines[i] = line(static_cast<int64_t>(i), id[i], edited[i]);
        done = true;
      }
  ASSERT_TRUE(done);
  const fs::path one = write_jsonl("one.jsonl", lines), js1 = dir_ / "one.json";
  Cmd s1 = run("score --workdir " + work() + " --split core-test --predictions " + one.string() + " --json " +
               js1.string());
  ASSERT_EQ(s1.rc, 0) << s1.output;
  const auto j1 = nlohmann::json::parse(slurp(js1));
  EXPECT_EQ(j1["phone_edits"].get<int64_t>(), 2);
  EXPECT_DOUBLE_EQ(j1["per"].get<double>(), 2.0 / static_cast<double>(phones));
  // at 20 ms: the 2 new boundaries are extra predictions (every reference boundary is still hit by
  // its own exact copy), so with N = internal: P = N/(N+2), R = 1, OS = 2/N, r1 = OS,
  // r2 = (-OS + 1 - 1)/sqrt 2 -> R-value = 1 - (OS + OS/sqrt 2)/2
  const auto& c20 = j1["boundary_20ms"];
  const double N = static_cast<double>(internal), os = 2.0 / N;
  EXPECT_EQ(c20["matched"].get<int64_t>(), internal);
  EXPECT_EQ(c20["num_pred"].get<int64_t>(), internal + 2);
  EXPECT_DOUBLE_EQ(c20["precision"].get<double>(), N / (N + 2));
  EXPECT_DOUBLE_EQ(c20["recall"].get<double>(), 1.0);
  EXPECT_NEAR(c20["r_value"].get<double>(), 1 - (os + os / std::sqrt(2.0)) / 2, 1e-12);
  EXPECT_NE(s1.output.find("R-value"), std::string::npos) << s1.output;
}

TEST_F(ScoreE2E, ErrorsNameTheLine) {
  const auto ref = reference_phones("core-test");
  const auto id = ids("core-test");
  ASSERT_GE(ref.size(), 2u);
  auto good = [&] {
    std::vector<std::string> v;
    for (size_t i = 0; i < ref.size(); ++i) v.push_back(line(static_cast<int64_t>(i), id[i], ref[i]));
    return v;
  };
  struct Case {
    std::string name, want;
    std::vector<std::string> lines;
  };
  std::vector<Case> cases;
  {
    auto v = good();
    auto short_ = ref[1];
    short_.pop_back();
    v[1] = line(1, id[1], short_);
    cases.push_back({"short", ":2: utterance '" + id[1] + "' has " + std::to_string(short_.size()) +
                                  " predicted frames, the split has " + std::to_string(ref[1].size()), v});
  }
  {
    auto v = good();
    std::swap(v[0], v[1]);
    cases.push_back({"order", ":1: index 1, expected 0", v});
  }
  {
    auto v = good();
    v[0] = line(0, "nobody", ref[0]);
    cases.push_back({"id", ":1: utterance_id 'nobody', expected '" + id[0] + "'", v});
  }
  {
    auto v = good();
    v.pop_back();
    cases.push_back({"missing", ": " + std::to_string(ref.size() - 1) + " utterance lines, split 'core-test'", v});
  }
  {
    auto v = good();
    v.push_back(v.back());
    cases.push_back({"extra", ":" + std::to_string(ref.size() + 1) + ": an extra line", v});
  }
  {
    auto v = good();
    auto bad = ref[0];
    bad[0] = "xx";
    v[0] = line(0, id[0], bad);
    cases.push_back({"phone", ":1: utterance '" + id[0] + "', frame 0: \"xx\" is not one of the 39 phones", v});
  }
  {
    auto v = good();
    v[0] = "{not json";
    cases.push_back({"json", ":1: not a JSON object", v});
  }
  for (const Case& c : cases) {
    const fs::path p = write_jsonl("bad-" + c.name + ".jsonl", c.lines), js = dir_ / ("bad-" + c.name + ".json");
    Cmd s = run("score --workdir " + work() + " --split core-test --predictions " + p.string() + " --json " +
                js.string());
    EXPECT_EQ(s.rc, 1) << c.name << ": " << s.output;
    EXPECT_NE(s.output.find(p.string() + c.want), std::string::npos) << c.name << ": " << s.output;
    EXPECT_FALSE(fs::exists(js)) << c.name;  // nothing written on failure
  }
}

// Phones per utterance (runs of equal names) of a predictions JSONL.
static std::vector<std::pair<size_t, size_t>> phones_and_frames(const std::string& jsonl) {
  std::vector<std::pair<size_t, size_t>> out;
  std::istringstream in(jsonl);
  std::string l;
  while (std::getline(in, l)) {
    const auto ph = nlohmann::json::parse(l)["phones"].get<std::vector<std::string>>();
    size_t runs = 0;
    for (size_t t = 0; t < ph.size(); ++t) runs += t == 0 || ph[t] != ph[t - 1];
    out.emplace_back(runs, ph.size());
  }
  return out;
}

TEST_F(ScoreE2E, PhoneBonusFromTheCheckpointAndTheFlag) {
  const fs::path cfg = dir_ / "bonus.yaml";
  std::ofstream(cfg) << "data:\n  workdir: " << work()
                     << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                        "crf:\n  max_duration: 4\n  phone_bonus: -100\n"
                        "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  threads: 2\n  run_dir: "
                     << (dir_ / "run-bonus").string() << "\n";
  Cmd t = run("train --config " + cfg.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string ckpt = (dir_ / "run-bonus" / "checkpoints" / "epoch-1.safetensors").string();
  auto evaluate = [&](const std::string& flag, const std::string& name) {
    const fs::path js = dir_ / (name + ".json"), pred = dir_ / (name + ".jsonl");
    Cmd e = run("evaluate --checkpoint " + ckpt + " --split dev --threads 2 " + flag + " --json " + js.string() +
                " --dump-predictions " + pred.string());
    EXPECT_EQ(e.rc, 0) << e.output;
    return std::make_pair(nlohmann::json::parse(slurp(js)), phones_and_frames(slurp(pred)));
  };
  const auto [j_ckpt, p_ckpt] = evaluate("", "bonus-ckpt");  // -100 from the checkpoint
  EXPECT_EQ(j_ckpt["phone_bonus"].get<double>(), -100.0);
  ASSERT_FALSE(p_ckpt.empty());
  for (const auto& [phones, frames] : p_ckpt) EXPECT_EQ(phones, 1u);
  const auto [j_plus, p_plus] = evaluate("--phone-bonus 100", "bonus-plus");
  EXPECT_EQ(j_plus["phone_bonus"].get<double>(), 100.0);
  for (const auto& [phones, frames] : p_plus) EXPECT_EQ(phones, frames);
  const auto [j_zero, p_zero] = evaluate("--phone-bonus 0", "bonus-zero");
  size_t zero_phones = 0, frames_total = 0;
  for (const auto& [phones, frames] : p_zero) zero_phones += phones, frames_total += frames;
  EXPECT_GT(zero_phones, p_ckpt.size());  // plain Viterbi lies strictly between the two limits
  EXPECT_LT(zero_phones, frames_total);
  // out of range: one line naming the flag, nothing written
  const fs::path bad = dir_ / "bonus-bad.json";
  Cmd e = run("evaluate --checkpoint " + ckpt + " --split dev --phone-bonus 1000 --json " + bad.string());
  EXPECT_EQ(e.rc, 1) << e.output;
  EXPECT_NE(e.output.find("--phone-bonus must be in [-100, 100]"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(bad));
}

// A run trained with crf.frame_ce_weight: 1 and crf.decode: posterior (its
// dev evaluation decodes that way too), with crf.phone_bonus: -100, which
// makes Viterbi decode one phone per utterance: posterior decoding (the
// checkpoint's, or --decode posterior) ignores the bonus and decodes more
// phones, identically for any --phone-bonus; --decode viterbi restores the
// bonus's one-phone limit, and plain Viterbi (bonus 0) differs from the
// posterior decoding too.
TEST_F(ScoreE2E, PosteriorDecodingFromTheCheckpointAndTheFlag) {
  const fs::path cfg = dir_ / "posterior.yaml";
  const fs::path run_dir = dir_ / "run-posterior";
  std::ofstream(cfg) << "data:\n  workdir: " << work()
                     << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                        "crf:\n  max_duration: 4\n  phone_bonus: -100\n  decode: posterior\n  frame_ce_weight: 1\n"
                        "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  threads: 2\n  run_dir: "
                     << run_dir.string() << "\n";
  Cmd t = run("train --config " + cfg.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  const auto rj = nlohmann::json::parse(slurp(run_dir / "run.json"));
  EXPECT_EQ(rj["config"]["crf"]["decode"], "posterior");
  EXPECT_EQ(rj["config"]["crf"]["frame_ce_weight"].get<double>(), 1.0);
  const auto metrics = nlohmann::json::parse(slurp(run_dir / "metrics.jsonl"));
  EXPECT_TRUE(std::isfinite(metrics["train_loss"].get<double>())) << metrics.dump();
  const std::string ckpt = (run_dir / "checkpoints" / "epoch-1.safetensors").string();
  auto evaluate = [&](const std::string& flag, const std::string& name) {
    const fs::path js = dir_ / (name + ".json"), pred = dir_ / (name + ".jsonl");
    Cmd e = run("evaluate --checkpoint " + ckpt + " --split dev --threads 2 " + flag + " --json " + js.string() +
                " --dump-predictions " + pred.string());
    EXPECT_EQ(e.rc, 0) << e.output;
    return std::make_pair(nlohmann::json::parse(slurp(js)), slurp(pred));
  };
  const auto [j_post, p_post] = evaluate("", "post-ckpt");
  EXPECT_EQ(j_post["decode"], "posterior");
  size_t phones = 0;
  const auto pf = phones_and_frames(p_post);
  ASSERT_FALSE(pf.empty());
  for (const auto& [n, frames] : pf) phones += n;
  EXPECT_GT(phones, pf.size()) << "the phone bonus -100 reached posterior decoding";
  const auto [j_flag, p_flag] = evaluate("--decode posterior --phone-bonus 100", "post-flag");
  EXPECT_EQ(p_flag, p_post);  // the bonus does not apply
  const auto [j_vit, p_vit] = evaluate("--decode viterbi", "post-viterbi");
  EXPECT_EQ(j_vit["decode"], "viterbi");
  for (const auto& [n, frames] : phones_and_frames(p_vit)) EXPECT_EQ(n, 1u);
  const auto [j_plain, p_plain] = evaluate("--decode viterbi --phone-bonus 0", "post-plain");
  EXPECT_NE(p_plain, p_post);
  // an unknown decoding: one line naming the flag, nothing written
  const fs::path bad = dir_ / "post-bad.json";
  Cmd e = run("evaluate --checkpoint " + ckpt + " --split dev --decode mbr --json " + bad.string());
  EXPECT_NE(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("--decode"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(bad));
}
