// Reading TIMIT trees laid out with real speaker ids, in upper case (SPHERE, as
// on the LDC discs) and lower case (RIFF, as in converted copies); split
// membership; prepare's handling of bad utterances (skip + count, --strict).
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "data/corpus.h"
#include "data/corpus_formats.h"
#include "data/dataset.h"
#include "data/phones.h"
#include "common/progress.h"
#include "util.h"

using namespace timitseg::data;

namespace {
// A tiny TIMIT tree laid out with real speaker ids:
//   TRAIN/DR1/FCJF0 (train), TEST/DR1/MDAB0 (core-test), TEST/DR1/FAKS0 (dev),
//   TEST/DR4/MTLS0 (core-test) and TEST/DR3/MTPG0 (neither list).
struct Utt { std::string part, dr, spk, name; };
const std::vector<Utt> kUtts = {
    {"train", "dr1", "fcjf0", "sa1"},    {"train", "dr1", "fcjf0", "si1027"}, {"train", "dr1", "fcjf0", "sx127"},
    {"train", "dr2", "marc0", "sx108"},  {"test", "dr1", "mdab0", "sa2"},     {"test", "dr1", "mdab0", "si1039"},
    {"test", "dr1", "faks0", "sx133"},   {"test", "dr1", "faks0", "si943"},   {"test", "dr4", "mtls0", "sx110"},
    {"test", "dr3", "mtpg0", "sx114"},
};
std::string up(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
void make_tree(const std::string& root, bool upper, int major) {
  auto nm = [&](const std::string& s) { return upper ? up(s) : s; };
  int k = 0;
  for (const auto& u : kUtts) {
    const std::string dir = root + "/" + nm(u.part) + "/" + nm(u.dr) + "/" + nm(u.spk) + "/";
    const int n = 4000 + 160 * (k++);
    testutil::write_audio(dir + nm(u.name) + nm(".wav"), testutil::test_signal(n, k), 16000, major);
    testutil::write_text(dir + nm(u.name) + nm(".phn"),
                         "0 1000 h#\n1000 2500 aa\n2500 " + std::to_string(n) + " h#\n");
  }
}
}  // namespace

TEST(Corpus, ScanEitherCaseAndFormatGivesTheSameSplits) {
  for (bool upper : {true, false}) {
    testutil::TempDir d;
    make_tree(d.str(), upper, upper ? SF_FORMAT_NIST : SF_FORMAT_WAV);
    std::vector<Problem> probs;
    auto utts = scan_timit(d.str(), &probs);
    EXPECT_TRUE(probs.empty());
    ASSERT_EQ(utts.size(), kUtts.size());
    std::map<std::string, std::set<std::string>> split;
    for (const auto& u : utts) {
      EXPECT_FALSE(u.phn_path.empty()) << u.id();
      EXPECT_EQ(u.id(), to_lower(u.id()));
      for (const auto& s : splits_of(u)) split[s].insert(u.id());
    }
    EXPECT_EQ(split["train"], (std::set<std::string>{"train/dr1/fcjf0/si1027", "train/dr1/fcjf0/sx127",
                                                     "train/dr2/marc0/sx108"}));
    EXPECT_EQ(split["dev"], (std::set<std::string>{"test/dr1/faks0/si943", "test/dr1/faks0/sx133"}));
    EXPECT_EQ(split["core-test"], (std::set<std::string>{"test/dr1/mdab0/si1039", "test/dr4/mtls0/sx110"}));
    EXPECT_EQ(split["test"], (std::set<std::string>{"test/dr1/mdab0/si1039", "test/dr1/faks0/sx133",
                                                    "test/dr1/faks0/si943", "test/dr4/mtls0/sx110",
                                                    "test/dr3/mtpg0/sx114"}));
    // the same through prepare and load_split
    timitseg::Progress::set_enabled(false);
    PrepareOptions po;
    po.timit_dir = d.str();
    po.workdir = d.str("work");
    po.threads = 2;
    po.progress = false;
    auto sum = prepare(po);
    EXPECT_EQ(sum.sa_excluded, 2);
    EXPECT_EQ(sum.skipped, 0);
    for (const auto& name : split_names()) {
      Split s = load_split(po.workdir, name);
      std::set<std::string> ids;
      for (const auto& u : s.utterances) ids.insert(u.id);
      EXPECT_EQ(ids, split[name]) << name;
    }
  }
}

TEST(Corpus, ProblemsOfTheTree) {
  testutil::TempDir d;
  testutil::write_audio(d.str("TRAIN/DR1/FCJF0/SI1027.WAV"), testutil::test_signal(4000));
  testutil::write_audio(d.str("TRAIN/DR1/FCJF0/si1027.wav"), testutil::test_signal(4000), 16000, SF_FORMAT_WAV);
  testutil::write_audio(d.str("TRAIN/DR1/FCJF0/SX127.WAV"), testutil::test_signal(4000));  // no .PHN
  testutil::write_audio(d.str("TRAIN/DR1/FCJF0/SI1027.WAV.wav"), testutil::test_signal(4000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SI1027.PHN"), "0 4000 h#\n");
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SI648.PHN"), "0 4000 h#\n");  // no .WAV
  std::vector<Problem> probs;
  auto utts = scan_timit(d.str(), &probs);
  ASSERT_EQ(utts.size(), 3u);
  ASSERT_EQ(probs.size(), 2u);
  for (const auto& p : probs) {
    EXPECT_NE(p.message.find("duplicate of " + d.str("TRAIN/DR1/FCJF0/SI1027.WAV")), std::string::npos) << p.str();
    EXPECT_FALSE(p.error);
  }
  EXPECT_EQ(utts[0].wav_path, d.str("TRAIN/DR1/FCJF0/SI1027.WAV"));
  EXPECT_EQ(utts[0].id(), "train/dr1/fcjf0/si1027");
  // a .PHN without .WAV is listed with an empty wav_path (prepare reports it)
  EXPECT_EQ(utts[1].id(), "train/dr1/fcjf0/si648");
  EXPECT_TRUE(utts[1].wav_path.empty());
  EXPECT_EQ(utts[1].phn_path, d.str("TRAIN/DR1/FCJF0/SI648.PHN"));
  EXPECT_EQ(utts[2].id(), "train/dr1/fcjf0/sx127");
  EXPECT_TRUE(utts[2].phn_path.empty());
  // two .PHN of one utterance: the second is a duplicate (warning)
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/si1027.phn"), "0 4000 h#\n");
  probs.clear();
  utts = scan_timit(d.str(), &probs);
  ASSERT_EQ(utts.size(), 3u);
  ASSERT_EQ(probs.size(), 3u);
  EXPECT_EQ(utts[0].phn_path, d.str("TRAIN/DR1/FCJF0/SI1027.PHN"));  // byte order: upper case first
  bool phn_dup = false;
  for (const auto& p : probs)
    phn_dup |= p.file == d.str("TRAIN/DR1/FCJF0/si1027.phn") &&
               p.message.find("duplicate of " + d.str("TRAIN/DR1/FCJF0/SI1027.PHN")) == 0 && !p.error;
  EXPECT_TRUE(phn_dup);
  EXPECT_THROW(scan_timit(d.str("TRAIN"), nullptr), std::runtime_error);  // no TRAIN/TEST inside
  std::filesystem::create_directories(d.str("outer"));
  std::filesystem::rename(d.str("TRAIN"), d.str("outer/TRAIN"));
  try {
    scan_timit(d.str(), nullptr);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean --timit " + d.str("outer")), std::string::npos) << e.what();
  }
  EXPECT_THROW(scan_timit(d.str("nothing"), nullptr), std::runtime_error);
}

TEST(Corpus, PrepareSkipsBadUtterancesAndStrictStops) {
  testutil::TempDir d;
  make_tree(d.str(), true, SF_FORMAT_NIST);
  // bad: unknown phone; PHN past the end; 8 kHz audio; missing .PHN; 24-bit audio
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SX127.PHN"), "0 1000 h#\n1000 2000 zz\n2000 4320 h#\n");
  testutil::write_text(d.str("TEST/DR3/MTPG0/SX114.PHN"), "0 1000 h#\n1000 99999 aa\n");
  testutil::write_audio(d.str("TEST/DR1/FAKS0/SI943.WAV"), testutil::test_signal(4000), 8000);
  std::filesystem::remove(d.str("TEST/DR1/MDAB0/SI1039.PHN"));
  testutil::write_audio(d.str("TEST/DR4/MTLS0/SX110.WAV"), testutil::test_signal(5000), 16000, SF_FORMAT_WAV, 1,
                        SF_FORMAT_PCM_24);
  // bad: a .PHN without .WAV (an SA one is excluded like every SA sentence: not reported)
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SI1800.PHN"), "0 1000 h#\n1000 2000 aa\n");
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SA2.PHN"), "0 1000 h#\n1000 2000 aa\n");
  // a gap is a warning only
  testutil::write_text(d.str("TRAIN/DR2/MARC0/SX108.PHN"), "0 1000 h#\n1200 2500 aa\n2500 4480 h#\n");
  // the .PHN stops before the end of the audio (4160 samples): a warning; the
  // frames whose centre is past 3500 are labelled h# (not aa)
  testutil::write_text(d.str("TRAIN/DR1/FCJF0/SI1027.PHN"), "0 1000 h#\n1000 3500 aa\n");
  PrepareOptions po;
  po.timit_dir = d.str();
  po.workdir = d.str("work");
  po.progress = false;
  // the log, to count its lines by level
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  sink->set_pattern("%l %v");
  spdlog::default_logger()->sinks().push_back(sink);
  auto sum = prepare(po);
  spdlog::default_logger()->sinks().pop_back();
  EXPECT_EQ(sum.skipped, 6);
  EXPECT_EQ(sum.warnings, 2);
  // the log agrees with the counts (issue 31): one "warning" line per warning, the
  // errors as "error" lines naming the skipped utterance, nothing else at those levels
  int warning_lines = 0, error_lines = 0;
  std::istringstream lines(log.str());
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("warning ", 0) == 0) ++warning_lines;
    if (l.rfind("error ", 0) == 0) {
      ++error_lines;
      EXPECT_NE(l.find(" skipped)"), std::string::npos) << l;
    }
  }
  EXPECT_EQ(warning_lines, sum.warnings) << log.str();
  EXPECT_EQ(error_lines, sum.skipped) << log.str();  // one error per bad utterance here
  EXPECT_NE(log.str().find("FCJF0/SX127.PHN:2: unknown phone 'zz' (train/dr1/fcjf0/sx127 skipped)"), std::string::npos)
      << log.str();
  EXPECT_EQ(sum.sa_excluded, 3);
  auto has = [&](const std::string& needle) {
    for (const auto& p : sum.problems)
      if (p.find(needle) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("FCJF0/SX127.PHN:2: unknown phone 'zz'"));
  EXPECT_TRUE(has("MTPG0/SX114.PHN:2: end 99999 is past the end of the audio"));
  EXPECT_TRUE(has("FAKS0/SI943.WAV: sample rate 8000 Hz, expected 16000 Hz"));
  EXPECT_TRUE(has("MDAB0/SI1039.WAV: no matching .PHN file"));
  for (const auto& p : sum.problems) EXPECT_EQ(p.rfind(d.str(), 0), 0u) << p;  // every line starts with its file
  EXPECT_TRUE(has("MTLS0/SX110.WAV: 24-bit samples, expected 16-bit PCM (pass --allow-resample to accept it)"));
  EXPECT_TRUE(has("FCJF0/SI1800.PHN: no matching .WAV file"));
  EXPECT_FALSE(has("SA2.PHN"));
  EXPECT_TRUE(has("MARC0/SX108.PHN:2: gap of 200 samples after the previous phone (1000 .. 1200)"));
  EXPECT_TRUE(has("FCJF0/SI1027.PHN:2: gap of 660 samples after the last phone (3500 .. 4160)"));
  EXPECT_FALSE(has("warning"));  // no doubled "[warning] ...: warning:"
  EXPECT_EQ(sum.problems.size(), 8u);  // 6 errors (one per skipped utterance) + 2 warnings
  Split train = load_split(po.workdir, "train");
  ASSERT_EQ(train.utterances.size(), 2u);  // fcjf0/si1027, marc0/sx108
  {
    const Utterance& u = train.utterances[0];
    ASSERT_EQ(u.id, "train/dr1/fcjf0/si1027");
    ASSERT_EQ(u.num_frames, 24);  // 1 + (4160 - 400) / 160
    const auto& ps = PhoneSet::timit();
    for (int t = 0; t < u.num_frames; ++t) {
      const int c = 160 * t + 200;
      EXPECT_EQ(u.labels[t], ps.index61(c < 1000 ? "h#" : c < 3500 ? "aa" : "h#")) << t;
    }
  }
  Split dev = load_split(po.workdir, "dev");
  EXPECT_EQ(dev.utterances.size(), 1u);  // faks0/sx133
  // --strict: stops at the first bad utterance in id order (test/dr1/faks0/si943),
  // one line naming its file and problem, writes nothing; any thread count
  const std::string want = d.str("TEST/DR1/FAKS0/SI943.WAV") +
                           ": sample rate 8000 Hz, expected 16000 Hz (pass --allow-resample to resample it) "
                           "(--strict: nothing written)";
  po.workdir = d.str("strict");
  po.strict = true;
  for (int threads : {1, 2}) {
    po.threads = threads;
    try {
      prepare(po);
      FAIL() << "--strict did not stop";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
    EXPECT_FALSE(std::filesystem::exists(d.str("strict")));
  }
  // and through the CLI: non-zero exit, one line "error: ..."
  std::string out;
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " prepare --timit " + d.str() + " --out " +
                                      d.str("cli") + " --strict --no-progress",
                                  &out),
            0);
  EXPECT_EQ(out, "error: " + want + "\n");
  EXPECT_EQ(testutil::run(std::string(TIMITSEG_BINARY) + " prepare --timit " + d.str() + " --out " + d.str("cli") +
                          " --no-progress"),
            0);
}

TEST(Corpus, StrictStopsAtAPhnWithoutWav) {
  testutil::TempDir d;
  make_tree(d.str(), false, SF_FORMAT_WAV);
  testutil::write_text(d.str("test/dr3/mtpg0/si1800.phn"), "0 1000 h#\n");
  PrepareOptions po;
  po.timit_dir = d.str();
  po.workdir = d.str("work");
  po.progress = false;
  po.strict = true;
  try {
    prepare(po);
    FAIL() << "--strict did not stop";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              d.str("test/dr3/mtpg0/si1800.phn") + ": no matching .WAV file (--strict: nothing written)");
  }
  EXPECT_FALSE(std::filesystem::exists(po.workdir));
  po.strict = false;
  const auto sum = prepare(po);
  EXPECT_EQ(sum.skipped, 1);
  EXPECT_EQ(sum.utterances_found, static_cast<int64_t>(kUtts.size()) + 1);
  ASSERT_EQ(sum.problems.size(), 1u);
  EXPECT_EQ(sum.problems[0], d.str("test/dr3/mtpg0/si1800.phn") + ": no matching .WAV file");
}

// The split files store the absolute source path of each .WAV, so a WORKDIR
// prepared with a relative --timit loads usable audio paths from any directory.
TEST(Corpus, AudioPathsWorkFromAnyDirectory) {
  testutil::TempDir d;
  make_tree(d.str("corpus"), true, SF_FORMAT_NIST);
  ASSERT_EQ(testutil::run("cd " + d.str() + " && " + TIMITSEG_BINARY +
                          " prepare --timit ./corpus/../corpus --out work --no-progress --threads 1"),
            0);
  int n = 0;
  for (const auto& name : split_names()) {
    for (const auto& u : load_split(d.str("work"), name).utterances) {
      SCOPED_TRACE(u.id);
      EXPECT_TRUE(std::filesystem::path(u.audio_path).is_absolute());
      // .../corpus/TRAIN/DR1/FCJF0/SI1027.WAV for train/dr1/fcjf0/si1027
      std::string rel = u.id;
      for (char& c : rel) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      EXPECT_EQ(u.audio_path, d.str("corpus/" + rel + ".WAV"));
      EXPECT_EQ(static_cast<int64_t>(read_audio(u.audio_path).samples.size()), u.num_samples);
      ++n;
    }
  }
  EXPECT_EQ(n, 12);  // 3 train + 2 dev + 2 core-test + 5 test
}

TEST(SplitName, WordsAreTheSplitsPrepareWritesInItsOrder) {
  EXPECT_EQ(split_names(), (std::vector<std::string>{"train", "dev", "core-test", "test"}));
  EXPECT_STREQ(timitseg::common::to_string(SplitName::core_test), "core-test");
  SplitName s{};
  EXPECT_TRUE(timitseg::common::parse_enum("core-test", &s));
  EXPECT_EQ(s, SplitName::core_test);
  EXPECT_FALSE(timitseg::common::parse_enum("core_test", &s));
  EXPECT_FALSE(timitseg::common::parse_enum("Train", &s));  // words are exact; folders are lower-cased first
  EXPECT_TRUE(is_split("dev", SplitName::dev));
  EXPECT_FALSE(is_split("test", SplitName::dev));
  for (const char* w : {"train", "dev", "test"}) EXPECT_TRUE(is_corpus_split(w)) << w;
  for (const char* w : {"core-test", "all", "", "TRAIN"}) EXPECT_FALSE(is_corpus_split(w)) << w;
}

TEST(SplitName, UnknownSplitAndCoreTestInASplitFileKeepTheirMessages) {
  try {
    load_split("/nonexistent", "all");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown split 'all' (train, dev, core-test, test)");
  }
  testutil::TempDir d;
  testutil::write_text(d.str("splits.txt"), "spk1 train\nspk2 core-test\n");
  try {
    read_split_file(d.str("splits.txt"));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), d.str("splits.txt") + ":2: expected 'SPEAKER train|dev|test', got 'spk2 core-test'");
  }
  testutil::write_text(d.str("ok.txt"), "spk1 train\nspk2 dev\nspk3 test\n");
  const auto ok = read_split_file(d.str("ok.txt"));
  ASSERT_EQ(ok.size(), 3u);
  EXPECT_EQ(ok[1], (std::pair<std::string, std::string>{"spk2", "dev"}));
}
