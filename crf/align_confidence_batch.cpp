// batched_window_confidence (crf/align_confidence.h): the windows of
// fill_align_confidence's windowed path for one long utterance, scored as
// batches of windows, each batch one call of Backend::align_posteriors and one
// of Backend::span_marginals (on the cuda backend: one thread block a window;
// docs/align.md "Long recordings").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/parallel.h"
#include "crf/session.h"
#include "crf/align_confidence.h"
#include "crf/transcript_windows.h"

namespace timitseg::crf {
namespace {

using Win = TranscriptWindow;  // crf/transcript_windows.h

// One batch of windows ws[i0, i1) as rows of one problem: cum [nb][T+1][C],
// onset [nb][T][C] (zeros where the model has none), lengths, the phones
// [nb][N], flags, spans in the window's frames. A window's edge transitions
// are folded into its own rows (the batch shares one start and end vector):
// the start scores (the transitions from the kept phone before it, or the
// model's start at the recording's start) into onset row 0, which only
// segments starting at frame 0 read; the end scores (the transitions into the
// kept phone after it, or the model's end) into cum row L, which only
// segments ending at frame L read. Each fold is one float32 addition (its
// rounding is the difference from the host path, measured in docs/align.md).
struct Packed {
  crf::Dims dims;
  int64_t N = 0;
  std::vector<float> cum, onset;
  std::vector<int32_t> lengths, phones, nph, opt, spans;
  crf::Params params(const crf::Params& hp) const {
    crf::Params p = hp;
    p.cum_scores = cum.data();
    p.onset = onset.data();
    p.lengths = lengths.data();
    p.start = nullptr;
    p.end = nullptr;
    return p;
  }
};

void pack(const crf::Dims& dims, const crf::Params& hp, int64_t np, const int32_t* y, const int32_t* opt,
          const int32_t* spans, const std::vector<Win>& ws, int64_t i0, int64_t i1, int threads, Packed& pk) {
  const int64_t C = dims.C, nb = i1 - i0;
  int64_t T = 1, N = 1;
  for (int64_t i = i0; i < i1; ++i) {
    T = std::max(T, ws[i].e - ws[i].a);
    N = std::max(N, ws[i].p1 - ws[i].p0);
  }
  pk.dims = crf::Dims{nb, T, dims.K, C};
  pk.N = N;
  pk.cum.assign(static_cast<size_t>(nb * (T + 1) * C), 0.f);
  pk.onset.assign(static_cast<size_t>(nb * T * C), 0.f);
  pk.lengths.assign(nb, 0);
  pk.phones.assign(nb * N, 0);
  pk.nph.assign(nb, 0);
  pk.opt.assign(nb * N, 0);
  pk.spans.assign(nb * N * 2, 0);
  parallel_for(nb, static_cast<int>(std::min<int64_t>(std::max(1, threads), nb)), [&](int64_t r, int) {
    const Win& w = ws[i0 + r];
    const int64_t len = w.e - w.a, n = w.p1 - w.p0;
    pk.lengths[r] = static_cast<int32_t>(len);
    pk.nph[r] = static_cast<int32_t>(n);
    float* cum = pk.cum.data() + r * (T + 1) * C;     // [T+1][C]
    float* on = pk.onset.data() + r * T * C;          // [T][C]
    std::copy(hp.cum_scores + w.a * C, hp.cum_scores + (w.e + 1) * C, cum);
    if (hp.onset) std::copy(hp.onset + w.a * C, hp.onset + w.e * C, on);
    for (int64_t c = 0; c < C; ++c) {
      const float s = w.before >= 0 ? hp.transition[y[w.before] * C + c] : (hp.start ? hp.start[c] : 0.f);
      const float e = w.after < np ? hp.transition[c * C + y[w.after]] : (hp.end ? hp.end[c] : 0.f);
      on[c] += s;
      cum[len * C + c] += e;
    }
    for (int64_t i = 0; i < n; ++i) {
      pk.phones[r * N + i] = y[w.p0 + i];
      pk.opt[r * N + i] = opt ? opt[w.p0 + i] : 0;
      pk.spans[(r * N + i) * 2] = spans[2 * (w.p0 + i)] - static_cast<int32_t>(w.a);
      pk.spans[(r * N + i) * 2 + 1] = spans[2 * (w.p0 + i) + 1];
    }
  });
}

// Both scores of the packed windows (rows of pk: windows ws[i0 + r]), their
// core phones written into post3 [np][3] and label [np].
void score(crf::Session& session, const crf::Params& hp, const std::vector<Win>& ws, int64_t i0, const Packed& pk,
           double* post3, double* label) {
  const crf::Params p = pk.params(hp);
  const crf::AlignPosteriorResult ap =
      session.align_posteriors_host(pk.dims, p, pk.N, pk.phones.data(), pk.nph.data(), pk.opt.data(), pk.spans.data());
  std::vector<int32_t> queries(pk.dims.B * pk.N * 3, 0), nq(pk.nph);
  for (int64_t r = 0; r < pk.dims.B; ++r) {
    if (!(ap.log_z_c[r] > -INFINITY)) nq[r] = 0;  // infeasible: no spans to score
    for (int64_t i = 0; i < nq[r]; ++i) {
      queries[(r * pk.N + i) * 3] = pk.spans[(r * pk.N + i) * 2];
      queries[(r * pk.N + i) * 3 + 1] = pk.spans[(r * pk.N + i) * 2 + 1];
      queries[(r * pk.N + i) * 3 + 2] = pk.phones[r * pk.N + i];
    }
  }
  const crf::SpanMarginalResult sm = session.span_marginals_host(pk.dims, p, pk.N, queries.data(), nq.data());
  for (int64_t r = 0; r < pk.dims.B; ++r) {  // the core phones: disjoint between windows
    const Win& w = ws[i0 + r];
    for (int64_t i = w.c0; i < w.c1; ++i) {
      const int64_t j = r * pk.N + (i - w.p0);
      std::copy(ap.posterior.begin() + j * 3, ap.posterior.begin() + j * 3 + 3, post3 + i * 3);
      label[i] = nq[r] > 0 ? sm.marginal[j] : 0.0;
    }
  }
}

}  // namespace

int64_t batched_window_confidence(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t np,
                                  const int32_t* y, const int32_t* opt, const int32_t* spans, double* post3,
                                  double* label, const WindowLimits& wl, double batch_limit) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t L = hp.lengths[0], C = dims.C;
  const int64_t windows = (np + wl.core - 1) / wl.core;
  std::vector<Win> ws(windows);
  for (int64_t k = 0; k < windows; ++k) ws[k] = transcript_window(k, wl.core, wl.margin, np, L, spans);
  // The device tables of a batch (nb windows, T frames, N phones a row) and the unconstrained pass's workspace.
  auto need = [&](int64_t nb, int64_t T, int64_t N) {
    const crf::Dims d{nb, T, dims.K, C};
    return static_cast<double>(nb) * crf::align_posterior_table_bytes(T, N) +
           static_cast<double>(session.backend().workspace_bytes(d));
  };
  for (const Win& w : ws)
    if (need(1, w.e - w.a, w.p1 - w.p0) > batch_limit) return 0;  // nothing written
  std::vector<std::pair<int64_t, int64_t>> ranges;  // the batches: the most windows in order under the limit
  for (int64_t i0 = 0; i0 < windows;) {
    int64_t i1 = i0, T = 1, N = 1;
    while (i1 < windows) {
      const int64_t T2 = std::max(T, ws[i1].e - ws[i1].a), N2 = std::max(N, ws[i1].p1 - ws[i1].p0);
      if (i1 > i0 && need(i1 + 1 - i0, T2, N2) > batch_limit) break;
      T = T2, N = N2, ++i1;
    }
    ranges.emplace_back(i0, i1);
    i0 = i1;
  }
  // The next batch is packed on the host while the backend scores this one.
  using Clock = std::chrono::steady_clock;
  double pack_s = 0.0, score_s = 0.0;
  auto pack_range = [&](size_t j, Packed& pk) {
    const auto t = Clock::now();
    pack(dims, hp, np, y, opt, spans, ws, ranges[j].first, ranges[j].second, wl.threads, pk);
    pack_s += std::chrono::duration<double>(Clock::now() - t).count();
  };
  Packed cur, next;
  pack_range(0, cur);
  for (size_t j = 0; j < ranges.size(); ++j) {
    std::future<void> packing;
    if (j + 1 < ranges.size()) packing = std::async(std::launch::async, [&, j] { pack_range(j + 1, next); });
    const auto t = Clock::now();
    score(session, hp, ws, ranges[j].first, cur, post3, label);
    score_s += std::chrono::duration<double>(Clock::now() - t).count();
    if (packing.valid()) packing.get();
    std::swap(cur, next);
  }
  const int64_t batches = static_cast<int64_t>(ranges.size());
  spdlog::info("confidences: {} windows in {} batch(es) on {} in {:.2f} s (packing on the host {:.2f} s, overlapped; "
               "scoring {:.2f} s)", windows, batches, session.backend().name(),
               std::chrono::duration<double>(Clock::now() - t0).count(), pack_s, score_s);
  return batches;
}

}  // namespace timitseg::crf
