// Checkpoint integrity (issue 13): the `tensor_sha256` metadata key (checked
// against an independent hash of the documented byte stream), a flipped data
// byte caught by it, and the range checks of CMVN statistics, parameters and
// optimizer moments (values written through save_checkpoint, i.e. with a valid
// checksum). The pre-issue-11 fixture (no checksum key) still loads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "common/sha256.h"
#include "model/model.h"
#include "tests/support/model_problems.h"
#include "tests/common/tmpdir.h"

namespace fs = std::filesystem;
using namespace timitseg;
using namespace timitseg::model;

namespace {

ModelState tiny_state() { return testsupport::tiny_model_state(/*with_cmvn=*/true); }

// The error message of load_checkpoint(path); fails the test when it loads.
std::string load_error(const std::string& path) {
  try {
    load_checkpoint(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " loaded";
  return "";
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST(CheckpointChecks, ChecksumKeyMatchesTheDocumentedByteStream) {
  commontest::TempDir dir;
  const std::string path = (dir.path / "c.safetensors").string();
  save_checkpoint(path, tiny_state());
  const st::File f = st::load(path);
  ASSERT_TRUE(f.metadata.count("tensor_sha256"));
  // Independent oracle: the byte stream of checkpoint.h built by hand, hashed once.
  std::string stream;
  for (const auto& [name, t] : f.tensors) {
    stream += name + '\0' + st::dtype_name(t.dtype) + '\0';
    for (size_t i = 0; i < t.shape.size(); ++i) stream += (i ? "," : "") + std::to_string(t.shape[i]);
    stream += '\0';
    for (int i = 0; i < 8; ++i) stream += static_cast<char>((uint64_t(t.bytes.size()) >> (8 * i)) & 0xff);
    stream.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  EXPECT_EQ(f.metadata.at("tensor_sha256"), sha256_hex(stream));
  EXPECT_EQ(f.metadata.at("tensor_sha256").size(), 64u);
  const ModelState back = load_checkpoint(path);
  EXPECT_EQ(back.params, tiny_state().params);
  EXPECT_EQ(back.cmvn.var, tiny_state().cmvn.var);
}

TEST(CheckpointChecks, FlippedDataByteFailsNamingTheChecksum) {
  commontest::TempDir dir;
  const fs::path good = dir.path / "good.safetensors", bad = dir.path / "bad.safetensors";
  save_checkpoint(good.string(), tiny_state());
  std::vector<char> b = read_bytes(good);
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t(static_cast<uint8_t>(b[i])) << (8 * i);
  const size_t data_begin = 8 + header;
  ASSERT_LT(data_begin, b.size());
  // Bytes across the whole data section (every 97th) are caught; flipping the
  // low bit of a float's byte keeps it finite, so only the checksum can tell.
  int checked = 0;
  for (size_t pos = data_begin; pos < b.size(); pos += 97) {
    std::vector<char> c = b;
    c[pos] ^= 0x01;
    write_bytes(bad, c);
    const st::File f = st::load(bad.string());  // still a well-formed safetensors file
    const std::string msg = load_error(bad.string());
    ASSERT_EQ(msg.rfind(bad.string() + ": ", 0), 0u) << msg;
    ASSERT_NE(msg.find("checksum"), std::string::npos) << msg;
    ASSERT_NE(msg.find(f.metadata.at("tensor_sha256")), std::string::npos) << msg;
    ++checked;
  }
  EXPECT_GT(checked, 10);
  // The unmodified file still loads.
  EXPECT_NO_THROW(load_checkpoint(good.string()));
}

TEST(CheckpointChecks, EditedChecksumKeyFails) {
  commontest::TempDir dir;
  const fs::path p = dir.path / "c.safetensors";
  save_checkpoint(p.string(), tiny_state());
  st::File f = st::load(p.string());
  std::string& key = f.metadata.at("tensor_sha256");
  key[0] = key[0] == '0' ? '1' : '0';
  st::save(p.string(), f);
  EXPECT_NE(load_error(p.string()).find("checksum"), std::string::npos);
}

TEST(CheckpointChecks, NegativeCmvnVarianceFailsNamingTheTensor) {
  commontest::TempDir dir;
  const std::string path = (dir.path / "c.safetensors").string();
  ModelState s = tiny_state();
  s.cmvn.var[2] = -1.0;  // written through save: valid checksum
  save_checkpoint(path, s);
  const std::string msg = load_error(path);
  EXPECT_EQ(msg.rfind(path + ": tensor 'cmvn.var' [2] = -1: ", 0), 0u) << msg;
  for (double bad : {0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    s = tiny_state();
    s.cmvn.var[1] = bad;
    save_checkpoint(path, s);
    const std::string m = load_error(path);
    EXPECT_EQ(m.rfind(path + ": tensor 'cmvn.var' [1] = ", 0), 0u) << m;
  }
  s = tiny_state();
  s.cmvn.mean[0] = std::numeric_limits<double>::infinity();
  save_checkpoint(path, s);
  const std::string m = load_error(path);
  EXPECT_EQ(m.rfind(path + ": tensor 'cmvn.mean' [0] = inf: ", 0), 0u) << m;
}

TEST(CheckpointChecks, NonFiniteParameterFailsNamingTensorAndIndex) {
  commontest::TempDir dir;
  const std::string path = (dir.path / "c.safetensors").string();
  const ParamLayout layout(tiny_state().dims);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string name;
    size_t flat;
    float value;
    std::string index;
  };
  // encoder.input_proj.weight is [W=4][D=3]: flat 5 = [1][2]; crf.transition [39][39]: flat 40 = [1][1]
  for (const Case& c : std::vector<Case>{{"encoder.input_proj.weight", 5, nan, "[1][2]"},
                                         {"encoder.lstm.bias_hh_l0_reverse", 3, -inf, "[3]"},
                                         {"crf.projection.weight", 0, -inf, "[0][0]"},
                                         {"crf.transition", 40, inf, "[1][1]"},
                                         {"crf.start", 7, nan, "[7]"}}) {
    ModelState s = tiny_state();
    s.params[layout.get(c.name).offset + c.flat] = c.value;
    save_checkpoint(path, s);
    const std::string msg = load_error(path);
    EXPECT_EQ(msg.rfind(path + ": tensor '" + c.name + "' " + c.index + " = ", 0), 0u) << c.name << ": " << msg;
    EXPECT_NE(msg.find("not finite"), std::string::npos) << msg;
  }
  // The optimizer moments are checked too (exp_avg_sq must be >= 0).
  ModelState s = tiny_state();
  s.optimizer.v[layout.get("crf.end").offset + 2] = -1.f;
  save_checkpoint(path, s);
  const std::string msg = load_error(path);
  EXPECT_EQ(msg.rfind(path + ": tensor 'optimizer.exp_avg_sq.crf.end' [2] = -1: ", 0), 0u) << msg;

  // check_values = false (replay-step's state dumps): loaded as is, checksum still verified
  s = tiny_state();
  s.params[layout.get("crf.projection.bias").offset] = nan;
  save_checkpoint(path, s);
  EXPECT_TRUE(std::isnan(load_checkpoint(path, /*check_values=*/false).params[layout.get("crf.projection.bias").offset]));
}

TEST(CheckpointChecks, MinusInfinityIsAcceptedWhereTheCrfForbidsEntries) {
  commontest::TempDir dir;
  const std::string path = (dir.path / "c.safetensors").string();
  const ParamLayout layout(tiny_state().dims);
  ModelState s = tiny_state();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (const char* name : {"crf.transition", "crf.duration_bias", "crf.start", "crf.end"})
    s.params[layout.get(name).offset + 1] = ninf;
  save_checkpoint(path, s);
  const ModelState back = load_checkpoint(path);
  EXPECT_EQ(back.params[layout.get("crf.transition").offset + 1], ninf);
  EXPECT_EQ(back.params[layout.get("crf.end").offset + 1], ninf);
}

TEST(CheckpointChecks, LegacyFixtureWithoutChecksumLoads) {
  const std::string path =
      std::string(TIMITSEG_SOURCE_DIR) + "/tests/model/fixtures/legacy/checkpoint-pre-issue11.safetensors";
  EXPECT_EQ(st::load(path).metadata.count("tensor_sha256"), 0u);  // so the legacy path is the one exercised
  const ModelState s = load_checkpoint(path);
  EXPECT_EQ(s.params.size(), ParamLayout(s.dims).total());
  EXPECT_TRUE(s.has_cmvn);
  // Re-saved, it gains the key and still loads to the same values.
  commontest::TempDir dir;
  const std::string again = (dir.path / "again.safetensors").string();
  save_checkpoint(again, s);
  EXPECT_EQ(st::load(again).metadata.count("tensor_sha256"), 1u);
  EXPECT_EQ(load_checkpoint(again).params, s.params);
}

// A checkpoint assembled from another model's files (issue 13: "a checkpoint
// from another label set or model size"): its metadata says one size, its
// tensors hold another. The load names the file and the first tensor whose
// shape disagrees, with both shapes; a label set that does not match the
// projection's rows is named as such.
TEST(CheckpointChecks, TensorsOfAnotherModelSizeOrLabelSetAreNamed) {
  commontest::TempDir dir;
  const fs::path p = dir.path / "c.safetensors";
  save_checkpoint(p.string(), tiny_state());  // hidden_dim 4, 39 classes
  {
    st::File f = st::load(p.string());
    nlohmann::json d = nlohmann::json::parse(f.metadata.at("dims"));
    d["hidden_dim"] = 8;  // the tensors stay those of hidden_dim 4
    f.metadata["dims"] = d.dump();
    st::save(p.string(), f);  // tensor data unchanged: the checksum still holds
  }
  std::string msg = load_error(p.string());
  EXPECT_EQ(msg.rfind(p.string() + ":", 0), 0u) << msg;
  EXPECT_NE(msg.find("encoder.input_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has shape [4, 3], expected [8, 3]"), std::string::npos) << msg;  // file vs metadata

  save_checkpoint(p.string(), tiny_state());
  {
    st::File f = st::load(p.string());
    f.metadata["label_set"] = "48";  // a 48-phone label set over a 39-class projection
    st::save(p.string(), f);
  }
  msg = load_error(p.string());
  EXPECT_EQ(msg, p.string() + ": label set size 48 != num_classes 39") << msg;
}
