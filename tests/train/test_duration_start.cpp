// crf.duration_init = data's segments (train/duration_start.h) and the flat
// start (model::flat_start_labels): equal splits, the long-phone rule, the
// gold-first rule of a mixed split, checked against hand-computed durations
// and log p(d | c) (add-one smoothed: (n + 1) / (n_c + K)).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "crf/duration.h"
#include "data/phones.h"
#include "model/batch.h"
#include "model/labels.h"
#include "model/params.h"
#include "train/duration_start.h"

namespace timitseg::train {
namespace {

int idx(const char* phone) {
  const int i = data::PhoneSet::timit().index61(phone);
  EXPECT_GE(i, 0) << phone;
  return i;
}

// An utterance of T frames with only a transcript (phone, optional) and no times.
data::Utterance transcript_utterance(const std::string& id, int T,
                                     const std::vector<std::pair<const char*, int>>& phones) {
  data::Utterance u;
  u.id = id;
  u.dim = 1;
  u.num_frames = T;
  for (const auto& [p, opt] : phones) {
    u.transcript.push_back(idx(p));
    u.transcript_optional.push_back(static_cast<uint8_t>(opt));
  }
  return u;
}

// An utterance with times: runs of 61-set phones.
data::Utterance timed_utterance(const std::string& id, const std::vector<std::pair<const char*, int>>& runs) {
  data::Utterance u;
  u.id = id;
  u.dim = 1;
  for (const auto& [p, frames] : runs) u.labels.insert(u.labels.end(), frames, idx(p));
  u.num_frames = static_cast<int32_t>(u.labels.size());
  return u;
}

const model::LabelSet& ls39() {
  static const model::LabelSet ls = model::LabelSet::make(39);
  return ls;
}
int cls(const char* phone) { return ls39().class_of_label(idx(phone)); }

// log p(d | c) of the prior [K][C] at duration d (frames), label c.
double log_p(const model::DurationPrior& p, int d, int c) { return p.log_p.at(static_cast<size_t>(d - 1) * 39 + c); }

TEST(FlatStart, TenFramesThreePhonesSplitThreeThreeFour) {
  model::PhoneSequence s;
  s.phones = {cls("aa"), cls("b"), cls("iy")};
  s.optional = {0, 0, 0};
  const int a = cls("aa"), b = cls("b"), c = cls("iy");
  EXPECT_EQ(model::flat_start_labels(s, 10), (std::vector<int32_t>{a, a, a, b, b, b, c, c, c, c}));
  EXPECT_EQ(model::flat_start_labels(s, 11), (std::vector<int32_t>{a, a, a, b, b, b, b, c, c, c, c}));
  EXPECT_EQ(model::flat_start_labels(s, 3), (std::vector<int32_t>{a, b, c}));
  EXPECT_THROW(model::flat_start_labels(s, 2), std::invalid_argument);
  // an optional phone gets no frame: aa and iy take five each
  s.optional = {0, 1, 0};
  EXPECT_EQ(model::flat_start_labels(s, 10), (std::vector<int32_t>{a, a, a, a, a, c, c, c, c, c}));
  EXPECT_EQ(model::flat_start_labels(s, 2), (std::vector<int32_t>{a, c}));
}

TEST(DurationStart, TranscriptOnlyGivesTheEqualSplitAndItsLogPrior) {
  config::Config cfg;  // crf.supervision auto: no times, so the transcript
  // sil? aa b iy sil? over 10 frames: the optional silences none, aa 3, b 3, iy 4
  // a second utterance whose 2 frames cannot hold its 3 phones gives nothing (it cannot train)
  const std::vector<data::Utterance> train = {
      transcript_utterance("u1", 10, {{"h#", 1}, {"aa", 0}, {"b", 0}, {"iy", 0}, {"h#", 1}}),
      transcript_utterance("short", 2, {{"aa", 0}, {"b", 0}, {"iy", 0}})};
  const int K = 12;
  const DurationStart st = duration_start(cfg, train, ls39(), K);
  EXPECT_EQ(st.gold, 0);
  EXPECT_EQ(st.flat, 3);
  EXPECT_EQ(st.flat_labels, 3);
  EXPECT_EQ(st.transcripts, 1);
  const model::DurationPrior p = model::duration_log_prior(st.classes, K, 39);
  EXPECT_EQ(p.segments, 3);
  EXPECT_NEAR(log_p(p, 3, cls("aa")), std::log(2.0 / 13.0), 1e-12);  // one segment of 3 among 1: (1+1)/(1+12)
  EXPECT_NEAR(log_p(p, 4, cls("aa")), std::log(1.0 / 13.0), 1e-12);
  EXPECT_NEAR(log_p(p, 3, cls("b")), std::log(2.0 / 13.0), 1e-12);
  EXPECT_NEAR(log_p(p, 4, cls("iy")), std::log(2.0 / 13.0), 1e-12);
  EXPECT_NEAR(log_p(p, 3, cls("iy")), std::log(1.0 / 13.0), 1e-12);
  EXPECT_NEAR(log_p(p, 1, cls("h#")), std::log(1.0 / 12.0), 1e-12);  // the silences got no frame: uniform
  EXPECT_EQ(st.describe(K).rfind("the 3 segments of the train split (K = 12): 0 gold, 3 from an equal split of the "
                                 "transcripts (flat start",
                                 0),
            0u)
      << st.describe(K);
}

// crf.flat_start: false: the transcript utterances give no durations (counted, named in the line);
// the gold segments of a timed one still do.
TEST(DurationStart, FlatStartOffGivesNothingFromTranscripts) {
  config::Config cfg;
  cfg.crf_flat_start = false;
  const std::vector<data::Utterance> only = {
      transcript_utterance("u1", 10, {{"h#", 1}, {"aa", 0}, {"b", 0}, {"iy", 0}, {"h#", 1}})};
  const DurationStart st = duration_start(cfg, only, ls39(), 12);
  EXPECT_EQ(st.gold, 0);
  EXPECT_EQ(st.flat, 0);
  EXPECT_EQ(st.flat_labels, 0);
  EXPECT_EQ(st.transcripts, 1);
  EXPECT_TRUE(st.classes.empty());
  EXPECT_EQ(st.segments(), 0);
  EXPECT_EQ(st.describe(12), "the 0 segments of the train split (K = 12): 0 gold; the 1 utterances that train on "
                             "their transcript give none (crf.flat_start: false)");
  // negative control: the same utterance with the flat start on gives its 3 pieces
  config::Config on;
  EXPECT_EQ(duration_start(on, only, ls39(), 12).flat, 3);
}

TEST(DurationStart, EqualSplitLongerThanKIsCutAsGoldRunsAre) {
  config::Config cfg;
  // aa iy over 10 frames: 5 each; K = 3 cuts each into 3 + 2, as the loss's gold segmentation cuts a run of 5
  const std::vector<data::Utterance> train = {transcript_utterance("u1", 10, {{"aa", 0}, {"iy", 0}})};
  const DurationStart st = duration_start(cfg, train, ls39(), 3);
  EXPECT_EQ(st.flat, 4);
  const model::DurationPrior p = model::duration_log_prior(st.classes, 3, 39);
  EXPECT_EQ(p.segments, 4);
  for (const char* ph : {"aa", "iy"}) {
    EXPECT_NEAR(log_p(p, 1, cls(ph)), std::log(1.0 / 5.0), 1e-12) << ph;  // (0+1)/(2+3)
    EXPECT_NEAR(log_p(p, 2, cls(ph)), std::log(2.0 / 5.0), 1e-12) << ph;
    EXPECT_NEAR(log_p(p, 3, cls(ph)), std::log(2.0 / 5.0), 1e-12) << ph;
  }
}

TEST(DurationStart, MixedSplitTakesGoldFirstAndTheFlatStartForLabelsWithoutGold) {
  config::Config cfg;  // auto: the timed utterance trains on times, the other on its transcript
  // gold: aa 2, b 6 (K = 4 cuts b into 4 + 2); flat: aa iy b over 9 frames: 3, 3, 3, of which only iy counts
  const std::vector<data::Utterance> train = {
      timed_utterance("timed", {{"aa", 2}, {"b", 6}}),
      transcript_utterance("text", 9, {{"aa", 0}, {"iy", 0}, {"b", 0}})};
  const int K = 4;
  const DurationStart st = duration_start(cfg, train, ls39(), K);
  EXPECT_EQ(st.gold, 3);
  EXPECT_EQ(st.flat, 1);
  EXPECT_EQ(st.flat_labels, 1);
  const model::DurationPrior p = model::duration_log_prior(st.classes, K, 39);
  EXPECT_EQ(p.segments, 4);
  EXPECT_NEAR(log_p(p, 2, cls("aa")), std::log(2.0 / 5.0), 1e-12);  // gold only: the flat 3 not counted
  EXPECT_NEAR(log_p(p, 3, cls("aa")), std::log(1.0 / 5.0), 1e-12);
  EXPECT_NEAR(log_p(p, 4, cls("b")), std::log(2.0 / 6.0), 1e-12);   // pieces 4 and 2 among 2
  EXPECT_NEAR(log_p(p, 2, cls("b")), std::log(2.0 / 6.0), 1e-12);
  EXPECT_NEAR(log_p(p, 3, cls("b")), std::log(1.0 / 6.0), 1e-12);
  EXPECT_NEAR(log_p(p, 3, cls("iy")), std::log(2.0 / 5.0), 1e-12);  // the flat start's 3
  EXPECT_NE(st.describe(K).find("3 gold, 1 from an equal split"), std::string::npos) << st.describe(K);
  EXPECT_NE(st.describe(K).find("only for the 1 labels without gold segments"), std::string::npos) << st.describe(K);
  // segments only: no transcript utterance, the gold alone, and the line says nothing of a flat start
  cfg.crf_supervision = config::Supervision::segments;
  const DurationStart g = duration_start(cfg, {train[0]}, ls39(), K);
  EXPECT_EQ(g.describe(K), "the 3 segments of the train split (K = 4): 3 gold");
}

TEST(DurationStart, TranscriptSupervisionSplitsATimedUtteranceEqually) {
  config::Config cfg;
  cfg.crf_supervision = config::Supervision::transcript;  // times ignored: the runs read as the phone sequence
  // h# b aa: sil b aa (all required) over 2 + 1 + 9 = 12 frames: 4 each
  const std::vector<data::Utterance> train = {timed_utterance("timed", {{"h#", 2}, {"b", 1}, {"aa", 9}})};
  const DurationStart st = duration_start(cfg, train, ls39(), 12);
  EXPECT_EQ(st.gold, 0);
  EXPECT_EQ(st.flat, 3);
  const model::DurationPrior p = model::duration_log_prior(st.classes, 12, 39);
  for (const char* ph : {"h#", "b", "aa"}) EXPECT_NEAR(log_p(p, 4, cls(ph)), std::log(2.0 / 13.0), 1e-12) << ph;
}

TEST(DurationStart, LognormalFitsTheFlatStartDurations) {
  config::Config cfg;
  // aa iy over 6 and over 10 frames: aa 3 and 5, iy 3 and 5
  const std::vector<data::Utterance> train = {transcript_utterance("u1", 6, {{"aa", 0}, {"iy", 0}}),
                                              transcript_utterance("u2", 10, {{"aa", 0}, {"iy", 0}})};
  const DurationStart st = duration_start(cfg, train, ls39(), 12);
  const std::vector<float> ln = crf::fit_lognormal_durations(st.classes, 12, 39);
  const double mu = 0.5 * (std::log(3.0) + std::log(5.0)), sigma = 0.5 * (std::log(5.0) - std::log(3.0));
  for (const char* ph : {"aa", "iy"}) {
    EXPECT_NEAR(ln[cls(ph)], mu, 1e-6) << ph;
    EXPECT_NEAR(ln[39 + cls(ph)], std::log(sigma), 1e-5) << ph;
  }
}

}  // namespace
}  // namespace timitseg::train
