// No fast-math anywhere (issue 9, docs/design.md "Numerics policy"): every
// compile command of this build (compile_commands.json, C++ and CUDA) and the
// global C++/CUDA flags are read, and any flag that enables fast math fails
// the test, naming the file and the flag.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

// Flags that enable fast math, or one of its parts, in gcc/clang and nvcc.
const std::vector<std::string> kForbidden = {
    "-ffast-math", "-Ofast", "--use_fast_math", "-use_fast_math", "-ftz=true", "--ftz=true",
    "-prec-div=false", "--prec-div=false", "-prec-sqrt=false", "--prec-sqrt=false", "-funsafe-math-optimizations",
    "-ffinite-math-only", "-fno-signed-zeros", "-freciprocal-math", "-fassociative-math", "--fmad=false"};

std::vector<std::string> split_words(const std::string& command) {
  std::vector<std::string> words;
  std::istringstream in(command);
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

// The forbidden flags in one command line (also inside -Xcompiler=a,b and
// -Xcompiler a,b lists that nvcc passes to the host compiler).
std::vector<std::string> forbidden_in(const std::string& command) {
  std::vector<std::string> found;
  for (const std::string& w0 : split_words(command)) {
    std::vector<std::string> parts{w0};
    if (w0.find(',') != std::string::npos) {
      parts.clear();
      std::stringstream ss(w0);
      std::string p;
      while (std::getline(ss, p, ',')) parts.push_back(p);
    }
    for (std::string w : parts) {
      if (w.rfind("-Xcompiler=", 0) == 0) w = w.substr(11);
      if (!w.empty() && (w.front() == '"' || w.front() == '\'')) w = w.substr(1);
      if (!w.empty() && (w.back() == '"' || w.back() == '\'')) w.pop_back();
      for (const std::string& f : kForbidden)
        if (w == f) found.push_back(f);
    }
  }
  return found;
}

}  // namespace

TEST(NoFastMath, ScannerFindsPlantedFlags) {
  EXPECT_TRUE(forbidden_in("g++ -O2 -c a.cpp").empty());
  EXPECT_EQ(forbidden_in("g++ -O2 -ffast-math -c a.cpp"), std::vector<std::string>{"-ffast-math"});
  EXPECT_EQ(forbidden_in("nvcc --use_fast_math -c k.cu"), std::vector<std::string>{"--use_fast_math"});
  EXPECT_EQ(forbidden_in("nvcc -Xcompiler=-Wall,-Ofast -c k.cu"), std::vector<std::string>{"-Ofast"});
  EXPECT_EQ(forbidden_in("nvcc -ftz=true -prec-div=false k.cu").size(), 2u);
}

TEST(NoFastMath, EveryCompileCommandOfThisBuild) {
  std::ifstream in(TIMITSEG_COMPILE_COMMANDS);
  ASSERT_TRUE(in) << "cannot read " << TIMITSEG_COMPILE_COMMANDS
                  << " (CMAKE_EXPORT_COMPILE_COMMANDS is set in CMakeLists.txt)";
  const nlohmann::json db = nlohmann::json::parse(in);
  ASSERT_TRUE(db.is_array());
  int cpp = 0, cu = 0;
  for (const auto& e : db) {
    std::string cmd;
    if (e.contains("command")) {
      cmd = e.at("command").get<std::string>();
    } else {
      for (const auto& a : e.at("arguments")) cmd += a.get<std::string>() + " ";
    }
    const std::string file = e.at("file").get<std::string>();
    if (file.size() > 3 && file.compare(file.size() - 3, 3, ".cu") == 0) ++cu;
    else ++cpp;
    const auto bad = forbidden_in(cmd);
    EXPECT_TRUE(bad.empty()) << file << " is compiled with " << bad.front();
  }
  EXPECT_GT(cpp, 20) << "compile_commands.json holds too few C++ files";
#if TIMITSEG_BUILD_HAS_CUDA
  EXPECT_GT(cu, 5) << "a CUDA build, but compile_commands.json holds no .cu files";
#endif
  std::printf("[ info     ] %d C++ and %d CUDA compile commands checked\n", cpp, cu);
}

TEST(NoFastMath, GlobalFlags) {
  EXPECT_TRUE(forbidden_in(TIMITSEG_CXX_FLAGS).empty()) << "CMAKE_CXX_FLAGS: " << TIMITSEG_CXX_FLAGS;
  EXPECT_TRUE(forbidden_in(TIMITSEG_CUDA_FLAGS).empty()) << "CMAKE_CUDA_FLAGS: " << TIMITSEG_CUDA_FLAGS;
}
