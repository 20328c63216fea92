// The cpu backend (see cpu.h). Notation of the spec: sigma, alpha (forward),
// rho, gamma (backward), all float64 [L+1][C] per utterance.
//
// The C x C logsumexp  sigma[u,c] = logsumexp_{c'} (alpha[u,c'] + A[c',c])
// is computed as a matrix-vector product in the linear domain with both
// factors scaled to at most 1:
//     sigma[u,c] = m_u + amax[c] + log( sum_{c'} exp(alpha[u,c'] - m_u) * exp(A[c',c] - amax[c]) )
// (m_u = max_{c'} alpha[u,c'], amax[c] = max_{c'} A[c',c]). The sum has at least
// one term exp(alpha-m_u)*exp(A-amax) for every c', is exact up to rounding
// when it is not tiny, and when it falls below kTiny (terms underflowed, e.g.
// transitions of -1e4) that entry is recomputed with the exact two-pass
// logsumexp. gamma uses the same scheme on the rows of A. No epsilon enters a
// log; nothing is clamped.
//
// -inf parameters (forbidden transitions, durations, first/last labels) are
// exact: exp(-inf) = 0 terms drop out of every sum. A column (row) of A that is
// entirely -inf has amax = -inf; its scaled factors are set to 0 instead of
// exp(-inf - -inf) = NaN and its sigma (gamma) entries are -inf directly. Every
// "subtract the max" step checks for a -inf max first. Forbidden entries get a
// gradient of exactly 0. log Z = -inf (no path of finite score) and a gold
// segmentation of score -inf are errors naming the utterance (the smallest
// such index, whatever thread found it).
#include "crf/cpu/cpu.h"
#include "crf/cpu/align_banded.h"
#include "crf/cpu/align_full.h"
#include "crf/cpu/align_bounded.h"
#include "crf/cpu/align_posteriors.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/parallel.h"
#include "crf/detail.h"
#include "crf/score.h"
#include "crf/cpu/recurrences.h"
#include "crf/validate.h"

namespace timitseg::crf::cpu {
namespace {

using detail::kNegInf;

const char* const kWho = "cpu backend";

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(resolve_threads(threads)) {}
  std::string name() const override { return "cpu"; }
  bool on_device() const override { return false; }
  size_t workspace_bytes(const Dims& dims) const override { return layout(dims).bytes(dims.B); }

  void log_partition(const Dims& dims, const Params& p, double* log_z, void* ws) override {
    validate_host(dims, p, nullptr);
    Prepared pr = prepare(dims, p, ws);
    parallel_for(dims.B, static_cast<int>(pr.lay.threads), [&](int64_t b, int tid) {
      Utt x = utt(pr, dims, p, b, tid);
      const double lz = forward(x);
      if (!(lz > kNegInf)) detail::throw_no_path(kWho, b);
      log_z[b] = lz;
    });
  }

  void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold, void*) override {
    validate_host(dims, p, labels);
    for (int64_t b = 0; b < dims.B; ++b) {
      gold[b] = gold_one(dims, p, labels, b, nullptr, nullptr, nullptr, nullptr, nullptr, 0.0);
      if (!(gold[b] > kNegInf)) detail::throw_gold_forbidden(kWho, b);
    }
  }

  void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z, double* gold,
                const Grads& g, void* ws) override {
    if (g.frame_scores)
      throw std::invalid_argument(name() + " backend: frame_scores gradients are not computed here "
                                            "(fuses_frame_grads is false)");
    validate_host(dims, p, labels);
    Prepared pr = prepare(dims, p, ws);
    const int64_t T = dims.T, K = dims.K, C = dims.C;
    const Layout& lay = pr.lay;
    double* partial = pr.base + lay.shared() + lay.threads * lay.per_thread();
    // Per utterance: does its gold segmentation have score -inf? Reported after
    // the loop so that a log Z = -inf error (thrown inside) takes precedence,
    // as in the cuda backend; no parameter gradient is written in either case.
    std::vector<char> gold_forbidden(dims.B, 0);
    parallel_for(dims.B, static_cast<int>(lay.threads), [&](int64_t b, int tid) {
      Utt x = utt(pr, dims, p, b, tid);
      const int64_t L = x.L;
      const double lz = forward(x);
      if (!(lz > kNegInf)) detail::throw_no_path(kWho, b);
      if (log_z) log_z[b] = lz;
      double* gA = partial + b * lay.per_utt();
      double* gD = gA + C * C;
      double* gs = gD + K * C;
      double* ge = gs + C;
      std::fill(gA, gA + lay.per_utt(), 0.0);
      backward_pass(x, lz, gD);  // also d logZ / d D
      // d logZ / d cum[t,c] = P(segment with c ends at t) - P(segment with c starts at t); kept in aux.
      double* gc = x.aux;
      for (int64_t t = 0; t <= L; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const double pe = t >= 1 ? std::exp(x.alpha[t * C + c] + x.gamma[t * C + c] - lz) : 0.0;
          const double ps = t < L ? std::exp(x.sigma[t * C + c] + x.rho[t * C + c] - lz) : 0.0;
          gc[t * C + c] = pe - ps;
        }
      for (int64_t c = 0; c < C; ++c) {
        gs[c] = std::exp(x.start(c) + x.rho[c] - lz);
        ge[c] = std::exp(x.alpha[L * C + c] + x.end(c) - lz);
      }
      transition_gradient(x, lz, gA);  // d logZ / d A
      // d logZ / d o[u,c] = P(a segment with c starts at u), u < L; kept in the
      // rows 0..L-1 of sigma (not read again), minus the gold starts below.
      double* go = x.sigma;
      if (p.onset)
        for (int64_t i = 0; i < L * C; ++i) go[i] = std::exp(x.sigma[i] + x.rho[i] - lz);
      if (labels) {
        const double gsc = gold_one(dims, p, labels, b, gc, gA, gD, gs, ge, -1.0, p.onset ? go : nullptr);
        if (gold) gold[b] = gsc;
        gold_forbidden[b] = !(gsc > kNegInf);
      }
      if (g.cum_scores) {
        float* out = g.cum_scores + b * (T + 1) * C;
        for (int64_t i = 0; i < (L + 1) * C; ++i) out[i] = static_cast<float>(scale * gc[i]);
        std::fill(out + (L + 1) * C, out + (T + 1) * C, 0.0f);
      }
      if (p.onset && g.onset) {
        float* out = g.onset + b * T * C;
        for (int64_t i = 0; i < L * C; ++i) out[i] = static_cast<float>(scale * go[i]);
        std::fill(out + L * C, out + T * C, 0.0f);
      }
    });
    for (int64_t b = 0; b < dims.B; ++b)
      if (gold_forbidden[b]) detail::throw_gold_forbidden(kWho, b);
    // Fixed-order reduction of the per-utterance parameter gradients.
    auto reduce = [&](float* dst, int64_t offset, int64_t n) {
      if (!dst) return;
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t b = 0; b < dims.B; ++b) sum += partial[b * lay.per_utt() + offset + i];
        dst[i] = static_cast<float>(scale * sum);
      }
    };
    reduce(g.transition, 0, C * C);
    reduce(g.duration_bias, C * C, K * C);
    reduce(g.start, C * C + K * C, C);
    reduce(g.end, C * C + K * C + C, C);
  }

  void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments,
               void* ws) override {
    validate_host(dims, p, nullptr);
    Prepared pr = prepare(dims, p, ws);
    const int64_t T = dims.T, K = dims.K, C = dims.C;
    parallel_for(dims.B, static_cast<int>(pr.lay.threads), [&](int64_t b, int tid) {
      Utt x = utt(pr, dims, p, b, tid);
      const int64_t L = x.L;
      double* best = x.alpha;   // [L+1][C] max score of [0,t) ending with label c
      double* smax = x.sigma;   // [L+1][C] max over the previous label (s[c] at 0)
      int32_t* bp_d = reinterpret_cast<int32_t*>(x.rho);    // [L+1][C]
      int32_t* bp_c = reinterpret_cast<int32_t*>(x.gamma);  // [L+1][C]
      for (int64_t c = 0; c < C; ++c) smax[c] = x.start(c), bp_c[c] = -1;
      for (int64_t t = 1; t <= L; ++t) {
        for (int64_t c = 0; c < C; ++c) {
          double top = kNegInf;
          int32_t arg = 1;
          for (int64_t d = 1; d <= std::min(K, t); ++d) {  // ties: smallest d
            const double v = x.with_onset((x.cm(t, c) - x.cm(t - d, c) + x.Dd(d, c)) + smax[(t - d) * C + c], t - d, c);
            if (v > top) top = v, arg = static_cast<int32_t>(d);
          }
          best[t * C + c] = top;
          bp_d[t * C + c] = arg;
        }
        if (t < L)
          for (int64_t c = 0; c < C; ++c) {
            double top = kNegInf;
            int32_t arg = 0;
            for (int64_t cp = 0; cp < C; ++cp) {  // ties: smallest label
              const double v = best[t * C + cp] + x.Ad(cp, c);
              if (v > top) top = v, arg = static_cast<int32_t>(cp);
            }
            smax[t * C + c] = top;
            bp_c[t * C + c] = arg;
          }
      }
      int64_t c = 0;
      double top = kNegInf;
      for (int64_t k = 0; k < C; ++k)
        if (best[L * C + k] + x.end(k) > top) top = best[L * C + k] + x.end(k), c = k;
      // A finite maximum means the traceback only visits states of finite
      // score (a -inf candidate never replaces the -inf initial value: strict >).
      if (!(top > kNegInf)) detail::throw_no_path(kWho, b);
      score[b] = top;
      // Trace back (segments come out last-first), then reverse in place.
      int32_t* rows = segments + b * T * 3;
      int32_t n = 0;
      for (int64_t t = L; t > 0;) {
        const int64_t d = bp_d[t * C + c];
        rows[3 * n] = static_cast<int32_t>(t - d);
        rows[3 * n + 1] = static_cast<int32_t>(d);
        rows[3 * n + 2] = static_cast<int32_t>(c);
        ++n;
        c = bp_c[(t - d) * C + c];
        t -= d;
      }
      for (int32_t i = 0, j = n - 1; i < j; ++i, --j)
        for (int k = 0; k < 3; ++k) std::swap(rows[3 * i + k], rows[3 * j + k]);
      num_segments[b] = n;
    });
  }

  // Forced alignment: the F/S recurrence of docs/crf.md, per thread
  // F, S [(T+1)][N] float64 and their back pointers bp_d (final piece d of F),
  // bp_s (0 = the phone starts here, 1 = a piece of K before) [(T+1)][N] int32.
  size_t align_workspace_bytes(const Dims& dims, int64_t N) const override {
    return static_cast<size_t>(align_threads(dims)) * align_per_thread(dims, N);
  }

  void align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
             const int32_t* optional, double* score, int32_t* spans, void* ws) override {
    validate_host(dims, p, nullptr);
    validate_align_host(dims, N, phones, num_phones, optional);
    const bool bounded = full_table_bytes(dims, N) > cpu::kAlignFullTableBytes;  // docs/crf.md, long recordings
    if (!ws && !bounded)
      throw std::invalid_argument("cpu backend: align workspace is null (allocate align_workspace_bytes(dims, N) bytes)");
    const int64_t T1 = dims.T + 1, K = dims.K, C = dims.C;
    const size_t per_thread = align_per_thread(dims, N);
    parallel_for(dims.B, align_threads(dims), [&](int64_t b, int tid) {
      char* base = static_cast<char*>(ws) + static_cast<size_t>(tid) * per_thread;
      double* F = reinterpret_cast<double*>(base);
      double* S = F + T1 * N;
      int32_t* bp_d = reinterpret_cast<int32_t*>(S + T1 * N);
      int32_t* bp_s = bp_d + T1 * N;
      const int64_t L = p.lengths[b], np = num_phones[b];
      const int32_t* y = phones + b * N;
      const int32_t* opt = optional ? optional + b * N : nullptr;
      const float* cum = p.cum_scores + b * T1 * C;
      const float* on = p.onset ? p.onset + b * dims.T * C : nullptr;
      int32_t* out = spans + b * N * 2;
      std::fill(out, out + N * 2, 0);
      score[b] = kNegInf;
      if (bounded) {  // a band around the path, exact fallbacks (crf/cpu/align_banded.h)
        score[b] = cpu::align_banded({L, np, K, C, y, opt, cum, on, &p}, out, 0, cpu::kBandMaxBytes, nullptr, nullptr,
                                     dims.B == 1 ? threads_ : 1);
        return;
      }
      score[b] = align_full_table({L, np, K, C, y, opt, cum, on, &p}, N, {F, S, bp_d, bp_s}, out);
    });
  }

  // Span marginals: exp(sigma[s,c] + the span's pieces + gamma[e,c] - log Z) (docs/crf.md "Confidence").
  void span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                      const int32_t* num_queries, double* log_z, double* out, void* ws) override {
    validate_host(dims, p, nullptr);
    validate_span_queries_host(dims, Q, queries, num_queries, p.lengths);
    Prepared pr = prepare(dims, p, ws);
    parallel_for(dims.B, static_cast<int>(pr.lay.threads), [&](int64_t b, int tid) {
      Utt x = utt(pr, dims, p, b, tid);
      const double lz = forward(x);
      if (!(lz > kNegInf)) detail::throw_no_path(kWho, b);
      if (log_z) log_z[b] = lz;
      backward_pass(x);
      double* o = out + b * Q;
      std::fill(o, o + Q, 0.0);
      for (int64_t i = 0; i < num_queries[b]; ++i) {
        const int32_t* q = queries + (b * Q + i) * 3;
        const int64_t v = q[0], r = q[1], c = q[2], C = x.C;
        if (r == 0) continue;  // a skipped phone has no span
        double sc = x.sigma[v * C + c];
        for (int64_t pos = v; pos < v + r; pos += x.K) {
          if (pos > v) sc += x.Ad(c, c);
          const int64_t d = std::min(x.K, v + r - pos);
          sc += x.with_onset(x.cm(pos + d, c) - x.cm(pos, c) + x.Dd(d, c), pos, c);
        }
        o[i] = std::exp(sc + x.gamma[(v + r) * C + c] - lz);
      }
    });
  }

  // Constrained forward-backward (crf/cpu/align_posteriors.h): per thread
  // 4 (T+1) N doubles of tables and 5K + 1 doubles of scratch.
  size_t align_posterior_workspace_bytes(const Dims& dims, int64_t N) const override {
    return static_cast<size_t>(align_threads(dims)) * posterior_per_thread(dims, N);
  }
  void align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                        const int32_t* num_phones, const int32_t* optional, const int32_t* spans, double* log_z_c,
                        double* out, void* ws) override {
    validate_host(dims, p, nullptr);
    validate_align_host(dims, N, phones, num_phones, optional);
    validate_align_spans_host(dims, N, num_phones, p.lengths, spans);
    const double table = align_posterior_table_bytes(dims.T, N);
    if (table > static_cast<double>(cpu::kAlignPosteriorTableBytes))
      throw std::invalid_argument("cpu backend: align_posteriors: T=" + std::to_string(dims.T) + " frames x N=" +
                                  std::to_string(N) + " phones need a " +
                                  std::to_string(static_cast<int64_t>(table / (1 << 20))) +
                                  " MiB table per utterance, over the 512 MiB limit; compute it per window");
    if (!ws) throw std::invalid_argument("cpu backend: align_posteriors workspace is null (allocate "
                                         "align_posterior_workspace_bytes(dims, N) bytes)");
    const size_t per_thread = posterior_per_thread(dims, N);
    parallel_for(dims.B, align_threads(dims), [&](int64_t b, int tid) {
      double* tables = reinterpret_cast<double*>(static_cast<char*>(ws) + static_cast<size_t>(tid) * per_thread);
      const int64_t np = num_phones[b];
      const AlignUtterance au{p.lengths[b], np, dims.K, dims.C, phones + b * N, optional ? optional + b * N : nullptr,
                              p.cum_scores + b * (dims.T + 1) * dims.C,
                              p.onset ? p.onset + b * dims.T * dims.C : nullptr, &p};
      ConstrainedPosteriors cp(au, tables, tables + 4 * (au.L + 1) * np);
      const double lz = cp.run();
      if (log_z_c) log_z_c[b] = lz;
      double* o = out + b * N * 3;
      std::fill(o, o + N * 3, 0.0);
      for (int64_t n = 0; n < np; ++n) cp.query(n, spans[(b * N + n) * 2], spans[(b * N + n) * 2 + 1], o + n * 3);
    });
  }

  // Transcript NLL: the unconstrained backward into the outputs, then per
  // utterance the constrained tables (align_posteriors.h) and their marginals
  // subtracted in float64; parameter gradients from per-utterance slots
  // reduced over b in order (deterministic).
  size_t transcript_workspace_bytes(const Dims& dims, int64_t N) const override {
    return transcript_offset(dims) + static_cast<size_t>(align_threads(dims)) * transcript_per_thread(dims, N) +
           sizeof(double) * static_cast<size_t>(dims.B) * static_cast<size_t>(param_count(dims));
  }
  void transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                           const int32_t* num_phones, const int32_t* optional, const int32_t* links, double scale,
                           double* log_z, double* log_z_c, const Grads& g, void* ws) override {
    if (g.frame_scores)
      throw std::invalid_argument(name() + " backend: transcript_backward does not compute frame_scores gradients "
                                           "(Grads::frame_scores must be nullptr)");
    validate_host(dims, p, nullptr);
    validate_transcript_host(dims, N, phones, num_phones, optional, links);
    const double table = align_posterior_table_bytes(dims.T, N);
    if (table > static_cast<double>(cpu::kAlignPosteriorTableBytes))
      throw std::invalid_argument("cpu backend: transcript_backward: T=" + std::to_string(dims.T) + " frames x N=" +
                                  std::to_string(N) + " phones need a " +
                                  std::to_string(static_cast<int64_t>(table / (1 << 20))) +
                                  " MiB table per utterance, over the 512 MiB limit");
    if (!ws) throw std::invalid_argument("cpu backend: transcript workspace is null (allocate "
                                         "transcript_workspace_bytes(dims, N) bytes)");
    backward(dims, p, nullptr, scale, log_z, nullptr, g, ws);  // scale * d log Z into the outputs
    const int64_t T = dims.T, K = dims.K, C = dims.C, P = param_count(dims);
    char* base = static_cast<char*>(ws) + transcript_offset(dims);
    const size_t per_thread = transcript_per_thread(dims, N);
    double* partial = reinterpret_cast<double*>(base + static_cast<size_t>(align_threads(dims)) * per_thread);
    std::vector<char> infeasible(dims.B, 0);
    parallel_for(dims.B, align_threads(dims), [&](int64_t b, int tid) {
      double* tables = reinterpret_cast<double*>(base + static_cast<size_t>(tid) * per_thread);
      const int64_t L = p.lengths[b], np = num_phones[b];
      const AlignUtterance au{L, np, K, C, phones + b * N, optional ? optional + b * N : nullptr,
                              p.cum_scores + b * (T + 1) * C, p.onset ? p.onset + b * T * C : nullptr, &p,
                              links ? links + b * N : nullptr};
      double* scratch = tables + 4 * (T + 1) * std::max<int64_t>(N, 1);
      double* gc = scratch + ConstrainedPosteriors::scratch_doubles(K);
      double* go = gc + (T + 1) * C;
      ConstrainedPosteriors cp(au, tables, scratch);
      const double lzc = cp.run();
      if (!(lzc > kNegInf)) {
        infeasible[b] = 1;
        return;
      }
      if (log_z_c) log_z_c[b] = lzc;
      double* gA = partial + b * P;
      std::fill(gA, gA + P, 0.0);
      std::fill(gc, gc + (L + 1) * C, 0.0);
      if (p.onset) std::fill(go, go + L * C, 0.0);
      cp.add_marginals(scale, gc, gA, gA + C * C, gA + C * C + K * C, gA + C * C + K * C + C, p.onset ? go : nullptr);
      if (g.cum_scores) {
        float* out = g.cum_scores + b * (T + 1) * C;
        for (int64_t i = 0; i < (L + 1) * C; ++i) out[i] = static_cast<float>(static_cast<double>(out[i]) - gc[i]);
      }
      if (p.onset && g.onset) {
        float* out = g.onset + b * T * C;
        for (int64_t i = 0; i < L * C; ++i) out[i] = static_cast<float>(static_cast<double>(out[i]) - go[i]);
      }
    });
    for (int64_t b = 0; b < dims.B; ++b)
      if (infeasible[b])
        detail::throw_transcript_infeasible(kWho, b, p.lengths[b], optional ? optional + b * N : nullptr,
                                            num_phones[b], links ? links + b * N : nullptr);
    auto reduce = [&](float* dst, int64_t offset, int64_t n) {
      if (!dst) return;
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t b = 0; b < dims.B; ++b) sum += partial[b * P + offset + i];
        dst[i] = static_cast<float>(static_cast<double>(dst[i]) - sum);
      }
    };
    reduce(g.transition, 0, C * C);
    reduce(g.duration_bias, C * C, K * C);
    reduce(g.start, C * C + K * C, C);
    reduce(g.end, C * C + K * C + C, C);
  }

  void boundary_posteriors(const Dims& dims, const Params& p, double* out, void* ws) override {
    validate_host(dims, p, nullptr);
    Prepared pr = prepare(dims, p, ws);
    const int64_t T = dims.T, C = dims.C;
    parallel_for(dims.B, static_cast<int>(pr.lay.threads), [&](int64_t b, int tid) {
      Utt x = utt(pr, dims, p, b, tid);
      const double lz = forward(x);
      if (!(lz > kNegInf)) detail::throw_no_path(kWho, b);
      backward_pass(x);
      double* o = out + b * (T + 1);
      std::fill(o, o + T + 1, 0.0);
      for (int64_t t = 1; t <= x.L; ++t) {
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(x.alpha[t * C + c] + x.gamma[t * C + c] - lz);
        o[t] = sum;
      }
    });
  }

 private:
  int threads_;

  int align_threads(const Dims& d) const {
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads_, d.B)));
  }
  static size_t posterior_per_thread(const Dims& d, int64_t N) {
    return sizeof(double) * (4 * static_cast<size_t>(d.T + 1) * static_cast<size_t>(std::max<int64_t>(N, 1)) +
                             static_cast<size_t>(ConstrainedPosteriors::scratch_doubles(d.K)));
  }
  // The transcript workspace: backward's, then per thread the constrained
  // tables, their scratch and the cum [T+1][C] and onset [T][C] float64
  // gradients, then per utterance the parameter gradients.
  static int64_t param_count(const Dims& d) { return d.C * d.C + d.K * d.C + 2 * d.C; }
  size_t transcript_offset(const Dims& d) const { return (workspace_bytes(d) + 63) / 64 * 64; }
  static size_t transcript_per_thread(const Dims& d, int64_t N) {
    return (posterior_per_thread(d, N) + sizeof(double) * static_cast<size_t>((2 * d.T + 1) * d.C) + 63) / 64 * 64;
  }
  static size_t full_table_bytes(const Dims& d, int64_t N) {
    return static_cast<size_t>(d.T + 1) * static_cast<size_t>(std::max<int64_t>(N, 1)) *
           (2 * sizeof(double) + 2 * sizeof(int32_t));
  }
  // The full table per thread; none when the checkpointed method is used (it allocates its own).
  static size_t align_per_thread(const Dims& d, int64_t N) {
    const size_t full = full_table_bytes(d, N);
    return full > cpu::kAlignFullTableBytes ? 0 : full;
  }

  Layout layout(const Dims& d) const {
    return Layout{d.C, d.K, d.T + 1, static_cast<int64_t>(std::max<int64_t>(1, std::min<int64_t>(threads_, d.B)))};
  }

  struct Prepared {
    Layout lay;
    double* base;
  };

  Prepared prepare(const Dims& dims, const Params& p, void* ws) const {
    Prepared pr{layout(dims), static_cast<double*>(ws)};
    if (!ws) throw std::invalid_argument("cpu backend: workspace is null (allocate workspace_bytes(dims) bytes)");
    const int64_t C = dims.C;
    double* amax_col = pr.base;
    double* exp_col = amax_col + C;
    double* amax_row = exp_col + C * C;
    double* exp_row = amax_row + C;
    for (int64_t c = 0; c < C; ++c) {
      double mc = kNegInf, mr = kNegInf;
      for (int64_t k = 0; k < C; ++k) {
        mc = std::max(mc, static_cast<double>(p.transition[k * C + c]));
        mr = std::max(mr, static_cast<double>(p.transition[c * C + k]));
      }
      amax_col[c] = mc;
      amax_row[c] = mr;
    }
    // An all -inf column (row) has amax = -inf: its factors are 0, not
    // exp(-inf - -inf) = NaN (transition_in/out never read them anyway).
    for (int64_t a = 0; a < C; ++a)
      for (int64_t c = 0; c < C; ++c) {
        const double v = static_cast<double>(p.transition[a * C + c]);
        exp_col[a * C + c] = amax_col[c] == kNegInf ? 0.0 : std::exp(v - amax_col[c]);
        exp_row[a * C + c] = amax_row[a] == kNegInf ? 0.0 : std::exp(v - amax_row[a]);
      }
    return pr;
  }

  Utt utt(const Prepared& pr, const Dims& dims, const Params& p, int64_t b, int tid) const {
    const int64_t C = dims.C, T1 = dims.T + 1;
    Utt x;
    x.L = p.lengths[b];
    x.K = dims.K;
    x.C = C;
    x.cum = p.cum_scores + b * T1 * C;
    x.A = p.transition;
    x.D = p.duration_bias;
    x.s = p.start;
    x.e = p.end;
    x.on = p.onset ? p.onset + b * dims.T * C : nullptr;
    x.amax_col = pr.base;
    x.exp_col = x.amax_col + C;
    x.amax_row = x.exp_col + C * C;
    x.exp_row = x.amax_row + C;
    double* t = pr.base + pr.lay.shared() + tid * pr.lay.per_thread();
    x.alpha = t;
    x.sigma = t + T1 * C;
    x.rho = t + 2 * T1 * C;
    x.gamma = t + 3 * T1 * C;
    x.aux = t + 4 * T1 * C;
    x.tmp = t + 5 * T1 * C;
    x.v1 = x.tmp + std::max(dims.K, C);
    x.v2 = x.v1 + C;
    return x;
  }

  // Gold score of utterance b; when gc != nullptr also adds sign * indicator of
  // the gold segments to the float64 gradients (cum rows, A, D, s, e, and the
  // onset rows [L][C] when go != nullptr).
  static double gold_one(const Dims& dims, const Params& p, const int32_t* labels, int64_t b, double* gc, double* gA,
                         double* gD, double* gs, double* ge, double sign, double* go = nullptr) {
    const int64_t C = dims.C, T1 = dims.T + 1;
    const float* cum = p.cum_scores + b * T1 * C;
    auto st = [&](int64_t c) { return p.start ? static_cast<double>(p.start[c]) : 0.0; };
    auto en = [&](int64_t c) { return p.end ? static_cast<double>(p.end[c]) : 0.0; };
    double score = 0.0;
    int64_t prev = -1;
    detail::for_each_gold_segment(labels + b * dims.T, p.lengths[b], dims.K, [&](int64_t u, int64_t d, int64_t c) {
      if (prev < 0) {
        score = st(c);
        if (gc) gs[c] += sign;
      }
      score += segment_score(cum, p.duration_bias, static_cast<const float*>(nullptr), C, u, d, c);  // onset below
      if (prev >= 0) score += static_cast<double>(p.transition[prev * C + c]);
      if (p.onset) score += static_cast<double>(p.onset[(b * dims.T + u) * C + c]);
      if (go) go[u * C + c] += sign;
      if (gc) {
        gc[(u + d) * C + c] += sign;
        gc[u * C + c] -= sign;
        gD[(d - 1) * C + c] += sign;
        if (prev >= 0) gA[prev * C + c] += sign;
      }
      prev = c;
    });
    score += en(prev);
    if (gc) ge[prev] += sign;
    return score;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) { return std::make_unique<CpuBackend>(num_threads); }

}  // namespace timitseg::crf::cpu
