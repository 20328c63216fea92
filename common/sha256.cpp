#include "common/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace timitseg {

namespace {
EVP_MD_CTX* ctx_of(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) throw std::runtime_error("SHA-256: EVP_MD_CTX_new failed (out of memory)");
  if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    throw std::runtime_error("SHA-256: EVP_DigestInit_ex failed");
  }
  ctx_ = ctx;
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_of(ctx_)); }

void Sha256::update(const void* data, size_t bytes) {
  if (finished_) throw std::logic_error("SHA-256: update() after digest()");
  if (bytes == 0) return;
  if (EVP_DigestUpdate(ctx_of(ctx_), data, bytes) != 1) throw std::runtime_error("SHA-256: EVP_DigestUpdate failed");
}

std::array<uint8_t, 32> Sha256::digest() {
  if (finished_) throw std::logic_error("SHA-256: digest() called twice");
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_of(ctx_), out.data(), &len) != 1 || len != out.size())
    throw std::runtime_error("SHA-256: EVP_DigestFinal_ex failed");
  finished_ = true;
  return out;
}

std::string Sha256::hex() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : digest()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file(const std::string& path, uint64_t* size_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    h.update(buf.data(), n);
    total += n;
  }
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw std::runtime_error(path + ": read error");
  if (size_bytes) *size_bytes = total;
  return h.hex();
}

}  // namespace timitseg
