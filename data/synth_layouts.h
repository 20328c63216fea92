// The folder layouts `timitseg synth --format` writes (docs/synth.md, "Layouts"):
// timit (TRAIN/TEST/DRn/SPEAKER/UTT.WAV + .PHN, as the LDC discs; SA1 included),
// textgrid (MFA: SPEAKER/UTT.wav + UTT.TextGrid with `words` and `phones` tiers),
// buckeye (SPEAKER/UTT.wav + .phones + .words, Buckeye's header up to `#`, END
// times, the color column), kaldi (train/dev/test data dirs: wav.scp, segments,
// utt2spk, spk2utt, text, phones.ctm; audio under wav/) and manifest
// (manifest.jsonl with inline segments; audio under audio/). Every layout but timit
// leaves SA1 out (prepare excludes it from TIMIT) and says each speaker's split
// (splits.txt for textgrid and buckeye: lines "SPEAKER train|dev|test"); librispeech
// (--voice espeak: SUBSET/SPEAKER/1/SPEAKER-1-UTT.flac with SPEAKER-1.trans.txt, the
// words upper case, no times; SUBSET train-clean, dev-clean or test-clean). Times are
// seconds with 7 decimals: exact for 16 kHz sample positions. The espeak voice adds
// phone_set.yaml (the corpus's phones, silence; data/phone_set.h's format).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "data/synth.h"

namespace timitseg::data {

// One utterance to write: its speaker (index into the speakers) and TIMIT-style name.
struct SynthJob {
  size_t speaker = 0;
  int index = 0;     // -1: SA1
  std::string utt;   // lower case: "sa1", "si1000", "sx3"
};

// The split a synth speaker has outside the TIMIT layout: train (TRAIN), dev (a dev-list
// speaker), test (the other TEST speakers: the core test and the rest).
std::string synth_split(const SynthSpeaker& spk);

class SynthLayoutWriter {
 public:
  // root: the staging folder written into; final_root: where it will be renamed to
  // (Kaldi's wav.scp holds absolute paths of the final place).
  SynthLayoutWriter(const SynthOptions& o, std::filesystem::path root, std::filesystem::path final_root,
                    const std::vector<SynthSpeaker>& speakers, const std::vector<SynthJob>& jobs);
  ~SynthLayoutWriter();
  // Whether the layout holds this job (SA1 only in timit).
  bool wants(const SynthJob& j) const;
  // Writes job j's files; thread-safe for distinct jobs.
  void write(size_t j, const SynthUtterance& u);
  // The index files (kaldi, manifest, splits.txt) and phone_set.yaml.
  void finish();

 private:
  struct Rows;
  void write_timit(const SynthJob& job, const SynthUtterance& u);
  void write_librispeech(size_t j, const SynthUtterance& u);
  std::string stem(const SynthJob& job) const;  // "mabc0_si1000"
  const SynthOptions& o_;
  std::filesystem::path root_, final_root_;
  const std::vector<SynthSpeaker>& speakers_;
  const std::vector<SynthJob>& jobs_;
  std::unique_ptr<Rows> rows_;
  std::mutex mu_;
  std::set<std::string> labels_;
};

// Writes 16 kHz mono 16-bit audio (RIFF WAV, or NIST SPHERE when sphere).
void write_synth_audio(const std::string& path, const std::vector<int16_t>& samples, bool sphere);

// The phone-set YAML of an espeak corpus: its phones (sorted, the silence label last),
// silence, Buckeye's SIL mapped to it, broad classes vowels / consonants / silence.
std::string espeak_phone_set_yaml(const std::string& language, const std::set<std::string>& labels);

}  // namespace timitseg::data
