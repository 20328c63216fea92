// Boundaries from the posteriors (docs/crf.md "Boundaries from the
// posteriors"): after forced alignment, each kept phone's start is moved to
// the frame that maximizes the sum over the boundaries of
// P_c(phone starts there), under the transcript, jointly increasing. The
// constrained Viterbi decides which optional phones are there; this step
// decides where their boundaries lie.
#pragma once

#include <cstdint>
#include <vector>

#include "common/enum_names.h"
#include "crf/backend.h"
#include "crf/host_run.h"

namespace timitseg::crf {

// How an alignment's boundaries are placed: the constrained Viterbi's path, or
// the posteriors' programme above (docs/crf.md), each boundary then placed
// between frames by its posterior (posterior) or left on its frame
// (posterior_frames: the decision of rules 15-16, before rule 18).
enum class AlignBoundaries { viterbi, posterior, posterior_frames };
TIMITSEG_ENUM_NAMES(AlignBoundaries, 3, {AlignBoundaries::viterbi, "viterbi"},
                    {AlignBoundaries::posterior, "posterior"}, {AlignBoundaries::posterior_frames, "posterior-frames"});

// The position between frames of a boundary placed at frame b (docs/crf.md "Between
// frames"): from its start posteriors at b - 1, b, b + 1 (pm, p0, pp), the vertex of the
// parabola through their logarithms, in [-1/2, 1/2] frames; 0 unless all three are > 0 and
// the parabola has a maximum (log pm - 2 log p0 + log pp < 0).
double between_frames_offset(double pm, double p0, double pp);

// The programme of docs/crf.md: W [m][L] row-major (W[j-1][u] = the score of
// boundary j at frame u; column 0 is never read), m >= 1, L >= m + 1.
// Returns b [m], 0 < b[0] < ... < b[m-1] < L, maximizing sum_j W[j][b[j]];
// ties to the smallest frame at each step of the traceback's running maximum.
std::vector<int64_t> increasing_boundaries(const double* W, int64_t m, int64_t L);

// Bytes one utterance (or window) of L frames and np phones needs (the
// constrained tables and the programme's rows); an utterance above the limit
// (kPosteriorBoundaryBytes) is decided by windows of its transcript.
double posterior_boundary_bytes(int64_t L, int64_t np);
constexpr double kPosteriorBoundaryBytes = 512.0 * 1024 * 1024;

// The windows of an utterance over the limit (crf/transcript_windows.h): core
// phones per window and phones of context on each side; each window decides
// its core phones' starts conditioned on the aligned phones outside it, and
// the seams are made increasing.
struct PosteriorWindows {
  int64_t core = 32, margin = 16;
  bool always = false;  // by windows even when the whole utterance fits (tests and measurements)
};

// Moves the boundaries of r (an align() of these inputs on host arrays:
// dims, host_params, phones [B][N], num_phones [B], optional [B][N] or
// nullptr) to the posteriors' programme, in place, utterances in parallel on
// `threads` (results do not depend on it). An infeasible utterance, or one
// with fewer than two kept phones, is left as it is; one whose tables exceed
// `limit` bytes (<= 0: kPosteriorBoundaryBytes) by windows of its transcript,
// and one of which even a window exceeds it keeps the Viterbi's (counted).
// between_frames: also r->start_offset [B][N] (between_frames_offset of each
// placed boundary; 0 for the first kept phone, a skipped one, a start the seams
// moved, and an utterance left as it is). Adds what it did to r->posterior.
void posterior_boundaries(const Dims& dims, const Params& host_params, int64_t N, const int32_t* phones,
                          const int32_t* num_phones, const int32_t* optional, AlignResult* r, int threads,
                          double limit = 0.0, PosteriorWindows windows = PosteriorWindows(),
                          bool between_frames = false);

}  // namespace timitseg::crf
