// The phone set in checkpoints and WORKDIRs (model/labels.h, model/checkpoint.h):
// TIMIT's sets stay the "label_set" number they always were, any other
// inventory is written in full with its digest and read back byte-exactly
// (IPA labels), and a checkpoint meets a WORKDIR of another inventory with one
// line naming both.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "common/safetensors.h"
#include "data/phone_set.h"
#include "data/phones.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

namespace fs = std::filesystem;
using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

data::PhoneSetSpec ipa_set() {
  data::PhoneSetSpec s;
  s.name = "ipa-test";
  s.phones = {"a", "ə", "ʃ", "t͡ʃ", "ŋ", "sil"};
  s.silence = {"sil"};
  s.map = {{"SIL", "sil"}};
  s.fold = {{"ə", "a"}};
  s.broad_classes = {{"vowels", {"a"}}, {"silence", {"sil"}}};
  return s;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("timitseg_psckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(PhoneSetCheckpoint, TimitSetsAreWrittenAsTheirNumberOnly) {
  for (int set : {39, 48, 61}) {
    const LabelSet ls = LabelSet::make(set);
    EXPECT_EQ(ls.set, set);
    std::map<std::string, std::string> m;
    write_phone_set_metadata(ls, m);
    EXPECT_EQ(m, (std::map<std::string, std::string>{{"label_set", std::to_string(set)}}));
    const LabelSet back = read_phone_set_metadata(m, "x");
    EXPECT_EQ(back.names, ls.names);
    EXPECT_EQ(back.scoring_index, ls.scoring_index);
    EXPECT_EQ(back.label_to_class, ls.label_to_class);
  }
  // data.phone_set naming a shipped TIMIT set is that set
  EXPECT_EQ(LabelSet::make(data::PhoneSetSpec::builtin("timit48"), data::PhoneSet::timit().names61()).set, 48);
}

// A `label_set` of a checkpoint is one of the TimitLabelSet words exactly; any other text is one line naming the file.
TEST(PhoneSetCheckpoint, OnlyTheShippedTimitNumbersAreALabelSet) {
  for (const std::string bad : {"40", "039", " 39", "39.0", "timit39", ""})
    EXPECT_EQ(message_of([&] { read_phone_set_metadata({{"label_set", bad}}, "m.safetensors"); }),
              "m.safetensors: bad checkpoint metadata 'label_set': '" + bad + "' is not 39, 48 or 61")
        << bad;
}

TEST(PhoneSetCheckpoint, IpaInventoryRoundTripsByteExactly) {
  const fs::path dir = temp_dir("ipa");
  ModelState s = testsupport::tiny_model_state(false);
  s.labels = LabelSet::make(ipa_set());
  s.dims.num_classes = s.labels.size();
  s.params.assign(ParamLayout(s.dims).total(), 0.25f);
  s.optimizer.reset(s.params.size());
  const std::string p = (dir / "ipa.safetensors").string();
  save_checkpoint(p, s);
  const st::File f = st::load(p);
  EXPECT_FALSE(f.metadata.count("label_set"));
  EXPECT_EQ(f.metadata.at("phone_set_sha256"), ipa_set().digest());
  const ModelState back = load_checkpoint(p);
  EXPECT_EQ(back.labels.set, 0);
  EXPECT_EQ(back.labels.spec, ipa_set());
  EXPECT_EQ(back.labels.names, ipa_set().phones);
  EXPECT_EQ(back.labels.names[3], "t\xcd\xa1\xca\x83");  // U+0074 U+0361 U+0283, byte for byte
  EXPECT_EQ(back.labels.scoring_names, (std::vector<std::string>{"a", "ʃ", "t͡ʃ", "ŋ", "sil"}));
  EXPECT_EQ(back.labels.scoring_index, (std::vector<int>{0, 0, 1, 2, 3, 4}));
  // an edited inventory no longer matches its digest
  st::File g = f;
  auto j = nlohmann::json::parse(g.metadata.at("phone_set"));
  j["phones"][4] = "n";  // ŋ -> n: still a valid set, no longer the digested one
  g.metadata["phone_set"] = j.dump();
  const std::string bad = (dir / "bad.safetensors").string();
  st::save(bad, g);
  EXPECT_EQ(message_of([&] { load_checkpoint(bad); }).rfind(bad + ": checkpoint metadata 'phone_set_sha256' '", 0), 0u);
  fs::remove_all(dir);
}

TEST(PhoneSetCheckpoint, AWorkdirOfAnotherInventoryIsOneLineNamingBoth) {
  LabelSet ls = LabelSet::make(ipa_set());
  const std::string ipa12 = ipa_set().digest().substr(0, 12);
  const data::WorkdirPhoneSet timit = data::timit_workdir_phone_set();
  const std::string t12 = timit.spec.digest().substr(0, 12);
  EXPECT_EQ(message_of([&] { bind_workdir(ls, timit, "work", "ckpt.safetensors"); }),
            "ckpt.safetensors (phone set 'ipa-test', sha256 " + ipa12 + ") does not fit WORKDIR work (phone set "
            "'timit61', sha256 " + t12 + "): its labels 'aa', 'ae', 'ah', 'ao', 'aw', ... (61 of 61 labels) are not "
            "in the checkpoint's set");
  // a WORKDIR whose labels the set knows (a subset, or labels it maps) binds
  data::PhoneSetSpec sub;
  sub.name = "sub";
  sub.phones = {"SIL", "ʃ", "a"};
  sub.silence = {"SIL"};
  bind_workdir(ls, data::workdir_phone_set(sub), "work2", "ckpt.safetensors");
  EXPECT_EQ(ls.label_to_class, (std::vector<int>{5, 2, 0}));
  // a TIMIT checkpoint on a TIMIT WORKDIR: nothing to do; on an IPA WORKDIR: one line
  LabelSet t39 = LabelSet::make(39);
  bind_workdir(t39, timit, "work", "c39");
  EXPECT_EQ(t39.label_to_class, LabelSet::make(39).label_to_class);
  EXPECT_NE(message_of([&] { bind_workdir(t39, data::workdir_phone_set(ipa_set()), "w", "c39"); })
                .find("c39 (phone set 'timit39', sha256 "),
            std::string::npos);
}

TEST(PhoneSetCheckpoint, TrainingSetFollowsPhoneSetThenLabelSetThenTheWorkdir) {
  Config cfg;
  const data::WorkdirPhoneSet timit = data::timit_workdir_phone_set();
  cfg.data_label_set = 48;
  EXPECT_EQ(training_label_set(cfg, timit, "w").set, 48);
  cfg.data_phone_set = "timit61";
  EXPECT_EQ(training_label_set(cfg, timit, "w").size(), 60);
  const data::WorkdirPhoneSet ipa = data::workdir_phone_set(ipa_set());
  cfg.data_phone_set = "";
  EXPECT_EQ(training_label_set(cfg, ipa, "w").spec, ipa_set());  // label_set applies to TIMIT WORKDIRs only
  cfg.data_phone_set = "39";
  EXPECT_EQ(message_of([&] { training_label_set(cfg, ipa, "w"); }),
            "w: WORKDIR of phone set 'ipa-test' (sha256 " + ipa_set().digest().substr(0, 12) +
                ") does not fit the phone set trained on, 'timit39' (sha256 " +
                data::PhoneSetSpec::builtin("timit39").digest().substr(0, 12) +
                ", data.phone_set): its labels 'a', 'ə', 'ʃ', 't͡ʃ', 'ŋ' (5 of 6 labels) are not in phone set "
                "'timit39'");
}
