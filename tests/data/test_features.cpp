// Features against reference vectors of torchaudio.compliance.kaldi (an
// independent Kaldi-compatible implementation; fixtures/gen_kaldi_reference.py),
// plus closed-form checks (frame counts, pure tone, digital silence).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/features.h"
#include "util.h"

using namespace timitseg::data;

namespace {
nlohmann::json fixtures() {
  const std::string path = std::string(TIMITSEG_SOURCE_DIR) + "/tests/data/fixtures/kaldi_reference.json";
  return nlohmann::json::parse(timitseg::read_file(path));
}
}  // namespace

// Tolerance: |ours - ref| <= 1e-4 * max(|ref|, 1) per value, i.e. 1e-4 relative
// for values of magnitude >= 1 and 1e-4 absolute below (cepstra near zero).
TEST(Features, MatchTorchaudioKaldiTo1e4Relative) {
  const auto fx = fixtures();
  ASSERT_GE(fx["cases"].size(), 7u);
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    FeatureOptions o = feature_options_from_json(c["options"]);
    Audio a;
    a.sample_rate = 16000;
    for (int v : c["signal"]) a.samples.push_back(static_cast<float>(v));
    int32_t T = -1;
    auto x = compute_features(a, o, &T);
    ASSERT_EQ(T, c["frames"].get<int>());
    ASSERT_EQ(o.dim(), c["dim"].get<int>());
    const auto ref = c["features"].get<std::vector<double>>();
    ASSERT_EQ(x.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double err = std::abs(x[i] - ref[i]) / std::max(std::abs(ref[i]), 1.0);
      worst = std::max(worst, err);
      ASSERT_LE(err, 1e-4) << "value " << i << " (frame " << i / o.dim() << ", dim " << i % o.dim() << "): ours "
                           << x[i] << " reference " << ref[i];
    }
    std::printf("[ %s ] worst scaled error %.3g\n", c["name"].get<std::string>().c_str(), worst);
  }
}

TEST(Features, FrameCountsAndDims) {
  FeatureOptions o;
  EXPECT_EQ(o.frame_length_samples(), 400);
  EXPECT_EQ(o.frame_shift_samples(), 160);
  EXPECT_EQ(o.dim(), 39);
  EXPECT_EQ(FeatureOptions::defaults_for(FeatureType::fbank).dim(), 40);
  EXPECT_THROW(parse_feature_type("plp"), std::invalid_argument);
  EXPECT_EQ(parse_feature_type("fbank"), FeatureType::fbank);
  for (int64_t n : {0, 399, 400, 559, 560, 16000, 48123}) {
    const int64_t want = n < 400 ? 0 : 1 + (n - 400) / 160;
    EXPECT_EQ(num_frames_for(n, o), want) << n;
    Audio a;
    a.sample_rate = 16000;
    a.samples.assign(static_cast<size_t>(n), 100.0f);
    int32_t T = -1;
    auto x = compute_features(a, o, &T);
    EXPECT_EQ(T, want);
    EXPECT_EQ(x.size(), static_cast<size_t>(want) * 39);
  }
  EXPECT_EQ(frame_center_sample(0, o), 200);
  EXPECT_EQ(frame_center_sample(3, o), 680);
}

TEST(Features, PureToneAndSilenceClosedForms) {
  // fbank of a 1 kHz tone: the largest mel bin is the one whose centre is nearest
  // 1 kHz on the mel scale (Kaldi mel: 1127 ln(1 + f/700); 40 bins in [20, 8000]).
  FeatureOptions o = FeatureOptions::defaults_for(FeatureType::fbank);
  Audio a;
  a.sample_rate = 16000;
  for (int i = 0; i < 4000; ++i) a.samples.push_back(static_cast<float>(10000.0 * std::sin(2 * M_PI * 1000.0 * i / 16000.0)));
  int32_t T = 0;
  auto x = compute_features(a, o, &T);
  auto mel = [](double f) { return 1127.0 * std::log(1.0 + f / 700.0); };
  const double lo = mel(20), hi = mel(8000), d = (hi - lo) / 41;
  int best_bin = 0;
  for (int b = 0; b < 40; ++b)
    if (std::abs(lo + (b + 1) * d - mel(1000)) < std::abs(lo + (best_bin + 1) * d - mel(1000))) best_bin = b;
  for (int t = 0; t < T; ++t) {
    int arg = 0;
    for (int b = 1; b < 40; ++b)
      if (x[t * 40 + b] > x[t * 40 + arg]) arg = b;
    EXPECT_EQ(arg, best_bin) << "frame " << t;
  }
  // MFCC c0 (log energy, raw: after DC removal, before pre-emphasis / window) of a
  // tone: sum over 400 samples of (A sin)^2 minus the frame mean's contribution.
  FeatureOptions m;
  m.deltas = false;
  auto y = compute_features(a, m, &T);
  for (int t = 0; t < T; ++t) {
    double mean = 0, e = 0;
    for (int i = 0; i < 400; ++i) mean += a.samples[t * 160 + i];
    mean /= 400;
    for (int i = 0; i < 400; ++i) e += (a.samples[t * 160 + i] - mean) * (a.samples[t * 160 + i] - mean);
    EXPECT_NEAR(y[t * 13], std::log(e), 1e-4 * std::log(e));
  }
  // digital silence: every log is floored at log(FLT_EPSILON); cepstra 1.. are 0
  Audio z;
  z.sample_rate = 16000;
  z.samples.assign(1000, 0.0f);
  auto s = compute_features(z, m, &T);
  const double floor = std::log(static_cast<double>(std::numeric_limits<float>::epsilon()));
  for (int t = 0; t < T; ++t) {
    EXPECT_NEAR(s[t * 13], floor, 1e-5);
    for (int k = 1; k < 13; ++k) EXPECT_NEAR(s[t * 13 + k], 0.0, 1e-5);
  }
  // the same constant (DC) signal: DC removal makes it silence too
  z.samples.assign(1000, 1234.0f);
  auto dc = compute_features(z, m, &T);
  for (int t = 0; t < T; ++t) EXPECT_NEAR(dc[t * 13], floor, 1e-5);
}

TEST(Features, DeltasOfALinearRampAreConstant) {
  // deltas of features that grow linearly in t are the slope (away from the
  // edges, where frames are replicated), delta-deltas are 0.
  // Built from a signal whose log energy grows linearly: amplitude exp(k t).
  FeatureOptions o;
  Audio a;
  a.sample_rate = 16000;
  const int n = 400 + 160 * 30;
  for (int i = 0; i < n; ++i)
    a.samples.push_back(static_cast<float>(100.0 * std::exp(0.5 * i / 160.0) * (i % 2 ? 1 : -1)));
  int32_t T = 0;
  auto x = compute_features(a, o, &T);
  ASSERT_EQ(T, 31);
  for (int t = 4; t < T - 4; ++t) {
    EXPECT_NEAR(x[t * 39 + 13], 1.0, 1e-6);  // d/dt log(e^{2*0.5 t}) = 1 per frame
    EXPECT_NEAR(x[t * 39 + 26], 0.0, 1e-6);
  }
}

// compute_features in chunks of 1024 frames on several workers (long
// recordings): bitwise the one-worker result for every thread count, MFCC
// with deltas (their window crosses the chunks' edges) and fbank; and each
// row the features of that frame alone: a prefix of the audio gives the same
// rows (deltas: away from the prefix's last frames, which they replicate).
TEST(Features, ThreadsGiveBitwiseTheSameFeaturesAndRowsAreLocal) {
  Audio a;
  a.sample_rate = 16000;
  const int frames = 2 * 1024 + 700;  // three chunks
  uint64_t x = 88172645463325252ull;  // xorshift noise plus a tone: every row differs
  for (int i = 0; i < 400 + 160 * (frames - 1); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    a.samples.push_back(static_cast<float>(int64_t(x % 2001) - 1000) + 3000.0f * std::sin(0.01f * i));
  }
  for (const char* type : {"mfcc", "fbank"}) {
    SCOPED_TRACE(type);
    const FeatureOptions o = FeatureOptions::defaults_for(parse_feature_type(type));
    int32_t T1 = 0;
    const auto one = compute_features(a, o, &T1, 1);
    ASSERT_EQ(T1, frames);
    for (int threads : {2, 3, 0}) {
      int32_t T = 0;
      EXPECT_EQ(compute_features(a, o, &T, threads), one) << threads << " threads";
      EXPECT_EQ(T, T1);
    }
    Audio prefix = a;
    const int kept = 1500;  // across the first chunk's edge
    prefix.samples.resize(400 + 160 * (kept - 1));
    int32_t Tp = 0;
    const auto part = compute_features(prefix, o, &Tp, 4);
    ASSERT_EQ(Tp, kept);
    const int D = o.dim(), margin = o.deltas ? 4 : 0;
    for (int t = 0; t < kept - margin; ++t)
      for (int k = 0; k < D; ++k) ASSERT_EQ(part[t * D + k], one[t * D + k]) << "row " << t << " dim " << k;
  }
}

TEST(Features, OptionsJsonRoundTripAndValidation) {
  FeatureOptions o = FeatureOptions::defaults_for(FeatureType::fbank);
  o.num_mel_bins = 80;
  o.snip_edges = false;
  o.window_type = WindowType::hamming;
  o.high_freq = -400.5;
  FeatureOptions b = feature_options_from_json(feature_options_to_json(o));
  EXPECT_EQ(feature_options_to_json(b).dump(), feature_options_to_json(o).dump());
  b = feature_options_from_json(feature_options_to_json(o, true));
  EXPECT_EQ(feature_options_to_json(b).dump(), feature_options_to_json(o).dump());
  EXPECT_THROW(feature_options_from_json(nlohmann::json::parse("{\"bogus\": 1}")), std::runtime_error);
  EXPECT_THROW(feature_options_from_json(nlohmann::json::parse("{\"num_mel_bins\": \"x\"}")), std::runtime_error);
  FeatureOptions bad;
  bad.num_ceps = 30;
  EXPECT_THROW(validate(bad), std::invalid_argument);
  EXPECT_THROW(parse_window_type("kaiser"), std::invalid_argument);
  EXPECT_THROW(feature_options_from_json(nlohmann::json::parse("{\"window_type\": \"kaiser\"}")), std::runtime_error);
  bad = FeatureOptions();
  bad.high_freq = 9000;
  EXPECT_THROW(validate(bad), std::invalid_argument);
}

TEST(Audio, SphereWrittenByHandAndRiffReadTheSame) {
  testutil::TempDir d;
  auto sig = testutil::test_signal(3000);
  // NIST SPHERE header exactly as on the TIMIT discs (1024 bytes, little-endian "01").
  std::string hdr = "NIST_1A\n   1024\ndatabase_id -s5 TIMIT\nchannel_count -i 1\nsample_count -i 3000\n"
                    "sample_rate -i 16000\nsample_min -i -4000\nsample_max -i 4000\nsample_n_bytes -i 2\n"
                    "sample_byte_format -s2 01\nsample_sig_bits -i 16\nend_head\n";
  hdr.resize(1024, ' ');
  std::string body(reinterpret_cast<const char*>(sig.data()), sig.size() * 2);  // x86: little-endian
  testutil::write_text(d.str("SA1.WAV"), hdr + body);
  testutil::write_audio(d.str("sa1.wav"), sig, 16000, SF_FORMAT_WAV);
  for (const std::string f : {"SA1.WAV", "sa1.wav"}) {
    Audio a = read_audio(d.str(f));
    EXPECT_EQ(a.sample_rate, 16000);
    EXPECT_EQ(a.bits, 16);
    ASSERT_EQ(a.samples.size(), sig.size());
    for (size_t i = 0; i < sig.size(); ++i) ASSERT_EQ(a.samples[i], static_cast<float>(sig[i])) << f << " " << i;
  }
  EXPECT_EQ(read_audio(d.str("SA1.WAV")).container, "NIST SPHERE");
  EXPECT_EQ(read_audio(d.str("sa1.wav")).container, "RIFF WAV");
}

TEST(Audio, ErrorsNameTheFile) {
  testutil::TempDir d;
  try {
    read_audio(d.str("nope.wav"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.wav"), std::string::npos);
  }
  // several channels are read and down-mixed (prepare refuses them without
  // --allow-resample: tests/data/test_bad_inputs.cpp)
  std::vector<short> st(2000, 0);
  testutil::write_audio(d.str("stereo.wav"), st, 16000, SF_FORMAT_WAV, 2);
  EXPECT_EQ(read_audio(d.str("stereo.wav")).channels, 2);
  testutil::write_text(d.str("junk.wav"), "this is not audio at all, not even close................");
  EXPECT_THROW(read_audio(d.str("junk.wav")), std::runtime_error);
}

TEST(Audio, StereoIsTheMeanAndToRateTakingTheAudioOverEqualsTheCopy) {
  // Mono files are read straight into the samples, several channels through a
  // second buffer: both give int16 values exactly (stereo: the mean).
  testutil::TempDir d;
  std::vector<short> st(2 * 3001);  // [N][2]
  for (size_t i = 0; i < st.size(); ++i) st[i] = static_cast<short>((i * 7919) % 20001) - 10000;
  testutil::write_audio(d.str("stereo.wav"), st, 16000, SF_FORMAT_WAV, 2);
  const Audio a = read_audio(d.str("stereo.wav"));
  ASSERT_EQ(a.samples.size(), 3001u);
  for (size_t i = 0; i < a.samples.size(); ++i)
    ASSERT_EQ(a.samples[i], static_cast<float>((st[2 * i] + st[2 * i + 1]) / 2.0)) << i;
  for (const int rate : {16000, 8000}) {
    std::string w1, w2;
    const Audio copied = to_rate(a, rate, &w1);
    Audio taken_from = a;
    const Audio taken = to_rate(std::move(taken_from), rate, &w2);
    EXPECT_EQ(taken.samples, copied.samples) << rate;
    EXPECT_EQ(taken.sample_rate, rate);
    EXPECT_EQ(w2, w1);
    EXPECT_EQ(w1, rate == 16000 ? "down-mixed 2 channels (mean)"
                                : "resampled from 16000 Hz to 8000 Hz, down-mixed 2 channels (mean)");
    if (rate == 16000) EXPECT_EQ(taken.samples, a.samples);
    else EXPECT_EQ(taken.samples.size(), 1501u);
  }
}

TEST(Audio, ResampleOnlyWhenAllowed) {
  // 8 kHz tone at 500 Hz: rejected by default; resampled, its spectrum peaks at 500 Hz.
  Audio a;
  a.sample_rate = 8000;
  for (int i = 0; i < 8000; ++i) a.samples.push_back(static_cast<float>(8000.0 * std::sin(2 * M_PI * 500.0 * i / 8000.0)));
  FeatureOptions o;
  int32_t T = 0;
  try {
    compute_features(a, o, &T);
    FAIL() << "8 kHz audio accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "audio sample rate 8000 Hz, features expect 16000 Hz (pass --allow-resample to resample it)");
  }
  auto r = resample(a.samples, 8000, 16000);
  ASSERT_EQ(r.size(), 16000u);
  // compare with the exact 16 kHz tone away from the edges
  double err = 0, ref = 0;
  for (int i = 1000; i < 15000; ++i) {
    const double want = 8000.0 * std::sin(2 * M_PI * 500.0 * i / 16000.0);
    err += (r[i] - want) * (r[i] - want);
    ref += want * want;
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-3);
  o.allow_resample = true;
  auto x = compute_features(a, o, &T);
  EXPECT_EQ(T, num_frames_for(16000, o));
}

// Messages of invalid options name the command-line flag (not the FeatureOptions
// field), and say what is wrong with the given value.
TEST(Features, InvalidOptionMessagesNameTheFlag) {
  auto message = [](const FeatureOptions& o) -> std::string {
    try {
      validate(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  struct Case { std::function<void(FeatureOptions&)> set; std::string want; };
  const std::vector<Case> cases = {
      {[](FeatureOptions& o) { o.frame_shift_ms = -10; }, "feature option --frame-shift-ms must be positive, got -10"},
      {[](FeatureOptions& o) { o.frame_shift_ms = 0; }, "feature option --frame-shift-ms must be positive, got 0"},
      {[](FeatureOptions& o) { o.frame_shift_ms = std::nan(""); },
       "feature option --frame-shift-ms must be positive, got nan"},
      {[](FeatureOptions& o) { o.frame_shift_ms = 0.05; },
       "feature option --frame-shift-ms 0.05 is shorter than 1 sample at 16000 Hz"},
      {[](FeatureOptions& o) { o.frame_length_ms = -25; }, "feature option --frame-length-ms must be positive, got -25"},
      {[](FeatureOptions& o) { o.frame_length_ms = 0.1; },
       "feature option --frame-length-ms 0.1 is shorter than 2 samples at 16000 Hz"},
      {[](FeatureOptions& o) { o.num_mel_bins = 2; }, "feature option --num-mel-bins must be at least 3, got 2"},
      {[](FeatureOptions& o) { o.num_ceps = 30; }, "feature option --num-ceps must be in [1, --num-mel-bins = 23], got 30"},
      {[](FeatureOptions& o) { o.preemph_coeff = 1.5; }, "feature option --preemph must be in [0, 1], got 1.5"},
      {[](FeatureOptions& o) { o.sample_rate = 0; }, "feature option --sample-rate must be positive, got 0"},
      {[](FeatureOptions& o) { o.low_freq = 9000; },
       "feature option --low-freq must be in [0, Nyquist = 8000 Hz), got 9000"},
      {[](FeatureOptions& o) { o.high_freq = 9000; },
       "feature option --high-freq must be in (--low-freq, Nyquist = 8000 Hz] (<= 0: offset from Nyquist), got 9000"},
  };
  for (const auto& c : cases) {
    FeatureOptions o;
    c.set(o);
    EXPECT_EQ(message(o), c.want);
  }
  EXPECT_EQ(message(FeatureOptions()), "(accepted)");
  // a window is a word, read where the text comes in (the flag, a features JSON)
  try {
    parse_window_type("kaiser");
    ADD_FAILURE() << "kaiser accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "feature option --window must be povey, hamming, hanning, rectangular, sine or blackman, got 'kaiser'");
  }
  // through the CLI: non-zero exit, the flag named
  testutil::TempDir d;
  testutil::write_audio(d.str("a.wav"), testutil::test_signal(4000));
  std::string out;
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " features " + d.str("a.wav") +
                                      " --frame-shift-ms -10 --out " + d.str("f.safetensors"),
                                  &out),
            0);
  EXPECT_NE(out.find("--frame-shift-ms must be positive, got -10"), std::string::npos) << out;
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " features " + d.str("a.wav") +
                                      " --window kaiser --out " + d.str("g.safetensors"),
                                  &out),
            0);
  EXPECT_NE(out.find("feature option --window must be povey, hamming, hanning, rectangular, sine or blackman, got "
                     "'kaiser'"),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(d.str("f.safetensors")));
}

// The keys are the ones checkpoints on disk hold (model/model.cpp wrote them
// with nlohmann::json, i.e. sorted); with_info adds dither and dim, as
// manifest.json records them.
TEST(Features, OptionsJsonKeys) {
  const std::vector<std::string> keys{"type",         "sample_rate", "frame_length_ms", "frame_shift_ms",
                                      "snip_edges",   "remove_dc_offset", "preemph_coeff", "window_type",
                                      "num_mel_bins", "low_freq",    "high_freq",       "num_ceps",
                                      "cepstral_lifter", "use_energy", "deltas",       "allow_resample"};
  const FeatureOptions o;
  const auto j = feature_options_to_json(o);
  std::vector<std::string> got;
  for (auto it = j.begin(); it != j.end(); ++it) got.push_back(it.key());
  EXPECT_EQ(got, keys);
  const auto ji = feature_options_to_json(o, true);
  ASSERT_EQ(ji.size(), keys.size() + 2);
  EXPECT_EQ(ji["dither"], 0.0);
  EXPECT_EQ(ji["dim"], 39);
  EXPECT_EQ(j["high_freq"], 0.0);
  EXPECT_EQ(j["num_mel_bins"], 23);
  EXPECT_EQ(j["window_type"], "povey");
  // a checkpoint's text (every key, sorted) gives the options back
  FeatureOptions c = FeatureOptions::defaults_for(FeatureType::fbank);
  c.num_mel_bins = 64;
  c.deltas = true;
  c.allow_resample = true;
  const std::string checkpoint_text = nlohmann::json::parse(feature_options_to_json(c).dump()).dump();
  const FeatureOptions back = feature_options_from_json(nlohmann::json::parse(checkpoint_text));
  EXPECT_EQ(back.type, FeatureType::fbank);
  EXPECT_EQ(back.num_mel_bins, 64);
  EXPECT_TRUE(back.deltas);
  EXPECT_TRUE(back.allow_resample);
  EXPECT_FALSE(back.use_energy);
  EXPECT_EQ(back.dim(), 192);
}

TEST(Features, OptionsJsonErrorsNameTheKey) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      feature_options_from_json(nlohmann::json::parse(text));
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of("{\"bogus\": 1}"), "feature options: key 'bogus': unknown key");
  EXPECT_EQ(error_of("{\"num_ceps\": 12.5}"), "feature options: key 'num_ceps': expected an integer, got 12.5");
  EXPECT_EQ(error_of("{\"deltas\": 1}"), "feature options: key 'deltas': expected true or false, got 1");
  EXPECT_EQ(error_of("{\"low_freq\": \"20\"}"), "feature options: key 'low_freq': expected a number, got \"20\"");
  EXPECT_EQ(error_of("{\"type\": \"plp\"}").rfind("feature options: key 'type': ", 0), 0u);
  EXPECT_EQ(error_of("{\"dither\": 1.0}"), "feature options: key 'dither': only 0 is supported, got 1.0");
  EXPECT_EQ(error_of("{\"deltas\": false, \"dim\": 39}"),
            "feature options: key 'dim': 39 does not match the other options (13)");
  EXPECT_EQ(error_of("[1]"), "feature options: expected a JSON object, got [1]");
  EXPECT_EQ(error_of("{\"type\": \"fbank\", \"dither\": 0, \"dim\": 40}"), "");  // integer 0 and 40 accepted
  // integer values for double options are accepted (JSON does not distinguish 20 from 20.0)
  EXPECT_EQ(feature_options_from_json(nlohmann::json::parse("{\"low_freq\": 64}")).low_freq, 64.0);
}
