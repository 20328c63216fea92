// SHA-256 (FIPS 180-4), written here because no installed dependency provides
// it; used for the checksums of the prepared cache (manifest.json).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace timitseg {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::array<uint8_t, 32> digest();  // finalizes; the object must not be updated afterwards
  std::string hex();                 // digest() as 64 lower-case hex digits

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& bytes);
// SHA-256 of a whole file (streamed); throws "PATH: cannot read" on error.
std::string sha256_file(const std::string& path, uint64_t* size_bytes = nullptr);

}  // namespace timitseg
