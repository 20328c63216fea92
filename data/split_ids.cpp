// The utterance names of a prepared split from its file's header (data/split_ids.h).
#include "data/split_ids.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace timitseg::data {

std::vector<std::string> split_utterance_ids(const std::string& workdir, const std::string& split) {
  const std::string path = (std::filesystem::path(workdir) / (split + ".safetensors")).string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  auto fail = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open");
  unsigned char len_bytes[8];  // the header's length, little-endian (safetensors)
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8)) fail("truncated safetensors file (no header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec || header_len > file_size - 8) fail("corrupt safetensors file: the header runs past the end");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len))) fail("read error in the header");
  std::vector<std::string> ids;
  try {
    const nlohmann::json h = nlohmann::json::parse(header);
    const nlohmann::json utts = nlohmann::json::parse(h.at("__metadata__").at("utterances").get<std::string>());
    for (const nlohmann::json& u : utts) ids.push_back(u.at("id").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("no utterance list in the header (") + e.what() + "); prepare the WORKDIR again");
  }
  return ids;
}

}  // namespace timitseg::data
