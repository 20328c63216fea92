// The GPU tests' guard, once: REQUIRE_GPU(); at the top of a test skips it
// (GTEST_SKIP) when this machine has no CUDA device, so the CUDA tests build
// and skip cleanly on a machine without one.
#pragma once

#include <gtest/gtest.h>

#include "common/cuda.h"

#define REQUIRE_GPU() \
  if (::timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found"
