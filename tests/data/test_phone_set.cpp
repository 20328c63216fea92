// Phone sets as data (data/phone_set.h): the shipped TIMIT files against the
// tables of PhoneSet::timit() (parsed from the standard map, the oracle), bad
// files and their one-line messages, UTF-8 (IPA) labels through YAML, JSON and
// digests, the WORKDIR record, derived inventories and the unseen-labels line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "data/phone_set.h"
#include "data/phones.h"

using namespace timitseg::data;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::string& yaml, const std::string& origin = "bad.yaml") {
  try {
    PhoneSetSpec::parse(yaml, origin);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("timitseg_phone_set_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(PhoneSetSpec, ShippedTimit39And48ReproduceTheStandardMap) {
  const PhoneSet& ps = PhoneSet::timit();
  for (int set : {39, 48}) {
    const PhoneSetSpec s = PhoneSetSpec::from_setting(std::to_string(set));
    EXPECT_EQ(s.name, "timit" + std::to_string(set));
    EXPECT_EQ(s.phones, ps.names(set));
    EXPECT_EQ(s.scoring_labels(), ps.names(39));
    for (int i = 0; i < 61; ++i) {
      const LabelResolution r = s.resolve(ps.names61()[i]);
      SCOPED_TRACE(ps.names61()[i]);
      if (ps.names61()[i] == "q") {
        EXPECT_EQ(r.kind, LabelKind::merge);
        continue;
      }
      ASSERT_EQ(r.kind, LabelKind::phone);
      EXPECT_EQ(r.index, ps.map(i, set));
      EXPECT_EQ(s.fold_indices()[r.index], ps.map(i, 39));
    }
  }
}

TEST(PhoneSetSpec, ShippedTimit61IsTheSixtyClassesFoldedTo39) {
  const PhoneSet& ps = PhoneSet::timit();
  const PhoneSetSpec s = PhoneSetSpec::builtin("timit61");
  ASSERT_EQ(s.size(), 60);
  EXPECT_EQ(s.merge, std::vector<std::string>{"q"});
  EXPECT_EQ(s.scoring_labels(), ps.names(39));
  int c = 0;
  for (int i = 0; i < 61; ++i) {
    if (ps.names61()[i] == "q") continue;
    EXPECT_EQ(s.phones[c], ps.names61()[i]);
    EXPECT_EQ(s.scoring_labels()[s.fold_indices()[c]], ps.names(39)[ps.map(i, 39)]) << ps.names61()[i];
    ++c;
  }
  EXPECT_EQ(s.silence_index(), s.index("h#"));
  EXPECT_TRUE(s.is_silence(s.index("pau")));
  EXPECT_FALSE(s.is_silence(s.index("bcl")));
  EXPECT_EQ(s.resolve("aan").kind, LabelKind::unknown);
}

// data.label_set's words ("39", "48", "61": TimitLabelSet) name the shipped
// timitN; a shipped name is that set; other text is a phone-set file's path.
TEST(PhoneSetSpec, FromSettingReadsTheLabelSetNumbers) {
  for (const auto& [word, name] : std::vector<std::pair<std::string, std::string>>{
           {"39", "timit39"}, {"48", "timit48"}, {"61", "timit61"}, {"timit48", "timit48"}, {"buckeye", "buckeye"}}) {
    const PhoneSetSpec spec = PhoneSetSpec::from_setting(word);
    EXPECT_EQ(spec.name, name) << word;
    EXPECT_EQ(spec.digest(), PhoneSetSpec::builtin(name).digest()) << word;
  }
  EXPECT_EQ(static_cast<int>(TimitLabelSet::timit48), 48);
  // "039" is no label set: read as a file, which is not there
  EXPECT_THROW(PhoneSetSpec::from_setting("039"), std::exception);
}

TEST(PhoneSetSpec, BroadClassesAgreeWithTheCompiledTable) {
  const PhoneSet& ps = PhoneSet::timit();
  for (const char* name : {"timit61", "timit48", "timit39"}) {
    const PhoneSetSpec s = PhoneSetSpec::builtin(name);
    EXPECT_EQ(s.broad_class_names(), broad_class_names());
    for (const std::string& p : s.phones) EXPECT_EQ(s.broad_class(p), ps.broad_class(p)) << name << " " << p;
  }
}

TEST(PhoneSetSpec, BadFilesGiveOneLineNamingTheProblem) {
  EXPECT_EQ(error_of("phones: [a, b, a]\nsilence: [a]\n"), "bad.yaml: duplicate phone 'a' (entries 1 and 3)");
  EXPECT_EQ(error_of("phones: [aa, sil]\nsilence: [sil]\nfold: {aa: ah}\n"),
            "bad.yaml: fold target 'ah' of 'aa' is not a phone (nearest: aa, sil) (a scoring label that is no "
            "phone is listed in extra_scoring_labels)");
  EXPECT_EQ(error_of("phones: [aa, sil]\nsilence: [sli]\n"),
            "bad.yaml: silence label 'sli' is not a phone (nearest: sil, aa)");
  EXPECT_EQ(error_of("phones: [aa, sil]\nmap: {aan: an}\n"),
            "bad.yaml: map target 'an' of 'aan' is not a phone (nearest: aa, sil)");
  EXPECT_EQ(error_of("phones: [aa, sil]\nmerge: [aa]\n"), "bad.yaml: merge label 'aa' is also a phone");
  EXPECT_EQ(error_of("phones: [aa, sil]\nsilences: [sil]\n"),
            "bad.yaml: unknown key 'silences' (known: name, phones, silence, merge, map, drop, fold, "
            "extra_scoring_labels, broad_classes)");
  EXPECT_EQ(error_of("phones: [aa, \"a b\"]\n"), "bad.yaml: phone entry 2 'a b' holds whitespace or a control character");
  EXPECT_EQ(error_of("phones: [aa, b\xff]\n"), "bad.yaml: phone entry 2 'b\xff' is not UTF-8");
  EXPECT_EQ(error_of("phones: [aa]\nphones: [b]\n"), "bad.yaml:2: key 'phones' given twice");
  EXPECT_EQ(error_of("phones: [aa, b\n"), error_of("phones: [aa, b\n"));  // deterministic
  EXPECT_NE(error_of("phones: [aa, b\n").find("bad.yaml:"), std::string::npos);
  EXPECT_EQ(error_of("silence: [a]\n"), "bad.yaml: no 'phones' list");
  EXPECT_EQ(error_of("phones: [a, b]\nbroad_classes: {v: [a], w: [a]}\n"), "bad.yaml: 'a' is in broad classes 'v' and 'w'");
}

TEST(PhoneSetSpec, LoadNamesTheFileAndTakesItsStem) {
  const fs::path d = fresh_dir("load");
  const std::string p = (d / "my_set.yaml").string();
  timitseg::write_file_atomic(p, "phones: [a, b, a]\n");
  try {
    PhoneSetSpec::load(p);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), p + ": duplicate phone 'a' (entries 1 and 3)");
  }
  timitseg::write_file_atomic(p, "phones: [a, b]\nsilence: [b]\n");
  EXPECT_EQ(PhoneSetSpec::load(p).name, "my_set");
  EXPECT_EQ(PhoneSetSpec::from_setting(p).phones, (std::vector<std::string>{"a", "b"}));
  fs::remove_all(d);
}

TEST(PhoneSetSpec, IpaLabelsRoundTripByteExactly) {
  PhoneSetSpec s;
  s.name = "ipa";
  s.phones = {"ʃ", "t͡ʃ", "ɑː", "ə", "ŋ", "sil", "a\"b"};
  s.silence = {"sil"};
  s.map = {{"SIL", "sil"}, {"tʃ", "t͡ʃ"}};
  s.fold = {{"ɑː", "ə"}};
  s.broad_classes = {{"vowels", {"ə"}}, {"fricatives", {"ʃ"}}};
  s.validate("test");
  const PhoneSetSpec y = PhoneSetSpec::parse(s.to_yaml(), "yaml");
  EXPECT_EQ(y, s);
  const PhoneSetSpec j = PhoneSetSpec::from_json(nlohmann::json::parse(s.to_json().dump()), "json");
  EXPECT_EQ(j, s);
  EXPECT_EQ(j.digest(), s.digest());
  EXPECT_EQ(s.phones[1], "t\xcd\xa1\xca\x83");
  EXPECT_EQ(s.resolve("tʃ").index, 1);
  EXPECT_EQ(s.broad_class("ɑː"), 0);  // through its fold target
  EXPECT_EQ(s.scoring_labels(), (std::vector<std::string>{"ʃ", "t͡ʃ", "ə", "ŋ", "sil", "a\"b"}));
}

TEST(PhoneSetSpec, DigestIsTheSha256OfTheCanonicalFormAndIgnoresTheName) {
  PhoneSetSpec a = PhoneSetSpec::builtin("timit39");
  EXPECT_EQ(a.digest(), timitseg::sha256_hex(a.canonical()));
  PhoneSetSpec b = a;
  b.name = "other";
  EXPECT_EQ(a.digest(), b.digest());
  b.phones.back() += "x";
  EXPECT_NE(a.digest(), b.digest());
  EXPECT_NE(PhoneSetSpec::builtin("timit61").digest(), a.digest());
}

TEST(PhoneSetSpec, NearestPhonesBySpelling) {
  const PhoneSetSpec s = PhoneSetSpec::builtin("timit61");
  EXPECT_EQ(nearest_phones(s, "aan", 3), (std::vector<std::string>{"aa", "ae", "ah"}));
  EXPECT_EQ(nearest_phones(s, "tcl", 1), std::vector<std::string>{"tcl"});
  // by sound, not spelling alone: an ASCII or TIMIT name finds the IPA phone of its sound
  const PhoneSetSpec ipa = PhoneSetSpec::parse("name: fr\nphones: [a, l, ʁ, ʃ, ɡ, ə, sil]\nsilence: [sil]\n", "fr");
  EXPECT_EQ(nearest_phones(ipa, "r", 2), (std::vector<std::string>{"ʁ", "a"}));
  EXPECT_EQ(nearest_phones(ipa, "sh", 1), std::vector<std::string>{"ʃ"});
  EXPECT_EQ(nearest_phones(ipa, "g", 1), std::vector<std::string>{"ɡ"});
  EXPECT_EQ(nearest_phones(ipa, "h#", 1), std::vector<std::string>{"sil"});
  EXPECT_EQ(nearest_phones(ipa, "ax", 1), std::vector<std::string>{"ə"});
}

TEST(PhoneSetSpec, DerivedFromTrainCounts) {
  const PhoneSetSpec s = derive_phone_set({{"a", 5}, {"SIL", 9}, {"b", 5}, {"c", 7}});
  EXPECT_EQ(s.name, "derived");
  EXPECT_EQ(s.phones, (std::vector<std::string>{"SIL", "c", "a", "b"}));
  EXPECT_EQ(s.silence, std::vector<std::string>{"SIL"});
  const PhoneSetSpec t = derive_phone_set({{"a", 1}, {"sil", 0}});
  EXPECT_EQ(t.silence, std::vector<std::string>{"sil"});
  const PhoneSetSpec u = derive_phone_set({{"a", 1}});
  EXPECT_EQ(u.phones, (std::vector<std::string>{"a", "sil"}));
  EXPECT_THROW(derive_phone_set({}), std::runtime_error);
}

TEST(PhoneSetSpec, UnseenLabelsLine) {
  EXPECT_EQ(unseen_labels_line({}), "");
  EXPECT_EQ(unseen_labels_line({{"dev", {{"zh", {3, "s1/u1"}}, {"oy", {5, "s2/u4"}}}}, {"test", {{"ʒ", {1, "s9/u2"}}}}}),
            "labels never seen in the train split: dev: 'oy' x5 (s2/u4), 'zh' x3 (s1/u1); test: 'ʒ' x1 (s9/u2)");
  EXPECT_EQ(unseen_labels_line({{"dev", {{"a", {1, "u"}}, {"b", {2, "v"}}}}}, 1),
            "labels never seen in the train split: dev: 'b' x2 (v) and 1 more");
}

TEST(WorkdirPhoneSet, RecordedAndLoadedBackWithItsChecksum) {
  const fs::path d = fresh_dir("workdir");
  PhoneSetSpec s;
  s.name = "ipa";
  s.phones = {"ʃ", "ə", "sil"};
  s.silence = {"sil"};
  const nlohmann::ordered_json entry = write_workdir_phone_set(d.string(), workdir_phone_set(s));
  EXPECT_EQ(entry["sha256"], s.digest());
  uint64_t bytes = 0;
  const std::string sha = timitseg::sha256_file((d / "phone_set.yaml").string(), &bytes);
  nlohmann::json m;
  m["format_version"] = kPreparedFormatVersion;
  m["files"]["phone_set.yaml"] = {{"bytes", bytes}, {"sha256", sha}};
  m["phone_set"] = entry;
  timitseg::write_file_atomic((d / "manifest.json").string(), m.dump());
  const WorkdirPhoneSet w = load_workdir_phone_set(d.string());
  EXPECT_EQ(w.spec, s);
  EXPECT_EQ(w.labels, s.phones);
  EXPECT_FALSE(w.is_timit());
  // an edited phone_set.yaml is refused by its checksum
  timitseg::write_file_atomic((d / "phone_set.yaml").string(), s.to_yaml() + "# edited\n");
  EXPECT_THROW(load_workdir_phone_set(d.string()), std::runtime_error);
  // a manifest without "phone_set" (prepared before phone sets were data) is TIMIT's
  m.erase("phone_set");
  timitseg::write_file_atomic((d / "manifest.json").string(), m.dump());
  const WorkdirPhoneSet t = load_workdir_phone_set(d.string());
  EXPECT_TRUE(t.is_timit());
  EXPECT_EQ(t.labels, PhoneSet::timit().names61());
  fs::remove_all(d);
}

TEST(PhoneSetSpec, ShippedBuckeyeScoresOnTimitsThirtyNine) {
  const PhoneSetSpec b = PhoneSetSpec::builtin("buckeye");
  EXPECT_EQ(b.size(), 41);
  std::vector<std::string> s = b.scoring_labels(), t = PhoneSet::timit().names(39);
  std::sort(s.begin(), s.end());
  std::sort(t.begin(), t.end());
  EXPECT_EQ(s, t);
  EXPECT_EQ(b.resolve("aan").index, b.index("aa"));
  EXPECT_EQ(b.resolve("tq").index, b.index("t"));
  EXPECT_EQ(b.resolve("<SIL>").index, b.silence_index());
  EXPECT_EQ(b.resolve("{B_TRANS}").index, b.silence_index());
  EXPECT_EQ(b.resolve("IVER").kind, LabelKind::drop);
  EXPECT_EQ(b.resolve("xyz").kind, LabelKind::unknown);
  for (const std::string& p : b.phones) EXPECT_GE(b.broad_class(p), 0) << p;
  EXPECT_EQ(PhoneSetSpec::builtin_names(), (std::vector<std::string>{"buckeye", "timit39", "timit48", "timit61"}));
}
