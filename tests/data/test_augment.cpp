// Augmentation (data/augment.h, data/augment_corpus.h): speed perturbation's
// labels against the frequencies found in the perturbed audio, the SNR of the
// written noisy audio measured independently, the spectral masks' shape and
// determinism, per-utterance CMVN against a hand computation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "data/augment.h"
#include "data/augment_corpus.h"
#include "data/corpus.h"
#include "data/features.h"
#include "data/phones.h"
#include "util.h"

namespace {
namespace fs = std::filesystem;
using namespace timitseg::data;

// A tone utterance: segments of pure tones, [start, end) samples each.
struct Tone {
  double hz;
  int64_t samples;
  const char* phone;
};
const std::vector<Tone> kTones = {{300, 3200, "aa"}, {1000, 4960, "s"}, {2200, 4000, "iy"}, {600, 5440, "m"}};

std::vector<short> tone_audio(const std::vector<Tone>& tones, double amp) {
  std::vector<short> s;
  for (const Tone& t : tones)
    for (int64_t i = 0; i < t.samples; ++i) s.push_back(static_cast<short>(amp * std::sin(2 * M_PI * t.hz * i / 16000.0)));
  return s;
}

std::string tone_phn(const std::vector<Tone>& tones) {
  std::string out;
  int64_t at = 0;
  for (const Tone& t : tones) {
    out += std::to_string(at) + " " + std::to_string(at + t.samples) + " " + t.phone + "\n";
    at += t.samples;
  }
  return out;
}

// A TIMIT layout: TRAIN speakers ma/fb with two tone utterances each (other
// tone orders), TEST speaker mc with one.
void write_tone_corpus(const fs::path& root) {
  const std::vector<std::pair<std::string, std::vector<Tone>>> utts = {
      {"TRAIN/DR1/MAAA0/SI1", kTones},
      {"TRAIN/DR1/MAAA0/SI2", {kTones[2], kTones[0], kTones[3], kTones[1]}},
      {"TRAIN/DR1/FBBB0/SI3", {kTones[1], kTones[3], kTones[0], kTones[2]}},
      {"TRAIN/DR1/FBBB0/SI4", {kTones[3], kTones[2], kTones[1], kTones[0]}},
      {"TEST/DR1/MCCC0/SI5", kTones}};
  for (const auto& [stem, tones] : utts) {
    testutil::write_audio((root / (stem + ".WAV")).string(), tone_audio(tones, 8000), 16000, SF_FORMAT_WAV);
    testutil::write_text((root / (stem + ".PHN")).string(), tone_phn(tones));
  }
}

// A suffix as the copies of an upper-case corpus spell it.
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Goertzel power of x[from, from + n) at hz.
double goertzel(const std::vector<float>& x, size_t from, size_t n, double hz) {
  const double w = 2 * M_PI * hz / 16000.0, c = 2 * std::cos(w);
  double s1 = 0, s2 = 0;
  for (size_t i = from; i < from + n && i < x.size(); ++i) {
    const double s = x[i] + c * s1 - s2;
    s2 = s1;
    s1 = s;
  }
  return s1 * s1 + s2 * s2 - c * s1 * s2;
}

TEST(Augment, SpeedPerturbationLabelsStayAlignedWithTheAudio) {
  testutil::TempDir tmp;
  write_tone_corpus(tmp.path / "in");
  for (double factor : {0.9, 1.1}) {
    AugmentCorpusOptions o;
    o.in_dir = (tmp.path / "in").string();
    o.out_dir = (tmp.path / ("sp" + std::to_string(int(factor * 100)))).string();
    o.speeds = {factor};
    o.threads = 2;
    const AugmentCorpusSummary s = augment_corpus(o);
    EXPECT_EQ(s.written, 4);  // the 4 TRAIN utterances, one copy each
    const std::string stem = (fs::path(o.out_dir) / "TRAIN/DR1/MAAA0/SI1").string() + upper(speed_suffix(factor));
    const Audio a = read_audio(stem + ".WAV");
    int64_t total = 0;
    for (const Tone& t : kTones) total += t.samples;
    EXPECT_EQ(static_cast<int64_t>(a.samples.size()), std::llround(total / factor));
    std::vector<Problem> probs;
    const auto phn = parse_phn(stem + ".PHN", timitseg::read_file(stem + ".PHN"), int64_t(a.samples.size()), &probs);
    ASSERT_EQ(phn.size(), kTones.size());
    FeatureOptions fo;
    const int64_t T = num_frames_for(int64_t(a.samples.size()), fo);
    const std::vector<int32_t> lab = frame_labels(phn, T, fo, 1.0);
    // the oracle: each frame's strongest of the four tones (at factor x their
    // frequency: speed changes pitch), from the perturbed audio alone
    std::vector<int> found(T), expected(T);
    for (int64_t t = 0; t < T; ++t) {
      double best = -1;
      for (size_t k = 0; k < kTones.size(); ++k) {
        const double p = goertzel(a.samples, size_t(t * 160), 400, kTones[k].hz * factor);
        if (p > best) best = p, found[t] = int(k);
      }
      for (size_t k = 0; k < kTones.size(); ++k)
        if (lab[t] == timitseg::data::PhoneSet::timit().index61(kTones[k].phone)) expected[t] = int(k);
    }
    // boundaries: the frames where the label changes, found vs expected within 1 frame
    std::vector<int64_t> bf, be;
    for (int64_t t = 1; t < T; ++t) {
      if (found[t] != found[t - 1]) bf.push_back(t);
      if (expected[t] != expected[t - 1]) be.push_back(t);
    }
    ASSERT_EQ(be.size(), 3u) << factor;
    ASSERT_EQ(bf.size(), be.size()) << factor;
    for (size_t i = 0; i < be.size(); ++i) EXPECT_LE(std::llabs(bf[i] - be[i]), 1) << factor << " boundary " << i;
    // and where the unperturbed boundary sample lands: round(p / factor)
    EXPECT_EQ(phn[1].start, std::llround(3200 / factor));
  }
}

double snr_of_files(const std::string& clean, const std::string& noisy) {
  const Audio c = read_audio(clean), n = read_audio(noisy);
  double ps = 0, pn = 0;
  for (size_t i = 0; i < c.samples.size(); ++i) {
    ps += double(c.samples[i]) * c.samples[i];
    pn += (double(n.samples[i]) - c.samples[i]) * (double(n.samples[i]) - c.samples[i]);
  }
  return 10 * std::log10(ps / pn);
}

TEST(Augment, NoisyTestCopyHasTheRequestedSnrAndTheSameLabels) {
  testutil::TempDir tmp;
  write_tone_corpus(tmp.path / "in");
  for (const std::string noise : {"white", "pink", "babble"})
    for (double snr : {10.0, 0.0}) {
      AugmentCorpusOptions o;
      o.in_dir = (tmp.path / "in").string();
      o.out_dir = (tmp.path / (noise + std::to_string(int(snr)))).string();
      o.noise = timitseg::common::enum_value<NoiseKind>(noise, "noise");
      o.snr_min = o.snr_max = snr;
      o.noisy_test = true;
      o.seed = 7;
      const AugmentCorpusSummary s = augment_corpus(o);
      EXPECT_EQ(s.written, 1);
      EXPECT_EQ(s.rescaled, 0);
      const std::string in = o.in_dir + "/TEST/DR1/MCCC0/SI5", out = o.out_dir + "/TEST/DR1/MCCC0/SI5";
      EXPECT_NEAR(snr_of_files(in + ".WAV", out + ".WAV"), snr, 0.1) << noise;
      EXPECT_TRUE(fs::is_symlink(out + ".PHN"));
      EXPECT_EQ(timitseg::read_file(out + ".PHN"), timitseg::read_file(in + ".PHN"));
      EXPECT_TRUE(fs::is_symlink(o.out_dir + "/TRAIN/DR1/MAAA0/SI1.WAV"));  // train untouched
    }
}

TEST(Augment, NoiseIsDeterministicPerSeedAndSnrRangeIsDrawnInside) {
  testutil::TempDir tmp;
  write_tone_corpus(tmp.path / "in");
  auto make = [&](const std::string& name, uint64_t seed) {
    AugmentCorpusOptions o;
    o.in_dir = (tmp.path / "in").string();
    o.out_dir = (tmp.path / name).string();
    o.noise = NoiseKind::babble;
    o.snr_min = 0, o.snr_max = 20;
    o.seed = seed;
    o.threads = 2;
    augment_corpus(o);
    return o.out_dir + "/TRAIN/DR1/FBBB0/SI3" + upper(kNoiseSuffix) + ".WAV";
  };
  const std::string a = make("a", 1), b = make("b", 1), c = make("c", 2);
  EXPECT_EQ(timitseg::read_file(a), timitseg::read_file(b));
  EXPECT_NE(timitseg::read_file(a), timitseg::read_file(c));
  const double snr = snr_of_files((tmp.path / "in/TRAIN/DR1/FBBB0/SI3.WAV").string(), a);
  EXPECT_GE(snr, -0.1);
  EXPECT_LE(snr, 20.1);
}

TEST(Augment, PinkNoiseHasEqualPowerPerOctave) {
  std::mt19937_64 rng(3);
  const std::vector<float> x = pink_noise(1 << 17, rng);
  EXPECT_NEAR(mean_power(x), 1.0, 1e-6);
  // periodogram averaged over 128 frames of 1024 (naive DFT), summed per octave
  const int N = 1024;
  std::vector<double> psd(N / 2, 0.0);
  for (size_t f0 = 0; f0 + N <= x.size(); f0 += N)
    for (int k = 1; k < N / 2; ++k) {
      double re = 0, im = 0;
      for (int i = 0; i < N; ++i) {
        re += x[f0 + i] * std::cos(2 * M_PI * k * i / N);
        im -= x[f0 + i] * std::sin(2 * M_PI * k * i / N);
      }
      psd[k] += re * re + im * im;
    }
  std::vector<double> octave;  // bins [4, 8), [8, 16), ... [256, 512): 62.5 Hz .. 8 kHz
  for (int lo = 4; lo < N / 2; lo *= 2) {
    double s = 0;
    for (int k = lo; k < 2 * lo; ++k) s += psd[k];
    octave.push_back(10 * std::log10(s));
  }
  for (size_t i = 1; i < octave.size(); ++i) EXPECT_NEAR(octave[i], octave[0], 1.5) << "octave " << i;
  // white noise's octaves double: +3 dB each (the test can tell the two apart)
  std::mt19937_64 r2(3);
  const std::vector<float> w = white_noise(1 << 12, r2);
  EXPECT_NEAR(mean_power(w), 1.0, 0.1);
}

TEST(Augment, MixAtSnrMeasuresTheRequestedSnr) {
  std::mt19937_64 rng(5);
  std::vector<float> speech(16000);
  for (size_t i = 0; i < speech.size(); ++i) speech[i] = float(3000 * std::sin(0.03 * i) * std::sin(0.0007 * i));
  const std::vector<float> talker = white_noise(5000, rng);
  for (double snr : {-5.0, 0.0, 10.0, 30.0}) {
    const std::vector<float> noisy = mix_at_snr(speech, babble_noise(speech.size(), {talker, speech}, rng), snr);
    EXPECT_NEAR(measured_snr_db(speech, noisy), snr, 1e-3);
  }
  EXPECT_THROW(mix_at_snr(speech, std::vector<float>(10, 1.f), 0), std::invalid_argument);
}

TEST(Augment, SpecMasksAreBandsAndSpansDeterministicPerSeed) {
  const int64_t T = 200, D = 40;
  SpecMaskOptions o{2, 20, 2, 8};
  auto masked = [&](uint64_t seed) {
    std::vector<float> f(T * D, 1.0f);
    spec_mask(f.data(), T, D, o, seed);
    return f;
  };
  const auto a = masked(spec_mask_seed(11, 3, 17));
  EXPECT_EQ(a, masked(spec_mask_seed(11, 3, 17)));
  EXPECT_NE(a, masked(spec_mask_seed(11, 4, 17)));
  EXPECT_NE(a, masked(spec_mask_seed(11, 3, 18)));
  EXPECT_NE(a, masked(spec_mask_seed(12, 3, 17)));
  // every zero is in a fully zero column (a band) or a fully zero row (a span)
  int zero_cols = 0, zero_rows = 0;
  std::vector<bool> col(D, true), row(T, true);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      if (a[t * D + d] != 0.0f) col[d] = row[t] = false;
  for (int64_t d = 0; d < D; ++d) zero_cols += col[d];
  for (int64_t t = 0; t < T; ++t) zero_rows += row[t];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      if (a[t * D + d] == 0.0f) EXPECT_TRUE(col[d] || row[t]) << t << " " << d;
  EXPECT_LE(zero_cols, 2 * 8);
  EXPECT_LE(zero_rows, 2 * 20);
  EXPECT_GT(zero_cols + zero_rows, 0);
  std::vector<float> f(T * D, 1.0f);
  spec_mask(f.data(), T, D, SpecMaskOptions{}, 1);
  EXPECT_EQ(f, std::vector<float>(T * D, 1.0f));  // off: untouched
}

TEST(Augment, UtteranceCmvnMatchesAHandComputation) {
  // [T=3][D=2]: column 0 = 1, 2, 6 (mean 3, var (4 + 1 + 9) / 3 = 14/3); column 1 constant 5 (var 0: floored)
  std::vector<float> f = {1, 5, 2, 5, 6, 5};
  utterance_cmvn(f.data(), 3, 2, 1e-10);
  const double sd = std::sqrt(14.0 / 3.0);
  EXPECT_FLOAT_EQ(f[0], float(-2 / sd));
  EXPECT_FLOAT_EQ(f[2], float(-1 / sd));
  EXPECT_FLOAT_EQ(f[4], float(3 / sd));
  EXPECT_EQ(f[1], 0.0f);
  EXPECT_EQ(f[5], 0.0f);
}

TEST(Augment, MarksOfAugmentedUtterances) {
  EXPECT_EQ(speed_suffix(0.9), "_augsp090");
  EXPECT_EQ(speed_suffix(1.1), "_augsp110");
  EXPECT_EQ(augmentation_of("train/dr1/maaa0/si1_augsp090"), Augmentation::speed);
  EXPECT_EQ(augmentation_of("train/dr1/maaa0/si1_augnoise"), Augmentation::noise);
  EXPECT_EQ(augmentation_of("train/dr1/maaa0/si1"), Augmentation::none);
  EXPECT_EQ(augmentation_of("train/dr1/maaa0/si1_augsp9"), Augmentation::none);
}

TEST(Augment, BadOptionsAreRefused) {
  testutil::TempDir tmp;
  write_tone_corpus(tmp.path / "in");
  AugmentCorpusOptions o;
  o.in_dir = (tmp.path / "in").string();
  o.out_dir = (tmp.path / "out").string();
  EXPECT_THROW(augment_corpus(o), std::invalid_argument);  // nothing to do
  o.speeds = {1.0};
  EXPECT_THROW(augment_corpus(o), std::invalid_argument);
  o.speeds = {0.9};
  o.noisy_test = true;
  EXPECT_THROW(augment_corpus(o), std::invalid_argument);
  o.noisy_test = false;
  o.out_dir = o.in_dir;
  EXPECT_THROW(augment_corpus(o), std::invalid_argument);  // exists
  o.out_dir = o.in_dir + "/copy";
  EXPECT_THROW(augment_corpus(o), std::invalid_argument);  // inside the corpus
  EXPECT_FALSE(fs::exists(o.out_dir + ".partial"));
  o.out_dir = (tmp.path / "bad").string();  // an unreadable .PHN: an error naming it, no OUT, no OUT.partial
  const fs::path phn = tmp.path / "in/TRAIN/DR1/MAAA0/SI1.PHN";
  const std::string keep = timitseg::read_file(phn.string());
  testutil::write_text(phn.string(), "0 x h#\n");
  try {
    augment_corpus(o);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("SI1.PHN:1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_dir));
  EXPECT_FALSE(fs::exists(o.out_dir + ".partial"));
  testutil::write_text(phn.string(), keep);
  o.out_dir = (tmp.path / "out").string();
  EXPECT_NO_THROW(augment_corpus(o));
}

}  // namespace
