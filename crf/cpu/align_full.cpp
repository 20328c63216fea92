// The cpu backend's forced alignment over the full F/S tables (align_full.h,
// docs/crf.md "Forced alignment"): the recurrence that the banded and bounded
// methods (align_banded.cpp, align_bounded.cpp) repeat expression by expression.
#include "crf/cpu/align_full.h"

#include <algorithm>

#include "crf/detail.h"
#include "crf/score.h"

namespace timitseg::crf::cpu {

using detail::kNegInf;

namespace {

// The traceback of the full-table forced alignment (docs/crf.md): from (L,
// the last kept phone), its final piece, then K-pieces while bp_s says so,
// then the phone before (or the one before that). out: [N][2] (start, length).
void trace_back_alignment(int64_t L, int64_t np, int64_t N, int64_t K, bool skip_last, const int32_t* bp_d,
                          const int32_t* bp_s, int32_t* out) {
  int64_t n = np - 1, end = L;
  if (skip_last) out[2 * n] = static_cast<int32_t>(L), --n;
  int64_t u = end - bp_d[end * N + n];
  while (true) {
    if (bp_s[u * N + n] == 1) {
      u -= K;
      continue;
    }
    out[2 * n] = static_cast<int32_t>(u);
    out[2 * n + 1] = static_cast<int32_t>(end - u);
    if (bp_s[u * N + n] == 2) {
      out[2 * (n - 1)] = static_cast<int32_t>(u);
      n -= 2;
    } else {
      n -= 1;
    }
    if (n < 0) break;
    end = u;
    u = end - bp_d[end * N + n];
  }
}

}  // namespace

double align_full_table(const AlignUtterance& a, int64_t N, const AlignTables& tb, int32_t* out) {
  const Params& p = *a.p;
  const int64_t L = a.L, np = a.np, K = a.K, C = a.C;
  const int32_t* y = a.y;
  const int32_t* opt = a.opt;
  const float* cum = a.cum;
  const float* on = a.onset;
  double* F = tb.F;
  double* S = tb.S;
  int32_t* bp_d = tb.bp_d;
  int32_t* bp_s = tb.bp_s;
  auto is_opt = [&](int64_t n) { return opt != nullptr && opt[n] == 1; };
  int64_t needed = 0;
  for (int64_t n = 0; n < np; ++n) needed += !is_opt(n);
  if (needed > L) return kNegInf;  // infeasible: every phone kept needs a frame
  auto A = [&](int64_t from, int64_t to) { return static_cast<double>(p.transition[from * C + to]); };
  auto st = [&](int64_t c) { return p.start ? static_cast<double>(p.start[c]) : 0.0; };
  auto en = [&](int64_t c) { return p.end ? static_cast<double>(p.end[c]) : 0.0; };
  auto seg = [&](int64_t u, int64_t d, int64_t c) { return segment_score(cum, p.duration_bias, on, C, u, d, c); };
  // S[0][n]: the first kept phone starts at 0 (phone 0, or phone 1 with phone 0 skipped).
  for (int64_t n = 0; n < np; ++n) {
    S[n] = n == 0 ? st(y[0]) : (n == 1 && is_opt(0) ? st(y[1]) : kNegInf);
    bp_s[n] = n == 1 ? 2 : 0;
  }
  for (int64_t t = 1; t <= L; ++t) {
    for (int64_t n = 0; n < np; ++n) {  // F[t][n]: ties to the smallest final piece d
      const int64_t c = y[n];
      double top = kNegInf;
      int32_t arg = 1;
      for (int64_t d = 1; d <= std::min(K, t); ++d) {
        const double v = S[(t - d) * N + n] + seg(t - d, d, c);
        if (v > top) top = v, arg = static_cast<int32_t>(d);
      }
      F[t * N + n] = top;
      bp_d[t * N + n] = arg;
    }
    if (t == L) break;
    // S[t][n]: ties to the entry after phone n-1, then after phone n-2 with the
    // optional phone n-1 skipped, then the continuation (a piece of K before).
    for (int64_t n = 0; n < np; ++n) {
      const int64_t c = y[n];
      double top = n == 0 ? kNegInf : F[t * N + n - 1] + A(y[n - 1], c);
      int32_t arg = 0;
      if (n >= 2 && is_opt(n - 1)) {
        const double skip = F[t * N + n - 2] + A(y[n - 2], c);
        if (skip > top) top = skip, arg = 2;
      }
      if (t >= K) {
        const double cont = S[(t - K) * N + n] + seg(t - K, K, c) + A(c, c);
        if (cont > top) top = cont, arg = 1;
      }
      S[t * N + n] = top;
      bp_s[t * N + n] = arg;
    }
  }
  double total = F[L * N + np - 1] + en(y[np - 1]);
  bool skip_last = false;
  if (np >= 2 && is_opt(np - 1)) {  // the last phone skipped
    const double alt = F[L * N + np - 2] + en(y[np - 2]);
    if (alt > total) total = alt, skip_last = true;
  }
  if (!(total > kNegInf)) return kNegInf;  // no alignment of finite score
  trace_back_alignment(L, np, N, K, skip_last, bp_d, bp_s, out);
  return total;
}


}  // namespace timitseg::crf::cpu
