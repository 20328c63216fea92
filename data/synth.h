// A synthetic TIMIT-layout corpus (`timitseg synth`, docs/synth.md): per-phone
// source-filter synthesis (voiced / unvoiced / silence / closure + burst; F1-F3
// targets and bandwidths per phone, interpolated across boundaries), TIMIT-like
// per-phone durations, speaker variation (F0, vocal-tract length, per-formant and
// per-vowel offsets, glottal tilt, breathiness, rate, loudness), per-token
// variability (formant jitter, target undershoot, voicing, amplitude, tilt, F0
// jitter / shimmer) and coloured background noise at a per-utterance SNR.
// Deterministic per seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "data/corpus_format.h"
#include "data/split_name.h"
#include "data/synth_utterance.h"

namespace timitseg::data {

// synth --audio: the timit layout's audio files.
enum class SynthAudio { sphere, riff };
TIMITSEG_ENUM_NAMES(SynthAudio, 2, {SynthAudio::sphere, "sphere"}, {SynthAudio::riff, "riff"});
// synth --voice: who speaks.
enum class SynthVoice { tones, flite, espeak };
TIMITSEG_ENUM_NAMES(SynthVoice, 3, {SynthVoice::tones, "tones"}, {SynthVoice::flite, "flite"},
                    {SynthVoice::espeak, "espeak"});

struct SynthOptions {
  std::string out_dir;
  int speakers = 16;               // TRAIN gets the rest after TEST's share (>= 3 TEST speakers)
  int utterances_per_speaker = 6;  // SI/SX sentences per speaker, plus one SA1 (excluded by prepare)
  uint64_t seed = 1;
  bool lower_case = false;         // file and folder names in lower case (LDC discs: upper case)
  SynthAudio format = SynthAudio::sphere;  // the timit layout's audio: sphere (NIST SPHERE, as on the discs) | riff (RIFF WAV)
  CorpusFormat layout = CorpusFormat::timit;  // the layout written (data/synth_layouts.h)
  SynthVoice voice = SynthVoice::tones;  // tones (the source-filter synthesizer) | flite (libflite speech, data/synth_flite.h)
                                   // | espeak (libespeak-ng speech in any language, data/synth_espeak.h)
  std::string language;            // --voice espeak: the espeak-ng language code (es, de, cmn, fr, en-us, ...)
  std::string text_file;           // --voice espeak: sentences, one per line (default: the shipped word list)
  int threads = 0;                 // worker threads (0: all cores); the corpus does not depend on it
  double noise_db = -23.0;         // background noise level relative to the speech RMS (dB): the centre of
                                   // the per-utterance range noise_db +- 7 dB (default: SNR 16-30 dB;
                                   // the CLI's default for --voice flite is kFliteNoiseDb)
};

constexpr double kFliteNoiseDb = -30.0;  // `synth --voice flite` without --noise-db: SNR 23-37 dB

struct SynthSummary {
  int train_speakers = 0, test_speakers = 0, dev_speakers = 0, core_test_speakers = 0;
  int64_t files = 0;  // utterances written (audio files, each with its labels)
  double seconds = 0.0;  // audio written, SA included
};

// The speaker of a synth corpus: TIMIT-style id ("mabc0"), sex, voice.
struct SynthSpeaker {
  std::string id;      // lower case
  SplitName part = SplitName::train;  // train | test
  int dialect = 1;     // 1..8
  double f0 = 120.0;   // mean F0 (Hz)
  double vtl = 1.0;    // formant scale (1 / relative vocal-tract length)
  double rate = 1.0;   // duration scale
  double gain = 1.0;
  // voice quality and accent (drawn from a generator seeded by the corpus seed and the id,
  // so they do not change the speaker-id draws above)
  double tilt_bw = 100.0;               // glottal low-pass bandwidth (Hz): lower = steeper spectral tilt
  double breathy = 0.1;                 // aspiration noise mixed into voicing (relative to aspiration level)
  double fscale[3] = {1.0, 1.0, 1.0};   // per-formant scale on top of vtl (non-uniform vocal tract)
  uint64_t accent = 0;                  // seeds per-speaker, per-phone formant offsets (0: none)
};

std::vector<SynthSpeaker> synth_speakers(int count, uint64_t seed);
SynthUtterance synth_utterance(const SynthSpeaker& spk, uint64_t seed, int index, bool sa, double noise_db);
SynthSummary synth_corpus(const SynthOptions& opts);

}  // namespace timitseg::data
