// Data augmentation (docs/training.md "Augmentation and noise"): the
// waveform-level transforms (speed perturbation with libsoxr, additive white,
// pink or babble noise at a chosen SNR), the on-the-fly spectral masks of a
// training batch's features, and the per-utterance CMVN. Every draw comes from
// a std::mt19937_64 seeded by the caller, turned into numbers by the integer
// and floating-point operations below (never a std::*_distribution, whose
// results differ between standard libraries): the same seed gives the same
// bits on every platform. Implemented in data/augment.cpp; the corpus copies
// of `timitseg augment`: data/augment_corpus.h.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace timitseg::data {

// ---- speed perturbation ----
// The waveform x played `factor` times faster (Kaldi's and sox's "speed"):
// its samples resampled by libsoxr (data/features.h resample) from
// round(1000 * factor) to 1000, so the output has round(N / factor) samples
// and pitch and tempo both change. factor in [0.5, 2]; 1 returns a copy.
std::vector<float> speed_perturb(const std::vector<float>& x, double factor);
// Where sample position p of the input lands in speed_perturb's output:
// round(p / factor). Labels (.PHN, .WRD sample positions) scale with it, so
// frame t of the perturbed audio carries the label of the phone around
// sample t * shift + length / 2 of the perturbed audio (the frames stay aligned).
int64_t speed_position(int64_t p, double factor);

// ---- additive noise ----
// The mean square of x (0 for an empty x).
double mean_power(const std::vector<float>& x);
// n samples of Gaussian white noise of unit variance (Box-Muller on the engine's 53-bit uniforms).
std::vector<float> white_noise(size_t n, std::mt19937_64& rng);
// n samples of pink (1/f) noise: white noise through Paul Kellet's refined
// 7-pole filter (-3 dB per octave within +-0.5 dB from 10 Hz to the Nyquist
// frequency at 16 kHz), scaled to unit variance.
std::vector<float> pink_noise(size_t n, std::mt19937_64& rng);
// n samples of babble: the sum of the talkers (other utterances' waveforms),
// each scaled to unit power, started at a random offset and repeated
// (cyclically) to cover n samples; then scaled to unit power. Throws
// std::invalid_argument when talkers is empty or one of them is silent.
std::vector<float> babble_noise(size_t n, const std::vector<std::vector<float>>& talkers, std::mt19937_64& rng);
// speech + g * noise with g chosen so that
// 10 log10(mean_power(speech) / mean_power(g * noise)) = snr_db exactly (the
// powers over the whole utterance, silences included); noise must have at
// least speech.size() samples (the first ones are used) and not be silent.
std::vector<float> mix_at_snr(const std::vector<float>& speech, const std::vector<float>& noise, double snr_db);
// The SNR measured: 10 log10(mean_power(speech) / mean_power(noisy - speech)).
double measured_snr_db(const std::vector<float>& speech, const std::vector<float>& noisy);

// ---- spectral masks (SpecAugment's time and frequency masks) ----
struct SpecMaskOptions {
  int time_masks = 0;  // masks of whole frames per utterance (0 = none)
  int time_width = 0;  // each one's width: uniform in [0, time_width] frames (and at most T)
  int freq_masks = 0;  // masks of feature dimensions per utterance (0 = none)
  int freq_width = 0;  // each one's width: uniform in [0, freq_width] dimensions (and at most D)
  bool enabled() const { return (time_masks > 0 && time_width > 0) || (freq_masks > 0 && freq_width > 0); }
};
// Sets the masked entries of feats [T][D] to 0 (the mean after CMVN): the
// freq_masks bands first, then the time_masks spans, each width then start
// drawn from std::mt19937_64(seed). Only the first T frames are touched.
void spec_mask(float* feats /*[T][D]*/, int64_t T, int64_t D, const SpecMaskOptions& opts, uint64_t seed);
// The seed of one utterance's masks in one epoch of a run: a hash (SplitMix64)
// of the run's seed, the epoch and the utterance's index in the train split.
// It depends on nothing else (batch order, ranks, threads, resume), so a run
// resumed from a checkpoint draws the same masks as one that never stopped.
uint64_t spec_mask_seed(uint64_t run_seed, int64_t epoch, int64_t utterance);

// ---- feature normalization ----
// Per-utterance CMVN (Kaldi's apply-cmvn with utterance statistics): each
// dimension of feats [T][D] minus its mean over the T frames, divided by the
// square root of its population variance over them (floored at var_floor).
void utterance_cmvn(float* feats /*[T][D]*/, int64_t T, int64_t D, double var_floor);

// ---- marks of augmented utterances ----
// The utterance-name suffixes `timitseg augment` gives its copies:
// "_augsp090" for speed 0.9 ("_augsp" + round(100 * factor), 3 digits) and
// "_augnoise" for the noisy copy. augmentation_of(id) gives speed, noise
// or none (an original utterance).
enum class Augmentation { none, speed, noise };
std::string speed_suffix(double factor);
inline constexpr const char* kNoiseSuffix = "_augnoise";
Augmentation augmentation_of(const std::string& utterance_id);

}  // namespace timitseg::data
