// An inventory other than TIMIT's, end to end with the built binary: a synth
// corpus rewritten as MFA-layout TextGrids whose labels are IPA, prepared with
// a derived phone set, trained for one epoch, evaluated, decoded and aligned;
// the labels come back byte for byte, the checkpoint records the inventory
// in full, and the checkpoint meets the corpus's TIMIT WORKDIR with one line
// naming both inventories (docs/phone_sets.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "data/phone_set.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

namespace {

// TIMIT label -> an IPA spelling (several bytes per label for most).
const std::map<std::string, std::string>& ipa() {
  static const std::map<std::string, std::string> m = {
      {"aa", "ɑ"},   {"ae", "æ"},   {"ah", "ʌ"},   {"ao", "ɔ"},    {"aw", "aʊ"},  {"ax", "ə"},   {"ax-h", "ə̥"},
      {"axr", "ɚ"},  {"ay", "aɪ"},  {"b", "b"},    {"bcl", "b̚"},  {"ch", "t͡ʃ"}, {"d", "d"},    {"dcl", "d̚"},
      {"dh", "ð"},   {"dx", "ɾ"},   {"eh", "ɛ"},   {"el", "l̩"},   {"em", "m̩"},  {"en", "n̩"},  {"eng", "ŋ̍"},
      {"epi", "epi"}, {"er", "ɝ"},  {"ey", "eɪ"},  {"f", "f"},    {"g", "ɡ"},    {"gcl", "ɡ̚"}, {"h#", "sil"},
      {"hh", "h"},   {"hv", "ɦ"},   {"ih", "ɪ"},   {"ix", "ɨ"},   {"iy", "i"},   {"jh", "d͡ʒ"}, {"k", "k"},
      {"kcl", "k̚"}, {"l", "l"},    {"m", "m"},    {"n", "n"},    {"ng", "ŋ"},   {"nx", "ɾ̃"},  {"ow", "oʊ"},
      {"oy", "ɔɪ"},  {"p", "p"},    {"pau", "pau"}, {"pcl", "p̚"}, {"q", "ʔ"},   {"r", "ɹ"},    {"s", "s"},
      {"sh", "ʃ"},   {"t", "t"},    {"tcl", "t̚"}, {"th", "θ"},   {"uh", "ʊ"},   {"uw", "u"},   {"ux", "ʉ"},
      {"v", "v"},    {"w", "w"},    {"y", "j"},    {"z", "z"},    {"zh", "ʒ"}};
  return m;
}

struct Row {
  int64_t b = 0, e = 0;
  std::string label;
};

std::vector<Row> read_phn(const fs::path& p) {
  std::vector<Row> out;
  std::istringstream in(slurp(p));
  for (Row r; in >> r.b >> r.e >> r.label;) out.push_back(r);
  return out;
}

// SYNTH (TIMIT layout) -> ROOT/SPEAKER/UTT.wav + UTT.TextGrid (short text format, IPA labels); returns the
// split file's lines (TRAIN speakers train; of TEST's, the first dev, the others test).
std::string write_ipa_textgrids(const fs::path& synth, const fs::path& root) {
  std::map<std::string, std::string> split;
  std::vector<fs::path> phns;
  for (const auto& e : fs::recursive_directory_iterator(synth))
    if (e.path().extension() == ".PHN") phns.push_back(e.path());
  std::sort(phns.begin(), phns.end());
  for (const fs::path& phn : phns) {
    const std::string spk = phn.parent_path().filename().string();
    const bool train = phn.string().find("/TRAIN/") != std::string::npos;
    if (!split.count(spk)) {
      int dev = 0;
      for (const auto& [s, w] : split) dev += w == "dev";
      split[spk] = train ? "train" : dev == 0 ? "dev" : "test";
    }
    fs::create_directories(root / spk);
    const std::string stem = phn.stem().string();
    fs::copy_file(fs::path(phn).replace_extension(".WAV"), root / spk / (stem + ".wav"),
                  fs::copy_options::overwrite_existing);
    const std::vector<Row> rows = read_phn(phn);
    std::ostringstream tg;
    tg.precision(10);
    const double end = rows.back().e / 16000.0;
    tg << "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\n0\n" << end << "\n<exists>\n1\n\"IntervalTier\"\n"
       << "\"phones\"\n0\n" << end << "\n" << rows.size() << "\n";
    for (const Row& r : rows) tg << r.b / 16000.0 << "\n" << r.e / 16000.0 << "\n\"" << ipa().at(r.label) << "\"\n";
    std::ofstream(root / spk / (stem + ".TextGrid"), std::ios::binary) << tg.str();
  }
  std::string lines;
  for (const auto& [s, w] : split) lines += s + " " + w + "\n";
  return lines;
}

}  // namespace

TEST(PhoneSetE2E, IpaCorpusTrainsEvaluatesDecodesAndAlignsWithItsOwnLabels) {
  const fs::path d = testsupport::fresh_temp_dir("timitseg_phone_set_e2e");
  Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, d, 6, 4, 5);  // synth + its TIMIT WORKDIR d/work
  ASSERT_EQ(c.rc, 0) << c.output;
  std::ofstream(d / "split.txt") << write_ipa_textgrids(d / "synth", d / "tg");
  c = run("prepare --corpus " + (d / "tg").string() + " --format textgrid --split-file " + (d / "split.txt").string() +
          " --out " + (d / "work_ipa").string());
  ASSERT_EQ(c.rc, 0) << c.output;
  const data::WorkdirPhoneSet w = data::load_workdir_phone_set((d / "work_ipa").string());
  EXPECT_EQ(w.spec.name, "derived");
  EXPECT_EQ(w.labels, w.spec.phones);
  EXPECT_EQ(w.spec.silence, (std::vector<std::string>{"sil", "pau"}));  // the candidates present, in their order
  const std::set<std::string> phones(w.spec.phones.begin(), w.spec.phones.end());
  EXPECT_TRUE(phones.count("ʃ") || phones.count("t͡ʃ") || phones.count("ɑ")) << c.output;

  const fs::path run_dir = d / "run_ipa";
  c = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
          (d / "work_ipa").string() + " --set train.run_dir=" + run_dir.string() +
          " --set train.epochs=1 --set model.hidden_dim=16 --set model.num_layers=1 --set crf.max_duration=8"
          " --set train.batch_size=4 --set train.device=cpu --set crf.backend=cpu --set train.threads=2");
  ASSERT_EQ(c.rc, 0) << c.output;
  EXPECT_NE(c.output.find("phone set derived: " + std::to_string(w.spec.size()) + " classes, scored on " +
                          std::to_string(w.spec.size()) + " labels (sha256 " + w.spec.digest().substr(0, 12) + ")"),
            std::string::npos)
      << c.output;
  const fs::path ckpt = run_dir / "checkpoints" / "epoch-1.safetensors";
  const st::File ck = st::load(ckpt.string());
  EXPECT_FALSE(ck.metadata.count("label_set"));
  EXPECT_EQ(ck.metadata.at("phone_set_sha256"), w.spec.digest());
  EXPECT_EQ(nlohmann::json::parse(ck.metadata.at("label_names")).get<std::vector<std::string>>(), w.spec.phones);

  // evaluate: PER on the inventory's own labels (no fold: as many as its phones)
  const fs::path json = d / "eval.json";
  c = run("evaluate --checkpoint " + ckpt.string() + " --split dev --json " + json.string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["confusion"].size(), w.spec.phones.size());

  // decode: every label written is one of the inventory's, byte for byte
  std::string wav;  // an utterance of a train speaker: its labels are all in the derived inventory
  {
    std::istringstream split(slurp(d / "split.txt"));
    std::string spk, which;
    while (split >> spk >> which && wav.empty())
      if (which == "train")
        for (const auto& e : fs::directory_iterator(d / "tg" / spk))
          if (e.path().extension() == ".wav" && (wav.empty() || e.path().string() < wav)) wav = e.path().string();
  }
  ASSERT_FALSE(wav.empty());
  c = run("decode --checkpoint " + ckpt.string() + " " + wav + " --out " + (d / "dec").string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  std::vector<Row> decoded;
  for (const auto& e : fs::recursive_directory_iterator(d / "dec"))
    if (e.path().extension() == ".PHN") decoded = read_phn(e.path());
  ASSERT_FALSE(decoded.empty()) << c.output;
  for (const Row& r : decoded) EXPECT_TRUE(phones.count(r.label)) << r.label;

  // align the utterance's own IPA phones: the .PHN written holds them in order, byte for byte
  const fs::path tg_file = fs::path(wav).replace_extension(".TextGrid");
  std::vector<std::string> seq;
  {
    std::istringstream in(slurp(tg_file));
    std::string line;
    while (std::getline(in, line))
      if (line.size() >= 2 && line.front() == '"' && line != "\"IntervalTier\"" && line != "\"phones\"") {
        const std::string l = line.substr(1, line.size() - 2);
        if (seq.empty() || seq.back() != l) seq.push_back(l);
      }
  }
  ASSERT_GT(seq.size(), 2u);
  for (const std::string& p : seq) ASSERT_TRUE(phones.count(p)) << p;
  {
    std::string list = wav;
    for (const std::string& s : seq) list += " " + s;
    std::ofstream(d / "phones.txt", std::ios::binary) << list << "\n";
    c = run("align --checkpoint " + ckpt.string() + " --phones " + (d / "phones.txt").string() + " --out " +
            (d / "aligned").string() + " --format phn --device cpu");
    ASSERT_EQ(c.rc, 0) << c.output;
    std::vector<std::string> got;
    for (const auto& e : fs::recursive_directory_iterator(d / "aligned"))
      if (e.path().extension() == ".PHN")
        for (const Row& r : read_phn(e.path())) got.push_back(r.label);
    EXPECT_EQ(got, seq);
    EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](const std::string& l) { return static_cast<unsigned char>(l[0]) >= 0x80; }))
        << "the utterance has a non-ASCII (IPA) label";
  }

  // the checkpoint against the corpus's TIMIT WORKDIR: one line naming both inventories
  c = run("evaluate --checkpoint " + ckpt.string() + " --workdir " + (d / "work").string() + " --device cpu");
  EXPECT_EQ(c.rc, 1) << c.output;
  const std::string want = ckpt.string() + " (phone set 'derived', sha256 " + w.spec.digest().substr(0, 12) +
                           ") does not fit WORKDIR " + (d / "work").string() + " (phone set 'timit61', sha256 " +
                           data::PhoneSetSpec::builtin("timit61").digest().substr(0, 12) + "): its labels ";
  EXPECT_NE(c.output.find(want), std::string::npos) << c.output;
  fs::remove_all(d);
}
