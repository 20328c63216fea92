// The one place that talks to libespeak-ng (docs/synth.md, "Speech in many languages"):
// text in any espeak-ng language -> 16-bit audio at espeak's rate (22050 Hz) and each
// phone's [start, end) sample positions, from espeak's phoneme events (the events'
// own sample positions: they tile the audio), and the G2P of `align --g2p espeak`.
//
// Labels are espeak-ng's IPA phoneme names (UTF-8, e.g. "ʁ", "tʃ", "ɔ̃", "øː"), as
// espeak reports them with espeakINITIALIZE_PHONEME_IPA, through espeak_label: no stress marks, no tones
// (espeak keeps Mandarin tones on the syllable, not as phonemes). espeak's pauses
// (phonemes without an IPA name over silent audio: mean square <= 1e-4 of the
// utterance's, i.e. -40 dB) and the audio before the first phone are kEspeakSilence;
// a nameless phoneme that sounds (Spanish ';', palatalization), zero-length events and
// language-switch markers ("(en)") are dropped: the phone before covers their samples.
// A stop (plosive or affricate) after a speech phone starts at its closure, not at the
// release where espeak's event comes: its start moves back over the quiet 5 ms windows
// before the event (docs/synth.md, "A stop starts at its closure").
// A boundary between two sonorants (vowel, nasal, liquid, glide) moves to the middle of
// its spectral transition (move_sonorant_boundaries below; docs/synth.md).
// Every synthesis runs in a forked child process (espeak-ng keeps state between
// syntheses and voice loads; see espeak_speak in the .cpp).
//
// libespeak-ng is optional at build time (CMake TIMITSEG_ESPEAK): without it
// espeak_built_in() is false and every other call throws espeak_missing_message().
// espeak-ng keeps global state (voice, parameters, callback) and is not thread
// safe: all calls are serialized by one mutex.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace timitseg::data {

bool espeak_built_in();
// "... libespeak-ng is not built in ..." (what to install and rebuild).
std::string espeak_missing_message();
// espeak-ng's version ("1.51") or "" without it.
std::string espeak_version();

constexpr const char* kEspeakSilence = "sil";

// The label of one espeak-ng phoneme event's IPA name, the one normalization of the
// labels synth writes and of the G2P's phones (both come through it): espeak's trailing
// '-' (its unstressed, reducible variant of a vowel: French "ə-" in je, le, ce, "a-" in
// la, "e-") is dropped, as it is not IPA and the same vowel is spelled without it
// elsewhere ("ə" of "petit"); every other name is kept as espeak gives it. "" stays "".
std::string espeak_label(const std::string& ipa_name);

// Throws std::invalid_argument, one line naming the code and the nearest espeak-ng
// language codes, when `language` is not a voice espeak-ng can load ("es", "de",
// "cmn", "fr", "en-us", ...).
void espeak_check_language(const std::string& language);
// Every language code of the installed espeak-ng voices, sorted.
std::vector<std::string> espeak_languages();

struct EspeakRequest {
  std::string language;      // espeak-ng voice / language code: es, de, cmn, fr, en-us, ...
  std::string variant;       // "" or an espeak-ng variant (m1..m8, f1..f5): language+variant
  std::string text;          // UTF-8
  int rate_wpm = 175;        // espeakRATE (words per minute, 80..450)
  int pitch = 50;            // espeakPITCH (0..100)
  int range = 50;            // espeakRANGE (0..100)
  unsigned rand_seed = 1;    // srand() before synthesis (espeak's Klatt noise may use rand())
};

struct EspeakPhone {
  int64_t start = 0, end = 0;  // [start, end) in samples at sample_rate
  std::string label;           // IPA, or kEspeakSilence
  int word = -1;               // index into EspeakOutput::words; -1 for silence
};

struct EspeakOutput {
  int sample_rate = 0;
  std::vector<int16_t> samples;
  std::vector<EspeakPhone> phones;  // tile [0, samples.size())
  std::vector<std::string> words;   // the text's words (split at spaces, punctuation stripped)
  int language_switches = 0;        // "(xx)" markers: espeak spoke part of the text in another language
};

EspeakOutput espeak_speak(const EspeakRequest& r);

// G2P: the phones of `text` in `language`, in synth's label set (IPA as above), silences
// left out. Computed from the phoneme events of a synthesis of the text (the very path
// synth labels come from, so a word's phones are the labels synth writes for it);
// espeak_TextToPhonemes is not used: its output carries stress marks and Mandarin tone
// digits that the events do not. Thread-safe (serialized). Throws for an unknown language.
std::vector<std::string> espeak_phones(const std::string& text, const std::string& language);

// A sonorant label: a vowel, nasal, liquid or glide, by its first IPA symbol
// (a e i o u y ø œ ɛ ɔ ə ɪ ʊ ɑ æ ɐ ɜ ʏ ɒ ʌ ɤ ɯ ɨ ʉ ɵ ɘ ɞ ɶ ɚ ɝ; m n ɲ ŋ ɱ ɳ ɴ;
// l ɫ ʎ ɭ ʟ r ɾ ɹ ɻ ʀ ɺ ɽ; j w ɥ ʋ ɰ). "aʊ", "ɔ̃", "eː", "ər" are; "ʁ", "sil", "ts", "ʲ" are not.
bool is_sonorant_label(const std::string& label);
// Which of them: 'V' vowel, 'N' nasal, 'L' liquid, 'G' glide; 0 for any other label.
char sonorant_class(const std::string& label);

// Every boundary between two sonorant phones of at least 30 ms each moves to the middle of
// the spectral transition between them (data::transition_middles, data/transitions.h:
// the first 5 ms frame after the earlier phone's middle whose log-mel spectrum is nearer
// the later phone's middle spectrum than the earlier one's), so it stays between the
// two phones' middles (docs/synth.md, "Between two sonorants"). espeak's events come
// after the transition there (into a vowel, medians of 19-21 ms after it from a nasal,
// 9-24 from a liquid), where phonetic segmentation puts the boundary at its middle.
// Other boundaries, and pairs with no qualifying frame, stay. Middles are computed from
// the tiling as given, then applied. `phones` tile [0, x.size()) by their starts (ends
// are not read or written).
void move_sonorant_boundaries(const std::vector<int16_t>& x, int sample_rate, std::vector<EspeakPhone>* phones);

}  // namespace timitseg::data
