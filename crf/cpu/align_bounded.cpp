// The checkpointed constrained Viterbi (align_bounded.h, docs/crf.md "Forced
// alignment in bounded memory"). Every expression is the one of the cpu
// backend's full-table recurrence (crf/cpu/align_full.cpp, align_full_table),
// in the same order, so the results are bitwise equal.
#include "crf/cpu/align_bounded.h"

#include <algorithm>
#include <memory>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/progress.h"
#include "crf/detail.h"
#include "crf/score.h"

namespace timitseg::crf::cpu {

namespace {

using detail::kNegInf;

// The rows of the recurrence: S in a ring of K+1 rows (row t at slot t mod
// (K+1)), F for the current frame only.
class Rows {
 public:
  explicit Rows(const AlignUtterance& u)
      : u_(u), R_(u.K + 1), S_(static_cast<size_t>(R_ * u.np)), F_(static_cast<size_t>(u.np)),
        arg_(static_cast<size_t>(u.np)) {}
  double* S(int64_t t) { return S_.data() + (t % R_) * u_.np; }
  const std::vector<double>& F() const { return F_; }
  bool is_opt(int64_t n) const { return u_.opt != nullptr && u_.opt[n] == 1; }
  double A(int64_t from, int64_t to) const { return static_cast<double>(u_.p->transition[from * u_.C + to]); }
  double st(int64_t c) const { return u_.p->start ? static_cast<double>(u_.p->start[c]) : 0.0; }
  double en(int64_t c) const { return u_.p->end ? static_cast<double>(u_.p->end[c]) : 0.0; }
  double seg(int64_t u, int64_t d, int64_t c) const {
    return segment_score(u_.cum, u_.p->duration_bias, u_.onset, u_.C, u, d, c);
  }
  // S[0][n]: the first kept phone starts at 0 (phone 0, or phone 1 with phone 0 skipped).
  void init0(int8_t* bps) {
    double* s0 = S(0);
    for (int64_t n = 0; n < u_.np; ++n) {
      s0[n] = n == 0 ? st(u_.y[0]) : (n == 1 && is_opt(0) ? st(u_.y[1]) : kNegInf);
      if (bps) bps[n] = static_cast<int8_t>(n == 1 ? 2 : 0);
    }
  }
  // Row t: F[t][.], then S[t][.] unless t = L; back pointers into bpd/bps when given.
  void step(int64_t t, int32_t* bpd, int8_t* bps) {
    const int64_t np = u_.np, K = u_.K;
    const int32_t* y = u_.y;
    // F[t][n] = max over d (ties to the smallest final piece d): per n the same
    // comparisons in the same order as the full table's loop, with d outside
    // so that the rows are read in order.
    int32_t* arg = bpd ? bpd : arg_.data();
    std::fill(F_.begin(), F_.end(), kNegInf);
    std::fill(arg, arg + np, 1);
    for (int64_t d = 1; d <= std::min(K, t); ++d) {
      const double* sd = S(t - d);
      for (int64_t n = 0; n < np; ++n) {
        const double v = sd[n] + seg(t - d, d, y[n]);
        if (v > F_[n]) F_[n] = v, arg[n] = static_cast<int32_t>(d);
      }
    }
    if (t == u_.L) return;
    double* st_row = S(t);
    for (int64_t n = 0; n < np; ++n) {  // ties: entry, then skip, then continuation
      const int64_t c = y[n];
      double top = n == 0 ? kNegInf : F_[n - 1] + A(y[n - 1], c);
      int8_t arg = 0;
      if (n >= 2 && is_opt(n - 1)) {
        const double skip = F_[n - 2] + A(y[n - 2], c);
        if (skip > top) top = skip, arg = 2;
      }
      if (t >= K) {
        const double cont = S(t - K)[n] + seg(t - K, K, c) + A(c, c);
        if (cont > top) top = cont, arg = 1;
      }
      st_row[n] = top;
      if (bps) bps[n] = arg;
    }
  }

 private:
  const AlignUtterance& u_;
  int64_t R_;
  std::vector<double> S_, F_;
  std::vector<int32_t> arg_;  // F's argmax when no back pointers are kept
};

}  // namespace

int64_t bounded_segment_frames(int64_t L, int64_t K) {
  const double m = std::ceil(std::sqrt(8.0 * static_cast<double>(K) * static_cast<double>(L) / 5.0));
  return std::max<int64_t>(1, static_cast<int64_t>(m));
}

size_t bounded_align_bytes(int64_t L, int64_t np, int64_t K, int64_t M) {
  const size_t n = static_cast<size_t>(np);
  return static_cast<size_t>(L / M) * static_cast<size_t>(K) * n * sizeof(double) +  // checkpoints
         static_cast<size_t>(M) * n * (sizeof(int32_t) + sizeof(int8_t)) +           // one segment's back pointers
         static_cast<size_t>(K + 2) * n * sizeof(double) + n * sizeof(int32_t);      // the ring and F
}

namespace {
double align_bounded_impl(const AlignUtterance& u, int32_t* out, int64_t M, Progress* bar);
}  // namespace

double align_bounded(const AlignUtterance& u, int32_t* out, int64_t M) {
  if (M <= 0) M = bounded_segment_frames(u.L, u.K);
  // A progress bar on long work (pass 1 and the traceback's recomputation: at most 2 L frames).
  std::unique_ptr<Progress> bar;
  if (u.L * u.np * u.K >= kProgressWork) bar = std::make_unique<Progress>("align (bounded memory)", 2 * u.L, "frame");
  try {
    return align_bounded_impl(u, out, M, bar.get());
  } catch (const std::bad_alloc&) {
    throw std::runtime_error("crf: align: " + std::to_string(u.L) + " frames and " + std::to_string(u.np) +
                             " phones need " + std::to_string(bounded_align_bytes(u.L, u.np, u.K, M) >> 20) +
                             " MiB even in bounded memory, and the allocation failed: free memory, or split the "
                             "recording (e.g. at long pauses) and align the parts");
  }
}

namespace {

double align_bounded_impl(const AlignUtterance& u, int32_t* out, int64_t M, Progress* bar) {
  const int64_t L = u.L, np = u.np, K = u.K;
  std::fill(out, out + np * 2, 0);
  int64_t needed = 0;
  for (int64_t n = 0; n < np; ++n) needed += !(u.opt != nullptr && u.opt[n] == 1);
  if (needed > L) return kNegInf;  // infeasible: every phone kept needs a frame
  // Pass 1: the rows with the ring only; at c_j = j M the K rows before it are stored.
  std::vector<double> ckpt(static_cast<size_t>(L / M) * K * np);
  Rows r(u);
  r.init0(nullptr);
  for (int64_t t = 1; t <= L; ++t) {
    if (t % M == 0)
      for (int64_t i = 0; i < K; ++i)
        if (t - K + i >= 0) std::memcpy(&ckpt[((t / M - 1) * K + i) * np], r.S(t - K + i), np * sizeof(double));
    r.step(t, nullptr, nullptr);
    if (bar && t % 1024 == 0) bar->advance(1024);
  }
  double total = r.F()[np - 1] + r.en(u.y[np - 1]);
  bool skip_last = false;
  if (np >= 2 && r.is_opt(np - 1)) {  // the last phone skipped
    const double alt = r.F()[np - 2] + r.en(u.y[np - 2]);
    if (alt > total) total = alt, skip_last = true;
  }
  if (!(total > kNegInf)) return kNegInf;  // no alignment of finite score
  // Back pointers of one segment [j M, (j+1) M) at a time, recomputed from its checkpoint.
  std::vector<int32_t> bpd(static_cast<size_t>(M * np));
  std::vector<int8_t> bps(static_cast<size_t>(M * np));
  int64_t loaded = -1;
  auto row = [&](int64_t t) {  // the offset of row t in the loaded segment
    const int64_t j = t / M;
    if (j != loaded) {
      int64_t from = j * M;
      if (j == 0) {
        r.init0(bps.data());
        from = 1;
      } else {
        for (int64_t i = 0; i < K; ++i)
          if (j * M - K + i >= 0) std::memcpy(r.S(j * M - K + i), &ckpt[((j - 1) * K + i) * np], np * sizeof(double));
      }
      for (int64_t s = from; s < std::min((j + 1) * M, L + 1); ++s)
        r.step(s, bpd.data() + (s - j * M) * np, bps.data() + (s - j * M) * np);
      if (bar) bar->advance(std::min((j + 1) * M, L + 1) - from);
      loaded = j;
    }
    return (t - j * M) * np;
  };
  // Trace back from (L, last kept phone), as the full table does.
  trace_back_spans(
      L, np, K, skip_last, [&](int64_t t, int64_t n) { return bpd[row(t) + n]; },
      [&](int64_t t, int64_t n) { return bps[row(t) + n]; }, out);
  return total;
}

}  // namespace

}  // namespace timitseg::crf::cpu
