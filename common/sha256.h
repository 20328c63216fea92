// SHA-256 through OpenSSL's libcrypto (EVP API); used for the checksums of the
// prepared cache (manifest.json), the corpus fingerprint and the checkpoints'
// tensor_sha256 metadata.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace timitseg {

class Sha256 {
 public:
  Sha256();  // throws std::runtime_error when libcrypto cannot set up SHA-256
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t bytes);
  std::array<uint8_t, 32> digest();  // finalizes; the object must not be updated afterwards
  std::string hex();                 // digest() as 64 lower-case hex digits

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX* (opaque here so that this header needs no OpenSSL include)
  bool finished_ = false;
};

std::string sha256_hex(const std::string& bytes);
// SHA-256 of a whole file (streamed); throws "PATH: cannot open ..." / "PATH: read error" on error.
std::string sha256_file(const std::string& path, uint64_t* size_bytes = nullptr);

}  // namespace timitseg
