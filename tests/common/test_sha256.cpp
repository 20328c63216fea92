// SHA-256 against the FIPS 180-2 / NIST example vectors.
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "tmpdir.h"

using namespace timitseg;

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // one million 'a', fed in uneven pieces
  Sha256 h;
  std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileMatchesString) {
  commontest::TempDir d;
  const std::string text = "The quick brown fox jumps over the lazy dog";
  commontest::write_bytes(d.str("f.txt"), text);
  uint64_t n = 0;
  EXPECT_EQ(sha256_file(d.str("f.txt"), &n), "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592");
  EXPECT_EQ(n, text.size());
  EXPECT_THROW(sha256_file(d.str("missing")), std::runtime_error);
}

TEST(Sha256, FileLargerThanTheReadBufferMatchesString) {
  // 2.5 MiB of varied bytes: sha256_file reads 1 MiB at a time, sha256_hex hashes in one update.
  commontest::TempDir d;
  std::string bytes(5 * (1 << 19), '\0');
  uint32_t s = 12345;
  for (auto& c : bytes) {
    s = s * 1664525u + 1013904223u;
    c = static_cast<char>(s >> 24);
  }
  commontest::write_bytes(d.str("big.bin"), bytes);
  uint64_t n = 0;
  EXPECT_EQ(sha256_file(d.str("big.bin"), &n), sha256_hex(bytes));
  EXPECT_EQ(n, bytes.size());
}

TEST(Sha256, DigestFinalizes) {
  Sha256 h;
  h.update("abc", 3);
  EXPECT_EQ(h.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THROW(h.update("x", 1), std::logic_error);
  EXPECT_THROW(h.digest(), std::logic_error);
}
