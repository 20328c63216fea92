// The reference backend's float64 lattice of one utterance (alpha, beta, log Z
// and the segment posteriors), shared by reference.cpp and the gradient of the
// marginals (marginals_backward.cpp). Private to crf/reference/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "crf/backend.h"
#include "crf/reference/params_f64.h"
#include "crf/score.h"

namespace timitseg::crf::reference {

// One utterance's view of the inputs, float64.
struct Utt {
  int64_t L, K, C;
  const double* cum;  // [L+1][C] (rows of this utterance)
  const double* A;    // [C][C]
  const double* D;    // [K][C]
  const double* s;    // [C] or nullptr
  const double* e;    // [C] or nullptr
  const double* on;   // [L][C] onset rows of this utterance, or nullptr
  double start(int64_t c) const { return s ? s[c] : 0.0; }
  double end(int64_t c) const { return e ? e[c] : 0.0; }
  // Without onset the expression is exactly the one of the spec's first version.
  double seg(int64_t u, int64_t d, int64_t c) const { return segment_score(cum, D, on, C, u, d, c); }
  Utt(const Dims& dims, const ParamsF64& p, int64_t b)
      : L(p.lengths[b]), K(dims.K), C(dims.C), cum(p.cum_scores + b * (dims.T + 1) * dims.C), A(p.transition),
        D(p.duration_bias), s(p.start), e(p.end), on(p.onset ? p.onset + b * dims.T * dims.C : nullptr) {}
};

// alpha[t][c], t = 0..L (row 0 unused = -inf).
std::vector<double> forward_alpha(const Utt& u);
double log_z_from_alpha(const Utt& u, const std::vector<double>& alpha);
// beta[t][c], t = 1..L (row 0 unused = -inf).
std::vector<double> backward_beta(const Utt& u);
// log of the summed exp-scores of everything before a segment with label c
// starting at v: s[c] for v = 0, else logsumexp_{c'} alpha[v][c'] + A[c'][c].
double log_prefix(const Utt& u, const std::vector<double>& alpha, int64_t v, int64_t c);
// The log Z of utterance b, checked (-inf: the no-path error).
double checked_log_z(double lz, int64_t b);

// One utterance's lattice for its posteriors: alpha, beta and log Z (-inf log Z
// is the no-path error). The posterior of a span of label c ending at frame
// `end` whose score, everything before it included, is `log_through`:
// exp(log_through + beta[end][c] - log Z), evaluated in that order (the
// segment, boundary and span posteriors and the gradient share it).
struct Lattice {
  Utt u;
  std::vector<double> alpha, beta;
  double lz;
  Lattice(const Dims& dims, const ParamsF64& p, int64_t b)
      : u(dims, p, b), alpha(forward_alpha(u)), beta(backward_beta(u)),
        lz(checked_log_z(log_z_from_alpha(u, alpha), b)) {}
  double posterior(double log_through, int64_t end, int64_t c) const {
    return std::exp(log_through + beta[end * u.C + c] - lz);
  }
  // f(v, d, c, mu) for every segment [v, v+d) with label c, mu = its posterior
  // P(the segment is in y): v, then d, then c ascending (the order of the sums).
  template <class F>
  void for_each_segment(F&& f) const {
    const int64_t L = u.L, K = u.K, C = u.C;
    std::vector<double> prefix(static_cast<size_t>(L * C));  // log_prefix(v, c), v = 0..L-1
    for (int64_t v = 0; v < L; ++v)
      for (int64_t c = 0; c < C; ++c) prefix[v * C + c] = log_prefix(u, alpha, v, c);
    for (int64_t v = 0; v < L; ++v)
      for (int64_t d = 1; d <= std::min(K, L - v); ++d)
        for (int64_t c = 0; c < C; ++c) f(v, d, c, posterior(prefix[v * C + c] + u.seg(v, d, c), v + d, c));
  }
};

// The float64 gradients accumulated by a backward (cum, transition, duration
// bias, start, end, onset) written to the outputs the caller wants (nullptr:
// not wanted; onset only when the problem has onset scores).
inline void write_grads(const GradsF64& out, bool onset, const std::vector<double>& cum,
                        const std::vector<double>& transition, const std::vector<double>& duration_bias,
                        const std::vector<double>& start, const std::vector<double>& end,
                        const std::vector<double>& onset_grad) {
  auto put = [](double* dst, const std::vector<double>& src) {
    if (dst) std::copy(src.begin(), src.end(), dst);
  };
  put(out.cum_scores, cum);
  put(out.transition, transition);
  put(out.duration_bias, duration_bias);
  put(out.start, start);
  put(out.end, end);
  if (onset) put(out.onset, onset_grad);
}

}  // namespace timitseg::crf::reference
