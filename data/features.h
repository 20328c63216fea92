// Kaldi-compatible MFCC / log-mel filterbank features (dither 0). Defaults equal
// Kaldi's compute-mfcc-feats / compute-fbank-feats defaults; see docs/features.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"

namespace timitseg::data {

// --features: 13 cepstra (+ deltas) or log-mel bins.
enum class FeatureType { mfcc, fbank };
TIMITSEG_ENUM_NAMES(FeatureType, 2, {FeatureType::mfcc, "mfcc"}, {FeatureType::fbank, "fbank"});
// --window: each frame's analysis window.
enum class WindowType { povey, hamming, hanning, rectangular, sine, blackman };
TIMITSEG_ENUM_NAMES(WindowType, 6, {WindowType::povey, "povey"}, {WindowType::hamming, "hamming"},
                    {WindowType::hanning, "hanning"}, {WindowType::rectangular, "rectangular"},
                    {WindowType::sine, "sine"}, {WindowType::blackman, "blackman"});
// The words as --features / --window and a features JSON write them; any other text throws
// std::invalid_argument "feature option --features must be mfcc or fbank, got 'x'" (--window alike).
FeatureType parse_feature_type(const std::string& text);
WindowType parse_window_type(const std::string& text);

struct FeatureOptions {
  FeatureType type = FeatureType::mfcc;
  int sample_rate = 16000;
  double frame_length_ms = 25.0;
  double frame_shift_ms = 10.0;
  bool snip_edges = true;
  bool remove_dc_offset = true;
  double preemph_coeff = 0.97;
  WindowType window_type = WindowType::povey;
  int num_mel_bins = 23;       // mfcc default 23; fbank default 40
  double low_freq = 20.0;
  double high_freq = 0.0;      // <= 0: offset from Nyquist (Kaldi convention)
  int num_ceps = 13;
  double cepstral_lifter = 22.0;
  bool use_energy = true;      // mfcc: c0 replaced by log energy
  bool deltas = true;          // mfcc: + deltas and delta-deltas (window 2)
  bool allow_resample = false; // audio must be 16 kHz unless true

  int frame_length_samples() const;  // 400 at defaults
  int frame_shift_samples() const;   // 160 at defaults
  int dim() const;                   // 39 for mfcc+deltas, num_mel_bins for fbank
  static FeatureOptions defaults_for(FeatureType type);
};

// Mono audio as float samples in the int16 range (Kaldi convention), plus rate.
struct Audio {
  std::vector<float> samples;  // [N] mono: the mean of the file's channels
  int sample_rate = 0;
  int bits = 16;          // sample size of the file's PCM encoding (0: not integer PCM, e.g. float)
  std::string container;  // "NIST SPHERE", "RIFF WAV", ... (libsndfile major format)
  int channels = 1;       // channels in the file; samples hold their mean (down-mix) when > 1
};

// Reads NIST SPHERE or RIFF WAV (or any other format libsndfile reads) and
// down-mixes it to mono (mean of the channels). Implemented in data/audio.cpp.
// Throws std::runtime_error "PATH: problem" with the problem in words:
//  - a file cut short: "truncated audio: the header says N samples (S s), the
//    file holds M (B bytes of sample data missing)";
//  - no samples at all: "no audio samples (...)";
//  - a header libsndfile refuses: what is wrong with it ("RIFF WAV header gives
//    a sample rate of 0 Hz", "not a NIST SPHERE or RIFF WAV file", "empty file"),
//    never libsndfile's own words ("SF_INFO struct incomplete").
Audio read_audio(const std::string& path);

// Audio at `rate` Hz: resampled with libsoxr (very high quality, linear phase,
// one thread: deterministic) when its rate differs, otherwise a copy. Fills
// *what (when given) with "" when nothing changed, else e.g. "resampled from
// 44100 Hz to 16000 Hz, down-mixed 2 channels (mean)", for the one log line
// `decode` and `features` print. The second form takes the audio over (no
// copy of its samples when the rate is already `rate`).
Audio to_rate(const Audio& audio, int rate, std::string* what = nullptr);
Audio to_rate(Audio&& audio, int rate, std::string* what = nullptr);

// Features of one waveform: [num_frames][opts.dim()], not normalized.
// num_frames = 1 + (N - 400) / 160 at defaults (snip_edges), 0 if N < 400.
// threads: workers for chunks of 1024 frames (common/parallel.h; <= 0: all
// cores); the result is bitwise the same for any count.
std::vector<float> compute_features(const Audio& audio, const FeatureOptions& opts, int32_t* num_frames,
                                    int threads = 1);

// Frame t covers samples [t*shift, t*shift + length); its label is the phone
// covering the frame centre t*shift + length/2 (docs/data.md). (With
// snip_edges false the frame is centred on t*shift + shift/2, Kaldi's rule.)
int64_t frame_center_sample(int64_t t, const FeatureOptions& opts);

// ---- additions of the data layer (not part of the original contract) ----
// Number of frames for N samples (snip_edges true: 1 + (N - len) / shift, 0 if
// N < len; false: Kaldi's (N + shift/2) / shift).
int64_t num_frames_for(int64_t num_samples, const FeatureOptions& opts);
// Band-limited resampling with libsoxr (SOXR_VHQ, linear phase, one thread),
// output length round(N * to_rate / from_rate). compute_features uses it only
// when FeatureOptions::allow_resample is set; `decode` and `features` always
// (through to_rate). Throws std::invalid_argument for rates <= 0 and
// std::runtime_error with libsoxr's message if it fails.
std::vector<float> resample(const std::vector<float>& x, int from_rate, int to_rate);
// Checks the options (positive sizes, mel range inside (0, Nyquist], ...);
// throws std::invalid_argument naming the option.
void validate(const FeatureOptions& opts);
// FeatureOptions as JSON: the one codec of the project (manifest.json, the
// metadata of prepared split files and of `timitseg features` output,
// checkpoints). Keys are the field names above, in this order: type,
// sample_rate, frame_length_ms, frame_shift_ms, snip_edges, remove_dc_offset,
// preemph_coeff, window_type, num_mel_bins, low_freq, high_freq, num_ceps,
// cepstral_lifter, use_energy, deltas, allow_resample. with_info appends the
// informational keys "dither" (always 0) and "dim" (= opts.dim()), as
// manifest.json and `features` output record them.
nlohmann::ordered_json feature_options_to_json(const FeatureOptions& opts, bool with_info = false);
// Back from a JSON object. Starts from defaults_for(type) (mfcc when there is
// no "type"), so {"type": "fbank"} means Kaldi's fbank defaults; "dither" must
// be 0 and "dim" must match the other options when present. Throws
// std::runtime_error "feature options: key 'K': ..." for an unknown or
// ill-typed key. Does not validate() the values.
FeatureOptions feature_options_from_json(const nlohmann::json& j);

}  // namespace timitseg::data
