// libFuzzer target: the audio reader (data::read_audio over libsndfile) with NIST
// SPHERE and RIFF WAV headers, then the features of what it accepts. Input: the
// bytes of a .WAV file.
// Invariants: a rejected file gets an error naming it; accepted audio has a
// positive sample rate, finite samples in the int16 range (for integer PCM), and
// its features at 16 kHz have the documented frame count and are finite.
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "data/features.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("SI1.WAV", data, size);
  data::Audio audio;
  try {
    audio = data::read_audio(path);
  } catch (const std::exception& e) {
    fuzz::expect_error_names(e, path);
    return 0;
  }
  fuzz::check(audio.sample_rate > 0, "accepted audio with sample rate " + std::to_string(audio.sample_rate));
  for (float s : audio.samples) {
    fuzz::check(std::isfinite(s), "accepted audio with a non-finite sample");
    if (audio.bits > 0) fuzz::check(s >= -32768.0f && s <= 32768.0f, "integer PCM sample outside the int16 range");
  }
  if (audio.sample_rate != 16000 || audio.bits == 0) return 0;  // features of 16 kHz integer PCM only
  const data::FeatureOptions opts;
  int32_t frames = -1;
  const std::vector<float> feats = data::compute_features(audio, opts, &frames);
  fuzz::check(frames == data::num_frames_for(static_cast<int64_t>(audio.samples.size()), opts),
              "feature frame count differs from num_frames_for");
  fuzz::check(feats.size() == static_cast<size_t>(frames) * static_cast<size_t>(opts.dim()), "feature size");
  for (float v : feats) fuzz::check(std::isfinite(v), "non-finite feature of finite int16-range audio");
  return 0;
}
