// Test harness: uploads a Problem to the device, runs every entry point of the
// cuda backend, downloads the results. Skips (GTEST_SKIP) without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "crf/cuda/cuda_backend.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {

#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    if (::timitseg::cuda::device_count() == 0)                                              \
      GTEST_SKIP() << "no CUDA device was found: the cuda backend tests need a GPU";        \
  } while (0)

// Device buffers are timitseg::Buffer (common/buffer.h); these name the few
// things the tests do with them.
inline Buffer device_buffer(size_t bytes) { return Buffer(Memory::device, bytes); }
template <class T>
Buffer to_device(const std::vector<T>& v) {
  Buffer b(Memory::device, 0);
  b.upload(v);
  return b;
}
template <class T>
std::vector<T> from_device(const Buffer& b, size_t count) {
  std::vector<T> v(count);
  b.download(v.data(), count * sizeof(T));
  return v;
}
// Fills the whole buffer with a byte pattern (poison) from the host.
inline void poison(Buffer& b, unsigned char byte = 0x7f) {
  std::vector<unsigned char> v(b.capacity(), byte);
  b.upload(v.data(), v.size());
}

struct DevProblem {
  Buffer cum, A, D, s, e, len, labels, o;  // o: onset scores [B][T][C] (empty: none)
  explicit DevProblem(const Problem& p)
      : cum(to_device(p.cum)), A(to_device(p.A)), D(to_device(p.D)), s(to_device(p.s)), e(to_device(p.e)),
        len(to_device(p.lengths)), labels(to_device(p.labels)), o(to_device(p.o)), has_onset(!p.o.empty()) {}
  bool has_onset;
  Params params() const {
    Params q;
    q.cum_scores = cum.as<float>();
    q.transition = A.as<float>();
    q.duration_bias = D.as<float>();
    q.start = s.as<float>();
    q.end = e.as<float>();
    q.lengths = len.as<int32_t>();
    q.onset = has_onset ? o.as<float>() : nullptr;
    return q;
  }
};

struct GpuResult {
  std::vector<double> logz, logz_fwd_only, gold, gold_only, vscore;
  std::vector<std::vector<Seg>> vsegs;
  std::vector<float> g_cum, g_A, g_D, g_s, g_e;
  std::vector<double> bpost;
};

// Runs backward (with labels when with_labels), log_partition, gold_score,
// viterbi and boundary_posteriors. Outputs are poisoned first, so an element
// that is not written shows up as a mismatch.
inline GpuResult run_gpu(Backend& be, const Problem& p, double scale, bool with_labels, bool all_entry_points = true) {
  const Dims& d = p.dims;
  const size_t B = d.B, T = d.T, K = d.K, C = d.C;
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws(Memory::device, be.workspace_bytes(d));
  Buffer logz(Memory::device, B * 8), gold(Memory::device, B * 8), gcum(Memory::device, B * (T + 1) * C * 4),
      gA(Memory::device, C * C * 4), gD(Memory::device, K * C * 4), gs(Memory::device, C * 4),
      ge(Memory::device, C * 4);
  for (Buffer* b : {&logz, &gold, &gcum, &gA, &gD, &gs, &ge}) poison(*b);
  Grads g;
  g.cum_scores = gcum.as<float>();
  g.transition = gA.as<float>();
  g.duration_bias = gD.as<float>();
  g.start = gs.as<float>();
  g.end = ge.as<float>();
  be.backward(d, q, with_labels ? dp.labels.as<int32_t>() : nullptr, scale, logz.as<double>(),
              with_labels ? gold.as<double>() : nullptr, g, ws.data());
  GpuResult r;
  r.logz = from_device<double>(logz, B);
  if (with_labels) r.gold = from_device<double>(gold, B);
  r.g_cum = from_device<float>(gcum, B * (T + 1) * C);
  r.g_A = from_device<float>(gA, C * C);
  r.g_D = from_device<float>(gD, K * C);
  r.g_s = from_device<float>(gs, C);
  r.g_e = from_device<float>(ge, C);
  if (!all_entry_points) return r;

  poison(logz);
  be.log_partition(d, q, logz.as<double>(), ws.data());
  r.logz_fwd_only = from_device<double>(logz, B);
  poison(gold);
  be.gold_score(d, q, dp.labels.as<int32_t>(), gold.as<double>(), ws.data());
  r.gold_only = from_device<double>(gold, B);

  Buffer vs(Memory::device, B * 8), segs(Memory::device, B * T * 3 * 4), nseg(Memory::device, B * 4),
      bp(Memory::device, B * (T + 1) * 8);
  poison(vs);
  poison(nseg);
  poison(segs);  // rows past num_segments stay as they were
  be.viterbi(d, q, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>(), ws.data());
  r.vscore = from_device<double>(vs, B);
  const auto n = from_device<int32_t>(nseg, B);
  const auto sg = from_device<int32_t>(segs, B * T * 3);
  r.vsegs.resize(B);
  for (size_t b = 0; b < B; ++b) {
    if (n[b] < 0 || static_cast<size_t>(n[b]) > T) {
      ADD_FAILURE() << "num_segments[" << b << "] = " << n[b];
      continue;
    }
    for (int i = 0; i < n[b]; ++i) {
      const int32_t* row = sg.data() + (b * T + i) * 3;
      r.vsegs[b].push_back({row[0], row[1], row[2]});
    }
  }
  poison(bp);
  be.boundary_posteriors(d, q, bp.as<double>(), ws.data());
  r.bpost = from_device<double>(bp, B * (T + 1));
  return r;
}

template <class V>
bool all_finite(const V& v) {
  for (auto x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

}  // namespace timitseg::crf::testing
