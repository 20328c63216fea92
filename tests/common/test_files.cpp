// common/files.h: read_file returns every byte (checked against bytes written
// with std::ofstream) and names the path and the reason on failure.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "common/files.h"
#include "tmpdir.h"

using namespace timitseg;

namespace {
// The message of the std::runtime_error thrown by fn ("" if none was thrown).
template <class F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Files, ReadFileReturnsEveryByte) {
  commontest::TempDir d;
  // NUL bytes, CR/LF, bytes >= 0x80, and more than one 64 KiB read.
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes += static_cast<char>((i * 131 + i / 7) & 0xff);
  bytes += "\r\n\0end";
  commontest::write_bytes(d.str("a.bin"), bytes);
  EXPECT_EQ(read_file(d.str("a.bin")), bytes);
  commontest::write_bytes(d.str("empty"), "");
  EXPECT_EQ(read_file(d.str("empty")), "");
}

TEST(Files, ReadFileErrorsNameThePathAndTheReason) {
  commontest::TempDir d;
  const std::string missing = d.str("no/such.txt");
  const std::string msg = error_of([&] { read_file(missing); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open for reading", 0), 0u) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  const std::string dir = d.str();
  EXPECT_EQ(error_of([&] { read_file(dir); }), dir + ": is a folder, not a file");
}

TEST(Files, RequireFile) {
  commontest::TempDir d;
  commontest::write_bytes(d.str("f"), "x");
  EXPECT_NO_THROW(require_file(d.str("f")));
  EXPECT_EQ(error_of([&] { require_file(d.str("g")); }), d.str("g") + ": missing");
  EXPECT_EQ(error_of([&] { require_file(d.str("g"), "; run prepare"); }), d.str("g") + ": missing; run prepare");
  EXPECT_EQ(error_of([&] { require_file(d.str()); }), d.str() + ": is a folder, not a file");
}
