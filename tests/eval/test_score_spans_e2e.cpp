// `timitseg score --spans` with the built binary on a tiny synth corpus, the
// spans written here from the references themselves (read independently of
// the scorer: the .PHN text and the frame labels):
//   - spans at the .PHN times score 100 % within 10 ms and 0 ms error against
//     the sample-accurate reference; spans at the frame runs' boundaries 0 ms
//     against the frame-quantized one;
//   - every span shifted by 30 ms: 0 % within 20 and 25 ms, 100 % within 50,
//     30 ms mean error (sample-accurate; frame-quantized exactly 3 frames);
//   - bad lines fail with the file, the line and the problem; a missing
//     utterance is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "model/labels.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

struct Phone {
  std::string name;
  double start = 0;  // seconds
};

class ScoreSpansE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_score_spans_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 3, 5);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string work() { return (dir_ / "work").string(); }
  static std::string name39(const model::LabelSet& ls, const std::string& phn_label) {
    const data::LabelResolution r = ls.spec.resolve(phn_label);
    return r.kind == data::LabelKind::phone ? ls.scoring_names[ls.scoring_index[r.index]] : "";  // "" : merged (q)
  }
  // The frame runs' phones, each starting at the boundary before its first frame (f*160 + 120 samples,
  // snip_edges at 16 kHz: halfway between the centres t*160 + 200 of frames f-1 and f).
  static std::vector<Phone> run_phones(const data::Utterance& u, const model::LabelSet& ls) {
    std::vector<Phone> out;
    for (size_t t = 0; t < u.labels.size(); ++t) {
      const std::string n = ls.scoring_names[ls.scoring_index[ls.class_of_label(u.labels[t])]];
      if (out.empty() || out.back().name != n) out.push_back({n, t == 0 ? 0.0 : (160.0 * t + 120.0) / 16000.0});
    }
    return out;
  }
  // The .PHN's phones in the 39 (q into the phone before it, equal neighbours merged).
  static std::vector<Phone> phn_phones(const data::Utterance& u, const model::LabelSet& ls) {
    std::ifstream f(fs::path(u.audio_path).replace_extension(".PHN"));
    std::vector<Phone> out;
    int64_t a = 0, b = 0;
    std::string label;
    while (f >> a >> b >> label) {
      const std::string n = name39(ls, label);
      if (n.empty() || (!out.empty() && out.back().name == n)) continue;
      out.push_back({n, a / 16000.0});
    }
    return out;
  }
  static nlohmann::json spans(const std::vector<Phone>& p, double shift, double end) {
    nlohmann::json phones = nlohmann::json::array();
    for (size_t i = 0; i < p.size(); ++i)
      phones.push_back({p[i].start + shift, (i + 1 < p.size() ? p[i + 1].start : end) + shift, p[i].name});
    return phones;
  }
  // Spans of every core-test utterance, each start + shift seconds: from the .PHN (as "phones" when its
  // phones are the frame runs', else as "phn_phones" beside the runs' "phones"), or from the runs only.
  static fs::path write_spans(const std::string& name, bool from_phn, double shift, int* n_other = nullptr) {
    const model::LabelSet ls = model::LabelSet::make(39);
    std::ofstream f(dir_ / name);
    for (const data::Utterance& u : data::load_split(work(), "core-test").utterances) {
      const std::vector<Phone> p = run_phones(u, ls), q = phn_phones(u, ls);
      bool same = p.size() == q.size();
      for (size_t i = 0; same && i < p.size(); ++i) same = p[i].name == q[i].name;
      const double end = u.num_frames * 0.01 + 0.015;
      nlohmann::json j = {{"utterance_id", u.id}, {"phones", spans(from_phn && same ? q : p, shift, end)}};
      if (from_phn && !same) {
        j["phn_phones"] = spans(q, shift, end);
        if (n_other) ++*n_other;
      }
      f << j.dump() << "\n";
    }
    return dir_ / name;
  }
  static nlohmann::json score(const fs::path& spans) {
    const fs::path out = dir_ / (spans.stem().string() + ".json");
    const Cmd s = run("score --workdir " + work() + " --split core-test --spans " + spans.string() + " --json " +
                      out.string());
    EXPECT_EQ(s.rc, 0) << s.output;
    EXPECT_NE(s.output.find("sample-accurate"), std::string::npos) << s.output;
    return nlohmann::json::parse(slurp(out));
  }
  static std::string fails(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    const Cmd s = run("score --workdir " + work() + " --split core-test --spans " + (dir_ / name).string());
    EXPECT_NE(s.rc, 0) << s.output;
    return s.output;
  }
};
fs::path ScoreSpansE2E::dir_;

TEST_F(ScoreSpansE2E, ReferenceSpansScorePerfect) {
  int n_other = 0;  // utterances whose .PHN phones are not their frame runs' (a phone shorter than a frame)
  const nlohmann::json j = score(write_spans("phn.jsonl", true, 0.0, &n_other));
  const nlohmann::json& s = j["samples"];
  ASSERT_GT(s["boundaries"].get<int64_t>(), 0);
  EXPECT_EQ(s["within_ms"]["10"].get<double>(), 1.0);
  EXPECT_NEAR(s["mean_abs_ms"].get<double>(), 0.0, 1e-9);
  EXPECT_EQ(j["utterances"].get<int64_t>(), static_cast<int64_t>(data::load_split(work(), "core-test").utterances.size()));
  EXPECT_EQ(s["sequence_differs"].get<int64_t>(), 0);  // "phn_phones" scored where given

  // without "phn_phones" those utterances leave the sample-accurate rows, counted
  const nlohmann::json r = score(write_spans("runs_only.jsonl", false, 0.0));
  EXPECT_EQ(r["samples"]["sequence_differs"].get<int64_t>(), n_other);

  const nlohmann::json f = score(write_spans("runs.jsonl", false, 0.0));
  ASSERT_GT(f["boundaries"].get<int64_t>(), 0);
  EXPECT_EQ(f["within_ms"]["10"].get<double>(), 1.0);
  EXPECT_EQ(f["mean_abs_ms"].get<double>(), 0.0);
}

TEST_F(ScoreSpansE2E, SpansShiftedBy30msScore30ms) {
  const nlohmann::json j = score(write_spans("phn30.jsonl", true, 0.030));
  const nlohmann::json& s = j["samples"];
  ASSERT_GT(s["boundaries"].get<int64_t>(), 0);
  EXPECT_EQ(s["within_ms"]["20"].get<double>(), 0.0);
  EXPECT_EQ(s["within_ms"]["25"].get<double>(), 0.0);
  EXPECT_EQ(s["within_ms"]["50"].get<double>(), 1.0);
  EXPECT_NEAR(s["mean_abs_ms"].get<double>(), 30.0, 1e-6);
  EXPECT_NEAR(s["median_abs_ms"].get<double>(), 30.0, 1e-6);
  // per phone: every boundary into every phone is 30 ms off the same way, and the
  // lengths an utterance gains and loses add up to 0 (its own start and end are exact)
  ASSERT_GT(s["by_phone"].size(), 3u) << s.dump();
  const double shift = s["mean_signed_ms"].get<double>();
  EXPECT_NEAR(std::fabs(shift), 30.0, 1e-6);
  double length_sum = 0.0;
  int64_t into = 0;
  for (const auto& [label, p] : s["by_phone"].items()) {
    if (p["boundaries"].get<int64_t>() > 0) EXPECT_NEAR(p["mean_signed_ms"].get<double>(), shift, 1e-6) << label;
    into += p["boundaries"].get<int64_t>();
    length_sum += p["phones"].get<double>() * p["mean_length_error_ms"].get<double>();
  }
  EXPECT_EQ(into, s["boundaries"].get<int64_t>());
  EXPECT_NEAR(length_sum, 0.0, 1e-6);

  const nlohmann::json f = score(write_spans("runs30.jsonl", false, 0.030));
  EXPECT_EQ(f["within_ms"]["25"].get<double>(), 0.0);
  EXPECT_EQ(f["within_ms"]["50"].get<double>(), 1.0);
  EXPECT_NEAR(f["mean_abs_ms"].get<double>(), 30.0, 1e-9);
}

TEST_F(ScoreSpansE2E, BadLinesNameFileAndLine) {
  const std::string good = slurp(write_spans("good.jsonl", false, 0.0));
  const std::string first = good.substr(0, good.find('\n') + 1), rest = good.substr(good.find('\n') + 1);
  const std::string id = nlohmann::json::parse(first)["utterance_id"];
  std::string out = fails("notjson.jsonl", first + "{oops\n" + rest);
  EXPECT_NE(out.find("notjson.jsonl:2: not a JSON object"), std::string::npos) << out;
  out = fails("twice.jsonl", first + first + rest);
  EXPECT_NE(out.find("twice.jsonl:2: utterance '" + id + "' again"), std::string::npos) << out;
  out = fails("missing.jsonl", rest);
  EXPECT_NE(out.find("missing.jsonl: no line for utterance '" + id + "'"), std::string::npos) << out;
  nlohmann::json j = nlohmann::json::parse(first);
  j["phones"][0][2] = j["phones"][0][2] == "sil" ? "aa" : "sil";
  out = fails("label.jsonl", j.dump() + "\n" + rest);
  EXPECT_NE(out.find("label.jsonl:1: utterance '" + id + "': phone 0 is"), std::string::npos) << out;
  j = nlohmann::json::parse(first);
  j["phones"][0] = {0.0, "x", "sil"};
  out = fails("shape.jsonl", rest + j.dump() + "\n");
  const int64_t last = std::count(rest.begin(), rest.end(), '\n') + 1;
  EXPECT_NE(out.find("shape.jsonl:" + std::to_string(last) + ": utterance '" + id + "', phone 0: "), std::string::npos)
      << out;
  out = fails("unknown.jsonl", R"({"utterance_id": "nope", "phones": [[0, 1, "sil"]]})" "\n");
  EXPECT_NE(out.find("unknown.jsonl:1: utterance 'nope' is not in split 'core-test'"), std::string::npos) << out;
  const Cmd both = run("score --workdir " + work() + " --split core-test --spans a --predictions b");
  EXPECT_NE(both.rc, 0);
  EXPECT_NE(both.output.find("excludes"), std::string::npos) << both.output;
}

}  // namespace
