// crf/cuda_knobs.h: the CUDA backend's environment knobs read into enums,
// against settings/env.cpp's table (the words each knob takes) and values
// written here by hand. No GPU needed: the knobs are read on the host.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "crf/cuda_knobs.h"
#include "settings/env.h"

namespace crf = timitseg::crf;
namespace env = timitseg::env;
namespace common = timitseg::common;

namespace {

env::Lookup fake(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

// Each enum's words are exactly its knob's words in the environment table, in the same order.
TEST(CudaKnobs, EnumWordsAreTheEnvironmentTablesWords) {
  EXPECT_EQ(common::enum_words<crf::CudaRecurrence>(), env::knob("TIMITSEG_CUDA_RECURRENCE").words);
  EXPECT_EQ(common::enum_words<crf::CudaMarginals>(), env::knob("TIMITSEG_CUDA_MARGINALS").words);
  EXPECT_EQ(common::enum_words<crf::CudaRing>(), env::knob("TIMITSEG_CUDA_RING").words);
  EXPECT_EQ(common::enum_words<crf::CudaCheckpoint>(), env::knob("TIMITSEG_CUDA_CHECKPOINT").words);
  EXPECT_EQ(env::knob("TIMITSEG_CUDA_LANES").words, (std::vector<std::string>{"4", "8", "16", "32"}));
}

TEST(CudaKnobs, UnsetOrEmptyGivesTheDefaults) {
  for (const std::string value : {"", "unset"}) {
    std::map<std::string, std::string> vars;
    if (value.empty())
      for (const char* n : {"TIMITSEG_CUDA_LANES", "TIMITSEG_CUDA_RECURRENCE", "TIMITSEG_CUDA_MARGINALS",
                            "TIMITSEG_CUDA_RING", "TIMITSEG_CUDA_CHECKPOINT"})
        vars[n] = "";
    const crf::CudaKnobs k = crf::cuda_knobs_from_environment(fake(vars));
    EXPECT_EQ(k.lanes, 0) << value;
    EXPECT_EQ(k.recurrence, crf::CudaRecurrence::fast) << value;
    EXPECT_EQ(k.marginals, crf::CudaMarginals::linear) << value;
    EXPECT_EQ(k.ring, crf::CudaRing::shared) << value;
    EXPECT_EQ(k.checkpoint, crf::CudaCheckpoint::automatic) << value;
  }
}

TEST(CudaKnobs, EachWordReadsAsItsValue) {
  const crf::CudaKnobs k = crf::cuda_knobs_from_environment(fake({{"TIMITSEG_CUDA_LANES", "16"},
                                                                   {"TIMITSEG_CUDA_RECURRENCE", "exact"},
                                                                   {"TIMITSEG_CUDA_MARGINALS", "exact"},
                                                                   {"TIMITSEG_CUDA_RING", "global"},
                                                                   {"TIMITSEG_CUDA_CHECKPOINT", "never"}}));
  EXPECT_EQ(k.lanes, 16);
  EXPECT_EQ(k.recurrence, crf::CudaRecurrence::exact);
  EXPECT_EQ(k.marginals, crf::CudaMarginals::exact);
  EXPECT_EQ(k.ring, crf::CudaRing::global);
  EXPECT_EQ(k.checkpoint, crf::CudaCheckpoint::never);
  EXPECT_EQ(crf::cuda_knobs_from_environment(fake({{"TIMITSEG_CUDA_CHECKPOINT", "always"}})).checkpoint,
            crf::CudaCheckpoint::always);
  EXPECT_EQ(crf::cuda_knobs_from_environment(fake({{"TIMITSEG_CUDA_CHECKPOINT", "auto"}})).checkpoint,
            crf::CudaCheckpoint::automatic);
}

TEST(CudaKnobs, AnotherWordIsTheTablesOneLineError) {
  try {
    crf::cuda_knobs_from_environment(fake({{"TIMITSEG_CUDA_RECURRENCE", "Exact"}}));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "TIMITSEG_CUDA_RECURRENCE must be 'fast' or 'exact', got 'Exact'");
  }
  EXPECT_THROW(crf::cuda_knobs_from_environment(fake({{"TIMITSEG_CUDA_LANES", "12"}})), std::invalid_argument);
}
