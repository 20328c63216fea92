// One espeak corpus written in every layout of `synth --format` and read back by the
// corpus readers (data/corpus_formats.h): every utterance of the timit layout (SA1
// aside) is found in each other layout with the same audio samples and the same
// labels at the same sample positions (silence as each layout spells it, resolved
// through the corpus's phone_set.yaml), and the speaker's split is the same.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "data/corpus_formats.h"
#include "data/espeak_tts.h"
#include "data/features.h"
#include "data/phone_set.h"
#include "data/synth.h"
#include "data/synth_layouts.h"
#include "util.h"

using namespace timitseg::data;
namespace fs = std::filesystem;

namespace {

struct Utt {
  std::vector<float> samples;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> labels;  // [start, end) samples, phone
  std::string split;
};

std::string last_part(const std::string& id) { return id.substr(id.find_last_of('/') + 1); }

// The phone a corpus label stands for in the phone set ("" and SIL: sil).
std::string phone_of(const PhoneSetSpec& ps, const std::string& label) {
  if (label.empty()) return ps.silence.at(0);
  const LabelResolution r = ps.resolve(label);
  EXPECT_EQ(r.kind, LabelKind::phone) << "label '" << label << "' is no phone of the set";
  return r.index >= 0 ? ps.phones.at(static_cast<size_t>(r.index)) : label;
}

std::map<std::string, Utt> read_layout(const fs::path& root, CorpusFormat f, const PhoneSetSpec& ps) {
  std::vector<Problem> problems;
  ReaderOptions ro;
  std::map<std::string, Utt> out;
  for (CorpusEntry& e : scan_corpus(root.string(), f, ro, &problems)) {
    read_labels(e, ro);
    for (const auto& p : e.problems) ADD_FAILURE() << p.file << ":" << p.line << ": " << p.message;
    Utt u;
    u.samples = read_audio(e.audio_path).samples;
    u.split = e.split ? timitseg::common::to_string(*e.split) : "";
    for (const auto& iv : e.intervals)
      u.labels.push_back({{std::llround(iv.start * 16000.0), std::llround(iv.end * 16000.0)}, phone_of(ps, iv.label)});
    out[last_part(e.id)] = std::move(u);
  }
  return out;
}

}  // namespace

TEST(SynthLayouts, EveryLayoutReadsBackToTheSameAudioAndLabels) {
  if (!espeak_built_in()) GTEST_SKIP() << "libespeak-ng is not built in: skipped";
  testutil::TempDir d;
  for (const std::string& layout : timitseg::common::enum_words<CorpusFormat>()) {
    SynthOptions o;
    o.out_dir = d.str(layout);
    o.voice = SynthVoice::espeak;
    o.language = "de";
    o.layout = timitseg::common::enum_value<CorpusFormat>(layout, "layout");
    o.format = SynthAudio::riff;
    o.lower_case = true;
    o.speakers = 5;
    o.utterances_per_speaker = 2;
    o.seed = 3;
    o.noise_db = kFliteNoiseDb;
    synth_corpus(o);
  }
  const PhoneSetSpec ps = PhoneSetSpec::load(d.str("timit/phone_set.yaml"));
  // the reference: the timit layout's .phn files, SA1 left out
  std::map<std::string, Utt> ref;
  const auto speakers = synth_speakers(5, 3);
  for (const auto& spk : speakers)
    for (const auto& e : fs::recursive_directory_iterator(d.path / "timit"))
      if (e.path().extension() == ".phn" && e.path().parent_path().filename() == spk.id &&
          e.path().stem() != "sa1") {
        Utt u;
        u.samples = read_audio(fs::path(e.path()).replace_extension(".wav").string()).samples;
        u.split = synth_split(spk);
        std::istringstream in(timitseg::read_file(e.path().string()));
        int64_t a, b;
        std::string l;
        while (in >> a >> b >> l) u.labels.push_back({{a, b}, phone_of(ps, l)});
        ref[spk.id + "_" + e.path().stem().string()] = std::move(u);
      }
  ASSERT_EQ(ref.size(), 10u);
  for (const auto& [name, f] : std::vector<std::pair<std::string, CorpusFormat>>{
           {"textgrid", CorpusFormat::textgrid}, {"buckeye", CorpusFormat::buckeye},
           {"kaldi", CorpusFormat::kaldi}, {"manifest", CorpusFormat::manifest}}) {
    EXPECT_EQ(detect_corpus_format(d.str(name)), f) << name;
    EXPECT_EQ(PhoneSetSpec::load(d.str(name + "/phone_set.yaml")).phones, ps.phones) << name;
    const auto got = read_layout(d.path / name, f, ps);
    ASSERT_EQ(got.size(), ref.size()) << name;
    for (const auto& [id, r] : ref) {
      ASSERT_TRUE(got.count(id)) << name << " lacks " << id;
      const Utt& g = got.at(id);
      EXPECT_EQ(g.samples, r.samples) << name << " " << id;
      EXPECT_EQ(g.labels, r.labels) << name << " " << id;
      if (!g.split.empty()) EXPECT_EQ(g.split, r.split) << name << " " << id;
    }
    if (name == "textgrid" || name == "buckeye") {
      const auto splits = read_split_file(d.str(name + "/splits.txt"));
      EXPECT_EQ(splits.size(), speakers.size());
      for (const auto& [spk, split] : splits)
        for (const auto& s : speakers)
          if (s.id == spk) EXPECT_EQ(split, synth_split(s));
    }
  }
}
