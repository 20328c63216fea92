// The executor of a device: the CPU executor (model/cpu/) or the GPU executor
// (model/cuda/), the one way the rooms above model/ get one.
#pragma once

#include <memory>

#include "model/executor.h"

namespace timitseg::model {

// The executor of `device` (cuda: the GPU executor, or no_device_message() in a build without CUDA).
std::unique_ptr<Executor> make_executor(Device device, const ModelDims& dims, const ExecutorOptions& options);

}  // namespace timitseg::model
