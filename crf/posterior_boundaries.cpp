// crf::posterior_boundaries (crf/posterior_boundaries.h; docs/crf.md
// "Boundaries from the posteriors"): the start marginals of the cpu backend's
// constrained forward-backward, then the increasing programme.
#include "crf/posterior_boundaries.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "common/parallel.h"
#include "crf/cpu/align_posteriors.h"

namespace timitseg::crf {

void PosteriorBoundaryCount::add(const PosteriorBoundaryCount& o) {
  utterances += o.utterances;
  boundaries += o.boundaries;
  moved += o.moved;
  moved_frames += o.moved_frames;
  over_limit += o.over_limit;
  if (first_over_limit < 0) first_over_limit = o.first_over_limit;
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

// Utterance b: fills its count and rewrites its spans [np][2] in place.
void one_utterance(const Dims& dims, const Params& hp, int64_t N, int64_t b, const int32_t* phones, int64_t np,
                   const int32_t* opt, int32_t* spans, double limit, PosteriorBoundaryCount* count) {
  const int64_t L = hp.lengths[b];
  std::vector<int64_t> kept;
  for (int64_t n = 0; n < np; ++n)
    if (spans[2 * n + 1] > 0) kept.push_back(n);
  const int64_t m = static_cast<int64_t>(kept.size()) - 1;  // boundaries to place
  if (m < 1) return;
  if (posterior_boundary_bytes(L, np) > limit) {
    count->over_limit = 1;
    count->first_over_limit = b;
    return;
  }
  Params p = hp;
  const int32_t length = static_cast<int32_t>(L);
  p.cum_scores = hp.cum_scores + b * (dims.T + 1) * dims.C;
  p.onset = hp.onset ? hp.onset + b * dims.T * dims.C : nullptr;
  p.lengths = &length;
  std::vector<double> tables(static_cast<size_t>(4 * (L + 1) * np)),
      tmp(static_cast<size_t>(cpu::ConstrainedPosteriors::scratch_doubles(dims.K)));
  const cpu::AlignUtterance au{L, np, dims.K, dims.C, phones + b * N, opt, p.cum_scores, p.onset, &p};
  cpu::ConstrainedPosteriors cp(au, tables.data(), tmp.data());
  if (!(cp.run() > -INFINITY)) return;  // (the path was feasible: only -inf parameters get here)
  std::vector<double> W(static_cast<size_t>(m * L), 0.0);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t u = 1; u < L; ++u) W[j * L + u] = cp.starts(kept[j + 1], u);
  const std::vector<int64_t> bnd = increasing_boundaries(W.data(), m, L);
  count->utterances = 1;
  count->boundaries = m;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t old = spans[2 * kept[j + 1]];
    count->moved += bnd[j] != old ? 1 : 0;
    count->moved_frames += bnd[j] - old;
  }
  // Kept phone j occupies [start_j, start_{j+1}); a skipped phone starts where the next kept one does (L after the last).
  std::vector<int64_t> start(static_cast<size_t>(m + 1));
  start[0] = 0;
  for (int64_t j = 0; j < m; ++j) start[j + 1] = bnd[j];
  for (int64_t n = 0, j = 0; n < np; ++n) {
    if (spans[2 * n + 1] > 0) {
      const int64_t e = j < m ? start[j + 1] : L;
      spans[2 * n] = static_cast<int32_t>(start[j]);
      spans[2 * n + 1] = static_cast<int32_t>(e - start[j]);
      ++j;
    } else {
      spans[2 * n] = static_cast<int32_t>(j <= m ? start[j] : L);
    }
  }
}

}  // namespace

void posterior_boundaries(const Dims& dims, const Params& host_params, int64_t N, const int32_t* phones,
                          const int32_t* num_phones, const int32_t* optional, AlignResult* r, int threads,
                          double limit) {
  if (limit <= 0) limit = kPosteriorBoundaryBytes;
  const int64_t B = dims.B;
  if (static_cast<int64_t>(r->score.size()) != B || static_cast<int64_t>(r->spans.size()) != B * N * 2)
    throw std::invalid_argument("posterior_boundaries: the alignment's shape is not [B][N][2]");
  std::vector<PosteriorBoundaryCount> counts(static_cast<size_t>(B));
  parallel_for(B, threads, [&](int64_t b, int) {
    if (!(r->score[b] > -INFINITY) || num_phones[b] < 2) return;
    one_utterance(dims, host_params, N, b, phones, num_phones[b], optional ? optional + b * N : nullptr,
                  r->spans.data() + b * N * 2, limit, &counts[b]);
  });
  for (const PosteriorBoundaryCount& c : counts) r->posterior.add(c);  // in index order
}

}  // namespace timitseg::crf
