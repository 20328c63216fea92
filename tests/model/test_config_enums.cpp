// The enum-like config keys (config/config_enums.h): every word of every key
// reads into its enum and writes back as the same text (--set, YAML, the
// JSON of run.json and the checkpoints), and a word that is none of them
// keeps the message it had when these keys were strings.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "config/config.h"
#include "config/config_enums.h"

using namespace timitseg::config;

namespace {

// Each key with its words as docs/config.md lists them (written out here, not
// taken from the tables under test), in the order of the error message.
struct KeyWords {
  const char* key;
  std::vector<std::string> words;
};
const std::vector<KeyWords>& key_words() {
  static const std::vector<KeyWords> k = {
      {"crf.backend", {"reference", "cpu", "cuda", "auto"}},
      {"crf.loss_normalization", {"utterance", "frame"}},
      {"crf.duration_init", {"random", "data"}},
      {"crf.decode", {"viterbi", "posterior"}},
      {"crf.onset_features", {"false", "true", "auto"}},
      {"crf.duration_model", {"table", "lognormal"}},
      {"train.lr_schedule", {"cosine", "cosine_epoch", "constant"}},
      {"train.device", {"cpu", "cuda", "auto"}},
      {"train.rnn_algo", {"standard", "persist_static", "persist_dynamic", "fused", "auto"}},
      {"data.cmvn", {"global", "utterance", "speaker"}},
  };
  return k;
}

std::string section(const std::string& key) { return key.substr(0, key.find('.')); }
std::string leaf(const std::string& key) { return key.substr(key.find('.') + 1); }

std::string error_of(const std::vector<std::string>& sets) {
  try {
    Config::load("", sets);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

// Every value of E: to_string gives a distinct word that parse_enum reads back
// as that value; `expected` is the key's list of words in order.
template <class E>
void check_table(const std::vector<std::string>& expected) {
  std::vector<std::string> words;
  std::set<int> values;
  for (const auto& [v, name] : EnumNames<E>::kNames) {
    words.push_back(name);
    values.insert(static_cast<int>(v));
    EXPECT_EQ(std::string(to_string(v)), name);
    E back{};
    ASSERT_TRUE(parse_enum(to_string(v), &back)) << name;
    EXPECT_EQ(back, v) << name;
  }
  EXPECT_EQ(words, expected);
  EXPECT_EQ(values.size(), expected.size());  // no value named twice
  E unused{};
  EXPECT_FALSE(parse_enum("Auto", &unused));  // case-sensitive, as the strings were
  EXPECT_FALSE(parse_enum("", &unused));
  EXPECT_FALSE(parse_enum(expected[0] + " ", &unused));
}

}  // namespace

TEST(ConfigEnums, EveryTableNamesEveryValueOnceAndReadsItBack) {
  const auto& k = key_words();
  check_table<CrfBackendSetting>(k[0].words);
  check_table<LossNormalization>(k[1].words);
  check_table<DurationInit>(k[2].words);
  check_table<DecodeMode>(k[3].words);
  check_table<OnsetFeatures>(k[4].words);
  check_table<DurationModel>(k[5].words);
  check_table<LrSchedule>(k[6].words);
  check_table<DeviceSetting>(k[7].words);
  check_table<RnnAlgo>(k[8].words);
  check_table<CmvnMode>(k[9].words);
  EXPECT_EQ(enum_choices<RnnAlgo>(), "standard, persist_static, persist_dynamic, fused, auto");
}

TEST(ConfigEnums, EveryWordRoundTripsThroughSetJsonAndYaml) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("timitseg_enums_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  for (const KeyWords& kw : key_words()) {
    for (const std::string& w : kw.words) {
      const std::string set = std::string(kw.key) + "=" + w;
      const Config c = Config::load("", {set});
      const nlohmann::json j = c.to_json();
      EXPECT_EQ(j.at(section(kw.key)).at(leaf(kw.key)), nlohmann::json(w)) << set;  // a JSON string, as before
      // the checkpoint's / run.json's JSON reads back to the same config
      EXPECT_EQ(Config::from_json(j, "json").to_json(), j) << set;
      // config.yaml: the word double-quoted, and it reads back
      const std::string yaml = c.to_yaml();
      EXPECT_NE(yaml.find(leaf(kw.key) + ": \"" + w + "\"\n"), std::string::npos) << set << "\n" << yaml;
      const std::string path = dir + "/config.yaml";
      std::ofstream(path) << yaml;
      EXPECT_EQ(Config::load(path, {}).to_json(), j) << set;
      // a YAML file with the bare word (crf.onset_features: true is a YAML boolean's text)
      std::ofstream(path) << section(kw.key) << ":\n  " << leaf(kw.key) << ": " << w << "\n";
      EXPECT_EQ(Config::load(path, {}).to_json(), j) << set;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ConfigEnums, BadWordsKeepTheirMessages) {
  // The messages of the string keys, verbatim: ORIGIN: 'KEY' = TEXT is out of range: one of WORDS.
  for (const KeyWords& kw : key_words()) {
    std::string list;
    for (const std::string& w : kw.words) list += (list.empty() ? "" : ", ") + w;
    const std::string set = std::string(kw.key) + "=bogus";
    EXPECT_EQ(error_of({set}), "--set " + set + ": '" + kw.key + "' = bogus is out of range: one of " + list);
  }
  // a later valid value replaces a bad one (the last --set wins, as before)
  EXPECT_EQ(error_of({"crf.decode=mbr", "crf.decode=posterior"}), "(accepted)");
  // ... and a later bad one is reported with its own origin
  EXPECT_EQ(error_of({"crf.decode=posterior", "crf.decode=MBR"}),
            "--set crf.decode=MBR: 'crf.decode' = MBR is out of range: one of viterbi, posterior");
  // checks run in validate()'s order: data.label_set before crf.backend, train.device before train.rnn_algo
  EXPECT_EQ(error_of({"crf.backend=gpu", "data.label_set=40"}),
            "--set data.label_set=40: 'data.label_set' = 40 is out of range: one of 39, 48, 61");
  EXPECT_EQ(error_of({"train.rnn_algo=x", "train.device=gpu"}),
            "--set train.device=gpu: 'train.device' = gpu is out of range: one of cpu, cuda, auto");
  // a YAML file names itself; a checkpoint's JSON names the checkpoint
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("timitseg_enums_bad_" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << "train:\n  lr_schedule: linear\n";
  try {
    Config::load(path, {});
    ADD_FAILURE() << "lr_schedule linear accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": 'train.lr_schedule' = linear is out of range: one of cosine, cosine_epoch, constant");
  }
  std::remove(path.c_str());
  nlohmann::json j = Config().to_json();
  j["crf"]["onset_features"] = "yes";
  try {
    Config::from_json(j, "run/best.safetensors (config metadata)");
    ADD_FAILURE() << "onset_features yes accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "run/best.safetensors (config metadata): 'crf.onset_features' = yes is out of "
                                     "range: one of false, true, auto");
  }
  // a control character of the value is shown escaped, as for every string value
  EXPECT_EQ(error_of({"crf.backend=a\tb"}),
            "--set crf.backend=a\tb: 'crf.backend' = a\\tb is out of range: one of reference, cpu, cuda, auto");
}

TEST(ConfigEnums, EnumValueReadsCheckedWordsAndNamesTheFlagOtherwise) {
  EXPECT_EQ(enum_value<DeviceSetting>("auto", "--device"), DeviceSetting::automatic);
  EXPECT_EQ(enum_value<RnnAlgo>("persist_dynamic", "--rnn-algo"), RnnAlgo::persist_dynamic);
  try {
    enum_value<DecodeMode>("mbr", "--decode");
    ADD_FAILURE() << "mbr accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--decode: 'mbr' is not one of viterbi, posterior");
  }
}
