// Shared by the files of the cuda backend (crf/cuda/*.cu): the workspace
// layout, the status word that kernels use to report the first invalid input,
// and small host helpers (grid sizes, start/end pointers). docs/cuda.md has
// the design; docs/crf.md the math.
//
// Every CUDA call goes through TS_CUDA and every launch is followed by
// TS_LAUNCHED (common/cuda_check.h). Work is queued on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/cuda_check.h"
#include "crf/backend.h"

namespace timitseg::crf::cuda_impl {

constexpr double kNegInf = -INFINITY;

// Tensor ids in the status key (smaller id = reported first).
enum TensorId : int {
  kLengths = 0,
  kCum = 1,
  kTransition = 2,
  kDuration = 3,
  kStart = 4,
  kEnd = 5,
  kOnset = 6,
  kLabels = 7,
  kLogZ = 8,
  kGold = 9,
  kNumPhones = 10,  // align: num_phones[b] outside [1, N]
  kPhones = 11,     // align: phones[b][i] outside [0, C)
  kOptional = 12,   // align: optional[b][i] not 0/1, or a second optional phone in a row
  kOptionalAll = 13,  // align: utterance b has only optional phones
  kSpans = 14,        // align_posteriors: spans[b][n] not inside [0, lengths[b]]
  kQueries = 15,      // span_marginals: queries[b][i] out of range
  kNumQueries = 16,   // span_marginals: num_queries[b] outside [0, Q]
  kTranscript = 17,   // transcript_backward: utterance b has log Z_c = -inf
};
constexpr unsigned long long kNoError = ~0ULL;
constexpr int kIndexBits = 56;

__device__ inline void report(unsigned long long* status, int tensor, long long index) {
  unsigned long long key = (static_cast<unsigned long long>(tensor) << kIndexBits) |
                           (static_cast<unsigned long long>(index) & ((1ULL << kIndexBits) - 1));
  atomicMin(status, key);  // integer: the smallest key wins whatever the order
}

// True when the validation kernel reported an invalid input. Every kernel
// queued after it returns at once then, so nothing is written (the host reads
// the status once, at the end of the call). Stable during any later kernel:
// input errors have the smallest keys, and the codes later kernels report
// (kLogZ, kGold) are larger, so the test is the same for every thread.
__device__ inline bool input_invalid(const unsigned long long* status) {
  return static_cast<int>(*status >> kIndexBits) < kLogZ;
}

// ---------------------------------------------------------------------------
// Workspace layout (byte offsets, each 256-aligned). [B][T+1][C] arrays are
// float64 in log space; Viterbi backpointers reuse the rho/gamma storage.
//
// Checkpointed (ck, docs/crf.md "The backward in bounded memory"): the four
// tables hold a window of rows [t0, t0 + trows) per utterance ([B][trows][C]),
// the recurrences' state is kept every W positions (ckpt [2B][nblk][S]) and
// the last rows alpha[L] / rho[0] in edge [2B][C]; the kernels that read the
// tables handle the rows [r0, r1) of the current window. Viterbi's back
// pointers bp_d / bp_c ([B][T+1][C] int32) share that region (never used in
// the same call). The full layout is the window [0, T+1) with r0 = 0, r1 = T+1.
struct Layout {
  int B = 0, T = 0, K = 0, C = 0;
  int nch = 1;    // chunks of positions per utterance for parameter gradients
  int chunk = 1;  // positions per chunk
  bool ck = false;      // checkpointed
  int W = 0, nblk = 0;  // ck: positions per block (a multiple of chunk), blocks over [0, T+1)
  int P = 0;            // ck: blocks recomputed together (one window)
  int trows = 0;        // table rows per utterance (T+1; ck: P W + K)
  int t0 = 0;           // first row held in the tables
  int r0 = 0, r1 = 0;   // rows the table readers handle now
  size_t status = 0, alpha = 0, sigma = 0, rho = 0, gamma = 0, segtmp = 0, bound = 0, logz = 0, logz_rev = 0,
         gold = 0, cnt_a = 0, cnt_d = 0, cnt_s = 0, cnt_e = 0, part = 0, zeros = 0, bp_d = 0, bp_c = 0, ckpt = 0,
         edge = 0, total = 0;
};

// Index of row t of utterance b in a table of the layout (signed: t may be
// any row of the window [t0, t0 + trows)).
__host__ __device__ inline long long tab_index(const Layout& l, int b, int t) {
  return (static_cast<long long>(b) * l.trows + (t - l.t0)) * l.C;
}

// The parameter-gradient chunks whose positions lie in rows [r0, r1): all nch
// when r1 is past the last row (the chunks past an utterance's end included).
__host__ __device__ inline int chunk_first(const Layout& l) { return l.r0 / l.chunk; }
__host__ __device__ inline int chunk_last(const Layout& l) {
  return l.r1 >= l.T + 1 ? l.nch : (l.r1 + l.chunk - 1) / l.chunk < l.nch ? (l.r1 + l.chunk - 1) / l.chunk : l.nch;
}

// Doubles of one checkpoint: the ring q, woff, wm [K][C], ref [C] and R.
__host__ __device__ inline size_t ck_state_doubles(int K, int C) {
  return 3 * static_cast<size_t>(K) * static_cast<size_t>(C) + static_cast<size_t>(C) + 1;
}

// The checkpointed backward is used for a long input: when the four full
// tables (4 [B][T+1][C] float64) of one utterance exceed
// kCheckpointUtteranceBytes (T > 26.9k at C 39), or those of the batch exceed
// kCheckpointTableBytes; or always with TIMITSEG_CUDA_CHECKPOINT=always. A
// training batch (T of a few thousand at most) keeps the full tables, which
// are faster, whatever its B.
constexpr size_t kCheckpointUtteranceBytes = size_t{32} << 20;
constexpr size_t kCheckpointTableBytes = size_t{1} << 30;
// Windows a checkpointed backward recomputes at least (its blocks in at most this many groups).
constexpr int kCheckpointGroups = 8;
inline size_t full_table_bytes(const Dims& d) {
  return 4 * sizeof(double) * static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(d.C);
}
inline bool long_input(const Dims& d) {
  return d.B > 0 && (full_table_bytes(d) / static_cast<size_t>(d.B) > kCheckpointUtteranceBytes ||
                     full_table_bytes(d) > kCheckpointTableBytes);
}

inline size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// Carves one workspace into 256-byte aligned parts: take(bytes) returns the
// part's byte offset; `off` is the total once every part is taken.
struct WorkspaceCarver {
  size_t off = 0;
  size_t take(size_t bytes) {
    const size_t at = off;
    off += align256(bytes);
    return at;
  }
};

// The checkpointed blocks, from the dims alone (never from the device, so the
// bits are the same on every GPU): W a multiple of the chunk near sqrt(T K);
// P blocks a window, as many as keep the windows, checkpoints and partials
// within Viterbi's back pointers (2 [B][T+1][C] int32, the region they share),
// at least 1 and at most those of kCheckpointGroups windows.
inline void checkpoint_blocks(Layout& l) {
  const double want = std::sqrt(static_cast<double>(l.T) * static_cast<double>(l.K)) / l.chunk;
  const int64_t m = std::max<int64_t>(1, std::llround(want));
  l.W = static_cast<int>(std::min<int64_t>(m * l.chunk, static_cast<int64_t>(l.nch) * l.chunk + 1));
  l.nblk = static_cast<int>((static_cast<int64_t>(l.T) + 1 + l.W - 1) / l.W);
  const double B = l.B, C = l.C, K = l.K;
  const double fixed = 8.0 * (2.0 * B * l.nblk * static_cast<double>(ck_state_doubles(l.K, l.C)) +
                              B * l.nch * (C * C + K * C));                    // checkpoints, partials
  const double rows = (8.0 * B * (l.T + 1.0) * C - fixed) / (32.0 * B * C);  // window rows that fit
  const int64_t fit = static_cast<int64_t>(std::floor((rows - K) / l.W));
  const int64_t most = (l.nblk + kCheckpointGroups - 1) / kCheckpointGroups;
  l.P = static_cast<int>(std::max<int64_t>(1, std::min(fit, most)));
  l.trows = l.P * l.W + l.K;
}

// tables = false: the layout of log_partition on the fast recurrence, which
// keeps its state in shared memory: no [B][T+1][C] tables, no gradient
// scratch (status, log Z and the zeros only). ck: the checkpointed layout
// (tables = true only).
inline Layout make_layout(const Dims& d, bool tables = true, bool ck = false) {
  Layout l;
  l.B = static_cast<int>(d.B);
  l.T = static_cast<int>(d.T);
  l.K = static_cast<int>(d.K);
  l.C = static_cast<int>(d.C);
  // Fixed from the dims alone (never from the device), so the summation order
  // and hence the bits of the gradients are the same on every GPU.
  const int64_t want = (512 + d.B - 1) / d.B;
  const int64_t most = (d.T + 15) / 16;
  l.nch = static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
  l.chunk = static_cast<int>((d.T + l.nch - 1) / l.nch);
  l.ck = tables && ck;
  l.trows = l.T + 1;
  l.r1 = l.T + 1;
  if (l.ck) checkpoint_blocks(l);
  const size_t btc = static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(d.C);
  const size_t B = static_cast<size_t>(d.B), C = static_cast<size_t>(d.C), K = static_cast<size_t>(d.K);
  WorkspaceCarver ws;
  auto take = [&](size_t bytes) { return ws.take(bytes); };
  const size_t tb = tables ? 1 : 0;
  const size_t part_bytes = tb * B * static_cast<size_t>(l.nch) * (C * C + K * C) * sizeof(double);
  l.status = take(64);
  if (l.ck) {
    // One region: Viterbi's back pointers, or the windows, checkpoints and partials.
    const size_t win = B * static_cast<size_t>(l.trows) * C * sizeof(double);
    WorkspaceCarver r;
    r.off = ws.off;
    l.alpha = r.take(win);
    l.sigma = r.take(win);
    l.rho = r.take(win);
    l.gamma = r.take(win);
    l.ckpt = r.take(2 * B * static_cast<size_t>(l.nblk) * ck_state_doubles(l.K, l.C) * sizeof(double));
    l.part = r.take(part_bytes);
    l.bp_d = ws.take(btc * sizeof(int32_t));
    l.bp_c = ws.take(btc * sizeof(int32_t));
    ws.off = std::max(ws.off, r.off);
    l.edge = take(2 * B * C * sizeof(double));
  } else {
    l.alpha = take(tb * btc * sizeof(double));
    l.sigma = take(tb * btc * sizeof(double));
    l.rho = take(tb * btc * sizeof(double));
    l.gamma = take(tb * btc * sizeof(double));
    l.bp_d = l.rho;
    l.bp_c = l.gamma;
  }
  l.segtmp = take(tb * B * static_cast<size_t>(d.T) * 3 * sizeof(int32_t));
  l.bound = take(tb * B * static_cast<size_t>(d.T + 1) * sizeof(int32_t));
  l.logz = take(B * sizeof(double));
  l.logz_rev = take(B * sizeof(double));
  l.gold = take(tb * B * sizeof(double));
  l.cnt_a = take(tb * B * C * C * sizeof(int32_t));
  l.cnt_d = take(tb * B * K * C * sizeof(int32_t));
  l.cnt_s = take(tb * B * C * sizeof(int32_t));
  l.cnt_e = take(tb * B * C * sizeof(int32_t));
  if (!l.ck) l.part = take(part_bytes);
  l.zeros = take(C * sizeof(float));
  l.total = ws.off;
  return l;
}

template <class T>
T* at(void* ws, size_t off) {
  return reinterpret_cast<T*>(static_cast<char*>(ws) + off);
}


// Blocks for a grid-stride loop over n items (at least 1, at most 8 * 65535).
inline int grid_for(long long n, int threads) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<int>(blocks);
}

// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) for the
// current device, skipped when the attribute is already at least `bytes` (a
// host call of 1-2 us that every launch repeated). The attribute is the
// process's, per function and device: the largest value set is kept, under
// one lock, so that no thread lowers it below what another launches with.
void allow_dynamic_smem(const void* kernel, size_t bytes);
template <class K>
void allow_dynamic_smem(K* kernel, size_t bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// start / end, or the workspace's zeros when the caller passed nullptr.
inline const float* start_ptr(const Params& p, void* ws, const Layout& l) {
  return p.start ? p.start : at<float>(ws, l.zeros);
}
inline const float* end_ptr(const Params& p, void* ws, const Layout& l) {
  return p.end ? p.end : at<float>(ws, l.zeros);
}

// Host launches of the kernels, one file each (same grids and block sizes as
// before the split). All queue on `stream` and return without waiting.

// validate.cu: the dims a call takes, checked on the host (std::invalid_argument
// naming them): each >= 1, B <= 65535 (gridDim.y), indices within int; the
// phone stride N of align.
void check_dims(const Dims& d);
void check_align_n(const Dims& d, int64_t N);
// validate.cu: every input checked; the first invalid one lands in `status`.
void launch_validate(const Layout& l, const Params& p, const int32_t* labels, unsigned long long* status,
                     cudaStream_t stream);
// gold.cu: gold scores (and gold_user when not null), boundaries and counts.
void launch_gold(const Layout& l, const Params& p, const int32_t* labels, double* gold_user, void* ws,
                 cudaStream_t stream);
// backward.cu: per-chunk marginals of A and D, their fixed-order reduction
// (with start/end), and grad cum_scores.
void launch_marginals(const Layout& l, const Params& p, void* ws, cudaStream_t stream);
// marginal_fast.cu: the same partials in the scaled linear domain (4 C exps
// per position, exact fallback per term; docs/cuda.md "Linear marginals"),
// bits within float64 rounding of launch_marginals'. Shared memory it needs
// (launch only when within the device's opt-in limit).
size_t marginal_fast_smem_bytes(int K, int C);
void launch_marginals_fast(const Layout& l, const Params& p, void* ws, cudaStream_t stream);
void launch_param_reduce(const Layout& l, const Params& p, void* ws, bool with_gold, double scale, const Grads& grads,
                         cudaStream_t stream);
void launch_grad_cum(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                     cudaStream_t stream);
// grad_frames: Grads::frame_scores [B][T][C], the centered cumsum's backward of
// launch_grad_cum's output without that output (its entries written into
// dx, then one block per utterance scans them in shared memory; bitwise the
// two in sequence). Launch only when grad_frames_smem_bytes(T, C) is within
// the device's opt-in shared memory.
size_t grad_frames_smem_bytes(int T, int C);
void launch_grad_frames(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                        cudaStream_t stream);
// grad onset [B][T][C] = scale * (P(a segment with c starts at t) - gold start
// indicator); 0 on padding frames. Needs p.onset (the recurrences included it).
void launch_grad_onset(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                       cudaStream_t stream);
// status.cu: reads the status word at l.status (a wait on `stream`) and, when a
// kernel reported an input, throws its one-line message (std::invalid_argument
// for an input, std::runtime_error for a -inf log Z or gold score); phones,
// num_phones, N and optional name align's inputs (spans / queries for the
// confidence calls). pinned: a word of pinned host memory that the status
// is copied into (the copy is then one DMA, not staged through a driver buffer).
void check_status_word(cudaStream_t stream, unsigned long long* pinned, const Layout& l, const Params& p,
                       const int32_t* labels, void* ws, const int32_t* phones, const int32_t* num_phones, int N,
                       const int32_t* optional);
// posteriors.cu: boundary posteriors [B][T+1] from alpha, gamma and log Z.
void launch_boundary(const Layout& l, const Params& p, void* ws, double* out, cudaStream_t stream);

// align.cu: forced alignment. Its workspace (align_workspace_bytes) is laid
// out apart from the one above: status word, zeros [C] (start/end when null),
// F, S [B][T+1][N] float64 and the back pointers bp_d, bp_s [B][T+1][N] int32.
struct AlignLayout {
  size_t status = 0, zeros = 0, F = 0, S = 0, bp_d = 0, bp_s = 0, total = 0;
};
AlignLayout make_align_layout(const Dims& d, int64_t N);
void launch_align_validate(int B, int N, int C, const int32_t* phones, const int32_t* num_phones,
                           const int32_t* optional, unsigned long long* status, cudaStream_t stream);
// One block per utterance; writes score [B] (-inf when infeasible) and spans [B][N][2].
void launch_align(const Layout& l, const AlignLayout& al, const Params& p, int N, const int32_t* phones,
                  const int32_t* num_phones, const int32_t* optional, void* ws, double* score, int32_t* spans,
                  cudaStream_t stream);

// confidence.cu: span marginals (after the recurrences of a backward without
// labels: sigma, gamma, log Z in the workspace above) and the constrained
// forward-backward, whose workspace (align_posterior_workspace_bytes) is the
// status word, zeros [C] and S, F, H, G [B][T+1][N] float64.
struct ConfLayout {
  size_t status = 0, zeros = 0, S = 0, F = 0, H = 0, G = 0, total = 0;
};
ConfLayout make_conf_layout(const Dims& d, int64_t N);
void launch_query_validate(const Layout& l, const int32_t* lengths, int Q, const int32_t* queries,
                           const int32_t* num_queries, unsigned long long* status, cudaStream_t stream);
void launch_span_validate(const Layout& l, const int32_t* lengths, int N, const int32_t* num_phones,
                          const int32_t* spans, unsigned long long* status, cudaStream_t stream);
void launch_span_marginals(const Layout& l, const Params& p, int Q, const int32_t* queries, const int32_t* num_queries,
                           void* ws, double* out, cudaStream_t stream);
// One block per utterance; writes log_z_c [B] (-inf when infeasible; may be null) and out [B][N][3].
void launch_align_posteriors(const Layout& l, const ConfLayout& cl, const Params& p, int N, const int32_t* phones,
                             const int32_t* num_phones, const int32_t* optional, const int32_t* spans, void* ws,
                             double* log_z_c, double* out, cudaStream_t stream);

// confidence.cu: the transcript NLL's constrained part. Its workspace (after
// the backward's, transcript_workspace_bytes): status word, zeros [C], S, F,
// H, G [B][T+1][N] float64, the constrained marginals of cum [B][T+1][C] and
// onset [B][T][C] and of the parameters [B][C*C + K*C + 2C] float64.
struct TranscriptLayout {
  size_t status = 0, zeros = 0, S = 0, F = 0, H = 0, G = 0, cum = 0, onset = 0, params = 0;
  size_t ends = 0, starts = 0, durations = 0, cont = 0, pairs = 0, lz = 0, total = 0;
};
TranscriptLayout make_transcript_layout(const Dims& d, int64_t N);
// One block per utterance fills the tables (constrained.cuh); then, a thread
// per entry, each phone's pieces by their first and last frame, duration and
// transition, the marginals of each label summed over its phones in order (no
// two threads write one entry, no atomics), then the outputs of the backward
// without labels minus scale x the marginals, the parameters reduced over b in
// order (transcript.cu). log_z_c [B] (may be null); an utterance with
// log Z_c = -inf reports kTranscript. In two launches:
//   launch_transcript_marginals: the tables, log Z_c and the constrained marginals (in ws only; reads
//                                the inputs alone, so it may run on a stream beside the backward without labels)
//   launch_transcript_grads:     grads minus scale x those marginals (after the backward wrote grads)
// links [B][N] (null = the chain of optional): the phone graph (crf/phone_graph.h).
void launch_transcript_marginals(const Layout& l, const TranscriptLayout& tl, const Params& p, int N,
                                 const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                 const int32_t* links, void* ws, double* log_z_c, cudaStream_t stream);
void launch_transcript_grads(const Layout& l, const TranscriptLayout& tl, const Params& p, double scale, void* ws,
                             const Grads& grads, cudaStream_t stream);

}  // namespace timitseg::crf::cuda_impl
