// Test harness: uploads a Problem to the device, runs every entry point of the
// cuda backend, downloads the results. Skips (GTEST_SKIP) without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "crf/cuda/cuda_backend.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {

#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    if (::timitseg::crf::cuda_device_count() == 0)                                          \
      GTEST_SKIP() << "no CUDA device was found: the cuda backend tests need a GPU";        \
  } while (0)

struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  explicit DevBuf(size_t bytes) : p(device_alloc(bytes)), n(bytes) {}
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  ~DevBuf() { device_free(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  template <class T>
  static DevBuf from(const std::vector<T>& v) {
    DevBuf b(v.size() * sizeof(T));
    copy_to_device(b.p, v.data(), v.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> get(size_t count) const {
    std::vector<T> v(count);
    copy_to_host(v.data(), p, count * sizeof(T));
    return v;
  }
  // Fill with a byte pattern (poison) from the host.
  void poison(unsigned char byte = 0x7f) {
    std::vector<unsigned char> v(n, byte);
    copy_to_device(p, v.data(), n);
  }
};

struct DevProblem {
  DevBuf cum, A, D, s, e, len, labels;
  explicit DevProblem(const Problem& p)
      : cum(DevBuf::from(p.cum)), A(DevBuf::from(p.A)), D(DevBuf::from(p.D)), s(DevBuf::from(p.s)),
        e(DevBuf::from(p.e)), len(DevBuf::from(p.len)), labels(DevBuf::from(p.labels)) {}
  Params params() const {
    Params q;
    q.cum_scores = cum.as<float>();
    q.transition = A.as<float>();
    q.duration_bias = D.as<float>();
    q.start = s.as<float>();
    q.end = e.as<float>();
    q.lengths = len.as<int32_t>();
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
  DevBuf ws(be.workspace_bytes(d));
  DevBuf logz(B * 8), gold(B * 8), gcum(B * (T + 1) * C * 4), gA(C * C * 4), gD(K * C * 4), gs(C * 4), ge(C * 4);
  for (DevBuf* b : {&logz, &gold, &gcum, &gA, &gD, &gs, &ge}) b->poison();
  Grads g;
  g.cum_scores = gcum.as<float>();
  g.transition = gA.as<float>();
  g.duration_bias = gD.as<float>();
  g.start = gs.as<float>();
  g.end = ge.as<float>();
  be.backward(d, q, with_labels ? dp.labels.as<int32_t>() : nullptr, scale, logz.as<double>(),
              with_labels ? gold.as<double>() : nullptr, g, ws.p);
  GpuResult r;
  r.logz = logz.get<double>(B);
  if (with_labels) r.gold = gold.get<double>(B);
  r.g_cum = gcum.get<float>(B * (T + 1) * C);
  r.g_A = gA.get<float>(C * C);
  r.g_D = gD.get<float>(K * C);
  r.g_s = gs.get<float>(C);
  r.g_e = ge.get<float>(C);
  if (!all_entry_points) return r;

  logz.poison();
  be.log_partition(d, q, logz.as<double>(), ws.p);
  r.logz_fwd_only = logz.get<double>(B);
  gold.poison();
  be.gold_score(d, q, dp.labels.as<int32_t>(), gold.as<double>(), ws.p);
  r.gold_only = gold.get<double>(B);

  DevBuf vs(B * 8), segs(B * T * 3 * 4), nseg(B * 4), bp(B * (T + 1) * 8);
  vs.poison();
  nseg.poison();
  segs.poison();  // rows past num_segments stay as they were
  be.viterbi(d, q, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>(), ws.p);
  r.vscore = vs.get<double>(B);
  const auto n = nseg.get<int32_t>(B);
  const auto sg = segs.get<int32_t>(B * T * 3);
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
  bp.poison();
  be.boundary_posteriors(d, q, bp.as<double>(), ws.p);
  r.bpost = bp.get<double>(B * (T + 1));
  return r;
}

template <class V>
bool all_finite(const V& v) {
  for (auto x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

}  // namespace timitseg::crf::testing
