// The reference backend's constrained forward-backward (docs/crf.md
// "Confidence"), by the definitions: a forward sum over every duration r of
// every phone (Fw[t][n]: phones 1..n aligned to [0, t), phone n kept and
// ending at t) and the matching backward sum (Bw[t][n]: everything after a
// kept phone n that ends at t), each phone's pieces scored one by one as in
// align_f64. O(L^2 N) per utterance; the oracle of the cpu and cuda recurrences.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "crf/cpu/align_bounded.h"
#include "crf/reference/constrained.h"
#include "crf/detail.h"
#include "crf/reference/reference.h"
#include "crf/score.h"
#include "crf/validate.h"

namespace timitseg::crf::reference {

using constrained::kNegInf;
using constrained::Tables;
using constrained::View;

void align_posteriors_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones,
                          const int32_t* num_phones, const int32_t* optional, const int32_t* spans, double* log_z_c,
                          double* out) {
  validate_f64(dims, p, nullptr);
  validate_align_host(dims, N, phones, num_phones, optional);
  validate_align_spans_host(dims, N, num_phones, p.lengths, spans);
  const int64_t T = dims.T, C = dims.C;
  for (int64_t b = 0; b < dims.B; ++b) {
    const int64_t L = p.lengths[b], np = num_phones[b];
    double* o = out + b * N * 3;
    std::fill(o, o + N * 3, 0.0);
    if (log_z_c) log_z_c[b] = kNegInf;
    const double table = static_cast<double>(L + 1) * static_cast<double>(np + 1) * 16.0;
    if (table > static_cast<double>(cpu::kAlignFullTableBytes))
      throw std::invalid_argument("crf: reference backend: align_posteriors of utterance " + std::to_string(b) + " (" +
                                  std::to_string(L) + " frames, " + std::to_string(np) + " phones) needs a " +
                                  std::to_string(static_cast<int64_t>(table / (1 << 20))) +
                                  " MiB table, over its 256 MiB limit; use the cpu backend");
    const View x{L,
                 dims.K,
                 C,
                 np,
                 p.cum_scores + b * (T + 1) * C,
                 p.transition,
                 p.duration_bias,
                 p.start,
                 p.end,
                 p.onset ? p.onset + b * T * C : nullptr,
                 phones + b * N,
                 optional ? optional + b * N : nullptr};
    const Tables tb(x);
    if (!(tb.lz > kNegInf)) continue;  // infeasible: no alignment of finite score
    if (log_z_c) log_z_c[b] = tb.lz;
    for (int64_t n = 1; n <= np; ++n) {
      const int64_t s = spans[(b * N + n - 1) * 2], e = s + spans[(b * N + n - 1) * 2 + 1];
      double* on = o + (n - 1) * 3;
      if (e == s) {
        on[0] = on[1] = on[2] = tb.skipped(n);
        continue;
      }
      for (int64_t ds = -1; ds <= 1; ++ds)
        for (int64_t de = -1; de <= 1; ++de) on[0] += tb.span(n, s + ds, e + de);
      for (int64_t u = std::max<int64_t>(0, s - 1); u <= std::min(L - 1, s + 1); ++u)
        for (int64_t t = u + 1; t <= L; ++t) on[1] += tb.span(n, u, t);
      for (int64_t t = std::max<int64_t>(1, e - 1); t <= std::min(L, e + 1); ++t)
        for (int64_t u = 0; u < t; ++u) on[2] += tb.span(n, u, t);
    }
  }
}

}  // namespace timitseg::crf::reference
