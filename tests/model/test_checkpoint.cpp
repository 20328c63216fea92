// Checkpoint metadata errors name the file and the key; label sets 39/48/61.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "data/phones.h"
#include "common/safetensors.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

namespace fs = std::filesystem;
using namespace timitseg;
using namespace timitseg::model;

namespace {

fs::path tiny_checkpoint(const fs::path& dir) {
  const ModelState s = testsupport::tiny_model_state(/*with_cmvn=*/false);
  const fs::path p = dir / "good.safetensors";
  save_checkpoint(p.string(), s);
  return p;
}

TEST(Checkpoint, CorruptMetadataNamesFileAndKey) {
  const fs::path dir = fs::temp_directory_path() / ("timitseg_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path good = tiny_checkpoint(dir);
  EXPECT_EQ(load_checkpoint(good.string()).epoch, 0);
  struct Case {
    std::string key, value;
  };
  for (const Case& c : std::vector<Case>{{"epoch", "abc"},
                                         {"epoch", "3x"},
                                         {"epoch", "99999999999"},
                                         {"optimizer_step", ""},
                                         {"best_dev_per", "zz"},
                                         {"label_set", "40"},
                                         {"dims", "{\"input_dim\": 3}"},
                                         {"feature_options", "[1"},
                                         {"transcript_trained", "yes"},
                                         {"transcript_trained", "1"}}) {
    st::File f = st::load(good.string());
    f.metadata[c.key] = c.value;
    const fs::path bad = dir / "bad.safetensors";
    st::save(bad.string(), f);
    try {
      load_checkpoint(bad.string());
      ADD_FAILURE() << c.key << "=" << c.value << " was accepted";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(bad.string() + ": bad checkpoint metadata '" + c.key + "': ", 0), 0u) << msg;
      if (c.key == "transcript_trained")  // a plain line, not the JSON parser's
        EXPECT_EQ(msg, bad.string() + ": bad checkpoint metadata 'transcript_trained': '" + c.value +
                           "' is not true or false");
    }
  }
  fs::remove_all(dir);
}

TEST(LabelSet, SizesNamesAndMapTo39) {
  const data::PhoneSet& ps = data::PhoneSet::timit();
  const int q = ps.index61("q");
  ASSERT_GE(q, 0);
  for (const int set : {39, 48, 61}) {
    const LabelSet ls = LabelSet::make(set);
    const int C = set == 61 ? 60 : set;
    ASSERT_EQ(ls.size(), C) << set;
    ASSERT_EQ(ls.scoring_names.size(), 39u);
    EXPECT_EQ(ls.class_of_label(q), -1) << set;
    for (int i = 0; i < 61; ++i) {
      if (i == q) continue;
      const int c = ls.class_of_label(i);
      ASSERT_GE(c, 0) << ps.names61()[i];
      ASSERT_LT(c, C);
      // the class maps to the same 39-phone as the 61-label does
      EXPECT_EQ(ls.scoring_index[c], ps.map(i, 39)) << set << " " << ps.names61()[i];
      if (set == 61) EXPECT_EQ(ls.names[c], ps.names61()[i]);
      if (set != 61) EXPECT_EQ(c, ps.map(i, set));
    }
  }
  EXPECT_THROW(LabelSet::make(40), std::invalid_argument);
}

}  // namespace
