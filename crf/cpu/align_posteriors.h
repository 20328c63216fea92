// The constrained forward-backward of one utterance on the cpu backend
// (docs/crf.md "Confidence"): log Z_c over every alignment of the transcript
// and the posteriors of phone spans, starts, ends and skips, from four full
// tables of np x (L+1) doubles, one row per phone (S and F forward, H and G
// backward; E is recomputed from F). Written over one utterance view (AlignUtterance) so
// that a caller can run it on any window of frames and transcript positions
// (a Params whose start/end are the transitions from / into the phones
// outside the window gives the posteriors conditioned on the window's edges).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "crf/cpu/align_bounded.h"
#include "crf/phone_graph.h"

namespace timitseg::crf::cpu {

// Above this size of one utterance's tables (align_posterior_table_bytes) the
// cpu backend refuses align_posteriors with one line (the caller windows).
constexpr size_t kAlignPosteriorTableBytes = size_t{512} << 20;

class ConstrainedPosteriors {
 public:
  // tables: 4 (L+1) np doubles, tmp: scratch_doubles(K) doubles (caller-owned, overwritten).
  ConstrainedPosteriors(const AlignUtterance& u, double* tables, double* tmp);
  static int64_t scratch_doubles(int64_t K) { return 5 * K + 1; }
  // Restricts run() to the phones [lo[t], hi[t]) at frame t (t = 0..L; the
  // arrays outlive run()): every other cell is -inf, so the posteriors are
  // those of the alignments inside the band (confidence windows: a band around
  // the aligned path, crf/align_confidence.cpp). lo/hi nullptr: every phone.
  void set_band(const int32_t* lo, const int32_t* hi) { lo_ = lo, hi_ = hi; }
  // Forward and backward passes; returns log Z_c (-inf: no alignment of finite score).
  double run();
  double log_z() const { return lz_; }
  // Posteriors (0-based phone n; 0 outside the valid range), after run():
  double span(int64_t n, int64_t s, int64_t e) const;  // P_c(phone n occupies [s, e))
  double starts(int64_t n, int64_t u) const;           // P_c(phone n starts at u)
  double ends(int64_t n, int64_t t) const;             // P_c(phone n ends at t)
  double skipped(int64_t n) const;                     // P_c(optional phone n has 0 frames)
  // Backend::align_posteriors' three numbers for the query span (s, r) of phone n.
  void query(int64_t n, int64_t s, int64_t r, double* out3) const;
  // The transcript loss's constrained marginals (docs/crf.md "Training from
  // transcripts"), after run() returned a finite log Z_c, without a band: adds
  // w times each marginal to the counts it multiplies: gc [L+1][C] (+ at a
  // piece's end, - at its start), gA [C][C], gD [K][C], gs [C], ge [C], go
  // [L][C] (nullptr: no onset). crf/cpu/transcript.cpp.
  void add_marginals(double w, double* gc, double* gA, double* gD, double* gs, double* ge, double* go) const;

 private:
  const AlignUtterance& u_;
  double *S_, *F_, *H_, *G_, *tmp_;
  double lz_;
  const int32_t* lo_ = nullptr;  // [L+1]: the band's first phone a frame (nullptr: 0)
  const int32_t* hi_ = nullptr;  // [L+1]: one past its last (nullptr: np)
  int64_t lo(int64_t t) const { return lo_ ? lo_[t] : 0; }
  int64_t hi(int64_t t) const { return hi_ ? hi_[t] : u_.np; }
  bool in_band(int64_t t, int64_t n) const { return !lo_ || (lo_[t] <= n && n < hi_[t]); }
  bool opt(int64_t n) const { return u_.opt != nullptr && u_.opt[n] == 1; }
  // The phone graph (crf/phone_graph.h: u.links, else the chain of u.opt), read once by the
  // constructor: each phone's links, and its successors (bit j: phone n + 1 + j may follow it).
  std::vector<int32_t> links_, succ_;
  int32_t link(int64_t n) const { return links_[static_cast<size_t>(n)]; }
  double A(int64_t from, int64_t to) const;
  double st(int64_t c) const;
  double en(int64_t c) const;
  double seg(int64_t v, int64_t d, int64_t c) const;
  double cum(int64_t t, int64_t c) const;
  double ons(int64_t v, int64_t c) const;  // o[v][c], 0 without onset
  double phone(int64_t v, int64_t r, int64_t c) const;
  double entry(int64_t t, int64_t n) const;  // E[t][n]: phone n starts at t (transition into it included)
  // dexp[d] = exp(D[d][c] - dmax) for d < K; returns dmax = max_d D[d][c] (-inf: dexp unset).
  double duration_factors(int64_t c, double* dexp) const;
  // The log-domain terms of F[t][n] (final pieces ending at t) and of H[v][n]
  // (pieces starting at v, the continuing one last): the exact path; returns their count.
  int64_t end_terms(int64_t n, int64_t t, double* terms) const;
  int64_t start_terms(int64_t n, int64_t v, double* terms) const;
  void forward_phone(int64_t n);   // S and F of phone n
  void backward_phone(int64_t n);  // G and H of phone n
  // H's linear-domain factors for the starts [v0, v1) of phone n (v1 - v0 <= K;
  // H known from v1 on; dm = dmax > -inf): eq [2K] for the final pieces, eu [K]
  // for the continuing one; returns their reference R (-inf: no finite term).
  double start_factors(int64_t n, int64_t v0, int64_t v1, double dm, double* eq, double* eu) const;
  // sum of H[v][n]'s terms over exp(R + dmax + o[v][c] - cum[v][c]) from those factors.
  double start_sum(int64_t v, int64_t v0, const double* dexp, const double* eq, const double* eu) const;
  double get(const double* tab, int64_t t, int64_t n) const { return tab[n * (u_.L + 1) + t]; }
};

}  // namespace timitseg::crf::cpu
