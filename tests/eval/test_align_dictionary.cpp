// Pronunciation dictionaries in `timitseg align` (eval/align_dictionary.h) with
// a 1-epoch checkpoint of a tiny synth corpus: the choice among candidate
// pronunciations against each candidate aligned on its own (a batch of one:
// the oracle), with and without pronunciation log probabilities; the MFA
// dictionary's phones checked against the checkpoint; the built binary
// choosing between two pronunciations and naming every missing word.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/parallel.h"
#include "data/espeak_tts.h"
#include "data/features.h"
#include "data/transcripts.h"
#include "eval/align.h"
#include "eval/align_dictionary.h"
#include "eval/infer.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

class AlignDictionary : public ::testing::Test {
 protected:
  static fs::path dir_, ckpt_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_align_dictionary");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 4, 3, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
    const std::string config = (dir_ / "tiny.yaml").string();
    std::ofstream(config) << "data:\n  workdir: " << (dir_ / "work").string()
                          << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                             "crf:\n  max_duration: 8\n  backend: cpu\n"
                             "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n"
                             "  run_dir: "
                          << (dir_ / "run").string() << "\n";
    const Cmd t = run("train --config " + config);
    ASSERT_EQ(t.rc, 0) << t.output;
    ckpt_ = dir_ / "run" / "checkpoints" / "best.safetensors";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::vector<fs::path> wavs() {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
      if (e.path().extension() == ".WAV") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  static data::Utterance features_of(const fs::path& wav, const model::ModelState& s) {
    data::Utterance u;
    u.id = wav.stem().string();
    const data::Audio a = data::to_rate(data::read_audio(wav.string()), s.features.sample_rate);
    u.features = data::compute_features(a, s.features, &u.num_frames, 1);
    u.dim = s.features.dim();
    u.num_samples = static_cast<int64_t>(a.samples.size());
    u.labels.assign(u.num_frames, 0);
    return u;
  }
  static std::vector<std::string> phn_phones(const fs::path& wav) {
    const fs::path phn = fs::path(wav).replace_extension(".PHN");
    return data::parse_phn_phones(phn.string(), read_file(phn.string()));
  }
};
fs::path AlignDictionary::dir_;
fs::path AlignDictionary::ckpt_;

// The score of one candidate aligned alone.
double score_alone(model::Executor& ex, const data::Utterance& u, const eval::ClassSequence& cs,
                   const model::ModelState& s) {
  const model::Batch batch = model::make_batch({&u}, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  const int64_t N = static_cast<int64_t>(cs.classes.size());
  return ex.align(batch, N, cs.classes, {static_cast<int32_t>(N)}, cs.optional, nullptr).score[0];
}

}  // namespace

TEST_F(AlignDictionary, ChoosesTheBestScorePlusLogProbability) {
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  auto ex = eval::make_inference_executor(s, config::DeviceSetting::cpu, std::nullopt, 2, 0.0, config::DecodeMode::viterbi);
  const std::vector<fs::path> w = wavs();
  ASSERT_GE(w.size(), 2u);
  const data::Utterance u0 = features_of(w[0], s), u1 = features_of(w[1], s);
  data::Transcript t;
  t.source = "t";
  t.phones = phn_phones(w[0]);
  const eval::ClassSequence primary = eval::to_classes(t, s.labels);
  // alternatives: the phones reversed, and two neighbours swapped (where no equal classes then meet)
  eval::Candidates alt;
  eval::ClassSequence rev = primary, swapped = primary;
  std::reverse(rev.classes.begin(), rev.classes.end());
  std::vector<int32_t>& c = swapped.classes;
  ASSERT_GE(c.size(), 6u);
  size_t i = 1;
  while (i + 2 < c.size() && (c[i - 1] == c[i + 1] || c[i] == c[i + 2])) ++i;
  ASSERT_LT(i + 2, c.size());
  std::swap(c[i], c[i + 1]);
  alt.alternatives = {rev, swapped};
  alt.log_prob = {0.0, 0.0, 0.0};
  const std::vector<double> alone = {score_alone(*ex, u0, primary, s), score_alone(*ex, u0, rev, s),
                                     score_alone(*ex, u0, swapped, s)};
  for (double v : alone) ASSERT_TRUE(std::isfinite(v));
  std::vector<size_t> order = {0, 1, 2};
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return alone[a] > alone[b]; });
  ASSERT_GT(alone[order[0]] - alone[order[1]], 1e-6);  // a clear winner
  // utterance 1 has no alternatives: not aligned here, index 0
  data::Transcript t1;
  t1.source = "t1";
  t1.phones = phn_phones(w[1]);
  const eval::ClassSequence p1 = eval::to_classes(t1, s.labels);
  const eval::Candidates none;
  std::vector<size_t> pick = eval::choose_pronunciations(*ex, {&u0, &u1}, {&primary, &p1}, {&alt, &none}, s);
  EXPECT_EQ(pick, (std::vector<size_t>{order[0], 0}));
  // a log probability that outweighs the score gap turns the choice to the runner-up
  alt.log_prob[order[0]] = -(alone[order[0]] - alone[order[1]]) - 1.0;
  pick = eval::choose_pronunciations(*ex, {&u1, &u0}, {&p1, &primary}, {&none, &alt}, s);
  EXPECT_EQ(pick, (std::vector<size_t>{0, order[1]}));
  // ... and one just short of it does not
  alt.log_prob[order[0]] = -(alone[order[0]] - alone[order[1]]) + 1e-3;
  pick = eval::choose_pronunciations(*ex, {&u0}, {&primary}, {&alt}, s);
  EXPECT_EQ(pick, (std::vector<size_t>{order[0]}));
  // an alternative with more phones than the audio has frames is never chosen (and fails nothing),
  // however probable
  eval::ClassSequence too_long;
  for (int32_t f = 0; f <= u0.num_frames; ++f) {
    too_long.classes.push_back(primary.classes[f % 2]);
    too_long.optional.push_back(0), too_long.word_first.push_back(-1), too_long.word_last.push_back(-1);
  }
  eval::Candidates longer;
  longer.alternatives = {too_long};
  longer.log_prob = {0.0, 1e6};
  pick = eval::choose_pronunciations(*ex, {&u0}, {&primary}, {&longer}, s);
  EXPECT_EQ(pick, (std::vector<size_t>{0}));
}

TEST_F(AlignDictionary, MfaPhonesCheckedAgainstTheCheckpoint) {
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  // label-set names, TIMIT 61 names and ARPAbet (MFA's english_us_arpa) are phones of the checkpoint
  EXPECT_GE(eval::phone_class("sil", s.labels), 0);
  EXPECT_EQ(eval::phone_class("h#", s.labels), eval::phone_class("sil", s.labels));
  EXPECT_EQ(eval::phone_class("AH0", s.labels), eval::phone_class("ax", s.labels));
  EXPECT_EQ(eval::phone_class("ʃ", s.labels), -1);
  EXPECT_EQ(eval::phone_class("q", s.labels), -1);
  const data::Dictionary good = data::Dictionary::parse("d", "a\t0.5\tHH AH0\na\t0.5\th# ax\n", data::DictFormat::mfa);
  EXPECT_NO_THROW(eval::check_dictionary_phones(good, s.labels));
  const data::Dictionary bad = data::Dictionary::parse("d", "a\tah\nchat\t1.0\tʃ a\n", data::DictFormat::mfa);
  try {
    eval::check_dictionary_phones(bad, s.labels);
    FAIL() << "no error";
  } catch (const data::TranscriptError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("d:2: phone 'ʃ' of 'chat' is not in the checkpoint's phone set (39 phones: ", 0),
              0u)
        << e.what();
  }
}

TEST_F(AlignDictionary, BinaryChoosesBetweenPronunciationsAndNamesMissingWords) {
  // "ab" pronounced as the .PHN's phones (probability 0.5) or as them reversed (0.5): the
  // written .PHN is the candidate of the higher score (the .PHN's, by the oracle above's measure).
  const model::ModelState s = model::load_checkpoint(ckpt_.string());
  auto ex = eval::make_inference_executor(s, config::DeviceSetting::cpu, std::nullopt, 2, 0.0, config::DecodeMode::viterbi);
  const fs::path wav = wavs()[0];
  std::vector<std::string> ph = phn_phones(wav);
  ph.erase(std::remove(ph.begin(), ph.end(), "q"), ph.end());
  std::vector<std::string> rv(ph.rbegin(), ph.rend());
  auto joined = [](const std::vector<std::string>& v) {
    std::string o;
    for (const std::string& p : v) o += (o.empty() ? "" : " ") + p;
    return o;
  };
  const fs::path dict = dir_ / "mfa.dict", list = dir_ / "words.txt";
  std::ofstream(dict) << "ab\t0.5\t" << joined(rv) << "\nab\t0.5\t" << joined(ph) << "\nrésumé\t1.0\th#\n";
  std::ofstream(list) << wav.string() << " ab\n";
  const fs::path out = dir_ / "out";
  Cmd a = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
              " --no-edge-silence --out " + out.string() + " --device cpu");
  ASSERT_EQ(a.rc, 0) << a.output;
  data::Transcript tf, tr;
  tf.source = tr.source = "x";
  tf.phones = ph, tr.phones = rv;
  const data::Utterance u = features_of(wav, s);
  const eval::ClassSequence cf = eval::to_classes(tf, s.labels), cr = eval::to_classes(tr, s.labels);
  const bool forward_wins = score_alone(*ex, u, cf, s) > score_alone(*ex, u, cr, s);  // ties: the first line
  const eval::ClassSequence& want = forward_wins ? cf : cr;
  std::istringstream in(slurp(out / (wav.stem().string() + ".PHN")));
  std::vector<std::string> got;
  long long b = 0, e = 0;
  for (std::string name; in >> b >> e >> name;) got.push_back(name);
  std::vector<std::string> want_names;
  for (int32_t c : want.classes) want_names.push_back(s.labels.names[c]);
  EXPECT_EQ(got, want_names);
  // every missing word of an utterance, with its count, in its one error line; that utterance is
  // left out, the others are aligned; a summary names the words and the inputs left out; exit 1
  const fs::path wav2 = wavs()[1];
  std::ofstream(list) << wav.string() << " ab zulu résumé yankee zulu\n" << wav2.string() << " ab\n";
  Cmd m = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
              " --out " + (dir_ / "out2").string() + " --device cpu");
  EXPECT_EQ(m.rc, 1);
  EXPECT_NE(m.output.find(list.string() + ":1: 2 words are not in the dictionary " + dict.string() +
                          " (3 occurrences): 'zulu' (2), 'yankee' (1)"),
            std::string::npos)
      << m.output;
  EXPECT_NE(m.output.find("align: 2 words are not in the dictionary " + dict.string() +
                          " (3 occurrences): 'zulu' (2), 'yankee' (1) (1 input(s) left out for them: " + wav.string() +
                          ")"),
            std::string::npos)
      << m.output;
  EXPECT_NE(m.output.find("align: 1 of 2 input file(s) failed"), std::string::npos) << m.output;
  EXPECT_FALSE(fs::exists(dir_ / "out2" / (wav.stem().string() + ".PHN")));
  EXPECT_TRUE(fs::exists(dir_ / "out2" / (wav2.stem().string() + ".PHN")));
}

TEST(AlignG2p, OptionsCheckedInOneLine) {
  eval::AlignOptions o;
  EXPECT_FALSE(static_cast<bool>(eval::with_g2p(o).words.g2p));  // no --g2p: a missing word stays an error
  auto error_of = [](const eval::AlignOptions& a) {
    try {
      eval::with_g2p(a);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  o.language = "es";
  EXPECT_EQ(error_of(o), "align: --language is the language of --g2p espeak; give both");
  o.g2p = timitseg::data::G2pEngine::espeak;
  EXPECT_EQ(error_of(o), "align: --g2p espeak pronounces words missing from --dict FILE; give one");
  o.dict = "d.dict";
  o.language.clear();
  EXPECT_NE(error_of(o).find("--g2p espeak needs --language LANG"), std::string::npos);
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  o.language = "xx-nolanguage";
  EXPECT_NE(error_of(o).find("xx-nolanguage"), std::string::npos) << error_of(o);
}

TEST(AlignG2p, MissingWordsPronouncedByEspeak) {
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  eval::AlignOptions o;
  o.g2p = timitseg::data::G2pEngine::espeak;
  o.dict = "d.dict";
  o.language = "es";
  const eval::AlignOptions g = eval::with_g2p(o);
  ASSERT_TRUE(static_cast<bool>(g.words.g2p));
  data::WordOptions wo = g.words;
  wo.edge_silence = false;
  const data::Dictionary d = data::Dictionary::parse("d.dict", "sí\ts i\n", data::DictFormat::mfa);
  const data::Transcript t = data::words_to_phones({{"sí", 1}, {"gato", 1}}, d, "u", wo);
  std::vector<std::string> want = {"s", "i"};
  const std::vector<std::string> gato = data::espeak_phones("gato", "es");
  ASSERT_FALSE(gato.empty());
  want.insert(want.end(), gato.begin(), gato.end());
  EXPECT_EQ(t.phones, want);  // the dictionary's word as written, the missing one as espeak-ng says it
  EXPECT_EQ(t.word_of_phone.back(), 1);
}

// A word recurs over the inputs (and a transcript may be read more than once): the G2P is asked once per distinct word,
// from any number of threads, and its answers are the uncached ones.
TEST(AlignG2p, EachMissingWordIsPronouncedOnce) {
  std::atomic<int> calls{0};
  std::mutex mu;
  std::map<std::string, int> asked;
  const eval::G2p counting = [&](const std::string& w) {
    ++calls;
    std::lock_guard<std::mutex> lock(mu);
    ++asked[w];
    return std::vector<std::string>{w.substr(0, 1), "a", std::to_string(w.size())};
  };
  const eval::G2p g2p = eval::cached_g2p(counting);
  data::WordOptions wo;
  wo.edge_silence = false;
  wo.g2p = g2p;
  const data::Dictionary d = data::Dictionary::parse("d.dict", "si\ts i\n", data::DictFormat::mfa);
  const std::vector<std::vector<data::Word>> inputs = {
      {{"si", 1}, {"gato", 1}, {"perro", 1}, {"gato", 2}}, {{"perro", 1}, {"casa", 1}}, {{"si", 1}}};
  std::vector<data::Transcript> first(inputs.size()), second(inputs.size());
  parallel_for(static_cast<int64_t>(inputs.size()), 3, [&](int64_t i, int) {  // the check of missing words
    first[i] = data::words_to_phones(inputs[i], d, "u" + std::to_string(i), wo);
  });
  for (size_t i = 0; i < inputs.size(); ++i)  // the alignment
    second[i] = data::words_to_phones(inputs[i], d, "u" + std::to_string(i), wo);
  EXPECT_EQ(calls.load(), 3);  // gato, perro, casa
  EXPECT_EQ(asked, (std::map<std::string, int>{{"casa", 1}, {"gato", 1}, {"perro", 1}}));
  data::WordOptions plain = wo;
  plain.g2p = counting;  // the answers are the G2P's own
  for (size_t i = 0; i < inputs.size(); ++i) {
    const data::Transcript want = data::words_to_phones(inputs[i], d, "u" + std::to_string(i), plain);
    EXPECT_EQ(first[i].phones, want.phones);
    EXPECT_EQ(second[i].phones, want.phones);
  }
}

TEST_F(AlignDictionary, BinaryG2pEspeakPronouncesMissingWords) {
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  // The TIMIT-phone checkpoint cannot hold espeak's IPA: the missing word reaches the aligner
  // pronounced by espeak-ng (its IPA phone named in the error), not as a missing word.
  const fs::path wav = wavs()[0];
  const fs::path dict = dir_ / "g2p.dict", list = dir_ / "g2p.txt";
  std::ofstream(dict) << "ab\t1.0\th# m ih\n";
  std::ofstream(list) << wav.string() << " ab shoe\n";
  const Cmd a = run("align --checkpoint " + ckpt_.string() + " --words " + list.string() + " --dict " + dict.string() +
                    " --g2p espeak --language en-us --out " + (dir_ / "g2p_out").string() + " --device cpu");
  EXPECT_EQ(a.rc, 1);
  EXPECT_EQ(a.output.find("not in the dictionary"), std::string::npos) << a.output;
  const std::vector<std::string> shoe = data::espeak_phones("shoe", "en-us");
  ASSERT_FALSE(shoe.empty());
  EXPECT_NE(a.output.find("is not in the label set"), std::string::npos) << a.output;
  bool named = false;
  for (const std::string& p : shoe) named = named || a.output.find("phone '" + p + "'") != std::string::npos;
  EXPECT_TRUE(named) << a.output;
}

// The silences added around words are the checkpoint's own silence label, and TIMIT's
// closures go only to TIMIT's label sets: an espeak-style set gets `sil` and the
// dictionary's phones as written; TIMIT's 39 set keeps h#, pau and the closures.
TEST(AlignWords, SilenceAndClosuresFollowTheLabelSet) {
  const data::Dictionary d = data::Dictionary::parse("d.dict", "bed  /b eh d/\nbad  /b ae d/\n", data::DictFormat::timit);
  data::WordOptions wo;
  wo.word_silence = true;
  using V = std::vector<std::string>;
  const model::LabelSet own = model::LabelSet::make(
      data::PhoneSetSpec::parse("name: own\nphones: [b, eh, ae, d, sil]\nsilence: [sil]\n", "own"));
  const data::WordOptions w_own = eval::words_for_labels(wo, own);
  EXPECT_FALSE(w_own.closures);
  EXPECT_EQ(w_own.silence, "sil");
  const data::Transcript t = data::words_to_phones({{"bed", 1}, {"bad", 1}}, d, "u", w_own);
  EXPECT_EQ(t.phones, V({"sil", "b", "eh", "d", "sil", "b", "ae", "d", "sil"}));
  EXPECT_NO_THROW(eval::to_classes(t, own));  // every phone is the set's
  const data::WordOptions w39 = eval::words_for_labels(wo, model::LabelSet::make(39));
  EXPECT_EQ(data::words_to_phones({{"bed", 1}, {"bad", 1}}, d, "u", w39).phones,
            V({"h#", "bcl", "b", "eh", "dcl", "d", "pau", "bcl", "b", "ae", "dcl", "d", "h#"}));
  // a set without a silence label: no silences are added
  const model::LabelSet bare =
      model::LabelSet::make(data::PhoneSetSpec::parse("name: bare\nphones: [b, eh, d]\n", "bare"));
  const data::WordOptions w_bare = eval::words_for_labels(wo, bare);
  EXPECT_EQ(data::words_to_phones({{"bed", 1}}, d, "u", w_bare).phones, V({"b", "eh", "d"}));
}
