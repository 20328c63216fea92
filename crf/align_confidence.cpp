// fill_align_confidence (crf/align_confidence.h): the confidence scores of aligned
// phones (docs/crf.md "Confidence") through a crf::Session on host arrays.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/parallel.h"
#include "crf/cpu/align_posteriors.h"  // the banded constrained pass of a window
#include "crf/align_confidence.h"
#include "crf/transcript_windows.h"
#include "settings/env.h"

namespace timitseg::crf {
namespace {

// Frames [first, first + length) of utterance b of a batch alone: its rows of
// cum/onset, dims with B = 1 and T = length (p.lengths points at `length`:
// not copyable).
struct OneUtt {
  crf::Dims dims;
  crf::Params p;
  int32_t length;
  OneUtt(const crf::Dims& d, const crf::Params& hp, int64_t b, int64_t first, int32_t frames)
      : dims{1, frames, d.K, d.C}, p(hp), length(frames) {
    p.cum_scores = hp.cum_scores + (b * (d.T + 1) + first) * d.C;
    p.onset = hp.onset ? hp.onset + (b * d.T + first) * d.C : nullptr;
    p.lengths = &length;
  }
  OneUtt(const OneUtt&) = delete;
  OneUtt& operator=(const OneUtt&) = delete;
};

// The label confidences (unconstrained span marginals) of the aligned spans
// of a batch (dims, hp) with N phones a row; a row whose log_z_c is -inf
// (infeasible) gets none.
void run_labels(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t N, const int32_t* phones,
                const int32_t* nph, const int32_t* spans, const double* log_z_c, double* label) {
  std::vector<int32_t> queries(dims.B * N * 3, 0), nq(nph, nph + dims.B);
  for (int64_t b = 0; b < dims.B; ++b) {
    if (!(log_z_c[b] > -INFINITY)) nq[b] = 0;  // infeasible: no spans to score
    for (int64_t n = 0; n < nq[b]; ++n) {
      queries[(b * N + n) * 3] = spans[(b * N + n) * 2];
      queries[(b * N + n) * 3 + 1] = spans[(b * N + n) * 2 + 1];
      queries[(b * N + n) * 3 + 2] = phones[b * N + n];
    }
  }
  const crf::SpanMarginalResult sm = session.span_marginals_host(dims, hp, N, queries.data(), nq.data());
  std::copy(sm.marginal.begin(), sm.marginal.end(), label);
}

// One call of both confidence methods for the batch (dims, hp) with N phones a row.
void run_batch(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t N, const int32_t* phones,
               const int32_t* nph, const int32_t* opt, const int32_t* spans, double* post3, double* label) {
  const crf::AlignPosteriorResult ap = session.align_posteriors_host(dims, hp, N, phones, nph, opt, spans);
  std::copy(ap.posterior.begin(), ap.posterior.end(), post3);
  run_labels(session, dims, hp, N, phones, nph, spans, ap.log_z_c.data(), label);
}

// The boundary confidences of one window (wd: B = 1, L = wd.T frames; n
// phones y, aligned spans sp [n][2] in the window's frames) on the host, the
// constrained forward-backward restricted to a band of +-band phones around
// the aligned path at every frame (crf::cpu::ConstrainedPosteriors::set_band;
// docs/align.md "Confidence": the posterior mass outside it is negligible).
// Returns log Z_c of the band (-inf: infeasible).
double banded_posteriors(const crf::Dims& wd, const crf::Params& p, int64_t n, const int32_t* y, const int32_t* opt,
                         const int32_t* sp, int64_t band, double* post3) {
  const int64_t L = wd.T;
  std::vector<int32_t> at(L + 1, -1), lo(L + 1), hi(L + 1);  // at[t]: the kept phone holding frame t
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = sp[2 * i]; t < sp[2 * i] + sp[2 * i + 1] && t < L; ++t) at[t] = static_cast<int32_t>(i);
  for (int64_t i = n - 1; i >= 0 && at[L] < 0; --i)
    if (sp[2 * i + 1] > 0) at[L] = static_cast<int32_t>(i);  // the end: the last kept phone
  for (int64_t t = 1; t <= L; ++t)
    if (at[t] < 0) at[t] = at[t - 1];  // (no gaps in an alignment: defensive)
  for (int64_t t = L - 1; t >= 0; --t)
    if (at[t] < 0) at[t] = at[t + 1];
  for (int64_t t = 0; t <= L; ++t) {
    lo[t] = static_cast<int32_t>(std::max<int64_t>(0, at[t] - band));
    hi[t] = static_cast<int32_t>(std::min<int64_t>(n, at[t] + band + 1));
  }
  std::vector<double> tables(4 * (L + 1) * n), tmp(crf::cpu::ConstrainedPosteriors::scratch_doubles(wd.K));
  const crf::cpu::AlignUtterance au{L, n, wd.K, wd.C, y, opt, p.cum_scores, p.onset, &p};
  crf::cpu::ConstrainedPosteriors cp(au, tables.data(), tmp.data());
  cp.set_band(lo.data(), hi.data());
  const double lz = cp.run();
  std::fill(post3, post3 + n * 3, 0.0);
  for (int64_t i = 0; i < n; ++i) cp.query(i, sp[2 * i], sp[2 * i + 1], post3 + i * 3);
  return lz;
}

// The confidences of utterance b (np phones y, optional flags opt or nullptr,
// aligned spans [np][2]) by windows of its transcript (docs/align.md): the
// core phones [c0, c1) are scored inside the window of phones [c0 - margin,
// c1 + margin), its frames from the start of its first phone to the end of its
// last, conditioned on the aligned phones outside it: the window's start
// scores are the transitions from the last kept phone before it, its end
// scores those into the first kept phone after it (the model's own start and
// end at the utterance's edges). Returns false (nothing written) when one
// window's need exceeds `limit`.
// The label windows' core, in boundary windows' cores (with the band).
constexpr int64_t kLabelCores = 8;

bool windowed(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t b, int64_t np,
              const int32_t* y, const int32_t* opt, const int32_t* spans, double* post3, double* label,
              const WindowLimits& wl, const std::function<double(const crf::Dims&, int64_t)>& need) {
  const int64_t C = dims.C, L = hp.lengths[b];
  const int64_t windows = (np + wl.core - 1) / wl.core;
  for (int64_t k = 0; k < windows; ++k) {  // every window under the limit before any work
    const TranscriptWindow w = transcript_window(k, wl.core, wl.margin, np, L, spans);
    if (need(crf::Dims{1, w.e - w.a, dims.K, C}, w.p1 - w.p0) > wl.limit) return false;
  }
  // Windows in parallel on a host backend (a session each; the backend's own
  // threads then run serially inside), one after another on a device backend.
  const bool host = !session.backend().on_device();
  const int threads = host ? static_cast<int>(std::min<int64_t>(std::max(1, wl.threads), windows)) : 1;  // --threads
  std::vector<std::unique_ptr<crf::Session>> sessions(threads);
  for (int t = 1; t < threads; ++t) sessions[t] = std::make_unique<crf::Session>(session.backend());
  using Clock = std::chrono::steady_clock;
  auto micros = [](Clock::time_point a) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a).count();
  };
  const Clock::time_point t0 = Clock::now();
  std::atomic<int64_t> boundary_us{0}, label_us{0};  // summed over the workers
  // Window k of `core` phones: its core [c0, c1), its phones from p0 (n), its
  // frames as one utterance (wd, p: the edge transitions) and its spans in them.
  auto with_window = [&](int64_t core, int64_t k, const auto& f) {
    const TranscriptWindow w = transcript_window(k, core, wl.margin, np, L, spans);
    const WindowProblem wp(dims, hp, b, w, y, spans);
    f(w.c0, w.c1, w.p0, w.p1 - w.p0, wp.dims, wp.p, wp.spans.data());
  };
  const bool banded = host && wl.band > 0;
  parallel_for(windows, threads, [&](int64_t k, int worker) {
    crf::Session& sess = worker == 0 ? session : *sessions[worker];
    with_window(wl.core, k, [&](int64_t c0, int64_t c1, int64_t p0, int64_t n, const crf::Dims& wd,
                                const crf::Params& p, const int32_t* sp) {
      const int32_t count = static_cast<int32_t>(n);
      std::vector<double> p3(n * 3, 0.0), lab(n, 0.0);
      Clock::time_point t = Clock::now();
      if (banded) {  // the constrained pass in a band around the aligned path; the labels below
        banded_posteriors(wd, p, n, y + p0, opt ? opt + p0 : nullptr, sp, wl.band, p3.data());
        boundary_us += micros(t);
      } else {  // every phone of the window (a device backend, or band 0)
        const crf::AlignPosteriorResult ap =
            sess.align_posteriors_host(wd, p, n, y + p0, &count, opt ? opt + p0 : nullptr, sp);
        std::copy(ap.posterior.begin(), ap.posterior.end(), p3.begin());
        boundary_us += micros(t);
        t = Clock::now();
        run_labels(sess, wd, p, n, y + p0, &count, sp, ap.log_z_c.data(), lab.data());
        label_us += micros(t);
      }
      for (int64_t i = c0; i < c1; ++i) {  // the core phones: disjoint between windows
        std::copy(p3.begin() + (i - p0) * 3, p3.begin() + (i - p0) * 3 + 3, post3 + i * 3);
        if (!banded) label[i] = lab[i - p0];
      }
    });
  });
  // With the band, the labels (the unconstrained pass, linear in the window's
  // frames) by windows of kLabelCores x core phones with the same context.
  const int64_t label_core = wl.core * kLabelCores, label_windows = (np + label_core - 1) / label_core;
  if (banded)
    parallel_for(label_windows, threads, [&](int64_t k, int worker) {
      crf::Session& sess = worker == 0 ? session : *sessions[worker];
      with_window(label_core, k, [&](int64_t c0, int64_t c1, int64_t p0, int64_t n, const crf::Dims& wd,
                                     const crf::Params& p, const int32_t* sp) {
        const int32_t count = static_cast<int32_t>(n);
        std::vector<double> lab(n, 0.0);
        const double feasible = 0.0;  // the aligned path lies in the window
        const Clock::time_point t = Clock::now();
        run_labels(sess, wd, p, n, y + p0, &count, sp, &feasible, lab.data());
        label_us += micros(t);
        for (int64_t i = c0; i < c1; ++i) label[i] = lab[i - p0];
      });
    });
  spdlog::info("confidences: {} windows ({} for the labels) in {:.2f} s on {} thread(s) (band: {}; worker time: "
               "boundary {:.2f} s, label {:.2f} s)",
               windows, banded ? label_windows : windows, micros(t0) * 1e-6, threads,
               banded ? std::to_string(wl.band) + " phone(s)" : "none", boundary_us.load() * 1e-6, label_us.load() * 1e-6);
  return true;
}

}  // namespace

void fill_align_confidence(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t N,
                           const std::vector<int32_t>& phones, const std::vector<int32_t>& num_phones,
                           const std::vector<int32_t>& optional, const crf::AlignResult& r, AlignConfidence* out,
                           double batch_limit, double utterance_limit, WindowLimits window_limits) {
  // Measurement knobs (docs/align.md): TIMITSEG_CONFIDENCE_UTTERANCE_MIB replaces the per-utterance limit,
  // so that the windows can be compared with the exact values on recordings that fit;
  // TIMITSEG_CONFIDENCE_BAND the windows' band (0: every phone of the window, the exact windows).
  if (const std::optional<double> mib = env::number("TIMITSEG_CONFIDENCE_UTTERANCE_MIB"))
    utterance_limit = *mib * 1024 * 1024;
  if (const std::optional<long long> band = env::integer("TIMITSEG_CONFIDENCE_BAND"))
    window_limits.band = static_cast<int64_t>(*band);
  const int64_t B = dims.B;
  const int32_t* opt = optional.empty() ? nullptr : optional.data();
  std::vector<double> post3(B * N * 3, 0.0), label(B * N, 0.0);
  out->computed.assign(B, 0);
  out->windowed.assign(B, 0);
  WindowLimits windows = window_limits;
  if (!(windows.limit > 0.0)) windows.limit = utterance_limit;
  out->reason.assign(B, "");
  std::vector<char> feasible(B);
  for (int64_t b = 0; b < B; ++b) feasible[b] = r.score[b] > -INFINITY;
  // The constrained tables and the unconstrained pass's workspace (the loss's recurrences, (T+1) C per thread).
  const std::function<double(const crf::Dims&, int64_t)> need = [&](const crf::Dims& d, int64_t n) {
    return static_cast<double>(d.B) * crf::align_posterior_table_bytes(d.T, n) +
           static_cast<double>(session.backend().workspace_bytes(d));
  };
  // (the cpu backend refuses a table over 512 MiB per utterance: kConfidenceUtteranceBytes keeps below it)
  if (need(dims, N) <= batch_limit && crf::align_posterior_table_bytes(dims.T, N) <= utterance_limit) {
    run_batch(session, dims, hp, N, phones.data(), num_phones.data(), opt, r.spans.data(), post3.data(), label.data());
    for (int64_t b = 0; b < B; ++b) out->computed[b] = feasible[b];
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const OneUtt u(dims, hp, b, 0, hp.lengths[b]);
      const double bytes = need(u.dims, num_phones[b]);
      // On a device backend the windows go as batches (one launch scores many windows), on a host backend
      // one window per thread.
      const bool device = session.backend().on_device();
      if (bytes > utterance_limit && feasible[b] &&
          (device && dims.B == 1 ? batched_window_confidence(session, dims, hp, num_phones[b], phones.data(),
                                                             opt, r.spans.data(), post3.data(), label.data(), windows,
                                                             std::max(batch_limit, windows.limit)) > 0
                                 : windowed(session, dims, hp, b, num_phones[b], phones.data() + b * N, opt ? opt + b * N : nullptr,
                                            r.spans.data() + b * N * 2, post3.data() + b * N * 3, label.data() + b * N,
                                            windows, need))) {
        out->computed[b] = 1;
        out->windowed[b] = 1;
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "computed by windows of %lld phones with %lld phones of context on each side (the whole "
                      "utterance would need %.0f MiB, over the %.0f MiB limit)",
                      static_cast<long long>(windows.core), static_cast<long long>(windows.margin), bytes / (1 << 20),
                      utterance_limit / (1 << 20));
        out->reason[b] = buf;
        continue;
      }
      if (bytes > utterance_limit) {
        std::fill(post3.begin() + b * N * 3, post3.begin() + (b + 1) * N * 3, 0.0);  // a window may have written
        std::fill(label.begin() + b * N, label.begin() + (b + 1) * N, 0.0);
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "the forward-backward passes need %.0f MiB (%d frames x %d phones x 32 bytes, and the "
                      "unconstrained pass's workspace), over the %.0f MiB limit",
                      bytes / (1 << 20), u.length, num_phones[b], utterance_limit / (1 << 20));
        out->reason[b] = buf;
        continue;
      }
      // one row: its own phone count as the stride (the backend's table is (length+1) x num_phones[b])
      run_batch(session, u.dims, u.p, num_phones[b], phones.data() + b * N, num_phones.data() + b,
                opt ? opt + b * N : nullptr, r.spans.data() + b * N * 2, post3.data() + b * N * 3, label.data() + b * N);
      out->computed[b] = feasible[b];
    }
  }
  out->boundary.assign(B * N, 0.0);
  out->start.assign(B * N, 0.0);
  out->end.assign(B * N, 0.0);
  out->label = label;
  for (int64_t i = 0; i < B * N; ++i) {
    out->boundary[i] = post3[3 * i];
    out->start[i] = post3[3 * i + 1];
    out->end[i] = post3[3 * i + 2];
  }
}

}  // namespace timitseg::crf
