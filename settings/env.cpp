// The table of environment variables and its one parser (settings/env.h).
#include "settings/env.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace timitseg::env {
namespace {

constexpr double kIntMax = static_cast<double>(INT_MAX - 1);
constexpr double kHuge = 9.0e18;  // below LLONG_MAX, so every accepted integer fits in a long long
constexpr double kInf = std::numeric_limits<double>::infinity();

Knob launcher(const char* name, const char* doc) {
  return {name, Type::integer, 0, kIntMax, {}, "a count >= 0 (set by the launcher)", "no launcher", doc, true};
}

std::vector<Knob> make_table() {
  std::vector<Knob> t = {
      {"TIMITSEG_CUDA_LANES", Type::word, 0, 0, {"4", "8", "16", "32"}, "4, 8, 16 or 32", "chosen from K and C",
       "lanes per label group of the GPU CRF recurrence (benchmark knob; docs/cuda.md)"},
      {"TIMITSEG_CUDA_RECURRENCE", Type::word, 0, 0, {"fast", "exact"}, "'fast' or 'exact'", "fast",
       "exact: the log-domain GPU recurrence even where the linear-domain one fits (test knob; docs/cuda.md)"},
      {"TIMITSEG_CUDA_MARGINALS", Type::word, 0, 0, {"linear", "exact"}, "'linear' or 'exact'", "linear",
       "exact: the GPU parameter marginals with one exp per term (test knob; docs/cuda.md)"},
      {"TIMITSEG_CUDA_RING", Type::word, 0, 0, {"shared", "global"}, "'shared' or 'global'", "shared",
       "global: the GPU recurrence state in global memory even where shared memory fits (test knob; docs/cuda.md)"},
      {"TIMITSEG_CUDA_CHECKPOINT", Type::word, 0, 0, {"auto", "always", "never"}, "'auto', 'always' or 'never'",
       "auto",
       "the GPU semi-CRF's checkpointed backward: auto for a long input (over 32 MiB of tables per utterance or 1 GiB in all), always (test knob) or never (docs/crf.md)"},
      {"TIMITSEG_GPU_COLLECTIVES", Type::word, 0, 0, {"nccl", "mpi"}, "'nccl' or 'mpi'",
       "nccl when built with NCCL, else mpi", "the GPU gradient all-reduce of a distributed run (docs/multigpu.md)"},
      {"TIMITSEG_LONG_WINDOW_BATCH", Type::integer, 1, 64, {}, "a number of windows in [1, 64]", "4",
       "encoder windows of a long recording forwarded together on the GPU (measurement knob; docs/align.md)"},
      {"TIMITSEG_CONFIDENCE_UTTERANCE_MIB", Type::number, 1e-9, kInf, {}, "a positive number of MiB",
       "the per-utterance limit", "memory above which align's confidences use windows (measurement knob; docs/align.md)"},
      {"TIMITSEG_CONFIDENCE_BAND", Type::integer, 0, kHuge, {}, "a number of phones >= 0 (0: no band)",
       "the windows' band", "phones around the aligned one in a confidence window (measurement knob; docs/align.md)"},
      {"TIMITSEG_DOCTEST_MAX_EPOCHS", Type::integer, 1, INT_MAX, {},
       "an integer >= 1 (the epoch cap of the documentation test; unset it for normal training)", "no cap",
       "caps train.epochs, set by the documentation test (docs/testing-docs.md)"},
      {"TIMITSEG_ACT_WITHOUT_MPI", Type::integer, 0, 1, {}, "0 or 1", "0",
       "1: behave as a build without MPI (test only; tests/dist/dist_cpu.py)"},
      {"TIMITSEG_TEST_ENOSPC_AFTER_BYTES", Type::integer, 0, kHuge, {},
       "a byte count (a test-only variable; unset it)", "no full disk",
       "atomic writes fail with ENOSPC after this many bytes (test only; docs/reliability.md)"},
      {"TIMITSEG_TEST_ENOSPC_PATH", Type::text, 0, 0, {}, "a path fragment", "every path",
       "the injected full disk hits only paths containing it (test only; docs/reliability.md)"},
      {"TIMITSEG_TEST_SIGINT_AT_CHECK", Type::integer, 0, kHuge, {}, "a check number >= 0 (0: never)", "0",
       "the process sends itself SIGINT at this stop check (test only; docs/reliability.md)"},
  };
  for (const Knob& k : {
           launcher("OMPI_COMM_WORLD_SIZE", "mpirun: the number of ranks"),
           launcher("OMPI_COMM_WORLD_RANK", "mpirun: this rank"),
           launcher("OMPI_COMM_WORLD_LOCAL_RANK", "mpirun: this rank on its node"),
           launcher("OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun: the ranks on this node"),
           launcher("SLURM_STEP_ID", "srun: present in a job step (an allocation's shell is no launch)"),
           launcher("SLURM_NTASKS", "srun: the number of ranks"),
           launcher("SLURM_PROCID", "srun: this rank"),
           launcher("SLURM_LOCALID", "srun: this rank on its node"),
           launcher("SLURM_NTASKS_PER_NODE", "srun: the ranks on this node"),
           launcher("PMI_SIZE", "PMI: the number of ranks"),
           launcher("PMI_RANK", "PMI: this rank"),
           launcher("PMIX_RANK", "PMIx: this rank"),
           launcher("LOCAL_RANK", "this rank on its node, the user's override of the launcher's (docs/multigpu.md)"),
       })
    t.push_back(k);
  return t;
}

const char* lookup_value(const char* name, const Lookup& lookup) {
  (void)knob(name);  // only the table's variables
  return lookup ? lookup(name) : std::getenv(name);
}

[[noreturn]] void bad_value(const Knob& k, const std::string& value) {
  throw std::invalid_argument(std::string(k.name) + " must be " + k.takes + ", got '" + value + "'");
}

const Knob& typed(const char* name, Type type) {
  const Knob& k = knob(name);
  if (k.type != type) throw std::logic_error(std::string("env: ") + name + " is read with another type than the table's");
  return k;
}

// The one parser: the value of `k`, checked against its type and range or
// words; nullopt when unset, empty, or (lenient knobs) malformed.
template <typename T>
std::optional<T> parse(const Knob& k, const Lookup& lookup) {
  const char* v = lookup_value(k.name, lookup);
  if (!v || !*v) return std::nullopt;
  const std::string s = v;
  T x{};
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) {
    x = s;
    ok = k.type == Type::text;
    for (const std::string& w : k.words) ok = ok || s == w;
  } else if constexpr (std::is_same_v<T, long long>) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    ok = ec == std::errc() && end == s.data() + s.size() && x >= k.min && x <= k.max;
  } else {
    char* end = nullptr;
    x = std::strtod(s.c_str(), &end);
    ok = end != s.c_str() && *end == '\0' && std::isfinite(x) && x >= k.min && x <= k.max;
  }
  if (ok) return x;
  if (k.lenient) return std::nullopt;
  bad_value(k, s);
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> t = make_table();
  return t;
}

const Knob& knob(const char* name) {
  for (const Knob& k : knobs())
    if (std::string(k.name) == name) return k;
  throw std::logic_error(std::string("env: ") + name + " is not in the table of settings/env.cpp");
}

std::optional<std::string> raw(const char* name, const Lookup& lookup) {
  const char* v = lookup_value(name, lookup);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<long long> integer(const char* name, const Lookup& lookup) {
  return parse<long long>(typed(name, Type::integer), lookup);
}
std::optional<double> number(const char* name, const Lookup& lookup) {
  return parse<double>(typed(name, Type::number), lookup);
}
std::optional<std::string> word(const char* name, const Lookup& lookup) {
  return parse<std::string>(typed(name, Type::word), lookup);
}
std::optional<std::string> text(const char* name, const Lookup& lookup) {
  return parse<std::string>(typed(name, Type::text), lookup);
}

}  // namespace timitseg::env
