// The reference backend's transcript NLL (docs/crf.md "Training from
// transcripts"): log Z and its gradient from backward_f64, log Z_c and the
// constrained marginals by the definitions (constrained.h: sums over every
// duration of every phone, each phone's pieces one by one), O(L^2 N) per
// utterance.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "crf/cpu/align_bounded.h"
#include "crf/reference/constrained.h"
#include "crf/reference/lattice.h"
#include "crf/reference/reference.h"
#include "crf/validate.h"

namespace timitseg::crf::reference {
namespace {

using constrained::kNegInf;
using constrained::Tables;
using constrained::View;

const char* const kWho = "reference backend";

// Float64 accumulators of the constrained expectations of one batch.
struct Acc {
  double *cum, *A, *D, *s, *e, *on;  // cum [L+1][C], on [L][C] or nullptr: the utterance's rows
  int64_t C;
  void piece(int64_t u, int64_t d, int64_t c, double w) {
    cum[(u + d) * C + c] += w;
    cum[u * C + c] -= w;
    D[(d - 1) * C + c] += w;
    if (on) on[u * C + c] += w;
  }
};

// Adds w * (the counts of every constrained marginal) of one utterance to acc.
void constrained_marginals(const Tables& tb, double w, Acc acc) {
  const View& x = tb.x;
  const int64_t L = x.L, np = x.np, K = x.K;
  const double lz = tb.lz;
  // Every span [v, v+r) of every phone n: its pieces, and A[c][c] between them.
  for (int64_t n = 1; n <= np; ++n) {
    const int64_t c = x.lab(n);
    for (int64_t v = 0; v < L; ++v)
      for (int64_t r = 1; v + r <= L; ++r) {
        const double pr = std::exp(tb.before(v, n) + x.phone(v, r, c) + tb.bw(v + r, n) - lz);
        if (pr == 0.0) continue;
        for (int64_t pos = v; pos < v + r; pos += K) {
          if (pos > v) acc.A[c * x.C + c] += w * pr;
          acc.piece(pos, std::min(K, v + r - pos), c, w * pr);
        }
      }
  }
  // Phone n ends at t, phone m (one that may follow it) starts there.
  for (int64_t n = 1; n <= np; ++n)
    for (int64_t m = n + 1; m <= std::min(np, n + kMaxLinkBack); ++m) {
      if (!x.precedes(n, m)) continue;
      for (int64_t t = 1; t < L; ++t)
        acc.A[x.lab(n) * x.C + x.lab(m)] +=
            w * std::exp(tb.fw(t, n) + x.trans(x.lab(n), x.lab(m)) + tb.from_start(t, m) - lz);
    }
  for (int64_t m = 1; m <= np; ++m)
    if (x.first(m)) acc.s[x.lab(m)] += w * std::exp(x.start(x.lab(m)) + tb.from_start(0, m) - lz);
  for (int64_t n = 1; n <= np; ++n)
    if (x.last(n)) acc.e[x.lab(n)] += w * std::exp(tb.fw(L, n) + x.end(x.lab(n)) - lz);
}

}  // namespace

void transcript_backward_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones,
                             const int32_t* num_phones, const int32_t* optional, const int32_t* links,
                             double scale, double* log_z, double* log_z_c, const GradsF64& g) {
  validate_f64(dims, p, nullptr);
  validate_transcript_host(dims, N, phones, num_phones, optional, links);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  std::vector<double> g_cum(B * (T + 1) * C), g_A(C * C), g_D(K * C), g_s(C), g_e(C), g_o(p.onset ? B * T * C : 0);
  GradsF64 full{g_cum.data(), g_A.data(), g_D.data(), g_s.data(), g_e.data(), p.onset ? g_o.data() : nullptr};
  std::vector<double> lz(B);
  backward_f64(dims, p, nullptr, scale, lz.data(), nullptr, full);  // scale * d log Z (throws for log Z = -inf)
  std::vector<double> lzc(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = p.lengths[b], np = num_phones[b];
    const double table = static_cast<double>(L + 1) * static_cast<double>(np + 1) * 16.0;
    if (table > static_cast<double>(cpu::kAlignFullTableBytes))
      throw std::invalid_argument("crf: reference backend: transcript_backward of utterance " + std::to_string(b) +
                                  " (" + std::to_string(L) + " frames, " + std::to_string(np) +
                                  " phones) needs a table over its 256 MiB limit; use the cpu backend");
    const View x{L,
                 K,
                 C,
                 np,
                 p.cum_scores + b * (T + 1) * C,
                 p.transition,
                 p.duration_bias,
                 p.start,
                 p.end,
                 p.onset ? p.onset + b * T * C : nullptr,
                 phones + b * N,
                 optional ? optional + b * N : nullptr,
                 links ? links + b * N : nullptr};
    const Tables tb(x);
    if (!(tb.lz > kNegInf))
      detail::throw_transcript_infeasible(kWho, b, L, optional ? optional + b * N : nullptr, np, links ? links + b * N : nullptr);
    lzc[b] = tb.lz;
    constrained_marginals(tb, -scale,
                          Acc{g_cum.data() + b * (T + 1) * C, g_A.data(), g_D.data(), g_s.data(), g_e.data(),
                              p.onset ? g_o.data() + b * T * C : nullptr, C});
  }
  if (log_z) std::copy(lz.begin(), lz.end(), log_z);
  if (log_z_c) std::copy(lzc.begin(), lzc.end(), log_z_c);
  write_grads(g, p.onset != nullptr, g_cum, g_A, g_D, g_s, g_e, g_o);
}

}  // namespace timitseg::crf::reference
