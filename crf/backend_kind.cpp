// The backends by kind (crf/backend_kind.h): the one table of names and make_backend.
#include "crf/backend_kind.h"

#include <stdexcept>
#include <utility>

#include "crf/cpu/cpu.h"
#include "crf/reference/reference.h"

namespace timitseg::crf {

namespace {
// The one table of backend names (to_string, parse_backend_kind).
constexpr std::pair<BackendKind, const char*> kBackendNames[] = {
    {BackendKind::reference, "reference"}, {BackendKind::cpu, "cpu"}, {BackendKind::cuda, "cuda"}};
}  // namespace

const char* to_string(BackendKind kind) {
  for (const auto& [k, name] : kBackendNames)
    if (k == kind) return name;
  return "?";  // unreachable: every kind has a name
}

bool parse_backend_kind(std::string_view name, BackendKind* out) {
  for (const auto& [k, word] : kBackendNames)
    if (name == word) {
      *out = k;
      return true;
    }
  return false;
}

BackendKind backend_kind(std::string_view name) {
  BackendKind k{};
  if (parse_backend_kind(name, &k)) return k;
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown crf backend '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> backend_kind_names() {
  std::vector<std::string> names;
  for (const auto& entry : kBackendNames) names.emplace_back(entry.second);
  return names;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::reference:
      return reference::make_reference_backend();
    case BackendKind::cpu:
      return cpu::make_cpu_backend(options.threads);
    case BackendKind::cuda: {
#ifdef TIMITSEG_HAVE_CUDA
      std::unique_ptr<Backend> be = make_cuda_backend();
      be->set_stream(options.stream);
      return be;
#else
      throw std::runtime_error(
          "cuda backend: this build of timitseg has no CUDA support (rebuild with -DTIMITSEG_CUDA=ON)");
#endif
    }
  }
  throw std::logic_error("make_backend: not a BackendKind");
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names{to_string(BackendKind::reference), to_string(BackendKind::cpu)};
#ifdef TIMITSEG_HAVE_CUDA
  names.push_back(to_string(BackendKind::cuda));
#endif
  return names;
}

}  // namespace timitseg::crf
