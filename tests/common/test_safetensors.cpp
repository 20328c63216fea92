// Safetensors round trip and every corruption case (issue 2). The oracle for
// the byte layout is the format itself: a hand-built file is parsed, and files
// written by st::save are parsed back and also checked byte by byte.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/safetensors.h"
#include "tmpdir.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

// A file from a raw JSON header and data bytes.
std::string make_raw(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string expect_error(const std::string& path) {
  try {
    st::load(path);
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path, 0), 0u) << "error must start with the file name: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypes) {
  commontest::TempDir tmp;
  const std::string dir = tmp.str(), path = dir + "/rt.safetensors";
  st::File f;
  f.metadata["epoch"] = "3";
  f.metadata["config"] = "a: 1\nb: [x, y]";
  std::vector<float> f32 = {1.5f, -2.25f, 3e-38f, 1e30f, 0.f, -0.f};
  std::vector<double> f64 = {3.141592653589793, -1e-300};
  std::vector<int32_t> i32 = {-7, 2147483647};
  std::vector<int64_t> i64 = {-(1ll << 60), 42, 0};
  std::vector<uint8_t> u8 = {0, 255, 17};
  f.tensors["a.f32"] = st::Tensor::from<float>({2, 3}, f32);
  f.tensors["b.f64"] = st::Tensor::from<double>({2}, f64);
  f.tensors["c.i32"] = st::Tensor::from<int32_t>({2, 1}, i32);
  f.tensors["d.i64"] = st::Tensor::from<int64_t>({3}, i64);
  f.tensors["e.u8"] = st::Tensor::from<uint8_t>({3}, u8);
  f.tensors["empty"] = st::Tensor::from<float>({0, 4}, std::vector<float>{});
  f.tensors["scalar"] = st::Tensor::from<double>({}, std::vector<double>{2.5});
  st::save(path, f);

  st::File g = st::load(path);
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), 7u);
  EXPECT_EQ(g.get("a.f32", st::DType::F32, {2, 3}).to<float>(), f32);
  EXPECT_EQ(g.get("b.f64").to<double>(), f64);
  EXPECT_EQ(g.get("c.i32").to<int32_t>(), i32);
  EXPECT_EQ(g.get("c.i32").to_int64(), (std::vector<int64_t>{-7, 2147483647}));
  EXPECT_EQ(g.get("d.i64").to<int64_t>(), i64);
  EXPECT_EQ(g.get("e.u8").to<uint8_t>(), u8);
  EXPECT_EQ(g.get("empty").shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(g.get("scalar").to<double>(), std::vector<double>{2.5});
  EXPECT_EQ(g.get("a.f32").to_double()[1], -2.25);

  // Byte layout: u64 little-endian header length, JSON header aligned to 8,
  // data in name order with the declared offsets.
  const std::string raw = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  auto h = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(h["a.f32"]["dtype"], "F32");
  EXPECT_EQ(h["a.f32"]["data_offsets"][0], 0);
  EXPECT_EQ(h["a.f32"]["data_offsets"][1], 24);
  EXPECT_EQ(h["__metadata__"]["epoch"], "3");
  float first;
  std::memcpy(&first, raw.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.5f);

  // No temporary file is left behind.
  int count = 0;
  for (auto& e : fs::directory_iterator(dir)) count += e.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(count, 0);
}

TEST(Safetensors, WrongDtypeOrShapeOnGet) {
  commontest::TempDir tmp;
  const std::string path = tmp.str("get.safetensors");
  st::File f;
  f.tensors["x"] = st::Tensor::from<float>({2, 2}, std::vector<float>{1, 2, 3, 4});
  st::save(path, f);
  st::File g = st::load(path);
  EXPECT_THROW(g.get("missing"), std::runtime_error);
  EXPECT_THROW(g.get("x", st::DType::F64, {2, 2}), std::runtime_error);
  EXPECT_THROW(g.get("x", st::DType::F32, {4}), std::runtime_error);
  EXPECT_NO_THROW(g.get("x", st::DType::F32, {-1, 2}));
  EXPECT_THROW(g.get("x").to<double>(), std::runtime_error);
  try {
    g.get("missing");
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

TEST(Safetensors, CorruptionCases) {
  commontest::TempDir tmp;
  const std::string dir = tmp.str();
  const std::string good_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\1');
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
    const std::string p = dir + "/" + name + ".safetensors";
    commontest::write_bytes(p, bytes);
    const std::string msg = expect_error(p);
    EXPECT_NE(msg.find(needle), std::string::npos) << name << ": " << msg;
  };
  // Sanity: the good file loads.
  commontest::write_bytes(dir + "/good.safetensors", make_raw(good_header, data));
  EXPECT_EQ(st::load(dir + "/good.safetensors").get("x").numel(), 2);

  check("empty", "", "truncated");
  check("short", std::string(5, '\0'), "truncated");
  check("header_past_end", make_raw(good_header, data).substr(0, 20), "past the end");
  check("truncated_data", make_raw(good_header, data.substr(0, 4)), "outside the data section");
  check("bad_json", make_raw("{\"x\": [", data), "not valid JSON");
  check("not_object", make_raw("[1,2]", ""), "not a JSON object");
  check("bad_dtype", make_raw(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", "abcd"),
        "unsupported dtype");
  check("shape_mismatch", make_raw(R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data),
        "need 16 bytes");
  check("negative_shape", make_raw(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), "bad shape");
  check("offsets_reversed", make_raw(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", data),
        "outside the data section");
  check("duplicate",
        make_raw(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"x":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                 data),
        "duplicate tensor name 'x'");
  check("overlap",
        make_raw(R"({"x":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"y":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                 data),
        "overlap");
  check("hole",
        make_raw(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"y":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                 data),
        "belong to no tensor");
  check("trailing", make_raw(R"({"x":{"dtype":"U8","shape":[6],"data_offsets":[0,6]}})", data), "after the last tensor");
  check("missing_fields", make_raw(R"({"x":{"dtype":"U8"}})", ""), "needs dtype, shape and data_offsets");
  check("bad_metadata", make_raw(R"({"__metadata__":{"a":1}})", ""), "not a string");
  EXPECT_THROW(st::load(dir + "/does_not_exist.safetensors"), std::runtime_error);
}

// Zero-size tensors share offsets with their neighbours (as Python's
// safetensors writes them); whatever their name order, the file is valid.
TEST(Safetensors, ZeroSizeTensorsAnywhere) {
  commontest::TempDir tmp;
  const std::string dir = tmp.str();
  const std::string data(8, '\2');
  for (const char* header :
       {R"({"a":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
        R"({"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
        R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})"}) {
    const std::string p = dir + "/zero.safetensors";
    commontest::write_bytes(p, make_raw(header, data));
    st::File f = st::load(p);
    EXPECT_EQ(f.tensors.size(), 2u) << header;
  }
  // And through save/load, with the empty tensor between non-empty ones.
  st::File f;
  f.tensors["a"] = st::Tensor::from<float>({2}, std::vector<float>{1, 2});
  f.tensors["b"] = st::Tensor::from<float>({0, 39}, std::vector<float>{});
  f.tensors["c"] = st::Tensor::from<int32_t>({1}, std::vector<int32_t>{7});
  st::save(dir + "/zero2.safetensors", f);
  st::File g = st::load(dir + "/zero2.safetensors");
  EXPECT_EQ(g.get("b").shape, (std::vector<int64_t>{0, 39}));
  EXPECT_EQ(g.get("c").to<int32_t>(), std::vector<int32_t>{7});
}

TEST(Safetensors, FailedSaveLeavesNothing) {
  commontest::TempDir tmp;
  const std::string dir = tmp.str(), path = dir + "/bad.safetensors";
  st::File f;
  st::Tensor t;
  t.dtype = st::DType::F32;
  t.shape = {3};
  t.bytes.resize(8);  // wrong size for the shape
  f.tensors["x"] = t;
  EXPECT_THROW(st::save(path, f), std::invalid_argument);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(st::save(dir + "/no/such/dir/x.safetensors", st::File{}), std::runtime_error);
}
