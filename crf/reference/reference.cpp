// The float64 reference backend: the spec's definitions computed directly,
// O(T K C^2) per utterance, one utterance at a time, no threads. Clarity over
// speed: this is the oracle for the cpu and cuda backends.
#include "crf/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "crf/cpu/align_bounded.h"
#include "crf/detail.h"
#include "crf/reference/lattice.h"
#include "crf/score.h"
#include "crf/segments.h"
#include "crf/validate.h"

namespace timitseg::crf::reference {
namespace {

using detail::kNegInf;
using detail::logsumexp;

const char* const kWho = "reference backend";

}  // namespace

// -inf parameters (forbidden entries) may leave no path of finite score.
double checked_log_z(double lz, int64_t b) {
  if (!(lz > kNegInf)) detail::throw_no_path(kWho, b);
  return lz;
}

// alpha[t][c], t = 0..L (row 0 unused = -inf).
std::vector<double> forward_alpha(const Utt& u) {
  const int64_t L = u.L, K = u.K, C = u.C;
  std::vector<double> alpha((L + 1) * C, kNegInf);
  std::vector<double> terms;
  for (int64_t t = 1; t <= L; ++t)
    for (int64_t c = 0; c < C; ++c) {
      terms.clear();
      for (int64_t d = 1; d <= std::min(K, t); ++d) {
        const int64_t v = t - d;  // segment [v, t) with label c
        if (v == 0) {
          terms.push_back(u.start(c) + u.seg(0, d, c));
        } else {
          for (int64_t cp = 0; cp < C; ++cp) terms.push_back(u.seg(v, d, c) + (alpha[v * C + cp] + u.A[cp * C + c]));
        }
      }
      alpha[t * C + c] = logsumexp(terms.data(), static_cast<int64_t>(terms.size()));
    }
  return alpha;
}

double log_z_from_alpha(const Utt& u, const std::vector<double>& alpha) {
  std::vector<double> terms(u.C);
  for (int64_t c = 0; c < u.C; ++c) terms[c] = alpha[u.L * u.C + c] + u.end(c);
  return logsumexp(terms.data(), u.C);
}

// beta[t][c], t = 1..L (row 0 unused = -inf).
std::vector<double> backward_beta(const Utt& u) {
  const int64_t L = u.L, K = u.K, C = u.C;
  std::vector<double> beta((L + 1) * C, kNegInf);
  for (int64_t c = 0; c < C; ++c) beta[L * C + c] = u.end(c);
  std::vector<double> terms;
  for (int64_t t = L - 1; t >= 1; --t)
    for (int64_t c = 0; c < C; ++c) {
      terms.clear();
      for (int64_t d = 1; d <= std::min(K, L - t); ++d)
        for (int64_t cn = 0; cn < C; ++cn) terms.push_back(u.A[c * C + cn] + u.seg(t, d, cn) + beta[(t + d) * C + cn]);
      beta[t * C + c] = logsumexp(terms.data(), static_cast<int64_t>(terms.size()));
    }
  return beta;
}

// log of the summed exp-scores of everything before a segment with label c
// starting at v: s[c] for v = 0, else logsumexp_{c'} alpha[v][c'] + A[c'][c].
double log_prefix(const Utt& u, const std::vector<double>& alpha, int64_t v, int64_t c) {
  if (v == 0) return u.start(c);
  std::vector<double> terms(u.C);
  for (int64_t cp = 0; cp < u.C; ++cp) terms[cp] = alpha[v * u.C + cp] + u.A[cp * u.C + c];
  return logsumexp(terms.data(), u.C);
}

namespace {

double gold_one(const Utt& u, const int32_t* lab) {
  const std::vector<Segment> segs = gold_segments(lab, static_cast<int32_t>(u.L), u.K);
  return segmentation_score(segs, u.cum, ScoreParams<double>{u.C, u.A, u.D, u.s, u.e, u.on});
}

}  // namespace

void validate_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels) {
  detail::validate_inputs<double>(dims, p.cum_scores, p.transition, p.duration_bias, p.start, p.end, p.lengths,
                                  labels, p.onset);
}

void log_partition_f64(const Dims& dims, const ParamsF64& p, double* log_z) {
  validate_f64(dims, p, nullptr);
  for (int64_t b = 0; b < dims.B; ++b) {
    const Utt u(dims, p, b);
    log_z[b] = checked_log_z(log_z_from_alpha(u, forward_alpha(u)), b);
  }
}

void gold_score_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels, double* gold) {
  validate_f64(dims, p, labels);
  for (int64_t b = 0; b < dims.B; ++b) {
    gold[b] = gold_one(Utt(dims, p, b), labels + b * dims.T);
    if (!(gold[b] > kNegInf)) detail::throw_gold_forbidden(kWho, b);
  }
}

void backward_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels, double scale, double* log_z,
                  double* gold, const GradsF64& g) {
  validate_f64(dims, p, labels);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  // Accumulate in float64 in these buffers, then write the requested outputs.
  std::vector<double> g_cum(B * (T + 1) * C, 0.0), g_A(C * C, 0.0), g_D(K * C, 0.0), g_s(C, 0.0), g_e(C, 0.0);
  std::vector<double> g_o(p.onset ? B * T * C : 0, 0.0);  // d/d o[b][u][c] = P(a segment with c starts at u)
  // First utterance whose gold segmentation has score -inf. Reported after the
  // loop, so that a log Z = -inf error of any utterance takes precedence (the
  // order of the cuda backend); no gradient is written in either case.
  int64_t gold_forbidden = -1;
  for (int64_t b = 0; b < B; ++b) {
    const Lattice lat(dims, p, b);
    const Utt& u = lat.u;
    const int64_t L = u.L;
    const std::vector<double>& alpha = lat.alpha;
    const double lz = lat.lz;
    if (log_z) log_z[b] = lz;
    double* gc = g_cum.data() + b * (T + 1) * C;
    double* go = p.onset ? g_o.data() + b * T * C : nullptr;
    // Segment marginals mu(v,d,c): d logZ / d cum, d logZ / d D (and d logZ / d o).
    lat.for_each_segment([&](int64_t v, int64_t d, int64_t c, double mu) {
      gc[(v + d) * C + c] += scale * mu;
      gc[v * C + c] -= scale * mu;
      g_D[(d - 1) * C + c] += scale * mu;
      if (v == 0) g_s[c] += scale * mu;
      if (go) go[v * C + c] += scale * mu;
    });
    // Transition marginals: label cp ends at v, label c starts at v, any duration d.
    for (int64_t v = 1; v < L; ++v)
      for (int64_t cp = 0; cp < C; ++cp)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 1; d <= std::min(K, L - v); ++d)
            g_A[cp * C + c] += scale * lat.posterior(alpha[v * C + cp] + u.A[cp * C + c] + u.seg(v, d, c), v + d, c);
    for (int64_t c = 0; c < C; ++c) g_e[c] += scale * std::exp(alpha[L * C + c] + u.end(c) - lz);
    if (labels) {
      const int32_t* lab = labels + b * T;
      const double gs = gold_one(u, lab);
      if (gold) gold[b] = gs;
      if (!(gs > kNegInf) && gold_forbidden < 0) gold_forbidden = b;
      const std::vector<Segment> segs = gold_segments(lab, static_cast<int32_t>(L), K);
      for (size_t i = 0; i < segs.size(); ++i) {
        const Segment& sg = segs[i];
        gc[(sg.start + sg.duration) * C + sg.label] -= scale;
        gc[sg.start * C + sg.label] += scale;
        g_D[(sg.duration - 1) * C + sg.label] -= scale;
        if (i > 0) g_A[segs[i - 1].label * C + sg.label] -= scale;
        if (go) go[sg.start * C + sg.label] -= scale;
      }
      g_s[segs.front().label] -= scale;
      g_e[segs.back().label] -= scale;
    }
  }
  if (gold_forbidden >= 0) detail::throw_gold_forbidden(kWho, gold_forbidden);
  write_grads(g, p.onset != nullptr, g_cum, g_A, g_D, g_s, g_e, g_o);
}

void viterbi_f64(const Dims& dims, const ParamsF64& p, double* score, int32_t* segments, int32_t* num_segments) {
  validate_f64(dims, p, nullptr);
  const int64_t T = dims.T, K = dims.K, C = dims.C;
  for (int64_t b = 0; b < dims.B; ++b) {
    const Utt u(dims, p, b);
    const int64_t L = u.L;
    // best[t][c] = max score of a segmentation of [0,t) ending with label c;
    // back pointer (d, previous label; -1 for the first segment).
    std::vector<double> best((L + 1) * C, kNegInf);
    std::vector<int64_t> bp_d((L + 1) * C, 0), bp_c((L + 1) * C, -1);
    for (int64_t t = 1; t <= L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 1; d <= std::min(K, t); ++d) {  // ties: smallest d, then smallest label
          const int64_t v = t - d;
          if (v == 0) {
            const double val = u.start(c) + u.seg(0, d, c);
            if (val > best[t * C + c]) best[t * C + c] = val, bp_d[t * C + c] = d, bp_c[t * C + c] = -1;
          } else {
            for (int64_t cp = 0; cp < C; ++cp) {
              const double val = u.seg(v, d, c) + (best[v * C + cp] + u.A[cp * C + c]);
              if (val > best[t * C + c]) best[t * C + c] = val, bp_d[t * C + c] = d, bp_c[t * C + c] = cp;
            }
          }
        }
    int64_t c = 0;
    double top = kNegInf;
    for (int64_t k = 0; k < C; ++k)
      if (best[L * C + k] + u.end(k) > top) top = best[L * C + k] + u.end(k), c = k;
    // A finite maximum means the traceback only visits states of finite score
    // (a -inf candidate never replaces the -inf initial value: strict >).
    if (!(top > kNegInf)) detail::throw_no_path(kWho, b);
    score[b] = top;
    std::vector<int32_t> rows;
    for (int64_t t = L; t > 0;) {
      const int64_t d = bp_d[t * C + c], cp = bp_c[t * C + c];
      rows.insert(rows.begin(), {static_cast<int32_t>(t - d), static_cast<int32_t>(d), static_cast<int32_t>(c)});
      t -= d;
      c = cp;
    }
    num_segments[b] = static_cast<int32_t>(rows.size() / 3);
    std::copy(rows.begin(), rows.end(), segments + b * T * 3);
  }
}

void boundary_posteriors_f64(const Dims& dims, const ParamsF64& p, double* out) {
  validate_f64(dims, p, nullptr);
  const int64_t T = dims.T;
  for (int64_t b = 0; b < dims.B; ++b) {
    double* o = out + b * (T + 1);
    std::fill(o, o + T + 1, 0.0);
    Lattice(dims, p, b).for_each_segment([o](int64_t v, int64_t d, int64_t, double mu) { o[v + d] += mu; });
  }
}

void segment_posteriors_f64(const Dims& dims, const ParamsF64& p, double* out) {
  validate_f64(dims, p, nullptr);
  const int64_t T = dims.T, K = dims.K, C = dims.C;
  for (int64_t b = 0; b < dims.B; ++b) {
    double* o = out + b * T * K * C;  // [T][K][C]: the segment ending at frame t (inclusive), of duration d
    std::fill(o, o + T * K * C, 0.0);
    Lattice(dims, p, b).for_each_segment([o, K, C](int64_t v, int64_t d, int64_t c, double mu) {
      o[((v + d - 1) * K + d - 1) * C + c] = mu;
    });
  }
}

void span_marginals_f64(const Dims& dims, const ParamsF64& p, int64_t Q, const int32_t* queries,
                        const int32_t* num_queries, double* log_z, double* out) {
  validate_f64(dims, p, nullptr);
  validate_span_queries_host(dims, Q, queries, num_queries, p.lengths);
  for (int64_t b = 0; b < dims.B; ++b) {
    const Lattice lat(dims, p, b);
    const Utt& u = lat.u;
    if (log_z) log_z[b] = lat.lz;
    double* o = out + b * Q;
    std::fill(o, o + Q, 0.0);
    for (int64_t i = 0; i < num_queries[b]; ++i) {
      const int32_t* q = queries + (b * Q + i) * 3;
      const int64_t v = q[0], r = q[1], c = q[2];
      if (r == 0) continue;  // a skipped phone has no span
      double sc = log_prefix(u, lat.alpha, v, c);  // everything before, then the pieces one by one
      for (int64_t pos = v; pos < v + r; pos += u.K) {
        if (pos > v) sc += u.A[c * u.C + c];
        sc += u.seg(pos, std::min(u.K, v + r - pos), c);
      }
      o[i] = lat.posterior(sc, v + r, c);
    }
  }
}

namespace {

// The full table of align_f64 (best, arg_r, arg_skip: 17 bytes a cell) over
// the CPU backend's limit: one error naming the utterance.
void check_align_table(int64_t b, int64_t L, int64_t n_ph) {
  const double table = static_cast<double>(L + 1) * static_cast<double>(n_ph + 1) * 17.0;  // best, arg_r, arg_skip
  if (table > static_cast<double>(cpu::kAlignFullTableBytes))
    throw std::invalid_argument("crf: reference backend: align of utterance " + std::to_string(b) + " (" +
                                std::to_string(L) + " frames, " + std::to_string(n_ph) + " phones) needs a " +
                                std::to_string(static_cast<int64_t>(table / (1 << 20))) +
                                " MiB table, over its 256 MiB limit; use --crf-backend cpu (bounded memory)");
}

// The spans out [n_ph][2] (start, length) of align_f64's best path from its
// back pointers arg_r, arg_skip [(L+1)][W] (the last phone skipped or not).
void trace_back_f64(int64_t L, int64_t n_ph, int64_t W, bool skip_last, const std::vector<int64_t>& arg_r,
                    const std::vector<char>& arg_skip, int32_t* out) {
  int64_t n = n_ph, t = L;
  if (skip_last) out[2 * (n - 1)] = static_cast<int32_t>(L), --n;
  while (n >= 1) {
    const int64_t r = arg_r[t * W + n];
    const bool skipped = arg_skip[t * W + n];
    out[2 * (n - 1)] = static_cast<int32_t>(t - r);
    out[2 * (n - 1) + 1] = static_cast<int32_t>(r);
    t -= r;
    if (skipped) {
      out[2 * (n - 2)] = static_cast<int32_t>(t);
      n -= 2;
    } else {
      n -= 1;
    }
  }
}

}  // namespace

void align_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
               const int32_t* optional, double* score, int32_t* spans) {
  validate_f64(dims, p, nullptr);
  validate_align_host(dims, N, phones, num_phones, optional);
  const int64_t K = dims.K, C = dims.C;
  for (int64_t b = 0; b < dims.B; ++b) {
    const Utt u(dims, p, b);
    const int64_t L = u.L, n_ph = num_phones[b];
    const int32_t* y = phones + b * N;
    auto opt = [&](int64_t n) { return optional != nullptr && optional[b * N + n - 1] == 1; };  // n 1-based
    int32_t* out = spans + b * N * 2;
    std::fill(out, out + N * 2, 0);
    score[b] = kNegInf;
    int64_t needed = 0;
    for (int64_t n = 1; n <= n_ph; ++n) needed += !opt(n);
    if (needed > L) continue;  // infeasible: every phone kept needs a frame
    check_align_table(b, L, n_ph);
    // The score of phone label c over [v, v+r): the gold-run rule, pieces of K
    // then the remainder, each a segment; A[c][c] between consecutive pieces.
    auto phone_score = [&](int64_t v, int64_t r, int64_t c) {
      double sc = 0.0;
      for (int64_t pos = v; pos < v + r; pos += K) {
        if (pos > v) sc += u.A[c * C + c];
        sc += u.seg(pos, std::min(K, v + r - pos), c);
      }
      return sc;
    };
    // best[t][n]: max score of [0,t) holding phones 1..n (n = 1..n_ph), phone
    // n kept and ending at t (an optional phone before it may be skipped);
    // arg_r[t][n]: its duration; arg_skip[t][n]: phone n-1 was skipped.
    const int64_t W = n_ph + 1;
    std::vector<double> best((L + 1) * W, kNegInf);
    std::vector<int64_t> arg_r((L + 1) * W, 0);
    std::vector<char> arg_skip((L + 1) * W, 0);
    for (int64_t n = 1; n <= n_ph; ++n) {
      const int64_t c = y[n - 1];
      for (int64_t t = 1; t <= L; ++t) {
        const int64_t at = t * W + n;
        // r = j K + d, candidates in the order (d, j, predecessor): ties go to the smallest
        // final piece d, then the fewest pieces, then phone n-1 kept over skipped.
        for (int64_t d = 1; d <= std::min(K, t); ++d)
          for (int64_t r = d; r <= t; r += K) {
            const int64_t v = t - r;  // the phone is [v, t)
            double before[2] = {kNegInf, kNegInf};  // phone n-1 kept, phone n-1 skipped
            if (v == 0) {
              if (n == 1) before[0] = u.start(c);
              if (n == 2 && opt(1)) before[1] = u.start(c);
            } else {
              if (n >= 2) before[0] = best[v * W + n - 1] + u.A[y[n - 2] * C + c];
              if (n >= 3 && opt(n - 1)) before[1] = best[v * W + n - 2] + u.A[y[n - 3] * C + c];
            }
            for (int k = 0; k < 2; ++k) {
              if (before[k] == kNegInf) continue;
              const double val = before[k] + phone_score(v, r, c);
              if (val > best[at]) best[at] = val, arg_r[at] = r, arg_skip[at] = static_cast<char>(k);
            }
          }
      }
    }
    double total = best[L * W + n_ph] + u.end(y[n_ph - 1]);
    bool skip_last = false;
    if (opt(n_ph)) {  // the last phone skipped: phone n_ph-1 ends the utterance
      const double alt = best[L * W + n_ph - 1] + u.end(y[n_ph - 2]);
      if (alt > total) total = alt, skip_last = true;
    }
    if (!(total > kNegInf)) continue;  // no alignment of finite score
    score[b] = total;
    trace_back_f64(L, n_ph, W, skip_last, arg_r, arg_skip, out);
  }
}

namespace {

// The Backend object: converts the float32 inputs to float64 and calls the
// functions above. (Allocates internally; workspace_bytes is 0.)
class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  bool on_device() const override { return false; }
  size_t workspace_bytes(const Dims&) const override { return 0; }

  void log_partition(const Dims& dims, const Params& p, double* log_z, void*) override {
    Conv cv(dims, p);
    log_partition_f64(dims, cv.params, log_z);
  }
  void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold, void*) override {
    Conv cv(dims, p);
    gold_score_f64(dims, cv.params, labels, gold);
  }
  void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z, double* gold,
                const Grads& grads, void*) override {
    if (grads.frame_scores)
      throw std::invalid_argument(name() + " backend: frame_scores gradients are not computed here "
                                            "(fuses_frame_grads is false)");
    Conv cv(dims, p);
    Wide w(dims, p);
    backward_f64(dims, cv.params, labels, scale, log_z, gold, w.g64);
    w.put(grads, p);
  }
  size_t transcript_workspace_bytes(const Dims&, int64_t) const override { return 0; }
  void transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                           const int32_t* num_phones, const int32_t* optional, const int32_t* links, double scale,
                           double* log_z, double* log_z_c, const Grads& grads, void*) override {
    if (grads.frame_scores)
      throw std::invalid_argument(name() + " backend: transcript_backward does not compute frame_scores gradients "
                                           "(Grads::frame_scores must be nullptr)");
    Conv cv(dims, p);
    Wide w(dims, p);
    transcript_backward_f64(dims, cv.params, N, phones, num_phones, optional, links, scale, log_z, log_z_c, w.g64);
    w.put(grads, p);
  }
  void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments,
               void*) override {
    Conv cv(dims, p);
    viterbi_f64(dims, cv.params, score, segments, num_segments);
  }
  size_t align_workspace_bytes(const Dims&, int64_t) const override { return 0; }
  void align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
             const int32_t* optional, double* score, int32_t* spans, void*) override {
    Conv cv(dims, p);
    align_f64(dims, cv.params, N, phones, num_phones, optional, score, spans);
  }
  void span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                      const int32_t* num_queries, double* log_z, double* out, void*) override {
    Conv cv(dims, p);
    span_marginals_f64(dims, cv.params, Q, queries, num_queries, log_z, out);
  }
  size_t align_posterior_workspace_bytes(const Dims&, int64_t) const override { return 0; }
  void align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                        const int32_t* num_phones, const int32_t* optional, const int32_t* spans, double* log_z_c,
                        double* out, void*) override {
    Conv cv(dims, p);
    align_posteriors_f64(dims, cv.params, N, phones, num_phones, optional, spans, log_z_c, out);
  }
  void boundary_posteriors(const Dims& dims, const Params& p, double* out, void*) override {
    Conv cv(dims, p);
    boundary_posteriors_f64(dims, cv.params, out);
  }

 private:
  // Float64 gradient buffers and their float32 copy-out.
  struct Wide {
    std::vector<double> gc, ga, gd, gs, ge, go;
    GradsF64 g64;
    Wide(const Dims& dims, const Params& p)
        : gc(dims.B * (dims.T + 1) * dims.C), ga(dims.C * dims.C), gd(dims.K * dims.C), gs(dims.C), ge(dims.C),
          go(p.onset ? dims.B * dims.T * dims.C : 0),
          g64{gc.data(), ga.data(), gd.data(), gs.data(), ge.data(), p.onset ? go.data() : nullptr} {}
    void put(const Grads& grads, const Params& p) const {
      auto one = [](float* dst, const std::vector<double>& src) {
        if (dst)
          for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
      };
      one(grads.cum_scores, gc);
      one(grads.transition, ga);
      one(grads.duration_bias, gd);
      one(grads.start, gs);
      one(grads.end, ge);
      if (p.onset) one(grads.onset, go);
    }
  };
  struct Conv {
    std::vector<double> cum, A, D, s, e, o;
    ParamsF64 params;
    Conv(const Dims& dims, const Params& p) {
      // Validate the float32 inputs first (same messages), then widen.
      validate_host(dims, p, nullptr);
      const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
      cum.assign(B * (T + 1) * C, 0.0);
      for (int64_t b = 0; b < B; ++b)  // only valid rows: padding may hold anything
        for (int64_t i = 0; i < (p.lengths[b] + 1) * C; ++i)
          cum[b * (T + 1) * C + i] = p.cum_scores[b * (T + 1) * C + i];
      A.assign(p.transition, p.transition + C * C);
      D.assign(p.duration_bias, p.duration_bias + K * C);
      if (p.start) s.assign(p.start, p.start + C);
      if (p.end) e.assign(p.end, p.end + C);
      params = ParamsF64{cum.data(), A.data(), D.data(), p.start ? s.data() : nullptr, p.end ? e.data() : nullptr,
                         p.lengths};
      if (p.onset) {  // only valid frames: padding may hold anything
        o.assign(B * T * C, 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < p.lengths[b] * C; ++i) o[b * T * C + i] = p.onset[b * T * C + i];
        params.onset = o.data();
      }
    }
  };
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace timitseg::crf::reference
