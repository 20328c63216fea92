// Fused persistent bidirectional LSTM layer (model/cuda/lstm_fused.h).
//
// Why: at batch 32 the recurrence of one LSTM step is a [B][H] x [H][4H]
// product per direction (H = 128: 8 MFLOP for both directions), far too small
// for a GEMM launch per step (cuDNN: ~70 us per layer-step forward+backward).
// Here one persistent launch runs all T steps; W_hh stays in registers and the
// CTAs of a thread-block cluster exchange the new state through distributed
// shared memory (DSMEM) with one cluster barrier per step.
//
// Grid and roles (both kernels)
//   grid = (NC, ceil(B/BG), 2): blockIdx.x = rank in the cluster (cluster dims
//   (NC,1,1)), blockIdx.y = batch group of BG = 8 utterances, blockIdx.z =
//   direction. 256 threads per CTA, 1 CTA per SM (__launch_bounds__(256, 1)).
//   Supported: H = 64 (NC = 4), H = 128 (NC = 4), H = 256 (NC = 8).
//   CTA `rank` owns the U = H/NC hidden units [u0, u0+U), u0 = rank*U, i.e. the
//   R = 4U gate rows {q*H + u0 + j : q in i,f,g,o; j < U} of W_hh ("local row"
//   r = q*U + j). It finishes c and h (or d c and d G) of its own units alone.
//   Per utterance b of the group at step s: t = s (forward dir) or
//   t = len_b-1-s (reverse dir) in forward(); the mirror order in backward();
//   the row is valid while s < len_b; the loop runs to the group's max length.
//
// Cell threads: thread tid < U*BG owns (unit j = tid % U, utterance tid / U)
//   for all steps and keeps its c (forward) or d c (backward) and h_{t-1} in
//   registers. A warp covers 32 consecutive units of one utterance, so its
//   global loads/stores of xg, gates, cell, y, dxg are 128-byte coalesced.
//
// Matvec threads (all 256): out[b][o] = sum_i in[b][i] * M[o][i] with
//   forward:  M = the CTA's W_hh rows    [O = R][I = H], in = h_{t-1} [BG][H]
//   backward: M = their transpose        [O = H][I = R], in = d G_t  [BG][R]
//   Thread tid: lane group c = tid % 4 (4 adjacent lanes split the inputs),
//   outputs o = (tid/4)*OPT + e, e < OPT = 4*O/256. It holds M[o][i] for
//   i = 4*(g*4 + c) + m (g < I/16, m < 4) in registers: OPT * I/4 floats
//   (H = 128: 2 x 32 = 64; H = 64: 16; H = 256: 128). `in` is read from shared
//   memory as float4: the 4 lane groups read 4 consecutive float4 (16 banks),
//   lanes with the same c the same address (broadcast): no bank conflicts.
//   OPT*BG accumulators, then the 4 partial sums are combined by two xor
//   shuffles (a fixed order, the same bits in all 4 lanes).
//
// Forward step s (per CTA):
//   1. matvec h_{s-1} (own smem hbuf[s&1]) -> gsm[BG][R] (gate pre-activations)
//   2. __syncthreads
//   3. cell threads: + xg (prefetched last step), sigmoid/tanh, c, h; write
//      gates, cell, hprev, y; store h into hbuf[(s+1)&1][b][u0+j] of EVERY CTA
//      of the cluster (DSMEM); prefetch xg of step s+1
//   4. cluster.sync() (release/acquire: the h stores are visible after it)
// Backward step s (per CTA):
//   1. cell threads: d h_next = sum over ranks r = 0..NC-1 (in rank order) of
//      part[s&1][r][b][j]; d h_t = dy + d h_next, d c, d G (i,f,g,o) of its unit;
//      write dxg; d G -> dgs[BG][R]; prefetch dy, gates, c_t, c_{t-1} of s+1
//   2. __syncthreads
//   3. matvec d G_t (dgs) x W_rows -> partial d h [BG][H] over this CTA's rows;
//      the partial for unit k goes to part[(s+1)&1][rank][b][k % U] of CTA k / U
//   4. cluster.sync()
//   Double buffering by step parity makes one barrier per step enough: a CTA
//   writes buffer (s+1)&1 of another CTA only after that CTA passed the
//   barrier of step s-1, i.e. after it finished reading that buffer.
//   Rows past an utterance's end have d G = 0 and d c = 0, so nothing past
//   lengths[b] leaks into the valid frames. Outputs at padding frames (t >=
//   len_b) are written as 0 by the owning cell thread after the loop (every
//   output element is written exactly once; no memset).
//
// Budget per CTA (H = 128, NC = 4): registers 64 weights + 16 accumulators +
//   state; ptxas (CUDA 13, sm_90, -O2): forward 159, backward 167 registers
//   per thread, no spills (H = 64: 126 / 122; H = 256: 255 / 255, no spills);
//   static shared memory: forward hbuf 2*8*128*4 = 8 KiB + gsm 8*128*4 = 4 KiB;
//   backward part 2*4*8*32*4 = 8 KiB + dgs 4 KiB. (H = 256, NC = 8: 128
//   weights per thread; 20 KiB shared.)
// Expected cost per step (H = 128, NC = 4, BG = 8; not measured yet): per
//   thread 512 FMA + 64 LDS.128 + 32 SHFL for the matvec (~0.4-0.6 us at
//   8 warps/SM), ~0.1 us activations, NC DSMEM stores per cell thread, one
//   cluster barrier (~0.3-0.5 us): ~1-1.5 us per step for both directions and
//   all groups in parallel (B = 32: 8 clusters = 32 SMs; B = 128: 128 SMs).
//
// Numerics: float32, FMA allowed, accurate expf/tanhf (no fast-math, no
// __expf). Deterministic: no atomics, every sum in a fixed order.
// The cluster code needs sm_90: on older archs the kernel bodies are a trap,
// and supported() says why (it checks the device and the binary's version).
#include "model/cuda/lstm_fused.h"
#include "model/cuda/lstm_fused_tile.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/cuda.h"
#include "common/cuda_check.h"

namespace cg = cooperative_groups;

namespace timitseg::model::fused {
namespace {

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }

struct FwdArgs {
  int B, T;
  const float* xg;          // [B][T][2][4H]
  const float* w_hh;        // [2][4H][H]
  const int32_t* lengths;   // [B]
  float* y;                 // [B][T][2H]
  float* gates;             // [2][B][T][4H]
  float* cell;              // [2][B][T][H]
  float* hprev;             // [2][B][T][H]
};

struct BwdArgs {
  int B, T;
  const float* w_hh;        // [2][4H][H]
  const int32_t* lengths;   // [B]
  const float* dy;          // [B][T][2H]
  const float* gates;       // [2][B][T][4H]
  const float* cell;        // [2][B][T][H]
  float* dxg;               // [B][T][2][4H]
};

template <int H>
__global__ void __launch_bounds__(kThreads, 1) lstm_fused_forward_kernel(FwdArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // thread-block clusters need sm_90; supported() refuses before a launch
#else
  constexpr int NC = cluster_size(H), U = H / NC, R = 4 * U;
  using Mv = Tile<R, H>;
  static_assert(U * BG <= kThreads, "one cell thread per (unit, utterance)");
  __shared__ __align__(16) float hbuf[2][BG][H];  // h_{s-1} of the group, by step parity
  __shared__ __align__(16) float gsm[BG][R];      // h_{s-1} . W_rows^T of this step
  __shared__ int slen[BG];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int group = blockIdx.y, dir = blockIdx.z;
  const int tid = threadIdx.x, u0 = rank * U;
  const int B = a.B, T = a.T;

  if (tid < BG) slen[tid] = clamped_length(a.lengths, group * BG + tid, B, T);
  for (int n = tid; n < 2 * BG * H; n += kThreads) (&hbuf[0][0][0])[n] = 0.0f;

  // W_hh rows of this CTA in registers: w[e][n] = W[dir][row(o)][input_of(n)].
  const int c = tid % kSplit, o0 = (tid / kSplit) * Mv::OPT;
  float w[Mv::OPT][Mv::IPT];
#pragma unroll
  for (int e = 0; e < Mv::OPT; ++e) {
    const int r = o0 + e, q = r / U, j = r % U;
    const float* row = a.w_hh + (static_cast<int64_t>(dir) * 4 * H + q * H + u0 + j) * H;
#pragma unroll
    for (int n = 0; n < Mv::IPT; ++n) w[e][n] = __ldg(row + Mv::input_of(n, c));
  }
  __syncthreads();
  int steps = 0;
#pragma unroll
  for (int b = 0; b < BG; ++b) steps = max(steps, slen[b]);
  // Every CTA of the cluster has started and zeroed its hbuf before any DSMEM store.
  cluster.sync();

  const bool is_cell = tid < U * BG;
  const int j = tid % U, bl = tid / U, bg = group * BG + bl;
  const int len = is_cell ? slen[bl] : 0;
  const int64_t G4H = 4 * H;
  // Pointers of this (dir, utterance, unit); the frame offset is added per step.
  const float* xg_b = a.xg + (static_cast<int64_t>(bg) * T * 2 + dir) * G4H + u0 + j;        // + t*2*4H + q*H
  float* gates_b = a.gates + (static_cast<int64_t>(dir) * B + bg) * T * G4H + u0 + j;        // + t*4H + q*H
  float* cell_b = a.cell + (static_cast<int64_t>(dir) * B + bg) * T * H + u0 + j;            // + t*H
  float* hprev_b = a.hprev + (static_cast<int64_t>(dir) * B + bg) * T * H + u0 + j;          // + t*H
  float* y_b = a.y + static_cast<int64_t>(bg) * T * 2 * H + dir * H + u0 + j;                // + t*2H
  auto frame = [&](int s) { return dir == 0 ? s : len - 1 - s; };

  float c_state = 0.0f, h_state = 0.0f, xn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (len > 0) {
    const float* p = xg_b + static_cast<int64_t>(frame(0)) * 2 * G4H;
#pragma unroll
    for (int q = 0; q < 4; ++q) xn[q] = __ldg(p + q * H);
  }
  float acc[Mv::OPT][BG];
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1, nxt = cur ^ 1;
    Mv::run(w, &hbuf[cur][0][0], c, acc);
#pragma unroll
    for (int e = 0; e < Mv::OPT; ++e)
#pragma unroll
      for (int b = 0; b < BG; ++b)
        if ((e * BG + b) % kSplit == c) gsm[b][o0 + e] = acc[e][b];
    __syncthreads();
    if (s < len) {
      const int t = frame(s);
      const float gi = sigmoid(gsm[bl][0 * U + j] + xn[0]);
      const float gf = sigmoid(gsm[bl][1 * U + j] + xn[1]);
      const float gg = tanhf(gsm[bl][2 * U + j] + xn[2]);
      const float go = sigmoid(gsm[bl][3 * U + j] + xn[3]);
      const float cn = gf * c_state + gi * gg;
      const float hn = go * tanhf(cn);
      float* gt = gates_b + static_cast<int64_t>(t) * G4H;
      gt[0 * H] = gi;
      gt[1 * H] = gf;
      gt[2 * H] = gg;
      gt[3 * H] = go;
      cell_b[static_cast<int64_t>(t) * H] = cn;
      hprev_b[static_cast<int64_t>(t) * H] = h_state;
      y_b[static_cast<int64_t>(t) * 2 * H] = hn;
      c_state = cn;
      h_state = hn;
#pragma unroll
      for (int r = 0; r < NC; ++r) *cluster.map_shared_rank(&hbuf[nxt][bl][u0 + j], r) = hn;
      if (s + 1 < len) {  // prefetch the next step's input part; its latency hides behind the barrier
        const float* p = xg_b + static_cast<int64_t>(frame(s + 1)) * 2 * G4H;
#pragma unroll
        for (int q = 0; q < 4; ++q) xn[q] = __ldg(p + q * H);
      }
    }
    cluster.sync();
  }
  // Padding frames of this (dir, utterance, unit): 0.
  if (is_cell && bg < B) zero_forward_padding<H>(len, T, gates_b, cell_b, hprev_b, y_b);
#endif
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1) lstm_fused_backward_kernel(BwdArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // thread-block clusters need sm_90; supported() refuses before a launch
#else
  constexpr int NC = cluster_size(H), U = H / NC, R = 4 * U;
  using Mv = Tile<H, R>;
  static_assert(U * BG <= kThreads, "one cell thread per (unit, utterance)");
  __shared__ __align__(16) float part[2][NC][BG][U];  // d h partials of my units from each rank, by parity
  __shared__ __align__(16) float dgs[BG][R];          // d G_t of this CTA's rows
  __shared__ int slen[BG];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int group = blockIdx.y, dir = blockIdx.z;
  const int tid = threadIdx.x, u0 = rank * U;
  const int B = a.B, T = a.T;

  if (tid < BG) slen[tid] = clamped_length(a.lengths, group * BG + tid, B, T);
  for (int n = tid; n < 2 * NC * BG * U; n += kThreads) (&part[0][0][0][0])[n] = 0.0f;

  // Transposed tile: output o = unit k in [0, H), input = local row r:
  // w[e][n] = W[dir][row(r = input_of(n))][k = o0 + e].
  const int c = tid % kSplit, o0 = (tid / kSplit) * Mv::OPT;
  float w[Mv::OPT][Mv::IPT];
  load_transposed_tile<H, U, Mv>(a.w_hh + static_cast<int64_t>(dir) * 4 * H * H, u0, c, o0, w);
  __syncthreads();
  int steps = 0;
#pragma unroll
  for (int b = 0; b < BG; ++b) steps = max(steps, slen[b]);
  cluster.sync();  // every CTA has started and zeroed `part` before any DSMEM store

  const bool is_cell = tid < U * BG;
  const int j = tid % U, bl = tid / U, bg = group * BG + bl;
  const int len = is_cell ? slen[bl] : 0;
  const int64_t G4H = 4 * H;
  const float* dy_b = a.dy + static_cast<int64_t>(bg) * T * 2 * H + dir * H + u0 + j;               // + t*2H
  const float* gates_b = a.gates + (static_cast<int64_t>(dir) * B + bg) * T * G4H + u0 + j;         // + t*4H + q*H
  const float* cell_b = a.cell + (static_cast<int64_t>(dir) * B + bg) * T * H + u0 + j;             // + t*H
  float* dxg_b = a.dxg + (static_cast<int64_t>(bg) * T * 2 + dir) * G4H + u0 + j;                   // + t*2*4H + q*H
  // Backward order: the forward dir from its last frame down, the reverse dir from t = 0 up.
  auto frame = [&](int s) { return dir == 0 ? len - 1 - s : s; };
  // The frame whose state fed frame t in forward(), or -1 at the dir's first step.
  auto prev_frame = [&](int t) { return dir == 0 ? t - 1 : (t + 1 < len ? t + 1 : -1); };

  // Prefetched inputs of step s: dy, i f g o, c_t, c_{t-1}.
  float n_dy = 0.0f, n_g[4] = {0.0f, 0.0f, 0.0f, 0.0f}, n_c = 0.0f, n_cp = 0.0f;
  auto prefetch = [&](int s) {
    const int t = frame(s), tp = prev_frame(t);
    n_dy = __ldg(dy_b + static_cast<int64_t>(t) * 2 * H);
    const float* gt = gates_b + static_cast<int64_t>(t) * G4H;
#pragma unroll
    for (int q = 0; q < 4; ++q) n_g[q] = __ldg(gt + q * H);
    n_c = __ldg(cell_b + static_cast<int64_t>(t) * H);
    n_cp = tp >= 0 ? __ldg(cell_b + static_cast<int64_t>(tp) * H) : 0.0f;
  };
  if (len > 0) prefetch(0);
  float dc = 0.0f;  // d loss / d c_t carried from the later step
  float acc[Mv::OPT][BG];
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1, nxt = cur ^ 1;
    if (is_cell) {
      if (s < len) {
        float dh = part[cur][0][bl][j];
#pragma unroll
        for (int r = 1; r < NC; ++r) dh += part[cur][r][bl][j];  // rank order: deterministic
        const int t = frame(s);
        const float gi = n_g[0], gf = n_g[1], gg = n_g[2], go = n_g[3];
        const float tc = tanhf(n_c);
        const float dht = n_dy + dh;
        const float dct = dht * go * (1.0f - tc * tc) + dc;
        const float di = dct * gg * gi * (1.0f - gi);
        const float df = dct * n_cp * gf * (1.0f - gf);
        const float dg = dct * gi * (1.0f - gg * gg);
        const float dout = dht * tc * go * (1.0f - go);
        dc = dct * gf;
        float* dt = dxg_b + static_cast<int64_t>(t) * 2 * G4H;
        dt[0 * H] = di;
        dt[1 * H] = df;
        dt[2 * H] = dg;
        dt[3 * H] = dout;
        dgs[bl][0 * U + j] = di;
        dgs[bl][1 * U + j] = df;
        dgs[bl][2 * U + j] = dg;
        dgs[bl][3 * U + j] = dout;
        if (s + 1 < len) prefetch(s + 1);
      } else {  // past the end (or no utterance): no gradient flows
        dc = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; ++q) dgs[bl][q * U + j] = 0.0f;
      }
    }
    __syncthreads();
    Mv::run(w, &dgs[0][0], c, acc);
    send_partials<U, NC, Mv>(cluster, part[nxt], rank, c, o0, acc);
    cluster.sync();
  }
  if (is_cell && bg < B) zero_backward_padding<H>(len, T, dxg_b);
#endif
}

// ---------------------------------------------------------------------------
// Host side.

cudaLaunchConfig_t launch_config(int NC, int groups, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(NC), static_cast<unsigned>(groups), 2u);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(NC);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Why the kernel `fn` (cluster size NC) cannot run on the current device; "" when it can.
std::string kernel_problem(const void* fn, const char* name, int NC) {
  cudaFuncAttributes fa{};
  cudaError_t err = cudaFuncGetAttributes(&fa, fn);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string(name) + ": cudaFuncGetAttributes failed: " + cudaGetErrorString(err);
  }
  if (fa.binaryVersion < 90) {
    std::ostringstream os;
    os << name << ": this binary has no sm_90 code for it (it was built for compute capability "
       << fa.binaryVersion / 10 << "." << fa.binaryVersion % 10
       << "; build with CMAKE_CUDA_ARCHITECTURES including 90)";
    return os.str();
  }
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(NC, 1, nullptr, attr);
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string(name) + ": cudaOccupancyMaxActiveClusters failed: " + cudaGetErrorString(err);
  }
  if (clusters <= 0) {
    std::ostringstream os;
    os << name << ": no cluster of " << NC << " CTAs x " << kThreads << " threads (" << fa.numRegs
       << " registers/thread, " << fa.sharedSizeBytes << " B shared) fits on this device";
    return os.str();
  }
  return "";
}

template <int H>
std::string problem_for() {
  constexpr int NC = cluster_size(H);
  std::string p = kernel_problem(reinterpret_cast<const void*>(&lstm_fused_forward_kernel<H>),
                                 "fused LSTM forward kernel", NC);
  if (p.empty())
    p = kernel_problem(reinterpret_cast<const void*>(&lstm_fused_backward_kernel<H>), "fused LSTM backward kernel",
                       NC);
  return p;
}

// The reason the kernels cannot run for H on the current device ("" when they can). Cached per (device, H).
std::string problem(int H) {
  if (cluster_size(H) == 0) {
    std::ostringstream os;
    os << "the fused LSTM supports 64, 128 or 256 hidden units per direction, not " << H;
    return os.str();
  }
  if (cuda::device_count() == 0) return cuda::no_device_message();
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDevice failed: ") + cudaGetErrorString(err);
  }
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev, H);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::string p;
  int major = 0, minor = 0;
  if ((err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess) {
    (void)cudaGetLastError();
    p = std::string("cudaDeviceGetAttribute failed: ") + cudaGetErrorString(err);
  } else if (major < 9) {
    std::ostringstream os;
    os << "the fused LSTM needs thread-block clusters (compute capability >= 9.0); device " << dev << " has "
       << major << "." << minor;
    p = os.str();
  } else {
    p = H == 64 ? problem_for<64>() : H == 128 ? problem_for<128>() : problem_for<256>();
  }
  cache.emplace(key, p);
  return p;
}

void check_call(const char* what, int B, int T, int H) {
  if (B < 1 || T < 1) {
    std::ostringstream os;
    os << "fused LSTM " << what << ": B = " << B << " and T = " << T << " must both be >= 1";
    throw std::invalid_argument(os.str());
  }
  if (cluster_size(H) == 0) throw std::invalid_argument("fused LSTM " + std::string(what) + ": " + problem(H));
  const std::string p = problem(H);
  if (!p.empty()) throw std::runtime_error("fused LSTM " + std::string(what) + ": " + p);
}

template <int H>
void launch_forward(const FwdArgs& args, cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  const int groups = (args.B + BG - 1) / BG;
  const cudaLaunchConfig_t cfg = launch_config(cluster_size(H), groups, stream, attr);
  TS_CUDA(cudaLaunchKernelEx(&cfg, lstm_fused_forward_kernel<H>, args));
  TS_LAUNCHED("lstm_fused_forward_kernel");
}

template <int H>
void launch_backward(const BwdArgs& args, cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  const int groups = (args.B + BG - 1) / BG;
  const cudaLaunchConfig_t cfg = launch_config(cluster_size(H), groups, stream, attr);
  TS_CUDA(cudaLaunchKernelEx(&cfg, lstm_fused_backward_kernel<H>, args));
  TS_LAUNCHED("lstm_fused_backward_kernel");
}

}  // namespace

bool supported(int H, std::string* why) {
  std::string p;
  try {
    p = problem(H);
  } catch (const std::exception& e) {
    p = e.what();
  }
  if (why) *why = p;
  return p.empty();
}

void forward(int B, int T, int H, const float* xg, const float* w_hh, const int32_t* lengths, float* y, float* gates,
             float* cell, float* hprev, void* stream) {
  check_call("forward", B, T, H);
  const FwdArgs args{B, T, xg, w_hh, lengths, y, gates, cell, hprev};
  switch (H) {
    case 64: launch_forward<64>(args, S(stream)); break;
    case 128: launch_forward<128>(args, S(stream)); break;
    default: launch_forward<256>(args, S(stream)); break;
  }
}

void backward(int B, int T, int H, const float* w_hh, const int32_t* lengths, const float* dy, const float* gates,
              const float* cell, float* dxg, void* stream) {
  check_call("backward", B, T, H);
  const BwdArgs args{B, T, w_hh, lengths, dy, gates, cell, dxg};
  switch (H) {
    case 64: launch_backward<64>(args, S(stream)); break;
    case 128: launch_backward<128>(args, S(stream)); break;
    default: launch_backward<256>(args, S(stream)); break;
  }
}

}  // namespace timitseg::model::fused
