// Shared by the tests of the cpu backend's long-input aligners
// (tests/crf/test_align_bounded.cpp, test_align_banded.cpp): random phone
// sequences, the full-table alignment they are checked against (the cpu
// backend's align_host), one utterance as crf/cpu/align_bounded.h takes it,
// and one utterance's spans of a full-table result.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/cpu/align_bounded.h"
#include "crf/host_run.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {

struct Phones {
  int64_t N = 0;
  std::vector<int32_t> y, nph, opt;  // [B][N], [B], [B][N]
};

// Random phone sequences: nph[b] in [1, N], labels in [0, C) (repeats when C is small),
// optional phones (never two in a row, never all) when with_optional.
inline Phones random_phones(int64_t B, int64_t N, int64_t C, bool with_optional, uint32_t seed) {
  std::mt19937 rng(seed);
  Phones ph;
  ph.N = N;
  std::uniform_int_distribution<int32_t> ul(0, static_cast<int32_t>(C - 1)), un(1, static_cast<int32_t>(N));
  ph.y.resize(B * N);
  for (int32_t& v : ph.y) v = ul(rng);
  ph.opt.assign(B * N, 0);
  for (int64_t b = 0; b < B; ++b) {
    ph.nph.push_back(un(rng));
    if (!with_optional) continue;
    for (int64_t n = 0; n < ph.nph[b]; n += 2)
      if (rng() % 3 == 0 && ph.nph[b] > 1) ph.opt[b * N + n] = 1;
  }
  return ph;
}

// The cpu backend's full table: one workspace of (T+1) N x 24 bytes (the
// callers keep it under kAlignFullTableBytes, above which the backend aligns in a band).
inline AlignResult full_table(const Problem& pb, const Phones& ph, bool with_optional) {
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  return align_host(*cpu, pb.dims, pb.params(), ph.N, ph.y.data(), ph.nph.data(),
                    with_optional ? ph.opt.data() : nullptr);
}

// Utterance b of the problem and the phones, as cpu::align_bounded / align_banded take it.
inline cpu::AlignUtterance utterance(const Problem& pb, const Params& p, const Phones& ph, int64_t b,
                                     bool with_optional) {
  const Dims& d = pb.dims;
  return cpu::AlignUtterance{pb.lengths[b],
                             ph.nph[b],
                             d.K,
                             d.C,
                             ph.y.data() + b * ph.N,
                             with_optional ? ph.opt.data() + b * ph.N : nullptr,
                             pb.cum.data() + pb.row(b, 0),
                             pb.o.empty() ? nullptr : pb.o.data() + b * d.T * d.C,
                             &p};
}

// Utterance b's spans ([nph[b]][2]: start, length) of a full-table result.
inline std::vector<int32_t> full_spans(const AlignResult& full, const Phones& ph, int64_t b) {
  return std::vector<int32_t>(full.spans.begin() + b * ph.N * 2, full.spans.begin() + (b * ph.N + ph.nph[b]) * 2);
}

}  // namespace timitseg::crf::testing
