// Forced alignment of one utterance over the full tables: the F/S
// recurrence of docs/crf.md ("Forced alignment"), ties as documented there,
// the cpu backend's method while an utterance's table fits
// kAlignFullTableBytes (align_bounded.h above it, align_banded.h for long
// recordings).
#pragma once

#include <cstdint>

#include "crf/cpu/align_bounded.h"

namespace timitseg::crf::cpu {

// One thread's full tables (rows 0..L used): F, S [(T+1)][N] float64 and
// their back pointers bp_d (final piece d of F), bp_s (0 = the phone starts
// here, 1 = a piece of K before, 2 = after phone n-2, phone n-1 skipped)
// [(T+1)][N] int32.
struct AlignTables {
  double* F;
  double* S;
  int32_t* bp_d;
  int32_t* bp_s;
};

// Aligns u (its phones in rows of N) in the tables tb: returns the best score
// (-inf when infeasible, out then left as it is) and writes its spans out
// [N][2] (start, duration; a skipped phone has duration 0).
double align_full_table(const AlignUtterance& u, int64_t N, const AlignTables& tb, int32_t* out);

}  // namespace timitseg::crf::cpu
