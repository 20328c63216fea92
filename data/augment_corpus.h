// `timitseg augment` (docs/training.md "Augmentation and noise"): a copy of a
// TIMIT-layout corpus with augmented audio, for `timitseg prepare --timit`.
// Every file of the input is linked (symbolic link) into the output except the
// ones the command writes, so the copy costs the augmented audio only.
//  - train copies (speeds and/or noise): each TRAIN utterance (not SA, not one
//    of skip_speakers) gets extra utterances in its speaker folder: one per
//    speed factor (NAME_augspNNN: audio by speed_perturb, the .PHN/.WRD/.TXT
//    sample positions by speed_position) and one noisy copy (NAME_augnoise: the
//    same labels). The speaker folders and the speakers stay the same, so
//    prepare chooses the same dev speakers; pass them as skip_speakers so that
//    dev holds no augmented copies. Training chooses the copies it uses with
//    augment.speed and augment.noise.
//  - a noisy test copy (noisy_test): every TEST utterance's audio replaced by
//    speech + noise at the SNR under the same name, its labels linked
//    unchanged (noise does not move a boundary), TRAIN linked untouched: the
//    prepared copy has the same train split and CMVN, and noisy dev,
//    core-test and test splits, with the clean copy's sample-accurate references.
// Noise: white, pink (generated) or babble (talkers other utterances of TRAIN
// from other speakers than the utterance's, never test audio), at an SNR drawn
// uniformly in [snr_min, snr_max] per utterance. Every draw is seeded by
// (seed, the utterance id, what is drawn): the output does not depend on threads.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <vector>

#include "common/enum_names.h"

namespace timitseg::data {

// augment --noise: generated white or pink noise, or babble (other TRAIN talkers summed).
enum class NoiseKind { white, pink, babble };
TIMITSEG_ENUM_NAMES(NoiseKind, 3, {NoiseKind::white, "white"}, {NoiseKind::pink, "pink"}, {NoiseKind::babble, "babble"});

struct AugmentCorpusOptions {
  std::string in_dir, out_dir;         // TIMIT layout in; the copy (must not exist)
  std::vector<double> speeds;          // train copies at these factors (e.g. 0.9, 1.1); each in [0.5, 2], not 1
  std::optional<NoiseKind> noise;      // none, or the noise added
  double snr_min = 10, snr_max = 10;   // dB
  bool noisy_test = false;             // replace TEST's audio by noisy audio instead of adding train copies
  std::vector<std::string> skip_speakers;  // TRAIN speakers that get no copies (lower case)
  int babble_talkers = 4;              // talkers summed into babble
  uint64_t seed = 0;
  int threads = 0;                     // <= 0: all cores
};

struct AugmentCorpusSummary {
  int64_t linked = 0;      // files linked unchanged
  int64_t written = 0;     // utterances written (copies, or noisy replacements)
  int64_t rescaled = 0;    // of them, mixes scaled down to fit 16-bit audio (the SNR unchanged)
  double audio_seconds = 0;  // audio written
  double wall_seconds = 0;
};

// Throws std::invalid_argument (bad options, OUT exists) or std::runtime_error
// naming the file; OUT appears complete or not at all (written as OUT.partial, renamed).
AugmentCorpusSummary augment_corpus(const AugmentCorpusOptions& opts);

// Sample positions of a .PHN or .WRD text ("start end label" lines; .TXT's
// first line "start end words") scaled by speed_position(p, factor), the ends
// clamped to num_samples (the perturbed audio's length). Throws naming path.
std::string scale_label_text(const std::string& path, const std::string& text, double factor, int64_t num_samples);

}  // namespace timitseg::data
