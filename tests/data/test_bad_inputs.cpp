// Bad inputs of the data layer (issue 13): each gives one message naming the
// file (and line / column where it applies), a non-zero exit through the CLI,
// and no partial output; audio at other rates or channel counts is resampled
// (libsoxr) and down-mixed by `features` and `decode`, refused by `prepare`
// unless --allow-resample.
#include <gtest/gtest.h>

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "common/safetensors.h"
#include "common/text.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/features.h"
#include "util.h"

using namespace timitseg::data;
namespace fs = std::filesystem;

namespace {

std::string read_error(const std::string& path) {
  try {
    read_audio(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

// Float WAV (no quantization), interleaved [N][channels] in the int16 range.
void write_float_wav(const std::string& path, const std::vector<double>& interleaved, int rate, int channels) {
  fs::create_directories(fs::path(path).parent_path());
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << path;
  std::vector<float> x(interleaved.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(interleaved[i] / 32768.0);
  sf_writef_float(f, x.data(), static_cast<sf_count_t>(x.size() / channels));
  sf_close(f);
}

std::string cut(const std::string& bytes, size_t n) { return bytes.substr(0, std::min(n, bytes.size())); }

int count_prefix(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string l;
  int n = 0;
  while (std::getline(in, l))
    if (l.rfind(prefix, 0) == 0) ++n;
  return n;
}

const std::string kBin = TIMITSEG_BINARY;

}  // namespace

// Truncated, empty, garbage and unsupported audio: what is wrong with the file,
// in words, never libsndfile's own ("SF_INFO struct incomplete").
TEST(BadAudio, HeaderProblemsInWords) {
  testutil::TempDir d;
  testutil::write_audio(d.str("a.wav"), testutil::test_signal(8000), 16000, SF_FORMAT_WAV);
  testutil::write_audio(d.str("a.sph"), testutil::test_signal(8000), 16000, SF_FORMAT_NIST);
  const std::string wav = timitseg::read_file(d.str("a.wav")), sph = timitseg::read_file(d.str("a.sph"));
  ASSERT_EQ(wav.size(), 44u + 16000u);
  ASSERT_EQ(sph.size(), 1024u + 16000u);
  testutil::write_text(d.str("cut.wav"), cut(wav, 44 + 8000));
  testutil::write_text(d.str("cut.sph"), cut(sph, 1024 + 4000));
  testutil::write_text(d.str("hdronly.wav"), cut(wav, 44));
  testutil::write_text(d.str("inhdr.wav"), cut(wav, 30));
  testutil::write_text(d.str("inhdr.sph"), cut(sph, 600));
  testutil::write_text(d.str("empty.wav"), "");
  testutil::write_text(d.str("text.wav"), "hello, this is not audio at all.........................");
  std::string rate0 = wav;
  rate0.replace(24, 4, std::string(4, '\0'));  // fmt sample rate = 0
  testutil::write_text(d.str("rate0.wav"), rate0);
  std::string ch0 = wav;
  ch0.replace(22, 2, std::string(2, '\0'));
  testutil::write_text(d.str("ch0.wav"), ch0);
  std::string norate = sph;
  norate.replace(norate.find("sample_rate"), 1, "x");
  testutil::write_text(d.str("norate.sph"), norate);
  testutil::write_audio(d.str("zero.wav"), {}, 16000, SF_FORMAT_WAV);
  fs::create_directories(d.str("folder.wav"));
  struct Case { const char* file; std::string says; };
  const std::vector<Case> cases = {
      {"cut.wav", "truncated audio: the header says 8000 samples (0.50 s), the file holds 4000 (8000 bytes of sample "
                  "data missing)"},
      {"cut.sph", "truncated audio: the header says 8000 samples (0.50 s), the file holds 2000 (12000 bytes of "
                  "sample data missing)"},
      {"hdronly.wav", "truncated audio: the header says 8000 samples (0.50 s), the file holds 0 (16000 bytes"},
      {"inhdr.wav", "RIFF WAV header has no complete 'fmt ' chunk: the file is cut short inside its header (30 bytes)"},
      {"inhdr.sph", "cut short inside its NIST SPHERE header (600 of 1024 header bytes)"},
      {"empty.wav", "empty file (0 bytes), not audio"},
      {"text.wav", "not a NIST SPHERE or RIFF WAV file (it starts with \"hello, t\""},
      {"rate0.wav", "RIFF WAV header gives a sample rate of 0 Hz"},
      {"ch0.wav", "RIFF WAV header gives 0 channels"},
      {"norate.sph", "NIST SPHERE header has no sample_rate field"},
      {"zero.wav", "no audio samples"},
      {"folder.wav", "is a folder, not an audio file"},
  };
  for (const Case& c : cases) {
    const std::string msg = read_error(d.str(c.file));
    EXPECT_EQ(msg.rfind(d.str(c.file) + ": " + c.says, 0), 0u) << c.file << ": " << msg;
    EXPECT_EQ(msg.find("SF_INFO"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    // through the CLI: one "error:" line naming the file, exit 1, no output file
    std::string out;
    EXPECT_EQ(testutil::run_capture(kBin + " features " + d.str(c.file) + " --out " + d.str("f.safetensors"), &out), 1)
        << c.file;
    EXPECT_EQ(out, "error: " + msg + "\n") << c.file;
    EXPECT_FALSE(fs::exists(d.str("f.safetensors")));
  }
  // the untouched files read
  EXPECT_EQ(read_audio(d.str("a.wav")).samples.size(), 8000u);
  EXPECT_EQ(read_audio(d.str("a.sph")).samples.size(), 8000u);
}

// A truncated .WAV whose .PHN covers the header's length is reported as short
// audio, not as .PHN lines past its end; the summary counts per kind.
TEST(BadAudio, PrepareReportsTruncatedAudioAndCountsPerKind) {
  testutil::TempDir d;
  const std::string c = d.str("corpus");
  ASSERT_EQ(testutil::run(kBin + " synth --out " + c + " --speakers 4 --utterances-per-speaker 2 --seed 3"), 0);
  std::vector<Problem> probs;
  std::vector<CorpusUtterance> utts;
  for (const auto& u : scan_timit(c, &probs))
    if (!u.is_sa()) utts.push_back(u);
  ASSERT_GE(utts.size(), 6u);
  const std::string wav = timitseg::read_file(utts[0].wav_path);
  testutil::write_text(utts[0].wav_path, cut(wav, wav.size() - 3000));  // inside the samples
  testutil::write_text(utts[1].phn_path, "\xEF\xBB\xBF" + timitseg::read_file(utts[1].phn_path));
  std::string phn2 = timitseg::read_file(utts[2].phn_path);
  phn2.insert(phn2.find('\n') + 1, "0 10 zz\n");
  testutil::write_text(utts[2].phn_path, phn2);
  PrepareOptions po;
  po.timit_dir = c;
  po.workdir = d.str("work");
  po.progress = false;
  const PrepareSummary s = prepare(po);
  EXPECT_EQ(s.skipped, 3);
  auto has = [&](const std::string& needle) {
    for (const auto& p : s.problems)
      if (p.find(needle) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(utts[0].wav_path + ": truncated audio: the header says ")) << testing::PrintToString(s.problems);
  EXPECT_FALSE(has("past the end of the audio"));
  EXPECT_TRUE(has(utts[1].phn_path + ":1: column 1: byte-order mark (U+FEFF)"));
  EXPECT_EQ(s.skipped_by_kind, (std::map<std::string, int64_t>{
                                   {"truncated audio", 1}, {"invisible character", 1}, {"unknown phone", 1}}));
  int64_t warn_total = 0;
  for (const auto& [k, n] : s.warnings_by_kind) warn_total += n;
  EXPECT_EQ(warn_total, s.warnings);
  // the CLI prints the counts
  std::string out;
  ASSERT_EQ(testutil::run_capture(kBin + " prepare --timit " + c + " --out " + d.str("work2") + " --no-progress", &out),
            0);
  EXPECT_NE(out.find("skipped: 1 invisible character, 1 truncated audio, 1 unknown phone"), std::string::npos) << out;
  // --strict: one line, nothing written
  EXPECT_EQ(testutil::run_capture(kBin + " prepare --strict --timit " + c + " --out " + d.str("w3") + " --no-progress",
                                  &out),
            1);
  EXPECT_EQ(count_prefix(out, "error: "), 1) << out;
  EXPECT_FALSE(fs::exists(d.str("w3")));
}

// Invisible characters in a .PHN: named, with line and column; CR LF is fine.
TEST(BadPhn, InvisibleCharactersAreNamedWithLineAndColumn) {
  struct Case { std::string text; int line; std::string says; };
  const std::vector<Case> cases = {
      {"\xEF\xBB\xBF" "0 100 h#\n", 1, "column 1: byte-order mark (U+FEFF)"},
      {"0 100 h#\n100\xE2\x80\x8B 200 aa\n", 2, "column 4: zero-width space (U+200B)"},
      {"0 100 h#\n100 200\xC2\xA0" "aa\n", 2, "column 8: no-break space (U+00A0)"},
      {"0 100 h#\n100 200 a\xFF\n", 2, "column 10: byte 0xFF that is not UTF-8 text"},
      {"0 100 h#\n100 200 a\xC0\xAF\n", 2, "column 10: byte 0xC0 that is not UTF-8 text"},      // overlong '/'
      {"0 100 h#\n100 200 a\xED\xA0\x80\n", 2, "column 10: byte 0xED that is not UTF-8 text"},  // surrogate
      {"0 100 h#\r100 200 aa\n", 1, "column 9: carriage return (U+000D) inside a line"},
  };
  for (const Case& c : cases) {
    std::vector<Problem> p;
    parse_phn("X.PHN", c.text, 200, &p);
    ASSERT_EQ(p.size(), 1u) << c.text;
    EXPECT_TRUE(p[0].error);
    EXPECT_EQ(p[0].str().rfind("X.PHN:" + std::to_string(c.line) + ": " + c.says + ": an invisible character", 0), 0u)
        << p[0].str();
  }
  std::vector<Problem> p;
  EXPECT_EQ(parse_phn("X.PHN", "0 100 h#\r\n100 200 aa\r\n", 200, &p).size(), 2u);  // CR LF line ends
  EXPECT_TRUE(p.empty());
}

TEST(BadPhn, EmptyNonNumericReversedOverlappingGappedEachOneLine) {
  // The validation cases of tests/data/test_phn.cpp, through prepare --strict
  // and the CLI: one error line naming FILE:LINE, nothing written.
  testutil::TempDir d;
  const std::string c = d.str("corpus");
  ASSERT_EQ(testutil::run(kBin + " synth --out " + c + " --speakers 4 --utterances-per-speaker 1 --seed 4"), 0);
  std::vector<Problem> probs;
  std::string phn;
  for (const auto& u : scan_timit(c, &probs))
    if (!u.is_sa()) {
      phn = u.phn_path;
      break;
    }
  const std::string orig = timitseg::read_file(phn);
  struct Case { std::string text; std::string says; };
  const std::vector<Case> cases = {
      {"", ": no phones"},
      {"0 abc h#\n", ":1: expected 'start end phone'"},
      {"0 100 h#\n300 200 aa\n", ":2: start 300 is not before end 200"},
      {"0 100 h#\n50 200 aa\n", ":2: overlaps the previous phone"},
      {"0 100 h#\n100 99999999 aa\n", ":2: end 99999999 is past the end of the audio"},
  };
  for (const Case& k : cases) {
    testutil::write_text(phn, k.text);
    std::string out;
    EXPECT_EQ(testutil::run_capture(kBin + " prepare --strict --no-progress --timit " + c + " --out " + d.str("w"), &out),
              1);
    EXPECT_EQ(count_prefix(out, "error: "), 1) << out;
    EXPECT_EQ(out.rfind("error: " + phn + k.says, 0), 0u) << out;
    EXPECT_FALSE(fs::exists(d.str("w")));
  }
  // a gap is a warning only, counted per kind
  std::istringstream in(orig);
  std::string l1, rest, line;
  std::getline(in, l1);
  std::istringstream f(l1);
  int64_t a, b;
  std::string ph;
  f >> a >> b >> ph;
  std::string gapped = std::to_string(a) + " " + std::to_string(b - 10) + " " + ph + "\n";
  while (std::getline(in, line)) gapped += line + "\n";
  testutil::write_text(phn, gapped);
  PrepareOptions po;
  po.timit_dir = c;
  po.workdir = d.str("w");
  po.progress = false;
  const PrepareSummary s = prepare(po);
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.warnings_by_kind.at("gap between phones"), 1);
}

TEST(BadCorpus, MissingEmptyOrFileCorpusAndRefusedOutputFolders) {
  testutil::TempDir d;
  std::string out;
  // missing, empty, a file, a tree with empty TRAIN/TEST
  fs::create_directories(d.str("empty"));
  testutil::write_text(d.str("afile"), "x");
  fs::create_directories(d.str("hollow/TRAIN/DR1"));
  fs::create_directories(d.str("hollow/TEST"));
  for (const std::string& root : {d.str("missing"), d.str("empty"), d.str("afile"), d.str("hollow")}) {
    EXPECT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + root + " --out " + d.str("w"), &out), 1)
        << root;
    EXPECT_EQ(count_prefix(out, "error: "), 1) << out;
    EXPECT_NE(out.find(root), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(d.str("w")));
  }
  // --out: a folder that is neither empty nor a WORKDIR prepare wrote is refused, untouched
  const std::string c = d.str("corpus");
  ASSERT_EQ(testutil::run(kBin + " synth --out " + c + " --speakers 4 --utterances-per-speaker 1 --seed 4"), 0);
  testutil::write_text(d.str("mine/notes.txt"), "keep me");
  EXPECT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + c + " --out " + d.str("mine"), &out), 1);
  EXPECT_EQ(out.rfind("error: --out " + d.str("mine") + ": folder is not empty and is not a WORKDIR", 0), 0u) << out;
  EXPECT_EQ(std::distance(fs::directory_iterator(d.str("mine")), fs::directory_iterator()), 1);
  testutil::write_text(d.str("other/manifest.json"), "{\"format\": \"something else\"}");
  EXPECT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + c + " --out " + d.str("other"), &out), 1);
  EXPECT_NE(out.find("holds a manifest.json that timitseg prepare did not write"), std::string::npos) << out;
  EXPECT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + c + " --out " + d.str("afile"), &out), 1);
  EXPECT_NE(out.find("exists and is not a folder"), std::string::npos) << out;
  // an empty folder, a WORKDIR it wrote, and one whose run was interrupted (no manifest, only its files) are fine
  fs::create_directories(d.str("fresh"));
  ASSERT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + c + " --out " + d.str("fresh"), &out), 0)
      << out;
  ASSERT_EQ(testutil::run_capture(kBin + " prepare --no-progress --force --timit " + c + " --out " + d.str("fresh"), &out),
            0)
      << out;
  fs::remove(d.str("fresh/manifest.json"));
  testutil::write_text(d.str("fresh/train.safetensors.tmp.123.0"), "half");
  ASSERT_EQ(testutil::run_capture(kBin + " prepare --no-progress --timit " + c + " --out " + d.str("fresh"), &out), 0)
      << out;
  // a folder where the config file is expected
  EXPECT_EQ(testutil::run_capture(kBin + " train --config " + d.str("empty"), &out), 1);
  EXPECT_EQ(out, "error: " + d.str("empty") + ": is a folder, not a config file\n");
}

TEST(BadConfig, ByteOrderMarkAndNoBreakSpaceAreNamed) {
  testutil::TempDir d;
  testutil::write_text(d.str("bom.yaml"), "\xEF\xBB\xBFtrain:\n  epochs: 3\n");
  testutil::write_text(d.str("nbsp.yaml"), "train:\n  epochs:\xC2\xA0" "3\n");
  std::string out;
  EXPECT_EQ(testutil::run_capture(kBin + " train --config " + d.str("bom.yaml"), &out), 1);
  EXPECT_EQ(out, "error: " + d.str("bom.yaml") +
                     ":1:1: byte-order mark (U+FEFF): an invisible character; delete it (or save the file as plain "
                     "UTF-8 without a byte-order mark)\n");
  EXPECT_EQ(testutil::run_capture(kBin + " train --config " + d.str("nbsp.yaml"), &out), 1);
  EXPECT_EQ(out.rfind("error: " + d.str("nbsp.yaml") + ":2:10: no-break space (U+00A0)", 0), 0u) << out;
  timitseg::InvisibleChar ic;
  EXPECT_FALSE(timitseg::find_invisible("a: b\r\nc: \xC3\xA9t\xC3\xA9\n", &ic));  // CR LF and accents are fine
}

// The down-mix is the mean of the channels: L = x + e, R = x - e gives
// exactly the features of x (no resampling at 16 kHz).
TEST(Resample, DownMixIsTheMeanOfTheChannels) {
  testutil::TempDir d;
  const std::vector<short> x = testutil::test_signal(8000, 3), e = testutil::test_signal(8000, 9);
  std::vector<short> st(2 * x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    st[2 * i] = static_cast<short>(x[i] / 2 + e[i] / 4);
    st[2 * i + 1] = static_cast<short>(x[i] / 2 - e[i] / 4);
  }
  std::vector<short> mono(x.size());
  for (size_t i = 0; i < x.size(); ++i) mono[i] = static_cast<short>((st[2 * i] + st[2 * i + 1]) / 2);
  // (L + R) / 2 is an integer here (x/2 + e/4 and x/2 - e/4 have an even sum): exact
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(2 * mono[i], st[2 * i] + st[2 * i + 1]);
  testutil::write_audio(d.str("st.wav"), st, 16000, SF_FORMAT_WAV, 2);
  testutil::write_audio(d.str("mono.wav"), mono, 16000, SF_FORMAT_WAV, 1);
  const Audio a = read_audio(d.str("st.wav"));
  EXPECT_EQ(a.channels, 2);
  ASSERT_EQ(a.samples.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(a.samples[i], static_cast<float>(mono[i])) << i;
  std::string out;
  ASSERT_EQ(testutil::run_capture(kBin + " features " + d.str("st.wav") + " " + d.str("mono.wav") + " --out " +
                                      d.str("f.safetensors"),
                                  &out),
            0)
      << out;
  EXPECT_NE(out.find(d.str("st.wav") + ": down-mixed 2 channels (mean)"), std::string::npos) << out;
  EXPECT_EQ(out.find(d.str("mono.wav") + ": down-mixed"), std::string::npos) << out;
  const timitseg::st::File f = timitseg::st::load(d.str("f.safetensors"));
  EXPECT_EQ(f.tensors.at(d.str("st.wav")).bytes, f.tensors.at(d.str("mono.wav")).bytes);
  // prepare refuses it without --allow-resample, naming file, channels and flag
  const std::string c = d.str("corpus");
  ASSERT_EQ(testutil::run(kBin + " synth --out " + c + " --speakers 4 --utterances-per-speaker 1 --seed 4"), 0);
  std::vector<Problem> probs;
  std::string wav;
  for (const auto& u : scan_timit(c, &probs))
    if (!u.is_sa() && u.part == SplitName::train) wav = u.wav_path;
  const Audio one = read_audio(wav);
  std::vector<short> two(2 * one.samples.size());
  for (size_t i = 0; i < one.samples.size(); ++i) two[2 * i] = two[2 * i + 1] = static_cast<short>(one.samples[i]);
  testutil::write_audio(wav, two, 16000, SF_FORMAT_NIST, 2);
  EXPECT_EQ(testutil::run_capture(kBin + " prepare --strict --no-progress --timit " + c + " --out " + d.str("w"), &out),
            1);
  EXPECT_EQ(out, "error: " + wav + ": 2 channels, expected mono (pass --allow-resample to down-mix it: the mean of the "
                                   "channels) (--strict: nothing written)\n");
  ASSERT_EQ(testutil::run_capture(kBin + " prepare --strict --allow-resample --no-progress --timit " + c + " --out " +
                                      d.str("w"),
                                  &out),
            0)
      << out;
}

// A tiny model trained for one epoch on a synth corpus (decode tests).
class DecodeAudio : public ::testing::Test {
 protected:
  static testutil::TempDir* dir_;
  static std::string ckpt_, corpus_;
  static void SetUpTestSuite() {
    dir_ = new testutil::TempDir;
    corpus_ = dir_->str("corpus");
    ASSERT_EQ(testutil::run(kBin + " synth --out " + corpus_ + " --speakers 4 --utterances-per-speaker 2 --seed 7"), 0);
    ASSERT_EQ(testutil::run(kBin + " prepare --no-progress --timit " + corpus_ + " --out " + dir_->str("work")), 0);
    testutil::write_text(dir_->str("c.yaml"), "data:\n  workdir: " + dir_->str("work") +
                                                  "\nmodel:\n  hidden_dim: 8\n  num_layers: 1\ncrf:\n  max_duration: "
                                                  "12\ntrain:\n  epochs: 1\n  batch_size: 2\n  threads: 1\n  run_dir: " +
                                                  dir_->str("run") + "\n");
    std::string out;
    ASSERT_EQ(testutil::run_capture(kBin + " train --config " + dir_->str("c.yaml"), &out), 0) << out;
    ckpt_ = dir_->str("run/checkpoints/best.safetensors");
    ASSERT_TRUE(fs::exists(ckpt_)) << out;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string first_wav(SplitName part) {
    std::vector<Problem> probs;
    for (const auto& u : scan_timit(corpus_, &probs))
      if (!u.is_sa() && u.part == part) return u.wav_path;
    return "";
  }
};
testutil::TempDir* DecodeAudio::dir_ = nullptr;
std::string DecodeAudio::ckpt_, DecodeAudio::corpus_;

// A 44.1 kHz stereo file made from a 16 kHz mono synth utterance (upsampled
// with libsoxr, float WAV so nothing is quantized; the channels are x + e and
// x - e, whose mean is x) gives, resampled back to 16 kHz, features close to
// the original's, and decodes.
//
// Tolerance: the 16 -> 44.1 -> 16 kHz round trip is not the identity: libsoxr's
// anti-aliasing filter (very high quality: passband to about 0.91 of Nyquist)
// removes the band from ~7.3 to 8 kHz, which the top mel filters (and, through
// the DCT, every cepstrum a little) see, and it rings over the first and last
// few ms (edge frames). So the test bounds the error per feature dimension
// relative to that dimension's spread over the utterance (its standard
// deviation): the mean absolute error below 5 % of it (measured: 2.2 %), and
// at most 1 % of all values off by more than 25 % of it (measured: none). A wrong rate (a 44.1 kHz file read as
// 16 kHz), a wrong down-mix (one channel only) or a shift of one frame breaks
// both bounds by far (checked below with a one-frame shift).
TEST_F(DecodeAudio, ResampledStereoMatchesTheOriginalAndDecodes) {
  testutil::TempDir d;
  const std::string wav16 = first_wav(SplitName::test);
  ASSERT_FALSE(wav16.empty());
  const Audio a16 = read_audio(wav16);
  ASSERT_EQ(a16.sample_rate, 16000);
  const std::vector<float> up = resample(a16.samples, 16000, 44100);
  ASSERT_EQ(up.size(), static_cast<size_t>(std::llround(a16.samples.size() * 44100.0 / 16000.0)));
  std::vector<double> st(2 * up.size());
  for (size_t i = 0; i < up.size(); ++i) {
    const double e = 500.0 * std::sin(0.013 * static_cast<double>(i));
    st[2 * i] = up[i] + e;
    st[2 * i + 1] = up[i] - e;
  }
  write_float_wav(d.str("my44k.wav"), st, 44100, 2);
  std::string out;
  ASSERT_EQ(testutil::run_capture(kBin + " features " + wav16 + " " + d.str("my44k.wav") + " --out " +
                                      d.str("f.safetensors"),
                                  &out),
            0)
      << out;
  EXPECT_NE(out.find(d.str("my44k.wav") + ": resampled from 44100 Hz to 16000 Hz, down-mixed 2 channels (mean)"),
            std::string::npos)
      << out;
  const timitseg::st::File f = timitseg::st::load(d.str("f.safetensors"));
  const std::vector<float> ref = f.tensors.at(wav16).to<float>(), got = f.tensors.at(d.str("my44k.wav")).to<float>();
  const auto& shape = f.tensors.at(wav16).shape;
  ASSERT_EQ(f.tensors.at(d.str("my44k.wav")).shape, shape);
  const int64_t T = shape[0], D = shape[1];
  auto errors = [&](int shift, double* mean_rel, double* frac_big) {
    double sum = 0;
    int64_t n = 0, big = 0;
    for (int64_t k = 0; k < D; ++k) {
      double m = 0, v = 0;
      for (int64_t t = 0; t < T; ++t) m += ref[t * D + k];
      m /= T;
      for (int64_t t = 0; t < T; ++t) v += (ref[t * D + k] - m) * (ref[t * D + k] - m);
      const double sd = std::sqrt(v / T);
      for (int64_t t = 0; t + shift < T; ++t) {
        const double r = std::abs(got[(t + shift) * D + k] - ref[t * D + k]) / sd;
        sum += r;
        big += r > 0.25;
        ++n;
      }
    }
    *mean_rel = sum / n;
    *frac_big = static_cast<double>(big) / n;
  };
  double mean_rel = 0, frac_big = 0;
  errors(0, &mean_rel, &frac_big);
  std::printf("44.1 kHz stereo vs 16 kHz original: mean |error| %.4f sd, %.4f of values over 0.25 sd\n", mean_rel,
              frac_big);
  EXPECT_LT(mean_rel, 0.05);
  EXPECT_LT(frac_big, 0.01);
  errors(1, &mean_rel, &frac_big);  // the bounds can fail: one frame off breaks them
  std::printf("shifted by one frame: mean |error| %.4f sd, %.4f of values over 0.25 sd\n", mean_rel, frac_big);
  EXPECT_GT(mean_rel, 0.1);
  EXPECT_GT(frac_big, 0.1);
  // decode: one line saying so; the .PHN is in samples of the 44.1 kHz file
  ASSERT_EQ(testutil::run_capture(kBin + " decode --checkpoint " + ckpt_ + " " + d.str("my44k.wav") + " " + wav16 +
                                      " --out " + d.str("dec"),
                                  &out),
            0)
      << out;
  EXPECT_NE(out.find(d.str("my44k.wav") + ": resampled from 44100 Hz to 16000 Hz, down-mixed 2 channels (mean)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find(wav16 + ": resampled"), std::string::npos) << out;
  // contiguous segments from 0 to the end of the 44.1 kHz file (labels of the model's set)
  std::istringstream phn(timitseg::read_file(d.str("dec/my44k.PHN")));
  int64_t b = 0, e = 0, prev = 0, n = 0;
  std::string label;
  while (phn >> b >> e >> label) {
    EXPECT_EQ(b, prev);
    EXPECT_LT(b, e);
    prev = e;
    ++n;
  }
  EXPECT_GT(n, 1);
  EXPECT_EQ(prev, static_cast<int64_t>(up.size()));
  EXPECT_TRUE(fs::exists(d.str("dec/my44k.TextGrid")));
}

// decode over a folder: every bad file is reported (one line naming it), the
// rest is decoded, and the exit is non-zero with a count.
TEST_F(DecodeAudio, FolderWithBadFilesDecodesTheRestAndFailsWithACount) {
  testutil::TempDir d;
  const std::string good = first_wav(SplitName::test);
  fs::create_directories(d.str("in/sub"));
  fs::copy_file(good, d.str("in/a.wav"));
  fs::copy_file(good, d.str("in/sub/c.wav"));
  testutil::write_text(d.str("in/b.wav"), "not audio at all, just some text in a file...........");
  const std::string bytes = timitseg::read_file(good);
  testutil::write_text(d.str("in/sub/cut.wav"), bytes.substr(0, bytes.size() - 1000));
  std::string out;
  EXPECT_EQ(testutil::run_capture(kBin + " decode --checkpoint " + ckpt_ + " " + d.str("in") + " --out " + d.str("dec"),
                                  &out),
            1);
  EXPECT_NE(out.find(d.str("in/b.wav") + ": not a NIST SPHERE or RIFF WAV file"), std::string::npos) << out;
  EXPECT_NE(out.find(d.str("in/sub/cut.wav") + ": truncated audio"), std::string::npos) << out;
  EXPECT_EQ(count_prefix(out, "error: "), 3) << out;  // one line per bad file (issue 41), then the count
  EXPECT_NE(out.find("error: " + d.str("in/b.wav") + ": not a NIST SPHERE"), std::string::npos) << out;
  EXPECT_NE(out.find("error: decode: 2 of 4 input file(s) failed (each named above: " + d.str("in/b.wav") + ", " +
                     d.str("in/sub/cut.wav") + "); 2 decoded into " + d.str("dec")),
            std::string::npos)
      << out;
  EXPECT_TRUE(fs::exists(d.str("dec/a.PHN")));
  EXPECT_TRUE(fs::exists(d.str("dec/sub/c.PHN")));
  EXPECT_FALSE(fs::exists(d.str("dec/b.PHN")));
  EXPECT_FALSE(fs::exists(d.str("dec/sub/cut.PHN")));
  // an output folder that cannot be written fails before any work, naming it
  testutil::write_text(d.str("afile"), "x");
  EXPECT_EQ(testutil::run_capture(kBin + " decode --checkpoint " + ckpt_ + " " + good + " --out " + d.str("afile/dec"),
                                  &out),
            1);
  EXPECT_EQ(count_prefix(out, "error: --out " + d.str("afile/dec") + ": cannot create the folder"), 1) << out;
}
