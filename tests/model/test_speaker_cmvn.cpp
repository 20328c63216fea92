// Per-speaker CMVN (data.cmvn speaker; data::Cmvn::with_speakers, applied by
// model::make_batch): each speaker's statistics over all of its utterances in
// the split read, against hand-computed numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"
#include "data/phones.h"
#include "model/batch.h"
#include "model/labels.h"

namespace timitseg::model {
namespace {

// An utterance of `speaker` with features [T][2] = rows, every frame labelled h#.
data::Utterance utt(const std::string& id, const std::string& speaker, const std::vector<std::vector<float>>& rows) {
  data::Utterance u;
  u.id = id;
  u.speaker = speaker;
  u.dim = 2;
  u.num_frames = static_cast<int32_t>(rows.size());
  for (const auto& r : rows) u.features.insert(u.features.end(), r.begin(), r.end());
  u.labels.assign(rows.size(), data::PhoneSet::timit().index61("h#"));
  return u;
}

// Speaker "a": two utterances, dimension 0 = 1 3 | 5 7 (mean 4, variance (9 + 1 + 1 + 9) / 4 = 5),
// dimension 1 = 10 10 | 20 20 (mean 15, variance 25). Speaker "b": one utterance, dimension 0 = 2 4 9
// (mean 5, variance (9 + 1 + 16) / 3 = 26 / 3), dimension 1 constant 0 (variance 0: floored, gives 0).
struct TwoSpeakers {
  data::Utterance a1 = utt("a/1", "a", {{1, 10}, {3, 10}});
  data::Utterance a2 = utt("a/2", "a", {{5, 20}, {7, 20}});
  data::Utterance b1 = utt("b/1", "b", {{2, 0}, {4, 0}, {9, 0}});
  std::vector<const data::Utterance*> all() const { return {&a1, &b1, &a2}; }
  static data::Cmvn speaker_mode() {
    data::Cmvn c;
    c.mean = {100, 100};  // the WORKDIR's train statistics: never used in this mode
    c.var = {1, 1};
    c.per_speaker = true;
    return c;
  }
};

TEST(SpeakerCmvn, StatisticsMatchAHandComputation) {
  const TwoSpeakers s;
  const data::CmvnStats a = data::frame_stats({&s.a1, &s.a2});
  EXPECT_DOUBLE_EQ(a.mean[0], 4.0);
  EXPECT_DOUBLE_EQ(a.mean[1], 15.0);
  EXPECT_DOUBLE_EQ(a.var[0], 5.0);
  EXPECT_DOUBLE_EQ(a.var[1], 25.0);
  const data::CmvnStats b = data::frame_stats({&s.b1});
  EXPECT_DOUBLE_EQ(b.mean[0], 5.0);
  EXPECT_DOUBLE_EQ(b.var[0], 26.0 / 3.0);
  EXPECT_DOUBLE_EQ(b.var[1], 0.0);
}

TEST(SpeakerCmvn, EachSpeakerNormalizedWithItsOwnFramesPaddingExcluded) {
  const TwoSpeakers s;
  const data::Cmvn cmvn = TwoSpeakers::speaker_mode().with_speakers(s.all());
  const LabelSet ls = LabelSet::make(39);
  // one batch [3][T=3][2]: a1 and a2 (2 frames) padded to b1's 3
  const Batch batch = make_batch(s.all(), &cmvn, ls, 0);
  ASSERT_EQ(batch.input.T, 3);
  auto at = [&](int b, int t, int d) { return batch.input.features[(static_cast<size_t>(b) * 3 + t) * 2 + d]; };
  const double sa = std::sqrt(5.0), sb = std::sqrt(26.0 / 3.0);
  // a1 (row 0): (1 - 4) / sqrt 5, (3 - 4) / sqrt 5; (10 - 15) / 5 = -1
  EXPECT_FLOAT_EQ(at(0, 0, 0), float(-3 / sa));
  EXPECT_FLOAT_EQ(at(0, 1, 0), float(-1 / sa));
  EXPECT_FLOAT_EQ(at(0, 0, 1), -1.0f);
  EXPECT_FLOAT_EQ(at(0, 1, 1), -1.0f);
  // a2 (row 2): (5 - 4) / sqrt 5, (7 - 4) / sqrt 5; (20 - 15) / 5 = 1
  EXPECT_FLOAT_EQ(at(2, 0, 0), float(1 / sa));
  EXPECT_FLOAT_EQ(at(2, 1, 0), float(3 / sa));
  EXPECT_FLOAT_EQ(at(2, 0, 1), 1.0f);
  EXPECT_FLOAT_EQ(at(2, 1, 1), 1.0f);
  // b1 (row 1): (2 - 5), (4 - 5), (9 - 5) over sqrt(26 / 3); the constant dimension gives 0
  EXPECT_FLOAT_EQ(at(1, 0, 0), float(-3 / sb));
  EXPECT_FLOAT_EQ(at(1, 1, 0), float(-1 / sb));
  EXPECT_FLOAT_EQ(at(1, 2, 0), float(4 / sb));
  for (int t = 0; t < 3; ++t) EXPECT_EQ(at(1, t, 1), 0.0f);
  // the padding frame of a1 and a2 is left at 0, and no statistic saw it
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(at(0, 2, d), 0.0f);
    EXPECT_EQ(at(2, 2, d), 0.0f);
  }
  // over each speaker's frames (padding excluded): mean 0, variance 1 per dimension (b's constant one: 0, 0)
  for (int d = 0; d < 2; ++d) {
    double m = 0, v = 0;
    const double xa[4] = {at(0, 0, d), at(0, 1, d), at(2, 0, d), at(2, 1, d)};
    for (double x : xa) m += x / 4;
    for (double x : xa) v += (x - m) * (x - m) / 4;
    EXPECT_NEAR(m, 0.0, 1e-6) << d;
    EXPECT_NEAR(v, 1.0, 1e-6) << d;
  }
  double m = 0, v = 0;
  for (int t = 0; t < 3; ++t) m += at(1, t, 0) / 3.0;
  for (int t = 0; t < 3; ++t) v += (at(1, t, 0) - m) * (at(1, t, 0) - m) / 3.0;
  EXPECT_NEAR(m, 0.0, 1e-6);
  EXPECT_NEAR(v, 1.0, 1e-6);
}

TEST(SpeakerCmvn, ASpeakerWithOneUtteranceIsPerUtteranceCmvn) {
  const TwoSpeakers s;
  const data::Cmvn cmvn = TwoSpeakers::speaker_mode().with_speakers(s.all());
  std::vector<float> by_speaker = s.b1.features, by_utterance = s.b1.features;
  cmvn.apply(by_speaker.data(), s.b1.num_frames, s.b1.id);
  data::utterance_cmvn(by_utterance.data(), s.b1.num_frames, 2, data::kCmvnVarFloor);
  EXPECT_EQ(by_speaker, by_utterance);  // bitwise
  // a file decoded or aligned alone is its own speaker (each_utterance_alone); no speakers at all is an error
  std::vector<float> alone = s.a1.features, own = s.a1.features;
  EXPECT_THROW(TwoSpeakers::speaker_mode().apply(alone.data(), s.a1.num_frames, s.a1.id), std::logic_error);
  const data::Cmvn files = cmvn.each_utterance_alone();
  EXPECT_TRUE(files.per_utterance);
  EXPECT_FALSE(files.per_speaker);
  files.apply(alone.data(), s.a1.num_frames, s.a1.id);
  data::utterance_cmvn(own.data(), s.a1.num_frames, 2, data::kCmvnVarFloor);
  EXPECT_EQ(alone, own);
  // and a1 with its speaker differs from a1 alone: (1 - 2) / 1 = -1 alone, (1 - 4) / sqrt 5 with a2
  std::vector<float> with = s.a1.features;
  cmvn.apply(with.data(), s.a1.num_frames, s.a1.id);
  EXPECT_FLOAT_EQ(own[0], -1.0f);
  EXPECT_FLOAT_EQ(with[0], float(-3 / std::sqrt(5.0)));
}

TEST(SpeakerCmvn, EachSplitHasItsOwnStatisticsAndUnknownIdsAreRefused) {
  const TwoSpeakers s;
  // speaker a in a second split (another utterance id): that split's frames only, 11 13 -> mean 12, var 1
  const data::Utterance dev_a = utt("dev/a/3", "a", {{11, 1}, {13, 3}});
  const data::Cmvn cmvn = TwoSpeakers::speaker_mode().with_speakers(s.all()).with_speakers({&dev_a});
  std::vector<float> f = dev_a.features;
  cmvn.apply(f.data(), dev_a.num_frames, dev_a.id);
  EXPECT_EQ(f, (std::vector<float>{-1, -1, 1, 1}));
  std::vector<float> g = s.a2.features;  // the first split's a is unchanged
  cmvn.apply(g.data(), s.a2.num_frames, s.a2.id);
  EXPECT_FLOAT_EQ(g[0], float(1 / std::sqrt(5.0)));
  EXPECT_THROW(cmvn.apply(f.data(), 2, "not/read"), std::logic_error);
  EXPECT_THROW(cmvn.with_speakers({&s.a1}), std::invalid_argument);  // an id held already
  // global mode: with_speakers adds nothing and the WORKDIR's statistics apply
  data::Cmvn global = TwoSpeakers::speaker_mode();
  global.per_speaker = false;
  const data::Cmvn same = global.with_speakers(s.all());
  EXPECT_EQ(same.speakers, nullptr);
  std::vector<float> h = {101, 102};
  same.apply(h.data(), 1, "a/1");
  EXPECT_EQ(h, (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace timitseg::model
