// End to end with the built binary: `timitseg align` on a tiny synth corpus
// with a 1-epoch checkpoint (transcripts from the .PHN beside the audio, from
// a --phones list and from words through a dictionary), identical output on
// the reference and cpu backends, bad inputs reported one line each while the
// others are aligned, and `evaluate --align`'s JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/features.h"
#include "data/transcripts.h"
#include "eval/align.h"
#include "eval/align_metrics.h"
#include "model/checkpoint.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

struct PhnRow {
  long long b, e;
  std::string name;
};

std::vector<PhnRow> read_phn(const fs::path& p) {
  std::vector<PhnRow> rows;
  std::istringstream in(slurp(p));
  PhnRow r;
  while (in >> r.b >> r.e >> r.name) rows.push_back(r);
  return rows;
}

class AlignE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static fs::path ckpt_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_align_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 4, 3, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
    const std::string config = (dir_ / "tiny.yaml").string();
    std::ofstream(config) << "data:\n  workdir: " << (dir_ / "work").string()
                          << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                             "crf:\n  max_duration: 8\n  backend: auto\n"
                             "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n"
                             "  run_dir: "
                          << (dir_ / "run").string() << "\n";
    const Cmd t = run("train --config " + config);
    ASSERT_EQ(t.rc, 0) << t.output;
    ckpt_ = dir_ / "run" / "checkpoints" / "best.safetensors";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // The transcript of a .PHN in the checkpoint's label set (what align must place).
  static std::vector<std::string> expected_names(const fs::path& phn) {
    const model::ModelState s = model::load_checkpoint(ckpt_.string());
    data::Transcript t;
    t.source = phn.string();
    t.phones = data::parse_phn_phones(phn.string(), read_file(phn.string()));
    std::vector<std::string> out;
    for (int32_t c : eval::to_classes(t, s.labels).classes) out.push_back(s.labels.names[c]);
    return out;
  }
};
fs::path AlignE2E::dir_;
fs::path AlignE2E::ckpt_;

}  // namespace

TEST_F(AlignE2E, TimitTreeFromPhnBesideAudioSameOnEveryHostBackend) {
  const fs::path test = dir_ / "synth" / "TEST";
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " +
              (dir_ / "al_cpu").string() + " --crf-backend cpu --device cpu --threads 2");
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd r = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " +
              (dir_ / "al_ref").string() + " --crf-backend reference --device cpu --batch-size 3");
  ASSERT_EQ(r.rc, 0) << r.output;
  int n = 0;
  for (const auto& f : fs::recursive_directory_iterator(test)) {
    if (f.path().extension() != ".WAV") continue;
    ++n;
    const fs::path rel = fs::relative(f.path(), test).replace_extension();
    const fs::path out = dir_ / "al_cpu" / rel;
    ASSERT_TRUE(fs::exists(out.string() + ".PHN")) << out;
    EXPECT_EQ(slurp(out.string() + ".PHN"), slurp((dir_ / "al_ref" / rel).string() + ".PHN")) << rel;
    EXPECT_EQ(slurp(out.string() + ".TextGrid"), slurp((dir_ / "al_ref" / rel).string() + ".TextGrid")) << rel;
    // The phones are the transcript's, in order, contiguous, covering the audio.
    const std::vector<PhnRow> rows = read_phn(out.string() + ".PHN");
    const std::vector<std::string> want = expected_names(fs::path(f.path()).replace_extension(".PHN"));
    ASSERT_EQ(rows.size(), want.size()) << rel;
    long long prev = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].name, want[i]) << rel << " phone " << i;
      EXPECT_EQ(rows[i].b, prev);
      EXPECT_GT(rows[i].e, rows[i].b);
      prev = rows[i].e;
    }
    const std::string tg = slurp(out.string() + ".TextGrid");
    EXPECT_NE(tg.find("name = \"phones\""), std::string::npos);
    EXPECT_EQ(tg.find("name = \"words\""), std::string::npos);
  }
  EXPECT_GT(n, 0);
}

TEST_F(AlignE2E, PhonesListBadLinesReportedOthersAligned) {
  // Two good utterances, one with a phone outside every label set, one with more phones than frames.
  std::vector<fs::path> wavs;
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
    if (f.path().extension() == ".WAV") wavs.push_back(f.path());
  std::sort(wavs.begin(), wavs.end());
  ASSERT_GE(wavs.size(), 4u);
  auto phones_of = [](const fs::path& wav) {
    std::string s;
    for (const std::string& p : data::parse_phn_phones("x", read_file(fs::path(wav).replace_extension(".PHN").string())))
      s += " " + p;
    return s;
  };
  std::string too_many;
  for (int i = 0; i < 5000; ++i) too_many += i % 2 ? " aa" : " s";
  const fs::path list = dir_ / "phones.txt";
  std::ofstream(list) << "# audio, then phones\n"
                      << wavs[0].string() << phones_of(wavs[0]) << "\n"
                      << wavs[1].string() << " h# zz aa h#\n"
                      << wavs[2].string() << too_many << "\n"
                      << wavs[3].string() << phones_of(wavs[3]) << "\n";
  const fs::path out = dir_ / "al_list";
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --phones " + list.string() + " --out " + out.string() +
              " --device cpu --threads 2");
  EXPECT_NE(a.rc, 0) << a.output;
  EXPECT_NE(a.output.find(list.string() + ":3: phone 'zz' is not in the label set"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find(wavs[2].string() + ": the transcript has 5000 phones but the audio only"), std::string::npos)
      << a.output;
  EXPECT_NE(a.output.find("align: 2 of 4 input file(s) failed"), std::string::npos) << a.output;
  auto stem = [&](const fs::path& w) { return out / w.filename().replace_extension(); };
  EXPECT_TRUE(fs::exists(stem(wavs[0]).string() + ".PHN"));
  EXPECT_TRUE(fs::exists(stem(wavs[3]).string() + ".PHN"));
  EXPECT_FALSE(fs::exists(stem(wavs[1]).string() + ".PHN"));
  EXPECT_FALSE(fs::exists(stem(wavs[2]).string() + ".TextGrid"));
  EXPECT_EQ(read_phn(stem(wavs[0]).string() + ".PHN").size(),
            expected_names(fs::path(wavs[0]).replace_extension(".PHN")).size());
}

TEST_F(AlignE2E, WordsThroughDictionaryGiveAWordsTier) {
  fs::path wav;
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
    if (f.path().extension() == ".WAV") wav = f.path();
  std::vector<std::string> ph = data::parse_phn_phones("x", read_file(fs::path(wav).replace_extension(".PHN").string()));
  ASSERT_GE(ph.size(), 4u);
  // Two made-up words covering the .PHN's phones (h# included), in CMUdict format.
  const size_t half = ph.size() / 2;
  auto arpa = [](const std::string& p) {
    std::string s = p;
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  };
  // Phones not in ARPAbet (closures, h#, ...) would not parse as CMUdict, so use TIMIT's format.
  std::string w1, w2;
  for (size_t i = 0; i < ph.size(); ++i) (i < half ? w1 : w2) += (i == 0 || i == half ? "" : " ") + ph[i];
  (void)arpa;
  const fs::path dict = dir_ / "dict.txt";
  std::ofstream(dict) << "; made-up words\nalpha  /" << w1 << "/\nbeta  /" << w2 << "/\n";
  const fs::path list = dir_ / "words.txt";
  std::ofstream(list) << wav.string() << " Alpha BETA\n";
  const fs::path out = dir_ / "al_words";
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
              " --no-closures --no-edge-silence --out " + out.string() + " --device cpu");
  ASSERT_EQ(a.rc, 0) << a.output;
  const fs::path base = out / wav.filename().replace_extension();
  const std::string tg = slurp(base.string() + ".TextGrid");
  EXPECT_NE(tg.find("size = 2"), std::string::npos) << tg;
  EXPECT_NE(tg.find("name = \"words\""), std::string::npos);
  EXPECT_NE(tg.find("text = \"Alpha\""), std::string::npos);  // as written in the list, looked up in any case
  EXPECT_NE(tg.find("text = \"BETA\""), std::string::npos);
  EXPECT_EQ(read_phn(base.string() + ".PHN").size(), expected_names(fs::path(wav).replace_extension(".PHN")).size());
  // Optional silences (edges and between the words): the aligner may skip them; the .PHN then has
  // between the transcript's phones and those plus the three silences.
  const fs::path out_s = dir_ / "al_words_sil";
  Cmd s2 = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
               " --no-closures --word-silence --out " + out_s.string() + " --device cpu");
  ASSERT_EQ(s2.rc, 0) << s2.output;
  const size_t n_sil = read_phn((out_s / wav.filename().replace_extension()).string() + ".PHN").size();
  const size_t n_plain = expected_names(fs::path(wav).replace_extension(".PHN")).size();
  EXPECT_GE(n_sil, n_plain - 2);  // h# of the made-up words may merge with the optional edge h#
  EXPECT_LE(n_sil, n_plain + 3);
  // A word missing from the dictionary: one line naming the list file and line; nothing written.
  std::ofstream(list) << wav.string() << " alpha gamma\n";
  Cmd b = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
              " --out " + (dir_ / "al_words2").string() + " --device cpu");
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.output.find(list.string() + ":1: word 'gamma' is not in the dictionary " + dict.string()),
            std::string::npos)
      << b.output;
  EXPECT_FALSE(fs::exists(dir_ / "al_words2" / (wav.filename().replace_extension().string() + ".PHN")));
  // An unparsable dictionary line fails before any work, naming file and line.
  std::ofstream(dict) << "alpha  /" << w1 << "/\nbeta " << w2 << "\n";
  Cmd c = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
              " --dict-format timit --out " + (dir_ / "al_words3").string() + " --device cpu");
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.output.find("error: " + dict.string() + ":2: expected 'word  /p h o n e s/'"), std::string::npos)
      << c.output;
}

TEST_F(AlignE2E, EvaluateAlignJson) {
  const fs::path js = dir_ / "eval.json";
  Cmd e = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --json " + js.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("forced alignment ("), std::string::npos) << e.output;
  const nlohmann::json j = nlohmann::json::parse(slurp(js));
  ASSERT_TRUE(j.contains("align")) << j.dump();
  const nlohmann::json& a = j["align"];
  EXPECT_GT(a["boundaries"].get<int64_t>(), 0);
  double prev = 0.0;
  for (const char* tol : {"10", "20", "25", "50"}) {
    const double f = a["within_ms"][tol].get<double>();
    EXPECT_GE(f, prev) << tol;
    EXPECT_LE(f, 1.0);
    prev = f;
  }
  EXPECT_GE(a["mean_abs_ms"].get<double>(), 0.0);
  EXPECT_GE(a["median_abs_ms"].get<double>(), 0.0);
  EXPECT_EQ(a["infeasible"].get<int64_t>(), 0);
  // The sample-accurate figure against an independent computation: `align` of the same
  // files writes the aligned boundaries in samples; each is compared here with the
  // reference .PHN (phn_reference: the same phone sequence) in ms.
  const fs::path test = dir_ / "synth" / "TEST", out = dir_ / "al_eval";
  Cmd al = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " + out.string() +
               " --device cpu");
  ASSERT_EQ(al.rc, 0) << al.output;
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  std::vector<double> errors, signed_errors;
  for (const data::Utterance& u : data::load_split((dir_ / "work").string(), "test").utterances) {
    const fs::path wav = u.audio_path, phn = fs::path(u.audio_path).replace_extension(".PHN");
    std::vector<data::Problem> problems;
    const auto ref = eval::phn_reference(data::parse_phn(phn.string(), slurp(phn), -1, &problems), s.labels);
    const std::vector<PhnRow> rows = read_phn((out / fs::relative(wav, test).replace_extension()).string() + ".PHN");
    ASSERT_EQ(rows.size(), ref.size()) << phn;
    for (size_t i = 1; i < ref.size(); ++i)
    {
      errors.push_back(std::fabs(static_cast<double>(rows[i].b - ref[i].start)) / 16.0);  // 16 samples per ms
      signed_errors.push_back(static_cast<double>(rows[i].b - ref[i].start) / 16.0);
    }
  }
  const nlohmann::json& sa = a["samples"];
  EXPECT_EQ(sa["without_phn"].get<int64_t>(), 0);
  ASSERT_EQ(sa["boundaries"].get<size_t>(), errors.size());
  double sum = 0;
  int within20 = 0;
  for (double e : errors) {
    sum += e;
    within20 += e <= 20.0;
  }
  EXPECT_NEAR(sa["mean_abs_ms"].get<double>(), sum / errors.size(), 1e-9);
  double signed_sum = 0;
  for (double e : signed_errors) signed_sum += e;
  EXPECT_NEAR(sa["mean_signed_ms"].get<double>(), signed_sum / errors.size(), 1e-9);
  EXPECT_NEAR(sa["within_ms"]["20"].get<double>(), static_cast<double>(within20) / errors.size(), 1e-12);
  size_t in_classes = 0;
  for (const auto& [name, c] : sa["by_class"].items()) in_classes += c["boundaries"].get<size_t>();
  EXPECT_EQ(in_classes, errors.size());
  EXPECT_NE(e.output.find("sample-accurate"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("frame-quantized"), std::string::npos) << e.output;
}

// Per-phone boundary shifts (eval/boundary_shifts.h, docs/align.md "Calibrating to a
// labelling convention"): `evaluate --align --fit-shifts` writes each phone's median
// error, checked here against the boundaries `align` writes and the .PHN; `align
// --shifts` moves each boundary by its phone's shift in samples (phones kept >= 1
// sample), and `evaluate --align --shifts` scores exactly those moved boundaries.
TEST_F(AlignE2E, FitShiftsThenApplyThemInAlignAndEvaluate) {
  const fs::path test = dir_ / "synth" / "TEST", plain = dir_ / "al_shift0", moved = dir_ / "al_shift1";
  const fs::path shifts = dir_ / "shifts.json", js = dir_ / "eval_shifted.json";
  const std::string ev = "evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu ";
  Cmd f = run(ev + "--fit-shifts " + shifts.string() + " --shift-min-boundaries 2");
  ASSERT_EQ(f.rc, 0) << f.output;
  EXPECT_NE(f.output.find("written to " + shifts.string()), std::string::npos) << f.output;
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " + plain.string() +
              " --device cpu");
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd b = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " + moved.string() +
              " --device cpu --shifts " + shifts.string());
  ASSERT_EQ(b.rc, 0) << b.output;
  Cmd e = run(ev + "--shifts " + shifts.string() + " --json " + js.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  const nlohmann::json fit = nlohmann::json::parse(slurp(shifts));
  EXPECT_EQ(fit["format"], "timitseg-boundary-shifts");
  EXPECT_EQ(fit["min_boundaries"], 2);
  EXPECT_EQ(fit["fitted_on"]["split"], "test");
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  // Per test utterance: its .PHN reference in the label set, `align`'s rows without shifts and with them.
  struct Rows3 {
    std::vector<eval::RefPhone> ref;
    std::vector<PhnRow> plain, moved;
  };
  auto test_rows = [&](const fs::path& moved_dir) {
    std::vector<Rows3> out;
    for (const data::Utterance& u : data::load_split((dir_ / "work").string(), "test").utterances) {
      const fs::path phn = fs::path(u.audio_path).replace_extension(".PHN");
      const fs::path rel = fs::relative(u.audio_path, test).replace_extension();
      std::vector<data::Problem> problems;
      out.push_back({eval::phn_reference(data::parse_phn(phn.string(), slurp(phn), -1, &problems), s.labels),
                     read_phn((plain / rel).string() + ".PHN"), read_phn((moved_dir / rel).string() + ".PHN")});
      EXPECT_EQ(out.back().plain.size(), out.back().ref.size()) << phn;
      EXPECT_EQ(out.back().moved.size(), out.back().ref.size()) << phn;
      if (out.back().plain.size() != out.back().ref.size() || out.back().moved.size() != out.back().ref.size())
        out.pop_back();
    }
    return out;
  };
  std::map<std::string, std::vector<double>> into;  // the independent fit: errors (ms) per phone from the files
  std::vector<double> moved_signed;                 // the moved boundaries against the .PHN, ms
  int64_t boundaries = 0, unmoved = 0, clamped = 0;
  for (const auto& [ref, r0, r1] : test_rows(moved)) {
    EXPECT_EQ(r1.back().e, r0.back().e);
    for (size_t i = 1; i < ref.size(); ++i) {
      ++boundaries;
      into[r0[i].name].push_back(static_cast<double>(r0[i].b - ref[i].start) / 16.0);
      moved_signed.push_back(static_cast<double>(r1[i].b - ref[i].start) / 16.0);
      EXPECT_GT(r1[i].b, r1[i - 1].b);
      EXPECT_EQ(r1[i - 1].e, r1[i].b);
      const double ms = fit["shift_ms"].value(r0[i].name, 0.0);
      if (ms == 0.0) ++unmoved;
      const long long want = r0[i].b - std::llround(ms * 16.0);
      if (r1[i].b != want) ++clamped;
    }
  }
  size_t fitted = 0;
  for (auto& [name, v] : into) {
    if (v.size() < 2) {
      EXPECT_FALSE(fit["shift_ms"].contains(name)) << name;
      continue;
    }
    ++fitted;
    std::sort(v.begin(), v.end());
    const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    EXPECT_NEAR(fit["shift_ms"][name].get<double>(), med, 1e-3) << name;
    EXPECT_EQ(fit["boundaries"][name].get<size_t>(), v.size()) << name;
  }
  EXPECT_GT(fitted, 0u);
  EXPECT_EQ(fit["shift_ms"].size(), fitted);
  const nlohmann::json sa = nlohmann::json::parse(slurp(js))["align"]["samples"];
  EXPECT_EQ(sa["shifts"]["file"], shifts.string());
  EXPECT_EQ(sa["shifts"]["boundaries"].get<int64_t>(), boundaries);
  EXPECT_EQ(sa["shifts"]["moved"].get<int64_t>(), boundaries - unmoved);
  EXPECT_EQ(sa["shifts"]["clamped"].get<int64_t>(), clamped);
  double sum = 0.0;
  for (double x : moved_signed) sum += x;
  EXPECT_NEAR(sa["mean_signed_ms"].get<double>(), sum / static_cast<double>(moved_signed.size()), 1e-9);
  EXPECT_NE(e.output.find("moved by the per-phone shifts of " + shifts.string()), std::string::npos) << e.output;
  // Refused before any work, one line each: --shifts without --align, both flags, another phone set.
  Cmd no_align = run("evaluate --checkpoint " + ckpt_.string() + " --split test --device cpu --shifts " + shifts.string());
  EXPECT_NE(no_align.rc, 0);
  EXPECT_NE(no_align.output.find("--shifts needs --align"), std::string::npos) << no_align.output;
  Cmd both = run(ev + "--shifts " + shifts.string() + " --fit-shifts " + (dir_ / "x.json").string());
  EXPECT_NE(both.rc, 0);
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
  nlohmann::json other = fit;
  other["phone_set"] = "espeak-de";
  const fs::path bad = dir_ / "shifts_de.json";
  std::ofstream(bad) << other.dump();
  for (const std::string& cmd : {ev + "--shifts " + bad.string(),
                                 "align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " +
                                     (dir_ / "al_shift_bad").string() + " --device cpu --shifts " + bad.string()}) {
    Cmd c = run(cmd);
    EXPECT_NE(c.rc, 0) << cmd;
    EXPECT_NE(c.output.find(bad.string() + ": fitted for phone set 'espeak-de'"), std::string::npos) << c.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "al_shift_bad"));

  // No output is an input (the checkpoint, also through a link; a WORKDIR file) or another output.
  const fs::path copy = dir_ / "ck_copy.safetensors", link = dir_ / "ck_link.safetensors";
  fs::copy_file(ckpt_, copy, fs::copy_options::overwrite_existing);
  fs::remove(link);
  fs::create_symlink(copy, link);
  const std::string before = slurp(copy);
  const std::string evc = "evaluate --checkpoint " + copy.string() + " --split test --align --device cpu ";
  for (const auto& [args, line] : std::vector<std::pair<std::string, std::string>>{
           {"--json " + copy.string(), "--json " + copy.string() + ": is the input " + copy.string()},
           {"--fit-shifts " + link.string(), "--fit-shifts " + link.string() + ": is the input " + copy.string()},
           {"--fit-shifts " + (dir_ / "work" / "manifest.json").string(), ": is the input "},
           {"--phone-plot " + link.string(), "--phone-plot " + link.string() + ": is the input " + copy.string()},
           {"--json " + (dir_ / "o.json").string() + " --fit-shifts " + (dir_ / "." / "o.json").string(),
            ": is also the path of --json"}}) {
    Cmd c = run(evc + args);
    EXPECT_NE(c.rc, 0) << args;
    EXPECT_NE(c.output.find(line), std::string::npos) << args << "\n" << c.output;
  }
  EXPECT_EQ(slurp(copy), before);
  EXPECT_FALSE(fs::exists(dir_ / "o.json"));

  // --max-utterances: a fit from the split's first two utterances (in its order) holds their boundaries only.
  const fs::path few = dir_ / "shifts_few.json", few_json = dir_ / "eval_few.json";
  Cmd fw = run(ev + "--max-utterances 2 --fit-shifts " + few.string() + " --shift-min-boundaries 1 --json " +
               few_json.string());
  ASSERT_EQ(fw.rc, 0) << fw.output;
  const std::vector<Rows3> all = test_rows(moved);
  ASSERT_GT(all.size(), 2u);
  const nlohmann::json fj = nlohmann::json::parse(slurp(few_json));
  EXPECT_EQ(fj["utterances"].get<int64_t>(), 2);
  EXPECT_EQ(fj["align"]["utterances"].get<int64_t>(), 2);
  const nlohmann::json few_fit = nlohmann::json::parse(slurp(few))["fitted_on"];
  EXPECT_EQ(few_fit["boundaries"].get<size_t>(), all[0].ref.size() - 1 + all[1].ref.size() - 1);
  EXPECT_EQ(few_fit["utterances"].get<int64_t>(), 2);
  EXPECT_EQ(few_fit["speakers"].get<int64_t>(), 1);  // 3 utterances a speaker, in split order
  EXPECT_NE(fw.output.find("fitted from 1 speaker(s)"), std::string::npos) << fw.output;
  Cmd neg = run(ev + "--max-utterances -1");
  EXPECT_NE(neg.rc, 0);
  EXPECT_NE(neg.output.find("--max-utterances must be >= 0"), std::string::npos) << neg.output;

  // --shift-context pair: each pair of phones around a boundary with >= 2 of them gets its own
  // median (from the same files), the others keep their phone's; align moves by the pair's first.
  const fs::path pairs = dir_ / "shifts_pair.json", moved2 = dir_ / "al_shift2";
  Cmd fp = run(ev + "--fit-shifts " + pairs.string() + " --shift-min-boundaries 2 --shift-context pair");
  ASSERT_EQ(fp.rc, 0) << fp.output;
  const nlohmann::json pj = nlohmann::json::parse(slurp(pairs));
  EXPECT_EQ(pj["context"], "pair");
  EXPECT_EQ(pj["shift_ms"], fit["shift_ms"]);  // the phones' shifts as before
  Cmd b2 = run("align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --out " + moved2.string() +
               " --device cpu --shifts " + pairs.string());
  ASSERT_EQ(b2.rc, 0) << b2.output;
  std::map<std::pair<std::string, std::string>, std::vector<double>> by_pair;
  int64_t by_pair_moved = 0, exact = 0, n = 0;
  double moved2_signed = 0.0;
  for (const auto& [ref, r0, r2] : test_rows(moved2)) {
    for (size_t i = 1; i < r0.size(); ++i) {
      by_pair[{r0[i - 1].name, r0[i].name}].push_back(static_cast<double>(r0[i].b - ref[i].start) / 16.0);
      const nlohmann::json& row = pj["pair_shift_ms"].value(r0[i - 1].name, nlohmann::json::object());
      const bool paired = row.contains(r0[i].name);
      const double ms = paired ? row[r0[i].name].get<double>() : fit["shift_ms"].value(r0[i].name, 0.0);
      by_pair_moved += paired;
      exact += r2[i].b == r0[i].b - std::llround(ms * 16.0);
      moved2_signed += static_cast<double>(r2[i].b - ref[i].start) / 16.0;
      ++n;
    }
  }
  size_t fitted_pairs = 0;
  for (auto& [key, v] : by_pair) {
    if (v.size() < 2) continue;
    ++fitted_pairs;
    std::sort(v.begin(), v.end());
    const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    EXPECT_NEAR(pj["pair_shift_ms"][key.first][key.second].get<double>(), med, 1e-3) << key.first << " " << key.second;
  }
  EXPECT_GT(fitted_pairs, 0u);
  EXPECT_GT(by_pair_moved, 0);
  // evaluate --shifts with the pair file scores the same moved boundaries: the ones not at their
  // shift are exactly those it held back, and its bias is theirs against the .PHN
  const fs::path js2 = dir_ / "eval_shifted_pair.json";
  Cmd e2 = run(ev + "--shifts " + pairs.string() + " --json " + js2.string());
  ASSERT_EQ(e2.rc, 0) << e2.output;
  const nlohmann::json sa2 = nlohmann::json::parse(slurp(js2))["align"]["samples"];
  EXPECT_EQ(sa2["shifts"]["clamped"].get<int64_t>(), n - exact);
  EXPECT_NEAR(sa2["mean_signed_ms"].get<double>(), moved2_signed / static_cast<double>(n), 1e-9);
}

// A WORKDIR prepared through --corpus (a manifest of the same TIMIT-layout corpus,
// labels as inline segments in seconds) records each utterance's reference in
// samples, so `evaluate --align` has sample-accurate rows without a .PHN: the
// same figures, boundary for boundary, as the TIMIT WORKDIR read beside its .PHN.
TEST_F(AlignE2E, CorpusWorkdirScoresSampleAccurateAlignmentFromItsRecordedReference) {
  std::string csv = "id,audio,speaker,split,segments\n";
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "synth")) {
    const fs::path p = e.path();
    if (p.extension() != ".PHN" || p.stem().string().rfind("SA", 0) == 0) continue;
    std::string segs;
    for (const PhnRow& r : read_phn(p)) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%.7f %.7f %s", segs.empty() ? "" : "; ", r.b / 16000.0, r.e / 16000.0,
                    r.name.c_str());
      segs += buf;
    }
    const std::string spk = p.parent_path().filename().string();
    const std::string part = p.parent_path().parent_path().parent_path().filename().string() == "TRAIN" ? "train" : "test";
    csv += spk + "/" + p.stem().string() + "," + fs::path(p).replace_extension(".WAV").string() + "," + spk + "," +
           part + ",\"" + segs + "\"\n";
  }
  fs::create_directories(dir_ / "manifest");
  std::ofstream(dir_ / "manifest" / "manifest.csv") << csv;
  Cmd p = run("prepare --corpus " + (dir_ / "manifest").string() + " --format manifest --phone-set timit61 --out " +
              (dir_ / "work_manifest").string() + " --no-progress");
  ASSERT_EQ(p.rc, 0) << p.output;
  const fs::path ja = dir_ / "eval_timit.json", jb = dir_ / "eval_manifest.json";
  Cmd a = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --json " + ja.string());
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd b = run("evaluate --checkpoint " + ckpt_.string() + " --workdir " + (dir_ / "work_manifest").string() +
              " --split test --align --device cpu --json " + jb.string());
  ASSERT_EQ(b.rc, 0) << b.output;
  const nlohmann::json sa = nlohmann::json::parse(slurp(ja))["align"]["samples"],
                       sb = nlohmann::json::parse(slurp(jb))["align"]["samples"];
  EXPECT_EQ(sb["without_phn"].get<int64_t>(), 0) << b.output;
  EXPECT_GT(sb["boundaries"].get<int64_t>(), 0);
  EXPECT_EQ(sa["boundaries"], sb["boundaries"]);
  EXPECT_EQ(sa["within_ms"], sb["within_ms"]);
  for (const char* k : {"mean_abs_ms", "median_abs_ms"})  // summed in another utterance order
    EXPECT_NEAR(sa[k].get<double>(), sb[k].get<double>(), 1e-9) << k;
}

// Kaldi-style input (wav.scp + a text file of utterance ids and words) and every
// output format: each parsed and checked against the .PHN of the same run.
TEST_F(AlignE2E, KaldiIdsAndEveryFormat) {
  fs::path wav;
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
    if (f.path().extension() == ".WAV") wav = f.path();
  const std::vector<std::string> ph =
      data::parse_phn_phones("x", read_file(fs::path(wav).replace_extension(".PHN").string()));
  std::string w1, w2;
  for (size_t i = 0; i < ph.size(); ++i) (i < ph.size() / 2 ? w1 : w2) += " " + ph[i];
  const fs::path dict = dir_ / "kaldi_dict.txt", scp = dir_ / "wav.scp", text = dir_ / "text", out = dir_ / "al_kaldi";
  std::ofstream(dict) << "alpha  /" << w1 << " /\nbeta  /" << w2 << " /\n";
  std::ofstream(scp) << "utt_a " << wav.string() << "\n";
  std::ofstream(text) << "utt_a alpha beta\nutt_missing alpha\n";
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --words " + text.string() + " --wav-scp " + scp.string() +
              " --dict " + dict.string() + " --no-closures --no-edge-silence --format phn,textgrid,csv,json,ctm --out " +
              out.string() + " --device cpu");
  EXPECT_NE(a.rc, 0);
  EXPECT_NE(a.output.find(text.string() + ":2: utterance 'utt_missing' is not in --wav-scp " + scp.string()),
            std::string::npos)
      << a.output;
  EXPECT_NE(a.output.find("align: 1 of 2 input file(s) failed"), std::string::npos) << a.output;
  const std::vector<PhnRow> rows = read_phn(out / "utt_a.PHN");
  ASSERT_GE(rows.size(), 2u);
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(out)) names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"utt_a.PHN", "utt_a.TextGrid", "utt_a.csv", "utt_a.ctm", "utt_a.json",
                                             "utt_a.words.ctm"}));  // nothing for utt_missing, no temporary files
  // JSON: the same phones in samples and seconds, the two words covering them
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "utt_a.json"));
  EXPECT_EQ(j["utterance"], "utt_a");
  const int rate = j["sample_rate"].get<int>();
  EXPECT_EQ(rate, 16000);
  ASSERT_EQ(j["phones"].size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(j["phones"][i]["label"], rows[i].name);
    EXPECT_EQ(j["phones"][i]["start_sample"].get<long long>(), rows[i].b);
    EXPECT_EQ(j["phones"][i]["end_sample"].get<long long>(), rows[i].e);
    EXPECT_NEAR(j["phones"][i]["start"].get<double>(), rows[i].b / 16000.0, 1e-12);
  }
  ASSERT_EQ(j["words"].size(), 2u);
  EXPECT_EQ(j["words"][0]["label"], "alpha");
  EXPECT_EQ(j["words"][1]["label"], "beta");
  EXPECT_EQ(j["words"][0]["start_sample"].get<long long>(), rows.front().b);
  EXPECT_EQ(j["words"][1]["end_sample"].get<long long>(), rows.back().e);
  // CSV: a header, one row per phone then per word
  std::istringstream csv(slurp(out / "utt_a.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "tier,start,end,start_sample,end_sample,label,boundary_confidence,label_confidence");
  for (size_t i = 0; i < rows.size() + 2; ++i) {
    ASSERT_TRUE(std::getline(csv, line));
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 8u) << line;
    for (size_t k : {6, 7}) {  // probabilities
      EXPECT_GE(std::stod(f[k]), 0.0) << line;
      EXPECT_LE(std::stod(f[k]), 1.0) << line;
    }
    if (i < rows.size()) {
      EXPECT_EQ(f[0], "phone");
      EXPECT_EQ(std::stoll(f[3]), rows[i].b);
      EXPECT_EQ(std::stoll(f[4]), rows[i].e);
      EXPECT_EQ(f[5], rows[i].name);
      EXPECT_NEAR(std::stod(f[1]), rows[i].b / 16000.0, 1e-6);
    } else {
      EXPECT_EQ(f[0], "word");
      EXPECT_EQ(f[5], i == rows.size() ? "alpha" : "beta");
    }
  }
  EXPECT_FALSE(std::getline(csv, line));
  // CTM: "utt_a 1 start duration phone", start + duration = the next start
  std::istringstream ctm(slurp(out / "utt_a.ctm"));
  size_t n = 0;
  for (std::string id, ch, label; ctm >> id >> ch;) {
    double start = 0, dur = 0;
    ctm >> start >> dur >> label;
    ASSERT_LT(n, rows.size());
    EXPECT_EQ(id, "utt_a");
    EXPECT_EQ(ch, "1");
    EXPECT_EQ(label, rows[n].name);
    EXPECT_NEAR(start * 16000.0, static_cast<double>(rows[n].b), 0.01);
    EXPECT_NEAR((start + dur) * 16000.0, static_cast<double>(rows[n].e), 0.02);
    ++n;
  }
  EXPECT_EQ(n, rows.size());
  const std::string wctm = slurp(out / "utt_a.words.ctm");
  EXPECT_EQ(std::count(wctm.begin(), wctm.end(), '\n'), 2);
  EXPECT_EQ(wctm.rfind("utt_a 1 ", 0), 0u) << wctm;
  // bad wav.scp lines: one line naming the file and line
  std::ofstream(scp) << "utt_a sox in.wav -t wav - |\n";
  Cmd b = run("align --checkpoint " + ckpt_.string() + " --words " + text.string() + " --wav-scp " + scp.string() +
              " --dict " + dict.string() + " --out " + out.string() + " --device cpu");
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.output.find("--wav-scp " + scp.string() + ":1: 'utt_a' is given by a command"), std::string::npos)
      << b.output;
  Cmd c = run("align --checkpoint " + ckpt_.string() + " --timit " + (dir_ / "synth" / "TEST").string() +
              " --format phn,srt --out " + out.string() + " --device cpu");
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.output.find("--format"), std::string::npos) << c.output;
}


// The confidences of align and the posteriors of decode (docs/align.md
// "Confidence"): in [0, 1], the same on the reference backend (the float64
// definitions) as on the cpu backend (the recurrences) to 1e-9, and
// evaluate --align's confidence section.
TEST_F(AlignE2E, ConfidencesAndPosteriorsSameOnReferenceAndCpu) {
  const fs::path test = dir_ / "synth" / "TEST";
  auto values = [](const fs::path& json, const char* list, const std::vector<std::string>& keys) {
    const nlohmann::json j = nlohmann::json::parse(slurp(json));
    std::vector<double> v;
    for (const auto& row : j.at(list))
      for (const std::string& k : keys) v.push_back(row.at(k).get<double>());
    return v;
  };
  for (const char* cmd : {"align", "decode"}) {
    const bool al = std::string(cmd) == "align";
    std::vector<std::vector<double>> got;
    for (const char* be : {"cpu", "reference"}) {
      const fs::path out = dir_ / (std::string("conf_") + cmd + "_" + be);
      const std::string input = al ? "--timit " + test.string() : test.string();
      Cmd c = run(std::string(cmd) + " --checkpoint " + ckpt_.string() + " " + input + " --out " + out.string() +
                  " --format json,csv --device cpu --crf-backend " + be);
      ASSERT_EQ(c.rc, 0) << c.output;
      if (al) EXPECT_NE(c.output.find("mean boundary_confidence"), std::string::npos) << c.output;
      std::vector<double> all;
      for (const auto& f : fs::recursive_directory_iterator(out)) {
        if (f.path().extension() != ".json") continue;
        const auto v = al ? values(f.path(), "phones", {"boundary_confidence", "label_confidence"})
                          : values(f.path(), "phones", {"posterior"});
        all.insert(all.end(), v.begin(), v.end());
        EXPECT_NE(slurp(fs::path(f.path()).replace_extension(".csv")).find(al ? ",label_confidence\n" : ",posterior\n"),
                  std::string::npos);
      }
      got.push_back(all);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    ASSERT_GT(got[0].size(), 10u);
    double sum = 0.0;
    for (size_t i = 0; i < got[0].size(); ++i) {
      EXPECT_GE(got[0][i], 0.0);
      EXPECT_LE(got[0][i], 1.0 + 1e-12);
      EXPECT_NEAR(got[0][i], got[1][i], 1e-9) << cmd << " value " << i;
      sum += got[0][i];
    }
    EXPECT_GT(sum, 0.0) << cmd;
  }
  const fs::path js = dir_ / "eval_conf.json";
  Cmd e = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --json " + js.string() +
              " --reliability-plot " + (dir_ / "rel.svg").string() + " --phone-plot " + (dir_ / "phones.svg").string());
  ASSERT_EQ(e.rc, 0) << e.output;
  {  // one bar per phone of by_phone with boundaries into it
    const nlohmann::json bp = nlohmann::json::parse(slurp(js))["align"]["samples"]["by_phone"];
    int64_t rows = 0;
    for (const auto& [label, p] : bp.items()) rows += p["boundaries"].get<int64_t>() > 0;
    ASSERT_GT(rows, 3);
    EXPECT_NE(slurp(dir_ / "phones.svg").find("data-rows=\"" + std::to_string(rows) + "\""), std::string::npos);
  }
  Cmd no_align = run("evaluate --checkpoint " + ckpt_.string() + " --split test --device cpu --phone-plot " +
                     (dir_ / "never.svg").string());
  EXPECT_NE(no_align.rc, 0);
  EXPECT_NE(no_align.output.find("evaluate: --phone-plot needs --align"), std::string::npos) << no_align.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.svg"));
  EXPECT_NE(e.output.find("label_confidence:    AUROC(replaced)"), std::string::npos) << e.output;
  const nlohmann::json c = nlohmann::json::parse(slurp(js))["align"]["confidence"];
  EXPECT_GT(c["label_confidence"]["replaced"].get<int64_t>(), 0);
  EXPECT_LT(c["label_confidence"]["replaced"].get<int64_t>(), c["label_confidence"]["phones"].get<int64_t>());
  const double auc = c["label_confidence"]["auroc_replaced"].get<double>();
  EXPECT_GE(auc, 0.0);
  EXPECT_LE(auc, 1.0);
  EXPECT_NE(slurp(dir_ / "rel.svg").find("label_confidence (ECE"), std::string::npos);
}

// evaluate --align says how many utterances its boundary_confidence figures leave out
// and why: here every test utterance, its .PHN moved away (no sample-accurate reference).
TEST_F(AlignE2E, ConfidenceFiguresSayWhatTheyLeaveOut) {
  std::vector<fs::path> moved;
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
    if (f.path().extension() == ".PHN") moved.push_back(f.path());
  for (const fs::path& p : moved) fs::rename(p, fs::path(p.string() + ".away"));
  const fs::path js = dir_ / "eval_left_out.json";
  Cmd e = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --json " + js.string());
  for (const fs::path& p : moved) fs::rename(fs::path(p.string() + ".away"), p);
  ASSERT_EQ(e.rc, 0) << e.output;
  const nlohmann::json a = nlohmann::json::parse(slurp(js))["align"];
  const int64_t n = a["utterances"].get<int64_t>();
  ASSERT_GT(n, 0);
  EXPECT_EQ(a["confidence"]["left_out"], nlohmann::json({{"no .PHN reference beside the audio", n}}));
  EXPECT_EQ(a["confidence"]["boundary_confidence"]["phones"].get<int64_t>(), 0);
  EXPECT_NE(e.output.find("(" + std::to_string(n) + " utterance(s) left out of boundary_confidence: " +
                          std::to_string(n) + " no .PHN reference beside the audio)"),
            std::string::npos)
      << e.output;
}

// --transcript picks the file beside each audio file (config/config_enums.h's
// words): phn the .PHN even with a dictionary, txt the .TXT's words, auto with
// --dict the .WRD then the .TXT (here no .WRD: the .TXT), wrd a .WRD (missing
// here: one line naming the audio); wrd without --dict and a word that is none
// of them are one error line each, before any work.
TEST_F(AlignE2E, TranscriptFlagPicksTheFileBesideTheAudio) {
  fs::path wav;
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
    if (f.path().extension() == ".WAV") wav = f.path();
  const fs::path in = dir_ / "tr_in";
  fs::create_directories(in);
  fs::copy_file(wav, in / "U.WAV", fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(wav).replace_extension(".PHN"), in / "U.PHN", fs::copy_options::overwrite_existing);
  const std::vector<std::string> ph = data::parse_phn_phones("x", read_file((in / "U.PHN").string()));
  ASSERT_GE(ph.size(), 4u);
  std::string w1, w2;  // two made-up words covering the .PHN's phones, TIMIT's dictionary format
  for (size_t i = 0; i < ph.size(); ++i) (i < ph.size() / 2 ? w1 : w2) += (i == 0 || i == ph.size() / 2 ? "" : " ") + ph[i];
  const fs::path dict = dir_ / "tr_dict.txt";
  std::ofstream(dict) << "alpha  /" << w1 << "/\nbeta  /" << w2 << "/\n";
  std::ofstream(in / "U.TXT") << "0 40000 Alpha beta.\n";
  auto align = [&](const std::string& mode, const std::string& out, bool with_dict) {
    return run("align --checkpoint " + ckpt_.string() + " " + in.string() + " --transcript " + mode +
               (with_dict ? " --dict " + dict.string() : std::string()) + " --no-closures --no-edge-silence --out " +
               (dir_ / out).string() + " --device cpu --threads 2");
  };
  const Cmd phn = align("phn", "tr_phn", true);
  ASSERT_EQ(phn.rc, 0) << phn.output;
  const std::vector<PhnRow> rows = read_phn(dir_ / "tr_phn" / "U.PHN");
  const std::vector<std::string> want = expected_names(in / "U.PHN");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].name, want[i]) << i;
  EXPECT_EQ(slurp(dir_ / "tr_phn" / "U.TextGrid").find("name = \"words\""), std::string::npos);
  const Cmd txt = align("txt", "tr_txt", true);
  ASSERT_EQ(txt.rc, 0) << txt.output;
  const std::string tg = slurp(dir_ / "tr_txt" / "U.TextGrid");
  EXPECT_NE(tg.find("name = \"words\""), std::string::npos) << tg;
  EXPECT_NE(tg.find("text = \"Alpha\""), std::string::npos) << tg;  // as written in the .TXT
  EXPECT_NE(tg.find("text = \"beta\""), std::string::npos) << tg;
  const Cmd au = align("auto", "tr_auto", true);
  ASSERT_EQ(au.rc, 0) << au.output;
  EXPECT_EQ(slurp(dir_ / "tr_auto" / "U.TextGrid"), tg);
  EXPECT_EQ(slurp(dir_ / "tr_auto" / "U.PHN"), slurp(dir_ / "tr_txt" / "U.PHN"));
  const Cmd wrd = align("wrd", "tr_wrd", true);
  EXPECT_EQ(wrd.rc, 1) << wrd.output;
  EXPECT_NE(wrd.output.find((in / "U.WAV").string() + ": no .WRD beside it"), std::string::npos) << wrd.output;
  EXPECT_FALSE(fs::exists(dir_ / "tr_wrd" / "U.PHN"));
  const Cmd nodict = align("wrd", "tr_nodict", false);
  EXPECT_EQ(nodict.rc, 1) << nodict.output;
  EXPECT_NE(nodict.output.find("error: align: --transcript wrd needs --dict FILE"), std::string::npos) << nodict.output;
  EXPECT_FALSE(fs::exists(dir_ / "tr_nodict"));
  const Cmd bad = align("words", "tr_bad", true);
  EXPECT_EQ(bad.rc, 2) << bad.output;
  EXPECT_NE(bad.output.find("--transcript"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("auto,phn,wrd,txt"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir_ / "tr_bad"));
}

namespace {

// The oracle of a moved silence edge, written out here from docs/align.md "Silence edges": the
// mean power over a centred window of 2 * 40 + 1 samples (5 ms at 16 kHz, cut at the ends), in dB
// (+ 1e-10); the floor the nearest-rank 10th percentile of it taken every 16 samples.
struct Envelope {
  std::vector<double> db;
  double floor = 0;
};
Envelope envelope_of(const std::vector<float>& x) {
  Envelope e;
  const long long n = static_cast<long long>(x.size()), h = 40;
  for (long long i = 0; i < n; ++i) {
    double p = 0;
    const long long a = std::max(0LL, i - h), b = std::min(n, i + h + 1);
    for (long long k = a; k < b; ++k) p += static_cast<double>(x[k]) * x[k];
    e.db.push_back(10.0 * std::log10(p / static_cast<double>(b - a) + 1e-10));
  }
  std::vector<double> every_ms;
  for (long long i = 0; i < n; i += 16) every_ms.push_back(e.db[i]);
  std::sort(every_ms.begin(), every_ms.end());
  e.floor = every_ms[static_cast<size_t>(std::ceil(0.1 * static_cast<double>(every_ms.size()))) - 1];
  return e;
}

}  // namespace

// Silence edges (eval/silence_edges.h): off by default for this time-trained checkpoint; `align
// --silence-edges on` moves only boundaries between a silence and a phone, each by at most the
// bound, onto a crossing of floor + 6 dB (the default) of the oracle envelope above; `evaluate --align
// --silence-edges on` counts as many moves as the two `align` outputs differ; a checkpoint trained on
// transcripts turns them on by default (its metadata says so).
TEST_F(AlignE2E, SilenceEdgesMoveOntoTheEnergyCrossing) {
  const fs::path test = dir_ / "synth" / "TEST", def = dir_ / "se_default", off = dir_ / "se_off",
                 on = dir_ / "se_on", js = dir_ / "se_eval.json";
  const std::string al = "align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --device cpu --out ";
  for (const auto& [out, flag] : {std::pair{def, std::string()}, std::pair{off, std::string(" --silence-edges off")},
                                  std::pair{on, std::string(" --silence-edges on --silence-max-move-ms 30")}}) {
    const Cmd c = run(al + out.string() + flag);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  EXPECT_FALSE(s.transcript_trained);
  long long moved = 0, edges = 0;
  for (const data::Utterance& u : data::load_split((dir_ / "work").string(), "test").utterances) {
    const fs::path rel = fs::relative(u.audio_path, test).replace_extension();
    EXPECT_EQ(slurp((def / rel).string() + ".PHN"), slurp((off / rel).string() + ".PHN")) << rel;  // auto: off
    const std::vector<PhnRow> a = read_phn((off / rel).string() + ".PHN"), b = read_phn((on / rel).string() + ".PHN");
    ASSERT_EQ(a.size(), b.size()) << rel;
    const data::Audio audio = data::read_audio(u.audio_path);
    ASSERT_EQ(audio.sample_rate, 16000);
    const Envelope env = envelope_of(audio.samples);
    const double threshold = env.floor + 6.0;  // the default margin
    auto silence = [&](const std::string& name) {
      for (size_t c = 0; c < s.labels.names.size(); ++c)
        if (s.labels.names[c] == name) return s.labels.spec.is_silence(static_cast<int>(c));
      return false;
    };
    for (size_t i = 1; i < a.size(); ++i) {
      ASSERT_EQ(a[i].name, b[i].name);
      const bool edge = silence(a[i - 1].name) != silence(a[i].name);
      edges += edge;
      if (a[i].b == b[i].b) continue;
      ++moved;
      EXPECT_TRUE(edge) << rel << " boundary " << i << " between " << a[i - 1].name << " and " << a[i].name;
      EXPECT_LE(std::llabs(b[i].b - a[i].b), 480) << rel << " boundary " << i;  // 30 ms
      EXPECT_GT(b[i].b, b[i - 1].b);
      // a crossing: the samples on either side of the new boundary lie on either side of the threshold
      EXPECT_NE(env.db[b[i].b - 1] >= threshold, env.db[b[i].b] >= threshold) << rel << " boundary " << i;
      // an onset starts in sound, an offset's silence in quiet
      EXPECT_EQ(env.db[b[i].b] >= threshold, silence(a[i - 1].name)) << rel << " boundary " << i;
    }
  }
  EXPECT_GT(moved, 0) << "no silence edge moved: the test would show nothing";
  const Cmd e = run("evaluate --checkpoint " + ckpt_.string() +
                    " --split test --align --device cpu --silence-edges on --silence-max-move-ms 30 --json " + js.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("silence edges at the energy change, floor + 6 dB within 30 ms, silences >= 10 % quiet: " +
                          std::to_string(moved) +
                          " of " + std::to_string(edges) + " moved"),
            std::string::npos)
      << e.output;
  const nlohmann::json se = nlohmann::json::parse(slurp(js))["align"]["samples"]["silence_edges"];
  EXPECT_EQ(se["moved"], moved);
  EXPECT_EQ(se["edges"], edges);
  EXPECT_EQ(se["max_move_ms"], 30.0);
  EXPECT_EQ(se["min_quiet_pct"], 10.0);
  EXPECT_EQ(se["moved"].get<long long>() + se["loud"].get<long long>() + se["no_crossing"].get<long long>() <= edges, true);
  // refused: one line naming the flag
  const Cmd bad = run(al + (dir_ / "se_bad").string() + " --silence-margin-db 0");
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_NE(bad.output.find("--silence-margin-db must be a number > 0"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir_ / "se_bad"));
  // trained on transcripts: the checkpoint says so and evaluate turns silence edges on by itself
  const Cmd t = run("train --config " + (dir_ / "tiny.yaml").string() + " --set crf.supervision=transcript --set train.run_dir=" +
                    (dir_ / "run_tr").string());
  ASSERT_EQ(t.rc, 0) << t.output;
  const fs::path ck_tr = dir_ / "run_tr" / "checkpoints" / "best.safetensors";
  EXPECT_TRUE(model::load_checkpoint(ck_tr.string()).transcript_trained);
  const Cmd ea = run("evaluate --checkpoint " + ck_tr.string() + " --split test --align --device cpu --json " +
                     (dir_ / "se_tr.json").string());
  ASSERT_EQ(ea.rc, 0) << ea.output;
  EXPECT_NE(ea.output.find("--silence-edges auto: the checkpoint trained on transcripts"), std::string::npos) << ea.output;
  EXPECT_TRUE(nlohmann::json::parse(slurp(dir_ / "se_tr.json"))["align"]["samples"].contains("silence_edges"));
  // ... and the boundaries from the posteriors (eval/posterior_boundaries.h), as for every checkpoint
  EXPECT_NE(ea.output.find("boundaries from the posteriors under the transcript, between frames (--boundaries auto"),
            std::string::npos)
      << ea.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "se_tr.json"))["align"]["boundary_decoding"], "posterior");
  // trained on times: auto leaves them off
  const Cmd eo = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --json " +
                     (dir_ / "se_times.json").string());
  ASSERT_EQ(eo.rc, 0) << eo.output;
  EXPECT_FALSE(nlohmann::json::parse(slurp(dir_ / "se_times.json"))["align"]["samples"].contains("silence_edges"));
  EXPECT_EQ(eo.output.find("silence edges"), std::string::npos) << eo.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "se_times.json"))["align"]["boundary_decoding"], "posterior");
}

// --boundaries (docs/align.md "Boundaries from the posteriors"; the programme and the offsets between
// frames are checked against enumeration in tests/crf/test_posterior_boundaries.cpp): the default (auto)
// is the posteriors' for this checkpoint trained on times too; posterior-frames against --boundaries
// viterbi keeps every phone, in order, tiling the audio, and moves as many boundaries as its log line
// says; posterior moves those by at most half a frame, as many as its line says; evaluate
// counts the same boundaries; a bad value is refused.
TEST_F(AlignE2E, PosteriorBoundariesMoveOnlyWhereTheLogSays) {
  const fs::path test = dir_ / "synth" / "TEST", vit = dir_ / "pb_viterbi", def = dir_ / "pb_default",
                 post = dir_ / "pb_posterior", frames = dir_ / "pb_frames";
  const std::string al = "align --checkpoint " + ckpt_.string() + " --timit " + test.string() + " --device cpu --out ";
  const Cmd a = run(al + vit.string() + " --boundaries viterbi");
  ASSERT_EQ(a.rc, 0) << a.output;
  EXPECT_EQ(a.output.find("boundaries from the posteriors"), std::string::npos) << a.output;
  ASSERT_EQ(run(al + def.string()).rc, 0);
  const Cmd p = run(al + frames.string() + " --boundaries posterior-frames");
  ASSERT_EQ(p.rc, 0) << p.output;
  EXPECT_EQ(p.output.find("between frames ("), std::string::npos) << p.output;
  const Cmd pb = run(al + post.string() + " --boundaries posterior");
  ASSERT_EQ(pb.rc, 0) << pb.output;
  std::smatch m;  // "..., N between frames (mean |offset| x frames) in ..."
  ASSERT_TRUE(std::regex_search(
      pb.output, m, std::regex("boundaries moved \\(mean move [-+0-9.]+ frames\\), ([0-9]+) between frames")))
      << pb.output;
  const long long between = std::stoll(m[1].str());
  long long differ = 0;
  long long moved = 0, boundaries = 0;
  int files = 0;
  for (const auto& f : fs::recursive_directory_iterator(test)) {
    if (f.path().extension() != ".WAV") continue;
    ++files;
    const fs::path rel = fs::relative(f.path(), test).replace_extension();
    const std::string phn = rel.string() + ".PHN";
    EXPECT_EQ(slurp(def / phn), slurp(post / phn)) << rel;  // the default is the posteriors'
    const std::vector<PhnRow> v = read_phn(vit / phn), q = read_phn(frames / phn), z = read_phn(post / phn);
    ASSERT_EQ(q.size(), v.size()) << rel;
    ASSERT_EQ(z.size(), q.size()) << rel;
    for (size_t i = 0; i < z.size(); ++i) {  // between frames: at most half a frame (80 samples) from its frame
      EXPECT_EQ(z[i].name, q[i].name) << rel << " phone " << i;
      EXPECT_GT(z[i].e, z[i].b) << rel << " phone " << i;
      EXPECT_LE(std::abs(z[i].b - q[i].b), 81) << rel << " phone " << i;  // (one more where two met: kept apart)
      if (i > 0) EXPECT_EQ(z[i].b, z[i - 1].e) << rel << " phone " << i;
      differ += z[i].b != q[i].b;
    }
    EXPECT_EQ(z.back().e, q.back().e) << rel;
    ASSERT_FALSE(q.empty());
    EXPECT_EQ(q.front().b, 0);
    EXPECT_EQ(q.back().e, v.back().e);
    for (size_t i = 0; i < q.size(); ++i) {
      EXPECT_EQ(q[i].name, v[i].name) << rel << " phone " << i;
      EXPECT_GT(q[i].e, q[i].b) << rel << " phone " << i;
      if (i > 0) EXPECT_EQ(q[i].b, q[i - 1].e) << rel << " phone " << i;
      if (i > 0) ++boundaries, moved += q[i].b != v[i].b;
    }
  }
  ASSERT_GT(files, 0);
  EXPECT_GT(moved, 0) << "no boundary moved: the test would show nothing";
  EXPECT_GT(differ, boundaries / 4) << "few boundaries between frames: the test would show little";
  // the line counts the boundaries an offset moves by at least one sample (one under half a sample
  // rounds to the frame's own): each is a start that differs from posterior-frames'
  EXPECT_EQ(differ, between);
  EXPECT_NE(p.output.find("align: boundaries from the posteriors: " + std::to_string(moved) + " of " +
                          std::to_string(boundaries) + " boundaries moved"),
            std::string::npos)
      << p.output;
  // evaluate --align: the same decision on the reference sequences, counted in the JSON and the table
  const fs::path js = dir_ / "pb_eval.json";
  const Cmd e = run("evaluate --checkpoint " + ckpt_.string() + " --split test --align --device cpu --boundaries posterior "
                    "--json " + js.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  const nlohmann::json j = nlohmann::json::parse(slurp(js))["align"];
  EXPECT_EQ(j["boundary_decoding"], "posterior");
  EXPECT_EQ(j["posterior_boundaries"]["boundaries"], j["boundaries"]);
  EXPECT_GT(j["posterior_boundaries"]["moved"].get<long long>(), 0);
  EXPECT_EQ(j["posterior_boundaries"]["over_limit"], 0);
  EXPECT_GT(j["posterior_boundaries"]["between_frames"].get<long long>(), 0);
  EXPECT_GT(j["posterior_boundaries"]["mean_abs_offset_frames"].get<double>(), 0.0);
  EXPECT_LE(j["posterior_boundaries"]["mean_abs_offset_frames"].get<double>(), 0.5);
  // the step's wall time, a part of the alignment pass's
  EXPECT_GT(j["posterior_boundaries"]["seconds"].get<double>(), 0.0);
  EXPECT_LE(j["posterior_boundaries"]["seconds"].get<double>(), j["seconds"].get<double>());
  EXPECT_NE(e.output.find("(both rows: boundaries from the posteriors under the transcript, "), std::string::npos)
      << e.output;
  // refused: one line naming the flag and its values, nothing written
  const Cmd bad = run(al + (dir_ / "pb_bad").string() + " --boundaries sometimes");
  EXPECT_NE(bad.rc, 0) << bad.output;
  EXPECT_NE(bad.output.find("--boundaries"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("posterior"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir_ / "pb_bad"));
  // evaluate without --align: an alignment flag would do nothing, so it is refused before any work, naming it
  for (const std::string flag : {"--boundaries viterbi", "--silence-edges on", "--silence-margin-db 3"}) {
    const fs::path never = dir_ / "pb_never.json";
    const Cmd n = run("evaluate --checkpoint " + ckpt_.string() + " --split test --device cpu " + flag + " --json " +
                      never.string());
    EXPECT_NE(n.rc, 0) << flag;
    EXPECT_NE(n.output.find("evaluate: " + flag.substr(0, flag.find(' ')) + " needs --align"), std::string::npos)
        << n.output;
    EXPECT_FALSE(fs::exists(never)) << flag;
  }
}
