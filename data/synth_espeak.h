// The speech corpus of `timitseg synth --voice espeak --language LANG` (docs/synth.md,
// "Speech in many languages"): sentences in the language (random words from a shipped
// word list, or the lines of --text FILE) spoken by libespeak-ng (data/espeak_tts.h),
// speakers as espeak-ng voice variants with their own pitch, range, rate and a
// vocal-tract warp; labels are espeak's IPA phone names and kEspeakSilence, each
// phone's [start, end) from espeak's phoneme events; 16 kHz with a noise floor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/synth.h"

namespace timitseg::data {

// The languages with a shipped word list: cmn de en es fr it nl. A code with a region
// ("es-419", "en-us", "fr-be") uses its language's list.
const std::vector<std::string>& espeak_text_languages();
// The word list for `language`, or nullptr when none is shipped.
const std::vector<std::string>* espeak_vocabulary(const std::string& language);
// A sentence of 4-10 words of the list (seeded), commas now and then, a full stop.
std::string espeak_sentence(const std::vector<std::string>& vocabulary, uint64_t seed);

// A speaker's espeak voice and its seeded variation.
struct EspeakSpeaker {
  std::string variant;   // m1..m7 (male ids) | f1..f5 (female ids)
  int pitch = 50;        // espeakPITCH 0..100
  int range = 50;        // espeakRANGE 0..100
  int rate_wpm = 170;    // espeakRATE
  double warp = 1.0;     // resampling factor: pitch and formants x warp, durations / warp
  double gain = 1.0;
};
EspeakSpeaker espeak_speaker(const SynthSpeaker& spk, uint64_t seed);

// The texts an espeak corpus speaks: the shipped list of the language, or the lines
// of --text FILE (non-empty lines; the file must be UTF-8). Throws one line when the
// language has no list and no file is given, or the file is unreadable or empty.
struct EspeakTexts {
  std::string language;
  std::vector<std::string> vocabulary;  // shipped words (when lines is empty)
  std::vector<std::string> lines;       // --text FILE
};
EspeakTexts espeak_texts(const std::string& language, const std::string& text_file);

// One utterance at 16 kHz: samples, phones (IPA + kEspeakSilence) tiling the audio,
// words with their sample spans, the text. index / sa as synth_utterance.
SynthUtterance synth_espeak_utterance(const SynthSpeaker& spk, const EspeakTexts& texts, uint64_t seed, int index,
                                      bool sa, double noise_db);

}  // namespace timitseg::data
