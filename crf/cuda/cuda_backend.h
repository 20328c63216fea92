// The CUDA semi-CRF backend (crf/cuda/*.cu, entry point in backend.cu).
//
// App code gets it through crf::make_backend(crf::BackendKind::cuda, options) and never
// includes this header; tests and benchmarks of the backend itself may.
// Device memory and copies: common/buffer.h and common/cuda.h (one set of
// CUDA helpers for the project).
#pragma once

#include <memory>

#include "crf/backend.h"
#include "crf/backend_kind.h"

namespace timitseg::crf {

// The cuda backend on the current CUDA device, on the default stream
// (Backend::set_stream changes it). Throws std::runtime_error with the one line
// cuda::no_device_message() + "; use --backend cpu or reference" when the
// machine has none.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace timitseg::crf
