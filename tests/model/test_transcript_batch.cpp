// Transcript batches (model/batch.h): the phone sequence an utterance's frame
// labels or transcript gives, its merge and optional-silence rules, and the
// epoch's batches of one supervision each (train/batches.h is tested in
// tests/train; here the pieces model/ owns).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/phones.h"
#include "model/batch.h"
#include "model/labels.h"

namespace timitseg::model {
namespace {

// An utterance whose frame labels are runs of TIMIT 61-set phones.
data::Utterance timed_utterance(const std::vector<std::pair<std::string, int>>& runs) {
  data::Utterance u;
  u.id = "test/u1";
  u.dim = 2;
  for (const auto& [phone, frames] : runs) {
    const int idx = data::PhoneSet::timit().index61(phone);
    EXPECT_GE(idx, 0) << phone;
    u.labels.insert(u.labels.end(), frames, idx);
  }
  u.num_frames = static_cast<int32_t>(u.labels.size());
  u.features.assign(static_cast<size_t>(u.num_frames) * u.dim, 0.5f);
  return u;
}

std::vector<std::string> names(const LabelSet& ls, const PhoneSequence& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.phones.size(); ++i) out.push_back(ls.names.at(s.phones[i]) + (s.optional[i] ? "?" : ""));
  return out;
}

TEST(TranscriptOf, FrameLabelsReadAsATranscriptWithOptionalSilences) {
  const LabelSet ls = LabelSet::make(39);
  // h# b aa pau aa h#: the silences go, an optional silence between phones and at both ends,
  // and the two aa on both sides of the pause merge (skipping the pause would read them as one run)
  const data::Utterance u = timed_utterance({{"h#", 3}, {"b", 2}, {"aa", 4}, {"pau", 2}, {"aa", 3}, {"h#", 2}});
  const PhoneSequence s = transcript_of(u, ls);
  EXPECT_EQ(names(ls, s), (std::vector<std::string>{"sil?", "b", "sil?", "aa", "sil?"}));
  EXPECT_EQ(s.required(), 2);
}

TEST(TranscriptOf, OwnTranscriptMergesEqualPhonesAndKeepsRequiredSilence) {
  const LabelSet ls = LabelSet::make(39);
  data::Utterance u;
  u.id = "test/u2";
  u.num_frames = 20;
  const auto& ps = data::PhoneSet::timit();
  // sil? s sil? s iy sil? (two words "s" and "s iy": the equal phones across the optional silence merge)
  for (const char* p : {"h#", "s", "h#", "s", "iy", "pau", "h#"}) u.transcript.push_back(ps.index61(p));
  u.transcript_optional = {1, 0, 1, 0, 0, 1, 0};
  const PhoneSequence s = transcript_of(u, ls);
  // the last pau? then a required h# (both fold to sil): the silence becomes required
  EXPECT_EQ(names(ls, s), (std::vector<std::string>{"sil?", "s", "iy", "sil"}));
  EXPECT_EQ(s.required(), 3);
}

TEST(TranscriptOf, SilenceAloneIsRequired) {
  const LabelSet ls = LabelSet::make(39);
  const data::Utterance u = timed_utterance({{"h#", 5}});
  const PhoneSequence s = transcript_of(u, ls);
  EXPECT_EQ(names(ls, s), (std::vector<std::string>{"sil"}));
}

TEST(MakeBatch, TranscriptBatchPadsPhonesAndLeavesLabelsUnread) {
  const LabelSet ls = LabelSet::make(39);
  const data::Utterance a = timed_utterance({{"h#", 3}, {"b", 2}, {"aa", 4}, {"h#", 2}});
  const data::Utterance b = timed_utterance({{"s", 4}, {"iy", 3}});
  const Batch batch = make_batch({&a, &b}, nullptr, ls, 0, BatchSupervision::transcript);
  ASSERT_TRUE(batch.transcript());
  EXPECT_EQ(batch.N, 5);  // sil? b sil? aa sil?
  EXPECT_EQ(batch.num_phones, (std::vector<int32_t>{5, 5}));
  const std::vector<int32_t> opt_a(batch.optional.begin(), batch.optional.begin() + 5);
  EXPECT_EQ(opt_a, (std::vector<int32_t>{1, 0, 1, 0, 1}));
  EXPECT_EQ(batch.input.lengths, (std::vector<int32_t>{11, 7}));
  for (int32_t l : batch.labels) EXPECT_EQ(l, 0);
  // a segments batch of an utterance without times is refused, naming it
  data::Utterance c = b;
  c.id = "test/untimed";
  c.transcript = c.labels;
  c.labels.clear();
  try {
    make_batch({&c}, nullptr, ls, 0);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("test/untimed"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(make_batch({&c}, nullptr, ls, 0, BatchSupervision::transcript));
}

}  // namespace
}  // namespace timitseg::model
