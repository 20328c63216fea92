// The CRF backends by kind: BackendKind and its names (the one table in
// crf/backend_kind.cpp), and make_backend, the one way to get a backend
// (crf/backend.h) of a kind.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "crf/backend.h"

namespace timitseg::crf {

// Defined in crf/cuda/ when this build has CUDA (TIMITSEG_HAVE_CUDA); never
// called otherwise. make_backend(BackendKind::cuda) is the public way to get it. Device
// memory and copies: common/buffer.h and common/cuda.h.
std::unique_ptr<Backend> make_cuda_backend();

// Construction options of make_backend.
struct BackendOptions {
  int threads = 0;         // cpu backend: worker threads (<= 0: all hardware threads, common/parallel.h)
  void* stream = nullptr;  // cuda backend: cudaStream_t for every call (nullptr: the default stream)
};

// The backends: the float64 oracle, the host recurrences, the device kernels.
// Code below the command line and the C API selects one by this enum; a
// user's word (`bench crf --backend`, `crf replay --backend`, `align
// --backend`, timitseg_crf_create) is read into it at that boundary by
// parse_backend_kind / backend_kind, over the one table of names in
// crf/backend_kind.cpp.
enum class BackendKind { reference, cpu, cuda };
// "reference", "cpu", "cuda": the kind's name for log lines, errors and JSON.
const char* to_string(BackendKind kind);
// name's kind when it is one of the names exactly; false for any other text.
bool parse_backend_kind(std::string_view name, BackendKind* out);
// The same, throwing std::runtime_error "unknown crf backend 'NAME' (known:
// reference, cpu, cuda)" (the names this build has, backend_names()).
BackendKind backend_kind(std::string_view name);
// Every kind's name in table order ("reference", "cpu", "cuda"), built with CUDA or not: the words a flag accepts.
std::vector<std::string> backend_kind_names();

// The backend of a kind. Throws std::runtime_error with one clear line when
// (cuda) this build has no CUDA or no device is available
// (cuda::no_device_message()). App code gets every backend through here and
// never includes a backend's own header.
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options = BackendOptions());
std::vector<std::string> backend_names();

}  // namespace timitseg::crf
