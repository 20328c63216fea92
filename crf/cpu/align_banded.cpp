// The banded constrained Viterbi (align_banded.h, docs/crf.md "Forced
// alignment of long recordings (banded)"). Every expression of a banded pass
// is the one of the cpu backend's full-table recurrence (crf/cpu/align_full.cpp,
// align_full_table), in the same order; a cell outside the band is -inf.
#include "crf/cpu/align_banded.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "common/parallel.h"
#include "common/progress.h"
#include "crf/detail.h"
#include "crf/score.h"

namespace timitseg::crf::cpu {

namespace {

using detail::kNegInf;

// A row of the band (BandRows::step) compiled twice, for AVX2 and for the
// baseline, the one run chosen when the program starts (GCC/Clang function
// multiversioning): the final pieces' loop four doubles wide instead of two.
// The same IEEE float64 additions, comparisons and selections (no FMA: avx2
// does not enable it, so nothing is contracted): the same bits.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TIMITSEG_BAND_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TIMITSEG_BAND_CLONES
#endif

// Passes of this much work (rows x width x K) or more draw a progress bar;
// recordings of this many frames or more log each pass (time, band size).
constexpr double kBandProgressWork = 1e9;
constexpr int64_t kLogFrames = 10000;

#if defined(__GNUC__) || defined(__clang__)
#define TIMITSEG_BAND_INLINE __attribute__((always_inline)) inline
#else
#define TIMITSEG_BAND_INLINE inline
#endif

// Four float64 lanes (GCC/Clang vector extension: the same IEEE operations
// lane by lane, two SSE2 halves in the baseline clone, one AVX2 register in
// the other); a block of final pieces is kBlock phones, two vectors in flight.
using V4 = double __attribute__((vector_size(32)));
constexpr int64_t kLanes = 4, kVectors = 2, kBlock = kVectors * kLanes;

TIMITSEG_BAND_INLINE void load4(V4& v, const double* p) { std::memcpy(&v, p, sizeof v); }
TIMITSEG_BAND_INLINE void store4(double* p, const V4& v) { std::memcpy(p, &v, sizeof v); }

// One final piece d of row t, seen from the phones n of row t: row r = t - d
// of the rings starts at base + n (base = the ring row's offset - lo[r]); its
// phones [n0, n1) are in both rows' bands (n0 = n1 = 0: none); db[n] =
// duration_bias[d-1][y_n].
struct Piece {
  int64_t base, n0, n1;
  const double* db;
};

// One final piece for the four phones m..m+3 (at least one of them in the
// piece's [n0, n1)): f = max(f, S[r][n] + seg(r, d, y_n)) lane by lane in the
// full table's expression order (gt - gr + db, then + onset, then S +), a = d
// where larger. A lane outside [n0, n1) reads the padding around its ring row
// (at most kLanes - 1 phones either side of the row's band), where S is -inf:
// -inf plus anything is -inf or NaN, never larger, as the full table's -inf
// cell. f and a stay in registers.
template <bool kOnset, bool kArg>
TIMITSEG_BAND_INLINE void final_piece(const Piece& p, int64_t m, const V4& dv, const V4& g, const double* S,
                                      const double* G, const double* O, V4& f, V4& a) {
  if (m >= p.n1 || m + kLanes <= p.n0) return;
  const int64_t k = p.base + m;
  V4 s, gr, db;
  load4(s, S + k);
  load4(gr, G + k);
  load4(db, p.db + m);
  V4 sg = g - gr + db;
  if constexpr (kOnset) {
    V4 o;
    load4(o, O + k);
    sg = sg + o;
  }
  const V4 v = s + sg;
  const auto better = v > f;
  f = better ? v : f;
  if constexpr (kArg) a = better ? dv : a;
}

// F[n..n+kBlock) and their final piece d (arg, as doubles) of row t: the max
// over d = 1..dmax of final_piece, ties to the smaller d, two vectors in
// flight, the odd and the even d as two chains (twice the independent work
// for the compare-and-select latency) joined at the end by value. With back
// pointers (kArg), ties to the smaller d: the maximum and the first d reaching
// it of one chain in d order, the sign of a zero included. Without (the
// centre passes), the larger of the two: the same value up to the sign of a
// zero, which no comparison and no sum with a non-zero sees, so the centres
// (positions, all those passes give) are the same.
// gt[i] = cum[t][y_{n+i}]; S, G, O: the rings of S, the gathered cum and
// onset. F and arg receive kBlock values (the rows are padded).
template <bool kOnset, bool kArg>
TIMITSEG_BAND_INLINE void final_block(int64_t n, int64_t dmax, const Piece* pc, const double* S, const double* G,
                                      const double* O, const double* gt, double* F, double* arg) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr int64_t kChains = 2;
  V4 f[kChains][kVectors], a[kChains][kVectors], g[kVectors];
#pragma GCC unroll 8
  for (int64_t j = 0; j < kVectors; ++j) {
    for (int64_t c = 0; c < kChains; ++c) {
      f[c][j] = V4{-inf, -inf, -inf, -inf};
      a[c][j] = V4{1, 1, 1, 1};
    }
    load4(g[j], gt + j * kLanes);
  }
  int64_t d = 1;
  for (; d + kChains - 1 <= dmax; d += kChains) {
#pragma GCC unroll 2
    for (int64_t c = 0; c < kChains; ++c) {
      const double dd = static_cast<double>(d + c);
      const V4 dv = {dd, dd, dd, dd};
#pragma GCC unroll 8
      for (int64_t j = 0; j < kVectors; ++j)
        final_piece<kOnset, kArg>(pc[d + c], n + j * kLanes, dv, g[j], S, G, O, f[c][j], a[c][j]);
    }
  }
  if (d <= dmax) {  // the last odd d (dmax odd)
    const double dd = static_cast<double>(d);
    const V4 dv = {dd, dd, dd, dd};
#pragma GCC unroll 8
    for (int64_t j = 0; j < kVectors; ++j)
      final_piece<kOnset, kArg>(pc[d], n + j * kLanes, dv, g[j], S, G, O, f[0][j], a[0][j]);
  }
#pragma GCC unroll 8
  for (int64_t j = 0; j < kVectors; ++j) {
    if constexpr (kArg) {  // chain 1 where larger, or equal with a smaller d
      const auto take = (f[1][j] > f[0][j]) | ((f[1][j] == f[0][j]) & (a[1][j] < a[0][j]));
      f[0][j] = take ? f[1][j] : f[0][j];
      a[0][j] = take ? a[1][j] : a[0][j];
      store4(arg + j * kLanes, a[0][j]);
    } else {
      f[0][j] = f[1][j] > f[0][j] ? f[1][j] : f[0][j];
    }
    store4(F + j * kLanes, f[0][j]);
  }
}

// The rows of the recurrence over a band: S in a ring of K+1 rows of the
// band's widest row, F for the current row. Row t holds phones [lo[t], hi[t]);
// in the adaptive mode (the centre passes) lo/hi are chosen row by row.
class BandRows {
 public:
  BandRows(const AlignUtterance& u, std::vector<int32_t>& lo, std::vector<int32_t>& hi, int64_t width)
      : u_(u), lo_(lo), hi_(hi), W_(width), P_(kLanes + width + kBlock), R_(u.K + 1),
        S_(static_cast<size_t>(R_ * P_), kNegInf), G_(static_cast<size_t>(R_ * P_), 0.0),
        O_(u.onset ? static_cast<size_t>(R_ * P_) : 0, 0.0), F_(static_cast<size_t>(P_), kNegInf),
        D_(static_cast<size_t>(P_), 1.0), DB_(static_cast<size_t>(u.K * u.np + kBlock), 0.0), pieces_(static_cast<size_t>(u.K + 1)) {
    for (int64_t d = 1; d <= u.K; ++d)  // DB[d-1][n] = duration_bias[d-1][y_n], the float -> double seg() reads
      for (int64_t n = 0; n < u.np; ++n)
        DB_[(d - 1) * u.np + n] = static_cast<double>(u.p->duration_bias[(d - 1) * u.C + u.y[n]]);
  }

  bool is_opt(int64_t n) const { return u_.opt != nullptr && u_.opt[n] == 1; }
  double A(int64_t from, int64_t to) const { return static_cast<double>(u_.p->transition[from * u_.C + to]); }
  double st(int64_t c) const { return u_.p->start ? static_cast<double>(u_.p->start[c]) : 0.0; }
  double en(int64_t c) const { return u_.p->end ? static_cast<double>(u_.p->end[c]) : 0.0; }
  double seg(int64_t u, int64_t d, int64_t c) const {
    return segment_score(u_.cum, u_.p->duration_bias, u_.onset, u_.C, u, d, c);
  }
  double S(int64_t t, int64_t n) const {
    return n >= lo_[t] && n < hi_[t] ? S_[ring(t) + (n - lo_[t])] : kNegInf;
  }
  double F(int64_t t, int64_t n) const { return n >= lo_[t] && n < hi_[t] ? F_[n - lo_[t]] : kNegInf; }
  int64_t centre() const { return centre_; }
  // Where row t's band starts in the rings (after the row's front padding).
  int64_t ring(int64_t t) const { return (t % R_) * P_ + kLanes; }

  // Row t's cum[t][y_n] (and onset[t][y_n]) for the phones of its band, read by
  // the rows after it: the same float -> double values seg() reads.
  void gather(int64_t t) {
    const int64_t C = u_.C, l = lo_[t];
    double* g = &G_[ring(t)];
    for (int64_t n = l; n < hi_[t]; ++n) g[n - l] = static_cast<double>(u_.cum[t * C + u_.y[n]]);
    if (u_.onset && t < u_.L) {
      double* o = &O_[ring(t)];
      for (int64_t n = l; n < hi_[t]; ++n) o[n - l] = static_cast<double>(u_.onset[t * C + u_.y[n]]);
    }
  }

  // Row 0: S[0][.] (the first kept phone starts at 0).
  void row0(int8_t* bps) {
    if (adaptive) lo_[0] = 0, hi_[0] = static_cast<int32_t>(std::min(W_, u_.np));
    gather(0);
    double* s0 = &S_[ring(0)];
    std::fill(s0, s0 + (P_ - kLanes), kNegInf);
    for (int64_t n = lo_[0]; n < hi_[0]; ++n) {
      s0[n - lo_[0]] = n == 0 ? st(u_.y[0]) : (n == 1 && is_opt(0) ? st(u_.y[1]) : kNegInf);
      if (bps) bps[n - lo_[0]] = static_cast<int8_t>(n == 1 ? 2 : 0);
    }
  }

  // Row t: (adaptive: the window around the best F of row t-1, moving at most
  // 2 phones a row), F[t][.], then S[t][.] unless t = L; back pointers when given.
  TIMITSEG_BAND_CLONES void step(int64_t t, uint16_t* bpd, int8_t* bps) {
    const int64_t np = u_.np, K = u_.K;
    if (adaptive) {
      const int64_t prev = lo_[t - 1], cap = std::max<int64_t>(prev, np - W_);
      lo_[t] = static_cast<int32_t>(std::max(prev, std::min({centre_ - W_ / 2, prev + 2, cap})));
      hi_[t] = static_cast<int32_t>(std::min(np, lo_[t] + W_));
    }
    const int64_t l = lo_[t], h = hi_[t];
    const int32_t* y = u_.y;
    gather(t);
    const int64_t rt = t % R_;
    const double* gt = &G_[ring(t)];  // gt[n - l] = cum[t][y_n]
    const int64_t dmax = std::min(K, t);
    for (int64_t d = 1, rr = rt; d <= dmax; ++d) {  // the final pieces d: rows r = t - d of the rings
      rr = rr == 0 ? R_ - 1 : rr - 1;  // (t - d) % R_
      const int64_t r = t - d, n0 = std::max(l, static_cast<int64_t>(lo_[r])),
                    n1 = std::min(h, static_cast<int64_t>(hi_[r]));
      pieces_[d] = n0 < n1 ? Piece{rr * P_ + kLanes - lo_[r], n0, n1, &DB_[(d - 1) * np]} : Piece{0, 0, 0, nullptr};
    }
    const double* O = u_.onset ? O_.data() : nullptr;
    for (int64_t n = l; n < h; n += kBlock) {  // ties to the smallest final piece d (d inside, lane by lane)
      double* f = &F_[n - l];
      double* arg = &D_[n - l];
      const double* g = gt + (n - l);
      if (O && bpd) final_block<true, true>(n, dmax, pieces_.data(), S_.data(), G_.data(), O, g, f, arg);
      else if (O) final_block<true, false>(n, dmax, pieces_.data(), S_.data(), G_.data(), O, g, f, arg);
      else if (bpd) final_block<false, true>(n, dmax, pieces_.data(), S_.data(), G_.data(), O, g, f, arg);
      else final_block<false, false>(n, dmax, pieces_.data(), S_.data(), G_.data(), O, g, f, arg);
    }
    if (bpd)
      for (int64_t i = 0; i < h - l; ++i) bpd[i] = static_cast<uint16_t>(D_[i]);
    if (adaptive) {  // the best F (the first of equals; none when every F is -inf)
      int64_t best = -1;
      double bv = kNegInf;
      for (int64_t n = l; n < h; ++n)
        if (F_[n - l] > bv) best = n, bv = F_[n - l];
      if (best >= 0) centre_ = best;
    }
    if (t == u_.L) return;
    double* srow = &S_[ring(t)];
    std::fill(srow, srow + (P_ - kLanes), kNegInf);
    const double* sK = t >= K ? &S_[ring(t - K)] : nullptr;  // row t - K: phones [lk, hk)
    const int64_t lk = t >= K ? lo_[t - K] : 0, hk = t >= K ? hi_[t - K] : 0;
    for (int64_t n = l; n < h; ++n) {  // ties: entry, then skip, then continuation
      const int64_t c = y[n];
      double top = n == 0 ? kNegInf : F(t, n - 1) + A(y[n - 1], c);
      int8_t arg = 0;
      if (n >= 2 && is_opt(n - 1)) {
        const double skip = F(t, n - 2) + A(y[n - 2], c);
        if (skip > top) top = skip, arg = 2;
      }
      if (t >= K) {  // S(t - K, n) from the row found once (no ring index a phone)
        const double sk = n >= lk && n < hk ? sK[n - lk] : kNegInf;
        const double cont = sk + seg(t - K, K, c) + A(c, c);
        if (cont > top) top = cont, arg = 1;
      }
      srow[n - l] = top;
      if (bps) bps[n - l] = arg;
    }
  }

  bool adaptive = false;

 private:
  const AlignUtterance& u_;
  std::vector<int32_t>&lo_, &hi_;
  // The widest row; a ring row's stride: kLanes of padding, the row, kBlock of
  // padding (S -inf there: final_piece's lanes outside the band read it); rows.
  int64_t W_, P_, R_;
  std::vector<double> S_, G_, O_, F_;  // S, the gathered cum and onset: rings of K+1 rows [K+1][P]; F [P]
  std::vector<double> D_;              // [W] the current row's final piece d (back pointers, as doubles)
  std::vector<double> DB_;             // [K][np] the duration bias of every phone (and kBlock of padding)
  std::vector<Piece> pieces_;          // [K+1] the current row's final pieces (1..min(K, t))
  int64_t centre_ = 0;                   // the best F of the last row
};

std::unique_ptr<Progress> bar_for(const std::string& label, int64_t L, double work) {
  if (work < kBandProgressWork) return nullptr;
  return std::make_unique<Progress>(label, L, "frame");
}

// The time-reversed problem: frames and phones reversed, transitions
// transposed, start and end swapped (onset scores left out: the centres are
// only an estimate).
struct Reversed {
  std::vector<float> cum, A;
  std::vector<int32_t> y, opt;
  Params p;
  AlignUtterance u;
  explicit Reversed(const AlignUtterance& f) {
    const int64_t L = f.L, C = f.C, np = f.np;
    cum.resize(static_cast<size_t>((L + 1) * C));
    for (int64_t t = 0; t <= L; ++t)
      for (int64_t c = 0; c < C; ++c) cum[t * C + c] = f.cum[L * C + c] - f.cum[(L - t) * C + c];
    A.resize(static_cast<size_t>(C * C));
    for (int64_t a = 0; a < C; ++a)
      for (int64_t b = 0; b < C; ++b) A[a * C + b] = f.p->transition[b * C + a];
    y.assign(f.y, f.y + np);
    std::reverse(y.begin(), y.end());
    if (f.opt) {
      opt.assign(f.opt, f.opt + np);
      std::reverse(opt.begin(), opt.end());
    }
    p = *f.p;
    p.cum_scores = cum.data();
    p.transition = A.data();
    std::swap(p.start, p.end);
    p.onset = nullptr;
    u = f;
    u.cum = cum.data();
    u.y = y.data();
    u.opt = f.opt ? opt.data() : nullptr;
    u.onset = nullptr;
    u.p = &p;
  }
};

}  // namespace

int64_t Band::cells() const {
  int64_t s = 0;
  for (size_t t = 0; t < lo.size(); ++t) s += hi[t] - lo[t];
  return s;
}

int64_t Band::max_width() const {
  int64_t m = 1;
  for (size_t t = 0; t < lo.size(); ++t) m = std::max<int64_t>(m, hi[t] - lo[t]);
  return m;
}

namespace {

std::vector<int32_t> centres(const AlignUtterance& u, int64_t width, Progress* bar) {
  const int64_t L = u.L, W = std::max<int64_t>(1, std::min(width, u.np));
  std::vector<int32_t> lo(static_cast<size_t>(L + 1)), hi(static_cast<size_t>(L + 1)), centre(lo.size(), 0);
  BandRows r(u, lo, hi, W);
  r.adaptive = true;
  r.row0(nullptr);
  for (int64_t t = 1; t <= L; ++t) {
    r.step(t, nullptr, nullptr);
    centre[t] = static_cast<int32_t>(r.centre());
    if (bar && t % 4096 == 0) bar->advance(4096);
  }
  if (bar) bar->advance(L % 4096);
  return centre;
}

std::vector<int32_t> reversed_centres(const AlignUtterance& u, int64_t width, Progress* bar) {
  const Reversed rev(u);
  const std::vector<int32_t> c = centres(rev.u, width, bar);
  const int64_t L = u.L, np = u.np;
  std::vector<int32_t> out(c.size());
  // reversed phones 0..n' done at reversed row t' = original phones np-1-n'.. in [L-t', L)
  for (int64_t t = 0; t <= L; ++t) out[t] = static_cast<int32_t>(std::max<int64_t>(0, np - 2 - c[L - t]));
  return out;
}

}  // namespace

std::vector<int32_t> forward_centres(const AlignUtterance& u, int64_t width) { return centres(u, width, nullptr); }

std::vector<int32_t> backward_centres(const AlignUtterance& u, int64_t width) {
  return reversed_centres(u, width, nullptr);
}

Band band_between(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t np, int64_t margin) {
  Band band;
  band.lo.resize(a.size());
  band.hi.resize(a.size());
  for (size_t t = 0; t < a.size(); ++t) {
    band.lo[t] = static_cast<int32_t>(std::max<int64_t>(0, std::min(a[t], b[t]) - margin));
    band.hi[t] = static_cast<int32_t>(std::min<int64_t>(np, std::max(a[t], b[t]) + margin + 1));
  }
  band.lo.front() = 0;  // the first phones start at row 0, the last ones end at L
  band.hi.back() = static_cast<int32_t>(np);
  return band;
}

Band band_around(const int32_t* spans, int64_t np, int64_t L, int64_t margin, const Band* old) {
  std::vector<int32_t> at(static_cast<size_t>(L + 1), static_cast<int32_t>(np - 1));  // the phone covering frame t
  for (int64_t n = 0; n < np; ++n)
    for (int64_t f = spans[2 * n]; f < spans[2 * n] + spans[2 * n + 1] && f < L; ++f) at[f] = static_cast<int32_t>(n);
  Band band = band_between(at, at, np, margin);
  if (old)
    for (int64_t t = 0; t <= L; ++t) {
      band.lo[t] = std::min(band.lo[t], old->lo[t]);
      band.hi[t] = std::max(band.hi[t], old->hi[t]);
    }
  return band;
}

BandPass align_in_band(const AlignUtterance& u, const Band& band, int32_t* out) {
  const int64_t L = u.L, np = u.np, K = u.K;
  std::fill(out, out + np * 2, 0);
  if (K > 65535) throw std::invalid_argument("crf: align_in_band: K = " + std::to_string(K) + " exceeds 65535");
  std::vector<int64_t> off(static_cast<size_t>(L + 2), 0);  // row t's cells start at off[t]
  for (int64_t t = 0; t <= L; ++t) off[t + 1] = off[t] + (band.hi[t] - band.lo[t]);
  std::vector<uint16_t> bpd(static_cast<size_t>(off[L + 1]));
  std::vector<int8_t> bps(static_cast<size_t>(off[L + 1]));
  std::vector<int32_t> lo = band.lo, hi = band.hi;
  BandRows r(u, lo, hi, band.max_width());
  std::unique_ptr<Progress> bar =
      bar_for("align: banded pass", L, static_cast<double>(off[L + 1]) * static_cast<double>(K));
  r.row0(bps.data());
  for (int64_t t = 1; t <= L; ++t) {
    r.step(t, bpd.data() + off[t], bps.data() + off[t]);
    if (bar && t % 4096 == 0) bar->advance(4096);
  }
  if (bar) bar->advance(L % 4096);
  BandPass res;
  double total = r.F(L, np - 1) + r.en(u.y[np - 1]);
  bool skip_last = false;
  if (np >= 2 && r.is_opt(np - 1)) {  // the last phone skipped
    const double alt = r.F(L, np - 2) + r.en(u.y[np - 2]);
    if (alt > total) total = alt, skip_last = true;
  }
  const bool everything = off[L + 1] == (L + 1) * np;
  if (!(total > kNegInf)) {  // none in the band: an edge (unless the band is every phone)
    res.score = kNegInf;
    res.touches_edge = !everything;
    return res;
  }
  res.score = total;
  // Trace back from (L, last kept phone), as the full table does; note every
  // cell of the path on an inner edge of its row.
  auto cell = [&](int64_t t, int64_t n) {
    if ((n == lo[t] && lo[t] > 0) || (n == hi[t] - 1 && hi[t] < np)) res.touches_edge = true;
    return static_cast<size_t>(off[t] + (n - lo[t]));
  };
  trace_back_spans(
      L, np, K, skip_last, [&](int64_t t, int64_t n) { return bpd[cell(t, n)]; },
      [&](int64_t t, int64_t n) { return bps[cell(t, n)]; }, out);
  return res;
}

namespace {

size_t band_bytes(const Band& b, int64_t K, int64_t np) {
  // back pointers, the rings of S, gathered cum and onset (K+1 rows each), F and its d, the rows' bounds and offsets,
  // the duration bias of every phone [K][np]
  return static_cast<size_t>(b.cells()) * 3 + static_cast<size_t>(3 * (K + 1) + 2) * b.max_width() * sizeof(double) +
         b.lo.size() * (2 * sizeof(int32_t) + sizeof(int64_t)) + static_cast<size_t>(K) * static_cast<size_t>(np) * sizeof(double);
}

std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

Band every_phone(int64_t L, int64_t np) {
  Band b;
  b.lo.assign(static_cast<size_t>(L + 1), 0);
  b.hi.assign(static_cast<size_t>(L + 1), static_cast<int32_t>(np));
  return b;
}

}  // namespace

double align_banded(const AlignUtterance& u, int32_t* spans, int64_t width, size_t max_bytes, BandedStats* stats,
                    const Band* first, int threads) {
  const int64_t L = u.L, np = u.np, K = u.K;
  BandedStats local;
  BandedStats& s = stats ? *stats : local;
  s = BandedStats{};
  std::fill(spans, spans + np * 2, 0);
  int64_t needed = 0;
  for (int64_t n = 0; n < np; ++n) needed += !(u.opt != nullptr && u.opt[n] == 1);
  if (needed > L) return kNegInf;  // infeasible: every phone kept needs a frame
  const int64_t W = width > 0 ? width : kBandStartWidth;
  int64_t margin = std::max<int64_t>(2, W / 2);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto seconds = [&] {
    const double x = std::chrono::duration<double>(clock::now() - t0).count();
    t0 = clock::now();
    return x;
  };
  Band band;
  if (first) {
    band = *first;
  } else if (2 * margin + 1 >= np) {
    band = every_phone(L, np);
  } else {  // the two centre passes side by side
    std::vector<int32_t> fwd, bwd;
    std::unique_ptr<Progress> bar =
        bar_for("align: placing the band", 2 * L, 2.0 * double(L) * double(std::min(W, np)) * double(K));
    parallel_for(2, threads, [&](int64_t i, int) {
      if (i == 0) fwd = centres(u, W, bar.get());
      else bwd = reversed_centres(u, W, bar.get());
    });
    band = band_between(fwd, bwd, np, margin);
    if (L >= kLogFrames) spdlog::info("align: {} frames, {} phones: band placed in {:.2f} s", L, np, seconds());
  }
  size_t bytes = band_bytes(band, K, np);
  while (bytes <= max_bytes) {
    s.cells = band.cells();
    s.max_width = band.max_width();
    ++s.passes;
    const BandPass pass = align_in_band(u, band, spans);
    if (L >= kLogFrames)
      spdlog::info("align: {} frames, {} phones: banded pass {} in {:.2f} s, {} cells (mean {:.1f}, widest {} phones a frame){}",
                 L, np, s.passes, seconds(), s.cells, static_cast<double>(s.cells) / static_cast<double>(L + 1), s.max_width,
                 pass.touches_edge ? ": the path touches the band's edge, widening" : "");
    if (!pass.touches_edge) return pass.score;
    margin *= 2;
    if (pass.score > kNegInf) {
      band = band_around(spans, np, L, margin, &band);
    } else {  // no path in the band: widen every row
      for (int64_t t = 0; t <= L; ++t) {
        band.lo[t] = static_cast<int32_t>(std::max<int64_t>(0, band.lo[t] - margin));
        band.hi[t] = static_cast<int32_t>(std::min<int64_t>(np, band.hi[t] + margin));
      }
    }
    bytes = band_bytes(band, K, np);
  }
  // The band cannot widen within max_bytes: the exact checkpointed recurrence, if it fits.
  std::fill(spans, spans + np * 2, 0);
  const int64_t M = bounded_segment_frames(L, K);
  const size_t exact = bounded_align_bytes(L, np, K, M);
  if (exact <= max_bytes) {
    s.exact_fallback = true;
    spdlog::info("align: {} frames, {} phones: the band would exceed {}; the exact checkpointed method instead", L, np,
                 mib(max_bytes));
    return align_bounded(u, spans, M);
  }
  throw std::runtime_error("crf: align: " + std::to_string(L) + " frames and " + std::to_string(np) +
                           " phones: the best path still touches the edge of its band, a wider band needs " +
                           mib(bytes) + " and the exact method " + mib(exact) + ", over the limit of " +
                           mib(max_bytes) +
                           "; check that the transcript matches the audio, or split the recording (e.g. at long "
                           "pauses) and align the parts");
}

}  // namespace timitseg::crf::cpu
