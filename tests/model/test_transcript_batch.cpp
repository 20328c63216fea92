// Transcript batches (model/batch.h): the phone sequence an utterance's frame
// labels or transcript gives, its merge and optional-silence rules, and the
// epoch's batches of one supervision each (train/batches.h is tested in
// tests/train; here the pieces model/ owns).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "crf/phone_graph.h"
#include "data/phones.h"
#include "model/batch.h"
#include "model/labels.h"
#include "model/params.h"
#include "tests/support/model_problems.h"

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

// An utterance of 30 frames whose transcript is `nodes`: (TIMIT 61-set phone, transcript_slot) pairs, the
// phones of the slots in `optional_slots` optional.
data::Utterance slot_utterance(const std::string& id, const std::vector<std::pair<const char*, int32_t>>& nodes,
                               const std::vector<int32_t>& optional_slots) {
  data::Utterance u;
  u.id = id;
  u.num_frames = 30;
  for (const auto& [p, slot] : nodes) {
    u.transcript.push_back(data::PhoneSet::timit().index61(p));
    u.transcript_slot.push_back(slot);
    u.transcript_optional.push_back(
        std::find(optional_slots.begin(), optional_slots.end(), slot >> 8) != optional_slots.end());
  }
  return u;
}

TEST(TranscriptOf, FrameLabelsReadAsTheirRunsWithTheTimesHidden) {
  const LabelSet ls = LabelSet::make(39);
  // h# b aa pau aa h#: every run one required phone (pau and h# both fold to sil in the 39 set; the two
  // aa stay apart, the pause between them is a phone)
  const data::Utterance u = timed_utterance({{"h#", 3}, {"b", 2}, {"aa", 4}, {"pau", 2}, {"aa", 3}, {"h#", 2}});
  const PhoneSequence s = transcript_of(u, ls);
  EXPECT_EQ(names(ls, s), (std::vector<std::string>{"sil", "b", "aa", "sil", "aa", "sil"}));
  EXPECT_EQ(s.required(), 6);
  // closures fold to sil too: bcl b reads sil b
  const data::Utterance v = timed_utterance({{"bcl", 2}, {"b", 1}, {"iy", 5}});
  EXPECT_EQ(names(ls, transcript_of(v, ls)), (std::vector<std::string>{"sil", "b", "iy"}));
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

// Several pronunciations of a word (transcript_slot): the phone graph over
// the slots, in classes (TIMIT 61 -> 39: equal neighbours inside a
// pronunciation merged, pronunciations equal after folding kept once); the
// primary path is each slot's first; the flat start and required() read it.
TEST(TranscriptOf, SlotsOfAlternativesBecomeAPhoneGraph) {
  const LabelSet ls = LabelSet::make(39);
  // sil? {t ah m ey t ow | t ah m aa t ow | t ah m aa t ow} sil? {ay} sil?  (slot 1's third equals its second)
  const std::vector<std::pair<const char*, int32_t>> nodes = {
      {"h#", 0},      {"t", 1 << 8},  {"ah", 1 << 8},     {"m", 1 << 8},      {"ey", 1 << 8},     {"t", 1 << 8},
      {"ow", 1 << 8}, {"t", 1 << 8 | 1}, {"ah", 1 << 8 | 1}, {"m", 1 << 8 | 1}, {"aa", 1 << 8 | 1}, {"t", 1 << 8 | 1},
      {"ow", 1 << 8 | 1}, {"t", 1 << 8 | 2}, {"ah", 1 << 8 | 2}, {"m", 1 << 8 | 2}, {"aa", 1 << 8 | 2},
      {"t", 1 << 8 | 2}, {"ow", 1 << 8 | 2}, {"pau", 2 << 8}, {"ay", 3 << 8}, {"h#", 4 << 8}};
  const data::Utterance u = slot_utterance("test/alts", nodes, {0, 2, 4});
  const PhoneSequence s = transcript_of(u, ls);
  EXPECT_EQ(names(ls, s), (std::vector<std::string>{"sil?", "t", "ah", "m", "ey", "t", "ow", "t", "ah", "m", "aa",
                                                    "t", "ow", "sil?", "ay", "sil?"}));
  ASSERT_EQ(s.links.size(), 16u);
  EXPECT_EQ(s.primary, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(s.links[1], crf::kLinkStart | 1);       // the first t: after sil 0, or first
  EXPECT_EQ(s.links[7], crf::kLinkStart | 1 << 6);  // the second pronunciation's t: after sil 0, or first
  EXPECT_EQ(s.links[13], 1 << 0 | 1 << 6);          // sil after ow (12) or ow (6)
  EXPECT_EQ(s.links[14], 1 << 0 | 1 << 1 | 1 << 7 | crf::kLinkEnd);  // ay after sil, ow (12) or ow (6); last
  EXPECT_EQ(s.links[15], 1 | crf::kLinkEnd);
  EXPECT_EQ(s.links[14] & crf::kLinkEnd, crf::kLinkEnd);
  EXPECT_EQ(s.required(), 7);  // t ah m ey t ow ay
  EXPECT_EQ(s.graph(), s.links);
  const std::vector<int32_t> flat = flat_start_labels(s, 14);  // 7 primary phones, 2 frames each
  std::vector<std::string> runs;
  for (size_t t = 0; t < flat.size(); t += 2) runs.push_back(ls.names.at(flat[t]));
  EXPECT_EQ(runs, (std::vector<std::string>{"t", "ah", "m", "ey", "t", "ow", "ay"}));
  const Batch batch = make_batch({&u}, nullptr, ls, 0, BatchSupervision::transcript);
  EXPECT_EQ(batch.N, 16);
  EXPECT_EQ(batch.links, s.links);
  // a chain's batch links are its optional flags' chain
  const data::Utterance c = timed_utterance({{"h#", 3}, {"b", 2}, {"aa", 4}});
  const Batch cb = make_batch({&c}, nullptr, ls, 0, BatchSupervision::transcript);
  EXPECT_EQ(cb.links, (std::vector<int32_t>{crf::kLinkStart, 1, 1 | crf::kLinkEnd}));
}

// The pronunciation combinations of a transcript with alternatives
// (pronunciation_chains, which the Gaussian head's re-estimation aligns): one
// chain per choice of an alternative per slot, the primary path first, the
// last slot fastest; a slot whose alternatives would pass max_chains keeps its
// first. Oracle: the chains written out by hand.
TEST(PronunciationChains, EveryCombinationWithinTheLimitAsAChain) {
  const LabelSet ls = LabelSet::make(39);
  // sil? {t ah | t aa} {m | n | ng} sil? {ay | oy}  (slots 1, 2 and 4 have 2, 3 and 2 alternatives)
  const std::vector<std::pair<const char*, int32_t>> nodes = {
      {"h#", 0},          {"t", 1 << 8},     {"ah", 1 << 8},     {"t", 1 << 8 | 1}, {"aa", 1 << 8 | 1},
      {"m", 2 << 8},      {"n", 2 << 8 | 1}, {"ng", 2 << 8 | 2}, {"pau", 3 << 8},   {"ay", 4 << 8},
      {"oy", 4 << 8 | 1}};
  data::Utterance u = slot_utterance("test/chains", nodes, {0, 3});
  u.dim = 2;
  u.features.assign(60, 0.25f);
  const auto read = [&](const std::vector<data::Utterance>& cs) {
    std::vector<std::string> out;
    for (const data::Utterance& c : cs) {
      EXPECT_EQ(c.id, u.id);
      EXPECT_EQ(c.features, u.features);
      EXPECT_TRUE(c.transcript_slot.empty());
      const PhoneSequence s = transcript_of(c, ls);
      EXPECT_TRUE(s.links.empty()) << "a chain";
      std::string line;
      for (const std::string& n : names(ls, s)) line += (line.empty() ? "" : " ") + n;
      out.push_back(line);
    }
    return out;
  };
  EXPECT_EQ(read(pronunciation_chains(u)),
            (std::vector<std::string>{"sil? t ah m sil? ay", "sil? t ah m sil? oy", "sil? t ah n sil? ay",
                                      "sil? t ah n sil? oy", "sil? t ah ng sil? ay", "sil? t ah ng sil? oy",
                                      "sil? t aa m sil? ay", "sil? t aa m sil? oy", "sil? t aa n sil? ay",
                                      "sil? t aa n sil? oy", "sil? t aa ng sil? ay", "sil? t aa ng sil? oy"}));
  // at most 4: slot 1 (2) and then slot 2 (3 would make 6) keeps m, slot 4 (2) makes 4
  EXPECT_EQ(read(pronunciation_chains(u, 4)), (std::vector<std::string>{"sil? t ah m sil? ay", "sil? t ah m sil? oy",
                                                                          "sil? t aa m sil? ay", "sil? t aa m sil? oy"}));
  EXPECT_EQ(read(pronunciation_chains(u, 1)), (std::vector<std::string>{"sil? t ah m sil? ay"}));
  EXPECT_THROW(pronunciation_chains(u, 0), std::invalid_argument);
  // without alternatives: the utterance itself
  data::Utterance c = u;
  c.transcript_slot.clear();
  const std::vector<data::Utterance> one = pronunciation_chains(c);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].transcript, c.transcript);
}

TEST(MakeBatch, TranscriptBatchPadsPhonesAndLeavesLabelsUnread) {
  const LabelSet ls = LabelSet::make(39);
  const data::Utterance a = timed_utterance({{"h#", 3}, {"b", 2}, {"aa", 4}, {"h#", 2}});
  const data::Utterance b = timed_utterance({{"s", 4}, {"iy", 3}});
  const Batch batch = make_batch({&a, &b}, nullptr, ls, 0, BatchSupervision::transcript);
  ASSERT_TRUE(batch.transcript());
  EXPECT_EQ(batch.N, 4);  // sil b aa sil
  EXPECT_EQ(batch.num_phones, (std::vector<int32_t>{4, 2}));
  EXPECT_EQ(std::vector<int32_t>(batch.phones.begin() + 4, batch.phones.begin() + 6),
            (std::vector<int32_t>{ls.spec.index("s"), ls.spec.index("iy")}));
  for (int32_t o : batch.optional) EXPECT_EQ(o, 0);
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

// The batch's frame labels read as phone sequences (their maximal runs, no optional phone).
Batch as_transcript_batch(Batch b) {
  const int B = b.input.B, T = b.input.T;
  std::vector<std::vector<int32_t>> seqs(B);
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < b.input.lengths[i]; ++t) {
      const int32_t l = b.labels[static_cast<size_t>(i) * T + t];
      if (seqs[i].empty() || seqs[i].back() != l) seqs[i].push_back(l);
    }
  b.N = 0;
  for (const auto& s : seqs) b.N = std::max(b.N, static_cast<int>(s.size()));
  b.phones.assign(static_cast<size_t>(B) * b.N, 0);
  b.optional.assign(static_cast<size_t>(B) * b.N, 0);
  b.num_phones.assign(B, 0);
  for (int i = 0; i < B; ++i) {
    std::copy(seqs[i].begin(), seqs[i].end(), b.phones.begin() + static_cast<size_t>(i) * b.N);
    b.num_phones[i] = static_cast<int32_t>(seqs[i].size());
  }
  return b;
}

// The transcript NLL through the executor's whole step: 0 <= it <= the NLL of
// the gold segmentation of the same labels (the gold segmentation is one of
// those that read the sequence), and its gradient is the loss's by central
// differences in a CRF parameter and an encoder weight.
TEST(TranscriptStep, LossIsBoundedByTheGoldNllAndItsGradientIsTheLosss) {
  const ModelDims d = testsupport::small_dims();
  const ParamLayout lay(d);
  const std::vector<float> params = testsupport::random_model_params(d, 11, 0.3f);
  const Batch gold = testsupport::random_model_batch(d, 3, 14, 12);
  const Batch tr = as_transcript_batch(gold);
  ASSERT_TRUE(tr.transcript());
  StepOptions o;
  o.dropout = 0.0;
  o.crf_reg = 0.0;
  for (const char* backend : {"reference", "cpu"}) {
    auto ex = testsupport::executor_with("cpu", d, params, backend);
    std::vector<float> g_gold, g;
    const StepResult rg = ex->gradients(gold, o, g_gold);
    const StepResult rt = ex->gradients(tr, o, g);
    EXPECT_GE(rt.nll_sum, -1e-9) << backend;
    EXPECT_LT(rt.nll_sum, rg.nll_sum) << backend;  // strictly: other segmentations read the same runs
    for (const char* name : {"crf.transition", "encoder.lstm.weight_ih_l0"}) {
      const ParamInfo& info = lay.get(name);
      int checked = 0;
      for (size_t k = info.offset; k < info.offset + info.size && checked < 4; k += info.size / 5 + 1, ++checked) {
        const double eps = 1e-2;
        std::vector<float> pp = params, pm = params;
        pp[k] += static_cast<float>(eps);
        pm[k] -= static_cast<float>(eps);
        std::vector<float> unused;
        const double lp = testsupport::executor_with("cpu", d, pp, backend)->gradients(tr, o, unused).loss;
        const double lm = testsupport::executor_with("cpu", d, pm, backend)->gradients(tr, o, unused).loss;
        const double fd = (lp - lm) / (2 * eps);
        EXPECT_NEAR(g[k], fd, 2e-3 + 2e-2 * std::abs(fd)) << backend << " " << name << " [" << k - info.offset << "]";
      }
    }
  }
}

}  // namespace
}  // namespace timitseg::model
