// scripts/skipped.sh: the skip reasons printed after ctest (scripts/test.sh),
// from a LastTest.log laid out as ctest writes it; scripts/demo.sh's usage.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {

struct Out {
  int rc;
  std::string text;
};

Out sh(const std::string& cmd) {
  Out r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.text.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// One test's record of LastTest.log; skipped: with gtest's "FILE:LINE: Skipped" + message.
std::string record(int i, const std::string& name, const std::string& message) {
  std::string out = std::to_string(i) + "/9 Testing: " + name + "\n" + std::to_string(i) + "/9 Test: " + name +
                    "\nCommand: \"x\" \"--gtest_filter=" + name + "\"\nOutput:\n"
                    "----------------------------------------------------------\n[ RUN      ] " + name + "\n";
  if (!message.empty())
    out += "../../../tests/cuda/test_x.cpp:36: Skipped\n" + message + "\n[  SKIPPED ] " + name + " (0 ms)\n";
  else
    out += "[       OK ] " + name + " (0 ms)\n";
  return out + "<end of output>\nTest time =   0.12 sec\n";
}

}  // namespace

TEST(Scripts, SkippedPrintsOneLinePerReasonWithCountAndNames) {
  const fs::path dir = fs::temp_directory_path() / ("timitseg_skipped_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "Testing" / "Temporary");
  std::ofstream(dir / "Testing" / "Temporary" / "LastTest.log")
      << "Start testing: Nov 25 12:51 UTC\n"
      << record(1, "CudaA.One", "no CUDA device was found") << record(2, "Cpu.Passes", "")
      << record(3, "CudaB.Two", "no CUDA device was found") << record(4, "Flite.Off", "libflite is not built in\nsecond line");
  const Out o = sh(std::string(TIMITSEG_SOURCE_DIR) + "/scripts/skipped.sh " + dir.string());
  EXPECT_EQ(o.rc, 0) << o.text;
  EXPECT_EQ(o.text,
            "test: skipped 2 tests: no CUDA device was found (CudaA.One, CudaB.Two)\n"
            "test: skipped 1 test: libflite is not built in second line (Flite.Off)\n");
  // no skips: nothing printed; no log: nothing printed, exit 0
  std::ofstream(dir / "Testing" / "Temporary" / "LastTest.log") << record(1, "Cpu.Passes", "");
  EXPECT_EQ(sh(std::string(TIMITSEG_SOURCE_DIR) + "/scripts/skipped.sh " + dir.string()).text, "");
  const Out none = sh(std::string(TIMITSEG_SOURCE_DIR) + "/scripts/skipped.sh " + (dir / "nothing").string());
  EXPECT_EQ(none.rc, 0);
  EXPECT_EQ(none.text, "");
  fs::remove_all(dir);
}

TEST(Scripts, DemoRefusesAnUnknownArgument) {
  const Out o = sh(std::string(TIMITSEG_SOURCE_DIR) + "/scripts/demo.sh --bogus");
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_EQ(o.text, "usage: scripts/demo.sh [--no-build]\n");
}
