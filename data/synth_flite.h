// The speech corpus of `timitseg synth --voice flite` (docs/synth.md, "The speech
// corpus"): random sentences spoken by libflite's voices awb, rms and slt
// (data/flite_tts.h), flite's own phone boundaries mapped to TIMIT's 61 phones,
// stops and affricates split into closure + release at the burst found in the audio.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/synth.h"

namespace timitseg::data {

// The phones flite's cmulex / usenglish front end emits for English text
// (measured over the vocabulary, docs/synth.md): the map covers exactly these.
const std::vector<std::string>& flite_emitted_phones();

// flite phone -> TIMIT-61 label(s), 1 or 2 (closure + release for stops and affricates).
// stressed: the syllable's lexical stress; edge: the first or last segment of the utterance.
// Throws std::invalid_argument for a phone outside flite_emitted_phones().
std::vector<std::string> flite_to_timit(const std::string& phone, bool stressed, bool edge);

// The split of a stop / affricate segment [start, end) of x (samples) into closure
// [start, split) and release [split, end): the onset of the last strong energy rise
// (docs/synth.md: 5 ms log-energy windows, 1 ms steps, rise >= kBurstRiseDb);
// `fallback` (flite's last HMM state start) when there is none. *found tells which.
// Both parts keep at least `min_part` samples; requires end - start >= 2 * min_part.
constexpr double kBurstRiseDb = 9.0;
int64_t release_onset(const std::vector<int16_t>& x, int64_t start, int64_t end, int64_t fallback, int64_t min_part,
                      bool* found = nullptr);

// A random sentence of 4-10 words from the embedded vocabulary and grammar (seeded).
std::string flite_sentence(uint64_t seed);
// The embedded vocabulary (every word the sentences may use).
const std::vector<std::string>& flite_vocabulary();

// A speaker's flite voice and its seeded variation (docs/synth.md).
struct FliteSpeaker {
  std::string voice;           // awb | rms (male ids) | slt (female ids)
  double stretch = 1.0;        // flite duration_stretch
  double f0_scale = 1.0;       // x the voice's own int_f0_target_mean
  double f0_range = 1.0;       // x the voice's own int_f0_target_stddev
  double warp = 1.0;           // resampling factor: pitch and formants x warp, durations / warp
  double gain = 1.0;
};
FliteSpeaker flite_speaker(const SynthSpeaker& spk, uint64_t seed);

// One utterance (16 kHz int16 + .PHN entries); index / sa as synth_utterance.
SynthUtterance synth_flite_utterance(const SynthSpeaker& spk, uint64_t seed, int index, bool sa, double noise_db);

}  // namespace timitseg::data
