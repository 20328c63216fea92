// Regression tests of what the libFuzzer targets (tests/fuzz/, docs/fuzzing.md)
// found in the data layer's parsers; each input is committed as found under
// tests/data/fixtures/fuzz/. Expected verdicts are written out by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/features.h"
#include "tests/data/util.h"

using namespace timitseg::data;
using testutil::TempDir;

namespace {
std::string fixture(const std::string& name) {
  const std::string path = std::string(TIMITSEG_SOURCE_DIR) + "/tests/data/fixtures/fuzz/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": missing fixture");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
// The fixture NAME copied to DIR/FILE (the parsers name files by their path); returns the path.
std::string fixture_at(const TempDir& dir, const std::string& file, const std::string& name) {
  const std::string path = (dir.path / file).string();
  std::ofstream(path, std::ios::binary) << fixture(name);
  return path;
}
}  // namespace

// fuzz_phn: an unreadable line ("6 bcl", line 14) switched off the overlap check
// of the next line, so "12586 12832 b" (line 15), which overlaps line 13
// (15493 16222 dcl), was returned as a valid entry; parse_phn's entries must be
// sorted and non-overlapping. Every later line up to 16222 overlaps too.
TEST(FuzzRegression, PhnOverlapAfterUnreadableLineIsReported) {
  std::vector<Problem> problems;
  const auto entries = parse_phn("F.PHN", fixture("phn-overlap-after-unreadable-line.phn"), -1, &problems);
  ASSERT_GE(problems.size(), 2u);
  EXPECT_EQ(problems[0].line, 14);
  EXPECT_NE(problems[0].message.find("expected 'start end phone'"), std::string::npos) << problems[0].str();
  EXPECT_EQ(problems[1].line, 15);
  EXPECT_TRUE(problems[1].error);
  EXPECT_NE(problems[1].message.find("overlaps the previous phone (starts at 12586, previous ends at 16222)"),
            std::string::npos)
      << problems[1].str();
  for (size_t i = 1; i < entries.size(); ++i) EXPECT_GE(entries[i].start, entries[i - 1].end) << "entry " << i;
  // The same in a small file: the overlap after a bad line is an error, a gap is
  // not judged against the bad line.
  problems.clear();
  parse_phn("F.PHN", "0 100 h#\nbad\n50 200 aa\n", 200, &problems);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[1].line, 3);
  EXPECT_NE(problems[1].message.find("overlaps the previous phone"), std::string::npos) << problems[1].str();
  problems.clear();
  parse_phn("F.PHN", "0 100 h#\nbad\n150 200 aa\n", 200, &problems);
  ASSERT_EQ(problems.size(), 1u) << problems.back().str();
  EXPECT_EQ(problems[0].line, 2);
}

namespace {
// A WORKDIR holding FILE_NAME with the bytes of `content`, listed in a
// manifest.json with its true size and SHA-256 (as the fuzz_cache harness does),
// so the loader gets past the checksum to the parser.
void cache_workdir(const TempDir& dir, const std::string& file_name, const std::string& content) {
  testutil::write_text(dir.str(file_name), content);
  nlohmann::json m;
  m["format_version"] = kPreparedFormatVersion;
  m["files"][file_name] = {{"bytes", content.size()}, {"sha256", timitseg::sha256_hex(content)}};
  testutil::write_text(dir.str("manifest.json"), m.dump());
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

// fuzz_cache: a split file whose 'labels' tensor holds values outside the 61
// phones (here the first 7 are float bits, 1078189489 first) was loaded as it
// was; the model layer indexes with those labels. Now the file is refused,
// naming the tensor, the index and the value.
TEST(FuzzRegression, CacheLabelOutOfRangeIsRefused) {
  TempDir dir;
  cache_workdir(dir, "train.safetensors", fixture("cache-label-out-of-range.safetensors"));
  const std::string msg = error_of([&] { load_split(dir.str(), "train"); });
  EXPECT_EQ(msg.rfind(dir.str("train.safetensors") + ": tensor 'labels' index 0: 1078189489 is not a phone index", 0),
            0u)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// The other checks added with it: segments that are not the runs of the labels,
// a q label, a negative sample count, 'utterances' that are not an array of
// entries with string fields. Each file is otherwise valid (2 frames, 1 utterance).
TEST(FuzzRegression, CacheCorruptValuesAreRefusedNamingTensor) {
  namespace st = timitseg::st;
  auto split = [](std::vector<int32_t> labels, std::vector<int32_t> segs, int64_t nsamp, const std::string& utts) {
    st::File f;
    f.metadata["utterances"] = utts;
    f.tensors["features"] = st::Tensor::from<float>({2, 1}, std::vector<float>{0.f, 1.f});
    f.tensors["labels"] = st::Tensor::from<int32_t>({2}, labels);
    f.tensors["num_samples"] = st::Tensor::from<int64_t>({1}, std::vector<int64_t>{nsamp});
    f.tensors["segments"] = st::Tensor::from<int32_t>({static_cast<int64_t>(segs.size() / 3), 3}, segs);
    f.tensors["utt_frame_offsets"] = st::Tensor::from<int64_t>({2}, std::vector<int64_t>{0, 2});
    f.tensors["utt_segment_offsets"] =
        st::Tensor::from<int64_t>({2}, std::vector<int64_t>{0, static_cast<int64_t>(segs.size() / 3)});
    TempDir tmp;
    st::save(tmp.str("x.safetensors"), f);
    return timitseg::read_file(tmp.str("x.safetensors"));
  };
  const std::string good_utts = R"([{"id":"train/dr1/a/si1","speaker":"a","audio":"/x.WAV"}])";
  const int q = PhoneSet::timit().index61("q");
  struct Case { std::string bytes, needle; };
  const std::vector<Case> cases = {
      {split({3, 3}, {0, 2, 3}, 560, good_utts), ""},  // valid: loads
      {split({3, 4}, {0, 2, 3}, 560, good_utts), "tensor 'segments' of utterance 0 (train/dr1/a/si1) are not the runs"},
      {split({3, q}, {0, 1, 3, 1, 1, q}, 560, good_utts), "tensor 'labels' index 1: " + std::to_string(q)},
      {split({3, 3}, {0, 2, 3}, -1, good_utts), "tensor 'num_samples' index 0: -1 is negative"},
      {split({3, 3}, {0, 2, 3}, 560, R"({"id":"x"})"), "metadata 'utterances' is not a JSON array"},
      {split({3, 3}, {0, 2, 3}, 560, R"([{"id":1,"speaker":"a","audio":"/x.WAV"}])"),
       "metadata 'utterances' entry 0 needs strings"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    cache_workdir(dir, "train.safetensors", c.bytes);
    const std::string msg = error_of([&] { load_split(dir.str(), "train"); });
    if (c.needle.empty()) {
      EXPECT_EQ(msg, "(no error)");
      continue;
    }
    EXPECT_EQ(msg.rfind(dir.str("train.safetensors") + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
  }
}

// fuzz_manifest: a manifest.json whose entry of cmvn.safetensors has no
// "sha256" key ("sha128" in the input) made load_cmvn throw the bare JSON
// library message "[json.exception.out_of_range.403] key 'sha256' not found",
// naming no file. Now the manifest and the entry are named.
TEST(FuzzRegression, ManifestEntryWithoutChecksumNamesManifest) {
  TempDir dir;
  std::string text = fixture("manifest-entry-without-sha256.json");
  // The fuzz_manifest placeholders of sizes (the checksums are never reached).
  for (const std::string ph : {"@TRAIN_BYTES@", "@CMVN_BYTES@"})
    for (size_t p = text.find(ph); p != std::string::npos; p = text.find(ph)) text.replace(p, ph.size(), "920");
  testutil::write_text(dir.str("manifest.json"), text);
  testutil::write_text(dir.str("cmvn.safetensors"), std::string(920, 'x'));
  const std::string msg = error_of([&] { load_cmvn(dir.str()); });
  EXPECT_EQ(msg.rfind(dir.str("manifest.json") + ": entry of cmvn.safetensors is malformed (needs \"bytes\" and \"sha256\"", 0),
            0u)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// fuzz_manifest (found by the 30 s CI run, 2026-11-26): an entry whose "bytes"
// is 3.5e+39 was converted to uint64_t (undefined behaviour, UBSan: "outside
// the range of representable values"); -1 and 1.5 likewise. Each is now one
// line naming the manifest and the entry.
TEST(FuzzRegression, ManifestEntryWithANonCountSizeNamesManifest) {
  for (const std::string bytes : {"3500000000000000000000000000000000000104", "3.5e+39", "-1", "1.5", "\"920\""}) {
    TempDir dir;
    std::string text = fixture("manifest-entry-without-sha256.json");
    for (size_t p = text.find("@TRAIN_BYTES@"); p != std::string::npos; p = text.find("@TRAIN_BYTES@"))
      text.replace(p, 13, "920");
    for (size_t p = text.find("@CMVN_BYTES@"); p != std::string::npos; p = text.find("@CMVN_BYTES@"))
      text.replace(p, 12, bytes);
    testutil::write_text(dir.str("manifest.json"), text);
    testutil::write_text(dir.str("cmvn.safetensors"), std::string(920, 'x'));
    const std::string msg = error_of([&] { load_cmvn(dir.str()); });
    EXPECT_EQ(msg.rfind(dir.str("manifest.json") + ": entry of cmvn.safetensors is malformed (needs \"bytes\" and \"sha256\"; \"bytes\" is ", 0),
              0u)
        << bytes << ": " << msg;
    EXPECT_NE(msg.find("not a byte count"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// fuzz target `audio` (found by the 30 s CI run): a file that starts "RIFF"
// but whose RIFF type field holds a newline ("RIFFNIST_1A\n...": a SPHERE
// header behind a RIFF tag). The message quoted the type's raw bytes and so
// took two lines; header bytes are now quoted with \xNN escapes.
TEST(FuzzRegression, RiffTypeWithNewlineGivesOneLine) {
  TempDir dir;
  const std::string path = fixture_at(dir, "SI1.WAV", "audio-riff-type-with-newline.wav");
  try {
    read_audio(path);
    FAIL() << path << " was read as audio";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg, path + ": a RIFF file of type '_1A\\x0A', not a WAVE file") << msg;
  }
}

// fuzz target `safetensors` (found by the 30 s CI run): a header whose tensor
// name holds a newline (JSON "segm\nts") and whose entry lacks dtype, shape and
// data_offsets. The message quoted the name as it was and took two lines; every
// header error now goes through one_line (common/text.h), which escapes it.
TEST(FuzzRegression, SafetensorsTensorNameWithNewlineGivesOneLine) {
  TempDir dir;
  const std::string path = fixture_at(dir, "train.safetensors", "safetensors-tensor-name-with-newline.safetensors");
  try {
    timitseg::st::load(path);
    FAIL() << path << " was loaded";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg, path + ": tensor 'segm\\nts': entry needs dtype, shape and data_offsets") << msg;
  }
}
