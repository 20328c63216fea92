// Safetensors read/write. See common/safetensors.h for the format and guarantees.
#include "common/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/text.h"

namespace timitseg::st {
namespace {

using nlohmann::json;

// 100 MB: far above any header we write; a larger value means corruption.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

// WHAT may quote names and values from the file's header: one_line keeps the
// message one line whatever they hold (a tensor name with a newline, found by fuzzing).
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + one_line(what));
}

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::F32}, {"F64", DType::F64}, {"I32", DType::I32}, {"I64", DType::I64}, {"U8", DType::U8}};
  for (const auto& [name, d] : table)
    if (s == name) {
      *out = d;
      return true;
    }
  return false;
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string Tensor::shape_str() const {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::vector<int64_t> Tensor::to_int64() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  if (dtype == DType::I64) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (dtype == DType::I32) {
    const auto* p = reinterpret_cast<const int32_t*>(bytes.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    throw std::runtime_error(std::string("tensor has dtype ") + dtype_name(dtype) + ", expected I32 or I64");
  }
  return out;
}

std::vector<double> Tensor::to_double() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  if (dtype == DType::F64) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (dtype == DType::F32) {
    const auto* p = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    throw std::runtime_error(std::string("tensor has dtype ") + dtype_name(dtype) + ", expected F32 or F64");
  }
  return out;
}

const Tensor& File::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error((path.empty() ? "safetensors" : path) + ": no tensor '" + one_line(name) + "'");
  return it->second;
}

const Tensor& File::get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const {
  const Tensor& t = get(name);
  const std::string where = (path.empty() ? "safetensors" : path) + ": tensor '" + one_line(name) + "'";
  if (t.dtype != dtype)
    throw std::runtime_error(where + " has dtype " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
  bool ok = t.shape.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || shape[i] == t.shape[i];
  if (!ok) {
    Tensor want;
    want.shape = shape;
    throw std::runtime_error(where + " has shape " + t.shape_str() + ", expected " + want.shape_str() +
                             " (-1 = any)");
  }
  return t;
}

// The header's JSON, parsed with a callback that catches duplicate names
// (plain parsing keeps the last); throws naming path unless it is an object.
json parse_header(const std::string& path, const std::string& header) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(header, cb);
  } catch (const json::exception& e) {
    fail(path, std::string("corrupt safetensors header (not valid JSON): ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "corrupt safetensors header: duplicate tensor name '" + duplicate + "'");
  if (!h.is_object()) fail(path, "corrupt safetensors header: not a JSON object");
  return h;
}

// A tensor's bytes in the data section.
struct Range {
  uint64_t begin, end;
  std::string name;
};

// Zero-size tensors occupy no bytes and may sit at any offset; the others
// must tile the data section exactly (no overlap, no hole, nothing after), as
// the reference implementation requires.
void check_tiling(const std::string& path, std::vector<Range> ranges, uint64_t data_size) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(), [](const Range& r) { return r.begin == r.end; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uint64_t covered = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0 && ranges[i].begin < ranges[i - 1].end)
      fail(path, "corrupt safetensors file: data of tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name +
                     "' overlap");
    if (ranges[i].begin != covered)
      fail(path, "corrupt safetensors file: bytes " + std::to_string(covered) + ".." + std::to_string(ranges[i].begin) +
                     " of the data section belong to no tensor");
    covered = ranges[i].end;
  }
  if (covered != data_size)
    fail(path, "corrupt safetensors file: " + std::to_string(data_size - covered) +
                   " bytes after the last tensor's data (trailing garbage or a wrong header)");
}

File load(const std::string& path) {
  static_assert(sizeof(uint64_t) == 8, "u64");
  require_file(path);  // a missing path or a folder is named as such, not as a read error
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) fail(path, "truncated safetensors file (" + std::to_string(file_size) + " bytes, no header length)");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > file_size - 8)
    fail(path, "corrupt safetensors file: header length " + std::to_string(header_len) + " runs past the end of the " +
                   std::to_string(file_size) + "-byte file");
  if (header_len > kMaxHeaderBytes) fail(path, "corrupt safetensors file: header length " + std::to_string(header_len));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) fail(path, "read error in header");

  const json h = parse_header(path, header);

  const uint64_t data_size = file_size - 8 - header_len;
  File f;
  f.path = path;
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ value for '" + m.key() + "' is not a string");
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(path, where + "entry needs dtype, shape and data_offsets");
    Tensor t;
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), &t.dtype))
      fail(path, where + "unsupported dtype " + v["dtype"].dump() + " (supported: F32 F64 I32 I64 U8)");
    if (!v["shape"].is_array()) fail(path, where + "shape is not an array");
    uint64_t numel = 1;
    for (const json& s : v["shape"]) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) fail(path, where + "bad shape " + v["shape"].dump());
      t.shape.push_back(s.get<int64_t>());
      const auto dim = static_cast<uint64_t>(t.shape.back());
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) fail(path, where + "shape overflows");
      numel *= dim;
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, where + "data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      fail(path, where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                     "] lie outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(t.dtype) || e - b != numel * dtype_size(t.dtype))
      fail(path, where + "dtype " + dtype_name(t.dtype) + " and shape " + t.shape_str() + " need " +
                     std::to_string(numel * dtype_size(t.dtype)) + " bytes, data_offsets give " + std::to_string(e - b));
    ranges.push_back({b, e, name});
    t.bytes.resize(e - b);
    in.seekg(static_cast<std::streamoff>(8 + header_len + b));
    if (!t.bytes.empty()) in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(e - b));
    if (!in) fail(path, where + "read error");
    f.tensors.emplace(name, std::move(t));
  }
  check_tiling(path, ranges, data_size);
  return f;
}

void save(const std::string& path, const File& file) {
  json h = json::object();
  if (!file.metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : file.metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name == "__metadata__") throw std::invalid_argument(path + ": '__metadata__' is not a valid tensor name");
    if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype))
      throw std::invalid_argument(path + ": tensor '" + one_line(name) + "' has " + std::to_string(t.bytes.size()) +
                                  " bytes, shape " + t.shape_str() + " needs " +
                                  std::to_string(t.numel() * dtype_size(t.dtype)));
    h[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  AtomicFile out(path);
  unsigned char len_bytes[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(header.data(), header.size());
  for (const auto& [name, t] : file.tensors) out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

}  // namespace timitseg::st
