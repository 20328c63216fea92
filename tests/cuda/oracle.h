// Test-only float64 CPU oracle of the semi-CRF (docs/crf.md), written for
// clarity and independence from the CUDA code: plain loops over the spec's
// factorized recurrences, for problems far too large to enumerate. It is
// itself checked against the shared brute-force oracle
// (tests/support/crf_bruteforce.h) in test_cuda_backend.cpp. Problems come
// from the shared generator (tests/support/crf_problems.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/parallel.h"
#include "crf/backend.h"
#include "crf/segments.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The cuda tests' problems: the shared generator (tests/support/crf_problems.h)
// with wide scores, unit parameters, the first utterance at full length, and
// NaN / garbage padding that the backend must never read.
struct Options {
  double score_sd = 3.0;   // frame scores N(0, sd^2), zero-centred over valid frames
  double param_sd = 1.0;   // A, D, s, e ~ N(0, sd^2)
  bool vary_lengths = true;
  int max_run = 0;         // label run lengths 1..max_run (0: 2K+2)
};

inline Problem make_problem(int64_t B, int64_t T, int64_t K, int64_t C, uint64_t seed, const Options& o = {}) {
  ProblemOptions po;
  po.x_scale = o.score_sd;
  po.p_scale = o.param_sd;
  if (o.vary_lengths)
    po.first_full = true;
  else
    po.lengths.assign(static_cast<size_t>(B), static_cast<int32_t>(T));
  po.max_run = o.max_run > 0 ? o.max_run : static_cast<int>(2 * K + 2);
  po.poison_padding = true;
  return random_problem_with(Dims{B, T, K, C}, static_cast<uint32_t>(seed), po);
}

struct Seg {
  int start, dur, label;
  bool operator==(const Seg& o) const { return start == o.start && dur == o.dur && label == o.label; }
};

struct Result {
  std::vector<double> logz, gold, vscore;  // [B]
  std::vector<std::vector<Seg>> vsegs;     // [B]
  std::vector<double> g_cum, g_A, g_D, g_s, g_e;
  std::vector<double> bpost;  // [B][T+1]
};

inline double lse(const std::vector<double>& v) {
  double m = -kInf;
  for (double x : v) m = std::max(m, x);
  if (m == -kInf) return -kInf;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// Gold segments: maximal runs split left to right into pieces of at most K.
inline std::vector<Seg> gold_segments(const Problem& p, int64_t b) {
  std::vector<Seg> out;
  const int64_t L = p.lengths[b], T = p.dims.T, K = p.dims.K;
  const int32_t* lab = p.labels.data() + b * T;
  int64_t t = 0;
  while (t < L) {
    int64_t r = 1;
    while (t + r < L && lab[t + r] == lab[t]) ++r;
    int64_t done = 0;
    while (done < r) {
      const int64_t d = std::min(K, r - done);
      out.push_back({static_cast<int>(t + done), static_cast<int>(d), lab[t]});
      done += d;
    }
    t += r;
  }
  return out;
}

inline double score_of(const Problem& p, int64_t b, const std::vector<Seg>& segs) {
  const int64_t C = p.dims.C;
  double sc = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    const Seg& g = segs[i];
    sc += static_cast<double>(p.cum[p.row(b, g.start + g.dur) + g.label]) -
          static_cast<double>(p.cum[p.row(b, g.start) + g.label]) + p.D[(g.dur - 1) * C + g.label];
    if (i == 0) sc += p.s[g.label];
    if (i > 0) sc += p.A[segs[i - 1].label * C + g.label];
    if (i + 1 == segs.size()) sc += p.e[g.label];
  }
  return sc;
}

// The oracle for utterance b. Adds scale * d(logZ_b - gold_b)/d(param) into
// the gradient arrays (of the whole batch) when `grads` is set.
inline void oracle_utterance(const Problem& p, int64_t b, double scale, bool with_labels, Result& r, bool grads,
                             std::vector<double>& gA, std::vector<double>& gD, std::vector<double>& gs,
                             std::vector<double>& ge) {
  const int64_t K = p.dims.K, C = p.dims.C, L = p.lengths[b];
  auto cum = [&](int64_t t, int64_t c) { return static_cast<double>(p.cum[p.row(b, t) + c]); };
  auto A = [&](int64_t from, int64_t to) { return static_cast<double>(p.A[from * C + to]); };
  auto D = [&](int64_t d, int64_t c) { return static_cast<double>(p.D[(d - 1) * C + c]); };
  const size_t n = static_cast<size_t>(L + 1) * C;
  std::vector<double> alpha(n, -kInf), sigma(n, -kInf), rho(n, -kInf), gamma(n, -kInf);
  std::vector<double> tmp;
  for (int64_t c = 0; c < C; ++c) sigma[c] = p.s[c];
  for (int64_t t = 1; t <= L; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      tmp.clear();
      for (int64_t d = 1; d <= std::min(K, t); ++d) tmp.push_back(cum(t, c) - cum(t - d, c) + D(d, c) + sigma[(t - d) * C + c]);
      alpha[t * C + c] = lse(tmp);
    }
    if (t < L)
      for (int64_t c = 0; c < C; ++c) {
        tmp.clear();
        for (int64_t c1 = 0; c1 < C; ++c1) tmp.push_back(alpha[t * C + c1] + A(c1, c));
        sigma[t * C + c] = lse(tmp);
      }
  }
  tmp.clear();
  for (int64_t c = 0; c < C; ++c) tmp.push_back(alpha[L * C + c] + p.e[c]);
  const double lz = lse(tmp);
  r.logz[b] = lz;
  for (int64_t c = 0; c < C; ++c) gamma[L * C + c] = p.e[c];
  for (int64_t u = L - 1; u >= 0; --u) {
    for (int64_t c = 0; c < C; ++c) {
      tmp.clear();
      for (int64_t d = 1; d <= std::min(K, L - u); ++d) tmp.push_back(cum(u + d, c) - cum(u, c) + D(d, c) + gamma[(u + d) * C + c]);
      rho[u * C + c] = lse(tmp);
    }
    if (u >= 1)
      for (int64_t c = 0; c < C; ++c) {
        tmp.clear();
        for (int64_t c2 = 0; c2 < C; ++c2) tmp.push_back(A(c, c2) + rho[u * C + c2]);
        gamma[u * C + c] = lse(tmp);
      }
  }
  // boundary posteriors
  for (int64_t t = 1; t <= L; ++t) {
    double v = 0;
    for (int64_t c = 0; c < C; ++c) v += std::exp(alpha[t * C + c] + gamma[t * C + c] - lz);
    r.bpost[b * (p.dims.T + 1) + t] = v;
  }
  // Viterbi (max-sum with the spec's tie-breaks)
  {
    std::vector<double> va(n, -kInf), vs(n, -kInf);
    std::vector<int> bd(n, -1), bc(n, -1);
    for (int64_t c = 0; c < C; ++c) vs[c] = p.s[c];
    for (int64_t t = 1; t <= L; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        double best = -kInf;
        int arg = 1;
        for (int64_t d = 1; d <= std::min(K, t); ++d) {
          const double v = cum(t, c) - cum(t - d, c) + D(d, c) + vs[(t - d) * C + c];
          if (v > best) best = v, arg = static_cast<int>(d);
        }
        va[t * C + c] = best;
        bd[t * C + c] = arg;
      }
      if (t < L)
        for (int64_t c = 0; c < C; ++c) {
          double best = -kInf;
          int arg = 0;
          for (int64_t c1 = 0; c1 < C; ++c1) {
            const double v = va[t * C + c1] + A(c1, c);
            if (v > best) best = v, arg = static_cast<int>(c1);
          }
          vs[t * C + c] = best;
          bc[t * C + c] = arg;
        }
    }
    double best = -kInf;
    int c = 0;
    for (int64_t c1 = 0; c1 < C; ++c1)
      if (va[L * C + c1] + p.e[c1] > best) best = va[L * C + c1] + p.e[c1], c = static_cast<int>(c1);
    r.vscore[b] = best;
    std::vector<Seg> segs;
    int64_t t = L;
    while (t > 0 && best > -kInf) {
      const int d = bd[t * C + c];
      segs.push_back({static_cast<int>(t - d), d, c});
      t -= d;
      if (t > 0) c = bc[t * C + c];
    }
    std::reverse(segs.begin(), segs.end());
    r.vsegs[b] = segs;
  }
  const std::vector<Seg> gsegs = gold_segments(p, b);
  r.gold[b] = score_of(p, b, gsegs);
  if (!grads) return;
  const int64_t T = p.dims.T;
  double* gc = r.g_cum.data() + p.row(b, 0);
  for (int64_t t = 0; t <= L; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double g = 0;
      if (t >= 1) g += std::exp(alpha[t * C + c] + gamma[t * C + c] - lz);
      if (t < L) g -= std::exp(sigma[t * C + c] + rho[t * C + c] - lz);
      gc[t * C + c] += scale * g;
    }
  for (int64_t u = 1; u < L; ++u)
    for (int64_t c1 = 0; c1 < C; ++c1)
      for (int64_t c = 0; c < C; ++c) gA[c1 * C + c] += scale * std::exp(alpha[u * C + c1] + A(c1, c) + rho[u * C + c] - lz);
  for (int64_t u = 0; u < L; ++u)
    for (int64_t d = 1; d <= std::min(K, L - u); ++d)
      for (int64_t c = 0; c < C; ++c)
        gD[(d - 1) * C + c] +=
            scale * std::exp(sigma[u * C + c] + cum(u + d, c) - cum(u, c) + D(d, c) + gamma[(u + d) * C + c] - lz);
  for (int64_t c = 0; c < C; ++c) {
    gs[c] += scale * std::exp(p.s[c] + rho[c] - lz);
    ge[c] += scale * std::exp(alpha[L * C + c] + p.e[c] - lz);
  }
  if (with_labels) {
    for (size_t i = 0; i < gsegs.size(); ++i) {
      const Seg& g = gsegs[i];
      gc[(g.start + g.dur) * C + g.label] -= scale;
      gc[g.start * C + g.label] += scale;
      gD[(g.dur - 1) * C + g.label] -= scale;
      if (i == 0) gs[g.label] -= scale;
      if (i > 0) gA[gsegs[i - 1].label * C + g.label] -= scale;
      if (i + 1 == gsegs.size()) ge[g.label] -= scale;
    }
  }
  (void)T;
}

// The whole batch; utterances in parallel (common/parallel.h; threads 0 = all) (per-utterance gradient
// arrays summed in batch order afterwards, so the result is deterministic).
inline Result oracle(const Problem& p, double scale, bool with_labels, unsigned threads = 0) {
  const int64_t B = p.dims.B, T = p.dims.T, K = p.dims.K, C = p.dims.C;
  Result r;
  r.logz.assign(B, 0);
  r.gold.assign(B, 0);
  r.vscore.assign(B, 0);
  r.vsegs.assign(B, {});
  r.bpost.assign(static_cast<size_t>(B) * (T + 1), 0.0);
  r.g_cum.assign(static_cast<size_t>(B) * (T + 1) * C, 0.0);
  std::vector<std::vector<double>> gA(B, std::vector<double>(C * C)), gD(B, std::vector<double>(K * C)),
      gs(B, std::vector<double>(C)), ge(B, std::vector<double>(C));
  parallel_for(B, resolve_threads(static_cast<int>(threads)), [&](int64_t b, int) {
    oracle_utterance(p, b, scale, with_labels, r, true, gA[b], gD[b], gs[b], ge[b]);
  });
  r.g_A.assign(C * C, 0);
  r.g_D.assign(K * C, 0);
  r.g_s.assign(C, 0);
  r.g_e.assign(C, 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < C * C; ++i) r.g_A[i] += gA[b][i];
    for (int64_t i = 0; i < K * C; ++i) r.g_D[i] += gD[b][i];
    for (int64_t i = 0; i < C; ++i) r.g_s[i] += gs[b][i], r.g_e[i] += ge[b][i];
  }
  return r;
}

// ||got - ref|| / max(||ref||, floor). The floor only matters for tensors
// that are zero in exact arithmetic (e.g. grad start when C = 1: 1 - 1), where
// a pure ratio would compare rounding noise with rounding noise.
template <class G, class R>
double rel_err(const std::vector<G>& got, const std::vector<R>& ref, double floor = 1e-6) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (!(num == num)) return kInf;  // NaN
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

}  // namespace timitseg::crf::testing
