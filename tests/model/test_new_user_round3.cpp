// Issue 41's path of a new user, with the built binary on a tiny synth corpus:
// (1) a checkpoint given features prepared with other options is refused by
// evaluate, report and compare (one line naming both option sets), and a
// checkpoint whose feature options disagree with its own input dimension by
// decode and align; (2) a full disk (the injected ENOSPC of common/atomic_file.h)
// leaves no file of the failed input, whatever format failed; (3) SIGINT
// (sent by the process to itself at a known point through the real handler,
// TIMITSEG_TEST_SIGINT_AT_CHECK) stops decode, align, evaluate, prepare and
// compare with one line and exit 130, leaving no folder they created empty;
// (4) one missing input among good ones: the good ones are decoded / aligned,
// rc 1, the summary names the failed one; one `error:` line per bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "model/feature_check.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using testsupport::Cmd;
using testsupport::run;
using testsupport::sh;
using testsupport::slurp;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The lines of `text` that start with "error:".
std::vector<std::string> error_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    if (line.rfind("error:", 0) == 0) out.push_back(line);
    at = end + 1;
  }
  return out;
}

std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

class NewUser3 : public ::testing::Test {
 protected:
  static fs::path dir_;
  static Cmd train_, fbank_;
  static std::vector<fs::path> wavs_;  // the TEST .WAV files of the synth corpus, sorted
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_new_user3");
    const Cmd c = testsupport::make_prepared_corpus(testsupport::binary(), dir_, 6, 4, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
    // the same corpus prepared as fbank with 39 mel bins: 39 dims too, as the MFCC model takes
    fbank_ = run("prepare --timit " + (dir_ / "synth").string() + " --out " + (dir_ / "work_fbank").string() +
                 " --features fbank --num-mel-bins 39");
    train_ = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                 (dir_ / "work").string() + " --set train.run_dir=" + (dir_ / "run").string() +
                 " --set model.hidden_dim=16 --set model.num_layers=1 --set train.epochs=1 --set train.threads=2");
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "synth" / "TEST"))
      if (e.path().extension() == ".WAV") wavs_.push_back(e.path());
    std::sort(wavs_.begin(), wavs_.end());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string best() { return (dir_ / "run" / "checkpoints" / "best.safetensors").string(); }
  static std::string phones_of(const fs::path& wav) {  // the .PHN's phones, space-separated
    std::ifstream in(fs::path(wav).replace_extension(".PHN"));
    std::string out, line;
    while (std::getline(in, line)) {
      const std::string name = line.substr(line.rfind(' ') + 1);
      out += (out.empty() ? "" : " ") + name;
    }
    return out;
  }
};
fs::path NewUser3::dir_;
Cmd NewUser3::train_, NewUser3::fbank_;
std::vector<fs::path> NewUser3::wavs_;

}  // namespace

// (1) evaluate and report of a WORKDIR prepared with other feature options: one line naming both, no number.
TEST_F(NewUser3, OtherFeatureOptionsAreRefusedNamingBoth) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  ASSERT_EQ(fbank_.rc, 0) << fbank_.output;
  const std::string fb = (dir_ / "work_fbank").string();
  const Cmd e = run("evaluate --checkpoint " + best() + " --workdir " + fb + " --device cpu --no-progress");
  EXPECT_EQ(e.rc, 1) << e.output;
  const std::vector<std::string> errs = error_lines(e.output);
  ASSERT_EQ(errs.size(), 1u) << e.output;
  EXPECT_NE(errs[0].find(best() + " was trained on mfcc features (39 dims;"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find(fb + "/manifest.json holds fbank features (39 dims;"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find("num_mel_bins 23"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find("num_mel_bins 39"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find("differ (type, "), std::string::npos) << errs[0];
  EXPECT_EQ(e.output.find("PER"), std::string::npos) << e.output;
  // the same WORKDIR's own options pass
  const Cmd ok = run("evaluate --checkpoint " + best() + " --workdir " + (dir_ / "work").string() +
                     " --device cpu --no-progress");
  EXPECT_EQ(ok.rc, 0) << ok.output;
  EXPECT_NE(ok.output.find("PER"), std::string::npos) << ok.output;
  // report of the run on the fbank WORKDIR
  const Cmd r = run("report " + (dir_ / "run").string() + " --out " + (dir_ / "r.html").string() + " --workdir " + fb);
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));
  EXPECT_NE(r.output.find("was trained on mfcc features"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("holds fbank features"), std::string::npos) << r.output;
}

// (1) train --resume on a WORKDIR prepared with other feature options (data.workdir may change on resume:
// "a WORKDIR that moved"): one line naming both, nothing trained or written; the run's own WORKDIR resumes.
TEST_F(NewUser3, ResumeOnOtherFeatureOptionsIsRefusedNamingBoth) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  ASSERT_EQ(fbank_.rc, 0) << fbank_.output;
  const fs::path run_dir = dir_ / "run_resume";
  fs::copy(dir_ / "run", run_dir, fs::copy_options::recursive);
  const std::vector<std::string> before = files_under(run_dir / "checkpoints");
  const std::string epoch1 = (run_dir / "checkpoints" / "epoch-1.safetensors").string();
  ASSERT_TRUE(fs::exists(epoch1)) << before.size() << " checkpoint file(s)";
  const std::string fb = (dir_ / "work_fbank").string();
  const Cmd bad = run("train --resume " + run_dir.string() + " --set data.workdir=" + fb + " --set train.epochs=2");
  EXPECT_EQ(bad.rc, 1) << bad.output;
  const std::vector<std::string> errs = error_lines(bad.output);
  ASSERT_EQ(errs.size(), 1u) << bad.output;
  EXPECT_NE(errs[0].find(epoch1 + " was trained on mfcc features (39 dims;"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find(fb + "/manifest.json holds fbank features (39 dims;"), std::string::npos) << errs[0];
  EXPECT_EQ(files_under(run_dir / "checkpoints"), before);  // no epoch-2 written
  const Cmd ok = run("train --resume " + run_dir.string() + " --set train.epochs=2");
  EXPECT_EQ(ok.rc, 0) << ok.output;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "epoch-2.safetensors")) << ok.output;
}

// (1) decode and align: they compute features with the checkpoint's own options; a checkpoint whose
// recorded options do not give its input dimension (metadata edited) is refused naming both.
TEST_F(NewUser3, ACheckpointWhoseFeatureOptionsDisagreeWithItsModelIsRefused) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  timitseg::st::File f = timitseg::st::load(best());
  f.metadata["feature_options"] = R"({"type": "fbank", "num_mel_bins": 40})";
  const std::string bad = (dir_ / "edited.safetensors").string();
  timitseg::st::save(bad, f);
  const std::string want = bad + ": the checkpoint's feature options give fbank features (40 dims; num_mel_bins 40), "
                                 "its model takes 39 dims";
  const Cmd d = run("decode --checkpoint " + bad + " " + wavs_.at(0).string() + " --out " +
                    (dir_ / "dec_edited").string() + " --device cpu");
  EXPECT_EQ(d.rc, 1) << d.output;
  EXPECT_NE(d.output.find("error: " + want), std::string::npos) << d.output;
  EXPECT_FALSE(fs::exists(dir_ / "dec_edited"));
  const Cmd a = run("align --checkpoint " + bad + " " + wavs_.at(0).string() + " --out " +
                    (dir_ / "al_edited").string() + " --device cpu");
  EXPECT_EQ(a.rc, 1) << a.output;
  EXPECT_NE(a.output.find("error: " + want), std::string::npos) << a.output;
}

// (4) one missing file among good ones: the good ones decoded, rc 1, the summary names the failed one.
TEST_F(NewUser3, DecodeGoesOnPastAMissingInput) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const fs::path out = dir_ / "dec_missing";
  const std::string missing = (dir_ / "nosuch.wav").string();
  const Cmd d = run("decode --checkpoint " + best() + " " + wavs_.at(0).string() + " " + missing + " " +
                    wavs_.at(1).string() + " --out " + out.string() + " --device cpu");
  EXPECT_EQ(d.rc, 1) << d.output;
  EXPECT_TRUE(fs::exists(out / (wavs_[0].stem().string() + ".PHN"))) << d.output;
  EXPECT_TRUE(fs::exists(out / (wavs_[1].stem().string() + ".PHN"))) << d.output;
  const std::vector<std::string> errs = error_lines(d.output);
  ASSERT_EQ(errs.size(), 2u) << d.output;  // the input's line, then the summary
  EXPECT_EQ(errs[0], "error: " + missing + ": no such file or folder");
  EXPECT_EQ(errs[1], "error: decode: 1 of 3 input file(s) failed (each named above: " + missing + "); 2 decoded into " +
                         out.string());
  EXPECT_EQ(d.output.find("[error]"), std::string::npos) << d.output;
  // every input missing: rc 1 and no --out folder left
  const Cmd none = run("decode --checkpoint " + best() + " " + missing + " --out " + (dir_ / "dec_none").string() +
                       " --device cpu");
  EXPECT_EQ(none.rc, 1) << none.output;
  EXPECT_FALSE(fs::exists(dir_ / "dec_none"));
}

// (4) align: a --phones list whose line 2 is empty, and a missing audio file among good ones.
TEST_F(NewUser3, AlignGoesOnPastAnEmptyTranscriptAndAMissingFile) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const fs::path list = dir_ / "mixed_empty.txt", out = dir_ / "al_mixed";
  std::ofstream(list) << wavs_.at(0).string() << " " << phones_of(wavs_[0]) << "\n"
                      << wavs_.at(1).string() << "\n"
                      << wavs_.at(2).string() << " " << phones_of(wavs_[2]) << "\n";
  const Cmd a = run("align --checkpoint " + best() + " --phones " + list.string() + " --out " + out.string() +
                    " --device cpu");
  EXPECT_EQ(a.rc, 1) << a.output;
  EXPECT_EQ(files_under(out), (std::vector<std::string>{wavs_[0].stem().string() + ".PHN",
                                                        wavs_[0].stem().string() + ".TextGrid",
                                                        wavs_[2].stem().string() + ".PHN",
                                                        wavs_[2].stem().string() + ".TextGrid"}))
      << a.output;
  const std::vector<std::string> errs = error_lines(a.output);
  ASSERT_EQ(errs.size(), 2u) << a.output;
  EXPECT_EQ(errs[0], "error: " + list.string() + ":2: empty transcript for '" + wavs_[1].string() +
                         "' (expected 'AUDIO tok tok ...')");
  EXPECT_EQ(errs[1], "error: align: 1 of 3 input file(s) failed (each named above: " + wavs_[1].string() +
                         "); 2 aligned into " + out.string());
  // a missing audio file given on the command line, among good ones
  const std::string missing = (dir_ / "nosuch.wav").string();
  const Cmd m = run("align --checkpoint " + best() + " " + wavs_[0].string() + " " + missing + " --out " +
                    (dir_ / "al_missing").string() + " --device cpu");
  EXPECT_EQ(m.rc, 1) << m.output;
  EXPECT_TRUE(fs::exists(dir_ / "al_missing" / (wavs_[0].stem().string() + ".PHN"))) << m.output;
  EXPECT_NE(m.output.find("error: " + missing + ": no such file or folder\n"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("failed (each named above: " + missing + "); 1 aligned"), std::string::npos) << m.output;
  // every input failed: no "align: N utterance(s) on cpu" line (nothing was aligned), no folder left
  const Cmd all = run("align --checkpoint " + best() + " " + missing + " --out " + (dir_ / "al_none").string() +
                      " --device cpu");
  EXPECT_EQ(all.rc, 1) << all.output;
  EXPECT_EQ(all.output.find("utterance(s) on"), std::string::npos) << all.output;
  EXPECT_FALSE(fs::exists(dir_ / "al_none"));
}

// (2) a full disk while one input's formats are written: none of that input's files is left, for every
// byte budget from "nothing fits" to "all but the last byte fits"; the other input is aligned.
TEST_F(NewUser3, AFullDiskLeavesNoFileOfTheFailedInput) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const std::string stem = wavs_.at(0).stem().string(), other = wavs_.at(1).stem().string();
  const std::string args = " --checkpoint " + best() + " " + wavs_[0].string() + " " + wavs_[1].string() +
                           " --format phn,textgrid,csv,json,ctm --device cpu --out ";
  for (const char* command : {"align", "decode"}) {
    const std::string cmd = command;
    // the full outputs' size, from a run without the hook
    const fs::path full = dir_ / ("enospc_full_" + cmd);
    ASSERT_EQ(run(cmd + args + full.string()).rc, 0);
    uint64_t bytes = 0;
    for (const std::string& f : files_under(full))
      if (f.rfind(stem + ".", 0) == 0) bytes += fs::file_size(full / f);
    ASSERT_GT(bytes, 100u);
    for (const uint64_t budget : {uint64_t{0}, uint64_t{40}, bytes / 3, bytes / 2, bytes - 1}) {
      const fs::path out = dir_ / ("enospc_" + cmd + std::to_string(budget));
      const Cmd a = sh("TIMITSEG_TEST_ENOSPC_AFTER_BYTES=" + std::to_string(budget) + " TIMITSEG_TEST_ENOSPC_PATH=/" +
                       stem + ". " + testsupport::binary() + " " + cmd + args + out.string());
      EXPECT_EQ(a.rc, 1) << cmd << " " << budget << ": " << a.output;
      EXPECT_NE(a.output.find("no space left on device"), std::string::npos) << a.output;
      for (const std::string& f : files_under(out)) {
        EXPECT_NE(f.rfind(stem + ".", 0), 0u) << cmd << " budget " << budget << ": " << f << " left";
        EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
      }
      EXPECT_TRUE(fs::exists(out / (other + ".PHN"))) << a.output;
    }
  }
}

// (3) SIGINT at a known point (the process sends it to itself through the installed handler):
// one error line saying what was done and what was not, exit 130, no folder the command created left empty.
TEST_F(NewUser3, SigintStopsEachCommandWithOneLine) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const std::string env = "TIMITSEG_TEST_SIGINT_AT_CHECK=";
  const std::string wav = wavs_.at(0).string(), wav2 = wavs_.at(1).string();
  struct Case {
    std::string name, at, args, want;
    fs::path out;
  };
  const fs::path out = dir_ / "int";
  const std::vector<Case> cases = {
      {"decode first", "1", "decode --checkpoint " + best() + " " + wav + " " + wav2 + " --device cpu --out " +
                                (out / "dec1" / "sub").string(),
       "error: decode interrupted (SIGINT): 0 of 2 input file(s) decoded into " + (out / "dec1" / "sub").string() +
           ", 2 not decoded",
       out / "dec1"},
      {"decode second", "2", "decode --checkpoint " + best() + " " + wav + " " + wav2 + " --device cpu --out " +
                                 (out / "dec2").string(),
       "error: decode interrupted (SIGINT): 1 of 2 input file(s) decoded into " + (out / "dec2").string() +
           ", 1 not decoded",
       ""},
      {"align", "1", "align --checkpoint " + best() + " " + wav + " --device cpu --out " + (out / "al").string(),
       "error: align interrupted (SIGINT): 0 of 1 input file(s) aligned into " + (out / "al").string() +
           ", 1 not aligned",
       out / "al"},
      {"align during its batch", "2", "align --checkpoint " + best() + " " + wav + " --device cpu --out " +
                                        (out / "al2").string(),  // the stop seen after the alignment, before its files
       "error: align interrupted (SIGINT): 0 of 1 input file(s) aligned into " + (out / "al2").string() +
           ", 1 not aligned",
       out / "al2"},
      {"evaluate", "3", "evaluate --checkpoint " + best() + " --device cpu --no-progress --split dev --dump-scores " +
                            (out / "scores").string(),
       "error: evaluate interrupted (SIGINT): 2 of ", ""},
      {"prepare", "2", "prepare --timit " + (dir_ / "synth").string() + " --out " + (out / "prep").string() +
                           " --threads 1 --no-progress",
       "error: prepare interrupted (SIGINT): 1 of ", out / "prep"},
  };
  for (const Case& c : cases) {
    const Cmd r = sh(env + c.at + " " + testsupport::binary() + " " + c.args);
    EXPECT_EQ(r.rc, 130) << c.name << ": " << r.output;
    const std::vector<std::string> errs = error_lines(r.output);
    ASSERT_EQ(errs.size(), 1u) << c.name << ": " << r.output;
    EXPECT_EQ(errs[0].rfind(c.want, 0), 0u) << c.name << ": " << errs[0];
    if (!c.out.empty()) EXPECT_FALSE(fs::exists(c.out)) << c.name << ": " << c.out << " left";
  }
  // decode interrupted after its first input: that input's outputs stay, complete
  EXPECT_TRUE(fs::exists(out / "dec2" / (wavs_[0].stem().string() + ".PHN")));
  EXPECT_FALSE(fs::exists(out / "dec2" / (wavs_[1].stem().string() + ".PHN")));
  // evaluate: the --dump-scores folder keeps the utterances dumped before the stop, nothing else is written
  EXPECT_FALSE(fs::exists(out / "scores") && fs::is_empty(out / "scores"));
}

// (1) + (3) compare: a run folder whose checkpoint was trained on features the WORKDIR no longer holds (the
// same path prepared again with other options) is a conflict naming both; SIGINT before its evaluation.
TEST_F(NewUser3, CompareRefusesARunOfOtherFeaturesAndStopsOnSigint) {
  ASSERT_EQ(fbank_.rc, 0) << fbank_.output;
  const fs::path work = dir_ / "work_cmp", runs = dir_ / "cmp";
  fs::copy(dir_ / "work", work, fs::copy_options::recursive);
  const std::string args = "compare --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml" +
                           " --set data.workdir=" + work.string() + " --set train.run_dir=" + runs.string() +
                           " --set model.hidden_dim=8 --set model.num_layers=1 --set train.epochs=1" +
                           " --set train.threads=2 --device cpu";  // (7) compare --device, as train's
  const Cmd first = run(args);
  ASSERT_EQ(first.rc, 0) << first.output;
  // (8) the table: every row as wide as the header, the "align (samples)" rows included
  {
    std::vector<std::string> rows;
    bool in = false;
    size_t at = 0;
    while (at < first.output.size()) {
      const size_t end = std::min(first.output.find('\n', at), first.output.size());
      const std::string line = first.output.substr(at, end - at);
      at = end + 1;
      if (line.rfind("metric ", 0) == 0 && rows.empty()) in = true;
      if (in) rows.push_back(line);
      if (in && line.rfind("train frames/s", 0) == 0) break;
    }
    ASSERT_GT(rows.size(), 5u) << first.output;
    bool samples = false;
    for (const std::string& r : rows) {
      EXPECT_EQ(r.size(), rows[0].size()) << "'" << r << "'";
      samples = samples || r.rfind("align (samples)", 0) == 0;
    }
    EXPECT_TRUE(samples) << first.output;
  }
  // SIGINT before the first run's evaluation (both runs reused): one line, 130, the runs stay
  const Cmd i = sh("TIMITSEG_TEST_SIGINT_AT_CHECK=1 " + testsupport::binary() + " " + args);
  EXPECT_EQ(i.rc, 130) << i.output;
  ASSERT_EQ(error_lines(i.output).size(), 1u) << i.output;
  EXPECT_EQ(error_lines(i.output)[0].rfind("error: compare interrupted (SIGINT): every run trained (under " +
                                               runs.string() + "), 0 of 2 evaluated",
                                           0),
            0u)
      << i.output;
  EXPECT_TRUE(fs::exists(runs / "linear" / "checkpoints" / "best.safetensors"));
  // the same WORKDIR path, prepared again as fbank (39 dims)
  fs::remove_all(work);
  fs::copy(dir_ / "work_fbank", work, fs::copy_options::recursive);
  const Cmd again = run(args);
  EXPECT_EQ(again.rc, 1) << again.output;
  EXPECT_NE(again.output.find("trained on mfcc features (39 dims;"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find(work.string() + " holds fbank features (39 dims;"), std::string::npos) << again.output;
  EXPECT_EQ(count(again.output, "error:"), 1u) << again.output;
}

// The comparison itself: the options that change the features, both sets named, allow_resample ignored.
TEST(FeatureCheck, DifferencesNameBothSetsAndIgnoreAllowResample) {
  using timitseg::data::FeatureOptions;
  using timitseg::data::FeatureType;
  timitseg::model::ModelState s;
  s.features = FeatureOptions::defaults_for(FeatureType::mfcc);
  FeatureOptions same = s.features;
  same.allow_resample = true;  // permits other rates, changes no feature
  EXPECT_TRUE(timitseg::model::feature_option_differences(s.features, same).empty());
  EXPECT_NO_THROW(timitseg::model::check_feature_options(s, "c.safetensors", same, "w/manifest.json"));
  FeatureOptions shift = s.features;
  shift.frame_shift_ms = 5.0;
  EXPECT_EQ(timitseg::model::feature_option_differences(s.features, shift), std::vector<std::string>{"frame_shift_ms"});
  try {
    timitseg::model::check_feature_options(s, "c.safetensors", shift, "w/manifest.json");
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(),
                 "c.safetensors was trained on mfcc features (39 dims; frame_shift_ms 10.0), w/manifest.json holds mfcc "
                 "features (39 dims; frame_shift_ms 5.0): the feature options differ (frame_shift_ms); use a WORKDIR "
                 "prepared with the checkpoint's feature options (`timitseg prepare`, docs/features.md)");
  }
  // fbank with 23 bins against mfcc's 23 mel bins: the type (and what differs with it) named
  FeatureOptions fb = FeatureOptions::defaults_for(FeatureType::fbank);
  fb.num_mel_bins = 23;
  const std::vector<std::string> d = timitseg::model::feature_option_differences(s.features, fb);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0], "type");
}

// (2) a real full disk: align onto a 16 KiB tmpfs (4 pages; the five formats of one utterance need more,
// each file at least a page), mounted in a private user + mount namespace (`unshare -rm`). The input fails
// with one line and leaves no file, complete or temporary, and no folder of its own beside --out.
TEST_F(NewUser3, ARealFullTmpfsLeavesNoFileOfTheFailedInput) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const fs::path mnt = dir_ / "tmpfs", log = dir_ / "tmpfs_align.log", rc = dir_ / "tmpfs_align.rc",
                 left = dir_ / "tmpfs_left";
  fs::create_directories(mnt);
  if (sh("unshare -rm sh -c 'mount -t tmpfs -o size=16k tmpfs " + mnt.string() + " && umount " + mnt.string() + "'")
          .rc != 0)
    GTEST_SKIP() << "unshare -rm cannot mount a tmpfs on this machine; AFullDiskLeavesNoFileOfTheFailedInput covers it";
  const std::string script = "mount -t tmpfs -o size=16k tmpfs " + mnt.string() + " && mkdir " + (mnt / "out").string() +
                             " && { " + testsupport::binary() + " align --checkpoint " + best() + " " +
                             wavs_.at(0).string() + " --format phn,textgrid,csv,json,ctm --device cpu --out " +
                             (mnt / "out" / "sub").string() + " > " + log.string() + " 2>&1; echo \\$? > " +
                             rc.string() + "; ls -A " + (mnt / "out").string() + " > " + left.string() + "; }";
  const Cmd u = sh("unshare -rm sh -c \"" + script + "\"");
  ASSERT_EQ(u.rc, 0) << u.output;
  const std::string out = slurp(log);
  EXPECT_EQ(slurp(rc), "1\n") << out;
  EXPECT_NE(out.find("no space left on device"), std::string::npos) << out;
  EXPECT_EQ(slurp(left), "") << out;  // out/sub, made by align, removed again: nothing in it
}
