// crf::posterior_boundaries (crf/posterior_boundaries.h; docs/crf.md
// "Boundaries from the posteriors"): the start marginals of the cpu backend's
// constrained forward-backward, then the increasing programme.
#include "crf/posterior_boundaries.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "common/parallel.h"
#include "crf/cpu/align_posteriors.h"
#include "crf/transcript_windows.h"

namespace timitseg::crf {

void PosteriorBoundaryCount::add(const PosteriorBoundaryCount& o) {
  utterances += o.utterances;
  boundaries += o.boundaries;
  moved += o.moved;
  moved_frames += o.moved_frames;
  windowed += o.windowed;
  over_limit += o.over_limit;
  if (first_over_limit < 0) first_over_limit = o.first_over_limit;
  seconds += o.seconds;
  between_frames += o.between_frames;
  offset_abs_sum += o.offset_abs_sum;
}

double between_frames_offset(double pm, double p0, double pp) {
  if (!(pm > 0.0 && p0 > 0.0 && pp > 0.0)) return 0.0;
  const double lm = std::log(pm), l0 = std::log(p0), lp = std::log(pp);
  const double curvature = lm - 2.0 * l0 + lp;
  if (!(curvature < 0.0)) return 0.0;  // no maximum (or not finite)
  return std::clamp(0.5 * (lm - lp) / curvature, -0.5, 0.5);
}

std::vector<int64_t> increasing_boundaries(const double* W, int64_t m, int64_t L) {
  if (m < 1 || L < m + 1) throw std::invalid_argument("increasing_boundaries: needs m >= 1 and L >= m + 1");
  // V[j][u] for boundary j (0-based: j = 0..m-1) at frame u in [j + 1, L - m + j]; arg: the previous boundary.
  std::vector<double> V(static_cast<size_t>(m * L), -INFINITY);
  std::vector<int64_t> arg(static_cast<size_t>(m * L), 0);
  for (int64_t u = 1; u <= L - m; ++u) V[u] = W[u];  // boundary 0 after b_0 = 0
  for (int64_t j = 1; j < m; ++j) {
    double best = -INFINITY;
    int64_t at = 0;
    for (int64_t u = j + 1; u <= L - m + j; ++u) {
      const double prev = V[(j - 1) * L + u - 1];  // the running maximum over u' < u
      if (prev > best) best = prev, at = u - 1;
      V[j * L + u] = best + W[j * L + u];
      arg[j * L + u] = at;
    }
  }
  std::vector<int64_t> b(static_cast<size_t>(m));
  double best = -INFINITY;
  for (int64_t u = m; u <= L - 1; ++u)
    if (V[(m - 1) * L + u] > best) best = V[(m - 1) * L + u], b[m - 1] = u;
  for (int64_t j = m - 1; j >= 1; --j) b[j - 1] = arg[j * L + b[j]];
  return b;
}

double posterior_boundary_bytes(int64_t L, int64_t np) {
  const double l = static_cast<double>(L), n = static_cast<double>(np);
  return 8.0 * (4.0 * (l + 1.0) * n + 3.0 * n * l);
}

namespace {

// The programme on one utterance view (d.B = 1, L = d.T frames; np phones y,
// flags opt or nullptr, its aligned spans [np][2] in its frames): writes the
// decided start of each kept phone after the first into starts [np] (the
// others untouched), and its offset between frames into offsets [np] when not
// nullptr. False when the constrained pass has no finite score.
bool decide(const Dims& d, const Params& p, int64_t np, const int32_t* y, const int32_t* opt, const int32_t* spans,
            int64_t* starts, double* offsets) {
  const int64_t L = d.T;
  std::vector<int64_t> kept;
  for (int64_t n = 0; n < np; ++n)
    if (spans[2 * n + 1] > 0) kept.push_back(n);
  const int64_t m = static_cast<int64_t>(kept.size()) - 1;  // boundaries to place
  if (m < 1) return true;
  std::vector<double> tables(static_cast<size_t>(4 * (L + 1) * np)),
      tmp(static_cast<size_t>(cpu::ConstrainedPosteriors::scratch_doubles(d.K)));
  const cpu::AlignUtterance au{L, np, d.K, d.C, y, opt, p.cum_scores, p.onset, &p};
  cpu::ConstrainedPosteriors cp(au, tables.data(), tmp.data());
  if (!(cp.run() > -INFINITY)) return false;  // (the path was feasible: only -inf parameters get here)
  std::vector<double> W(static_cast<size_t>(m * L), 0.0);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t u = 1; u < L; ++u) W[j * L + u] = cp.starts(kept[j + 1], u);
  const std::vector<int64_t> bnd = increasing_boundaries(W.data(), m, L);
  for (int64_t j = 0; j < m; ++j) starts[kept[j + 1]] = bnd[j];
  if (offsets)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t u = bnd[j];  // 1 <= u <= L - 1; a neighbour outside [1, L - 1] counts as probability 0
      const double* w = &W[j * L];
      offsets[kept[j + 1]] = between_frames_offset(u - 1 >= 1 ? w[u - 1] : 0.0, w[u], u + 1 <= L - 1 ? w[u + 1] : 0.0);
    }
  return true;
}

// Utterance b: its kept phones' starts from the posteriors (the whole
// utterance, or windows of its transcript when its tables exceed `limit`),
// made increasing, written into its spans [np][2] (and their offsets between
// frames into offsets [np] when not nullptr); fills its count.
void one_utterance(const Dims& dims, const Params& hp, int64_t N, int64_t b, const int32_t* phones, int64_t np,
                   const int32_t* opt, int32_t* spans, double limit, const PosteriorWindows& pw, int threads,
                   PosteriorBoundaryCount* count, double* offsets) {
  const int64_t L = hp.lengths[b];
  const int32_t* y = phones + b * N;
  std::vector<int64_t> kept;
  for (int64_t n = 0; n < np; ++n)
    if (spans[2 * n + 1] > 0) kept.push_back(n);
  const int64_t m = static_cast<int64_t>(kept.size()) - 1;
  if (m < 1) return;
  std::vector<int64_t> starts(static_cast<size_t>(np), 0);
  for (int64_t n = 0; n < np; ++n) starts[n] = spans[2 * n];
  std::vector<double> offs(static_cast<size_t>(np), 0.0);
  const bool whole = !pw.always && posterior_boundary_bytes(L, np) <= limit;
  const int64_t core = whole ? np : std::max<int64_t>(1, pw.core), margin = whole ? 0 : pw.margin;
  const int64_t windows = (np + core - 1) / core;
  for (int64_t k = 0; k < windows; ++k) {  // every window under the limit before any work
    const TranscriptWindow w = transcript_window(k, core, margin, np, L, spans);
    if (posterior_boundary_bytes(w.e - w.a, w.p1 - w.p0) > limit || w.e - w.a < 1) {
      count->over_limit = 1;
      count->first_over_limit = b;
      return;
    }
  }
  std::vector<char> decided(static_cast<size_t>(windows), 0);
  parallel_for(windows, threads, [&](int64_t k, int) {  // (serial when nested in the utterances' loop)
    const TranscriptWindow w = transcript_window(k, core, margin, np, L, spans);
    const WindowProblem wp(dims, hp, b, w, y, spans);
    std::vector<int64_t> local(static_cast<size_t>(w.p1 - w.p0));
    std::vector<double> local_offs(static_cast<size_t>(w.p1 - w.p0), 0.0);
    for (int64_t i = w.p0; i < w.p1; ++i) local[i - w.p0] = wp.spans[2 * (i - w.p0)];
    if (!decide(wp.dims, wp.p, w.p1 - w.p0, y + w.p0, opt ? opt + w.p0 : nullptr, wp.spans.data(), local.data(),
                offsets ? local_offs.data() : nullptr))
      return;
    for (int64_t i = w.c0; i < w.c1; ++i) {  // the core's: disjoint between windows
      starts[i] = w.a + local[i - w.p0];
      offs[i] = local_offs[i - w.p0];
    }
    decided[k] = 1;
  });
  for (char d : decided)
    if (!d) return;  // (a window of a feasible path: only -inf parameters get here) the Viterbi's stay
  // Kept phones strictly increasing inside [0, L) (windows decide their cores apart: the seams are clamped).
  std::vector<int64_t> s(static_cast<size_t>(m + 1));
  s[0] = 0;
  for (int64_t j = 1; j <= m; ++j) s[j] = std::max(starts[kept[j]], s[j - 1] + 1);
  for (int64_t j = m; j >= 1; --j) s[j] = std::min(s[j], (j == m ? L : s[j + 1]) - 1);
  count->utterances = 1;
  count->windowed = whole ? 0 : 1;
  count->boundaries = m;
  for (int64_t j = 1; j <= m; ++j) {
    const int64_t old = spans[2 * kept[j]];
    count->moved += s[j] != old ? 1 : 0;
    count->moved_frames += s[j] - old;
    if (!offsets) continue;
    const double o = s[j] == starts[kept[j]] ? offs[kept[j]] : 0.0;  // a start the seams moved stays on its frame
    offsets[kept[j]] = o;
    count->between_frames += o != 0.0 ? 1 : 0;
    count->offset_abs_sum += std::fabs(o);
  }
  // Kept phone j occupies [s_j, s_{j+1}); a skipped phone starts where the next kept one does (L after the last).
  for (int64_t n = 0, j = 0; n < np; ++n) {
    if (spans[2 * n + 1] > 0) {
      const int64_t e = j < m ? s[j + 1] : L;
      spans[2 * n] = static_cast<int32_t>(s[j]);
      spans[2 * n + 1] = static_cast<int32_t>(e - s[j]);
      ++j;
    } else {
      spans[2 * n] = static_cast<int32_t>(j <= m ? s[j] : L);
    }
  }
}

}  // namespace

void posterior_boundaries(const Dims& dims, const Params& host_params, int64_t N, const int32_t* phones,
                          const int32_t* num_phones, const int32_t* optional, AlignResult* r, int threads,
                          double limit, PosteriorWindows windows, bool between_frames) {
  const auto start = std::chrono::steady_clock::now();
  if (limit <= 0) limit = kPosteriorBoundaryBytes;
  const int64_t B = dims.B;
  if (static_cast<int64_t>(r->score.size()) != B || static_cast<int64_t>(r->spans.size()) != B * N * 2)
    throw std::invalid_argument("posterior_boundaries: the alignment's shape is not [B][N][2]");
  std::vector<PosteriorBoundaryCount> counts(static_cast<size_t>(B));
  if (between_frames) r->start_offset.assign(static_cast<size_t>(B * N), 0.0);
  auto one = [&](int64_t b, int window_threads) {
    if (!(r->score[b] > -INFINITY) || num_phones[b] < 2) return;
    one_utterance(dims, host_params, N, b, phones, num_phones[b], optional ? optional + b * N : nullptr,
                  r->spans.data() + b * N * 2, limit, windows, window_threads, &counts[b],
                  between_frames ? r->start_offset.data() + b * N : nullptr);
  };
  if (B == 1)  // a long recording is a batch of its own: its windows on the threads
    one(0, threads);
  else
    parallel_for(B, threads, [&](int64_t b, int) { one(b, 1); });
  for (const PosteriorBoundaryCount& c : counts) r->posterior.add(c);  // in index order
  r->posterior.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace timitseg::crf
