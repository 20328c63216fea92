// The executor of a device (see make_executor.h).
#include "model/make_executor.h"

#include <stdexcept>

#include "common/cuda.h"
#include "model/cpu/cpu_executor.h"
#ifdef TIMITSEG_HAVE_CUDA  // the GPU executor is built (model/cuda/)
#include "model/cuda/cuda_executor.h"
#endif

namespace timitseg::model {

std::unique_ptr<Executor> make_executor(Device device, const ModelDims& dims, const ExecutorOptions& options) {
  if (device == Device::cpu) return make_cpu_executor(dims, options);
#ifdef TIMITSEG_HAVE_CUDA
  cuda::require_device("; train on the CPU with train.device=cpu or auto (or --device cpu)");
  return make_cuda_executor(dims, options);
#else
  throw std::runtime_error(cuda::no_device_message());
#endif
}

}  // namespace timitseg::model
