// Gradients after the forward and backward recurrences: per-chunk marginals
// of the transition and duration parameters, their fixed-order reduction
// (plus start / end and the gold counts), and grad cum_scores.
#include <algorithm>

#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

// Partial parameter gradients of log Z for (chunk, utterance):
//   dA[c',c] += exp(alpha[u,c'] + A[c',c] + rho[u,c] - logZ)      1 <= u < L
//   dD[d-1,c] += exp(sigma[u,c] + cum[u+d,c]-cum[u,c] + D[d-1,c] (+ o[u,c]) + gamma[u+d,c] - logZ)
// Each entry is owned by one thread that walks its chunk in order.
__global__ void marginal_kernel(Layout l, const float* __restrict__ cum_all, const float* __restrict__ A,
                                const float* __restrict__ D, const int32_t* __restrict__ lengths, const double* alpha_all,
                                const double* sigma_all, const double* rho_all, const double* gamma_all,
                                const double* logz, const float* __restrict__ onset_all, double* part,
                                const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int ch = chunk_first(l) + blockIdx.x, b = blockIdx.y;
  const int C = l.C, K = l.K;
  const int L = lengths[b];
  const double lz = logz[b];
  const bool ok = lz > kNegInf;
  const size_t base = static_cast<size_t>(b) * (l.T + 1) * C;
  const float* cum = cum_all + base;
  const long long tb = tab_index(l, b, 0);  // the tables' rows by position (a window in the checkpointed layout)
  const double* alpha = alpha_all + tb;
  const double* sigma = sigma_all + tb;
  const double* rho = rho_all + tb;
  const double* gamma = gamma_all + tb;
  const float* onset = onset_all ? onset_all + static_cast<size_t>(b) * l.T * C : nullptr;  // [T][C] or null
  const int u0 = ch * l.chunk, u1 = min(L, u0 + l.chunk);
  const int nA = C * C, nD = K * C;
  double* out = part + (static_cast<size_t>(b) * l.nch + ch) * (nA + nD);
  for (int e = threadIdx.x; e < nA + nD; e += blockDim.x) {
    double acc = 0.0;
    if (ok && e < nA) {
      const int cp = e / C, c = e % C;
      const double a = A[e];
      for (int u = max(u0, 1); u < u1; ++u)
        acc += exp(alpha[static_cast<size_t>(u) * C + cp] + a + rho[static_cast<size_t>(u) * C + c] - lz);
    } else if (ok) {
      const int k = (e - nA) / C, c = (e - nA) % C;
      const int d = k + 1;
      const double dd = D[e - nA];
      const int uend = min(u1, L - d + 1);  // u + d <= L
      for (int u = u0; u < uend; ++u) {
        const size_t r0 = static_cast<size_t>(u) * C + c, r1 = static_cast<size_t>(u + d) * C + c;
        const double seg = static_cast<double>(cum[r1]) - static_cast<double>(cum[r0]);
        if (onset)  // onset rows [T][C]: row u is r0 of the [T+1][C] arrays
          acc += exp(sigma[r0] + (seg + dd + static_cast<double>(onset[r0])) + gamma[r1] - lz);
        else
          acc += exp(sigma[r0] + seg + dd + gamma[r1] - lz);
      }
    }
    out[e] = acc;
  }
}

// Sums the partials over (b, chunk) in a fixed order, subtracts the gold
// counts, and writes scale * total as float32. Entries: [C*C | K*C | C | C],
// one warp each: lane j takes the (b, chunk) pairs j, j + 32, ... in order
// (with the gold count of utterance b where the pair is (b, 0)), then the
// lanes' sums meet in a fixed xor butterfly (the same bits in every lane).
constexpr int kReduceWarps = 4;
__device__ __forceinline__ double warp_sum_fixed(double v) {
  for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__global__ void param_reduce_kernel(Layout l, const float* __restrict__ s, const float* __restrict__ e,
                                    const int32_t* __restrict__ lengths, const double* part, const double* alpha_all,
                                    const double* rho_all, const double* edge, const double* logz, const int32_t* cnt_a,
                                    const int32_t* cnt_d, const int32_t* cnt_s, const int32_t* cnt_e, int with_gold,
                                    double scale, float* g_a, float* g_d, float* g_s, float* g_e,
                                    const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int C = l.C, K = l.K, B = l.B;
  const int nA = C * C, nD = K * C, nP = nA + nD;
  const int n = nP + 2 * C;
  const int i = blockIdx.x * kReduceWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (i >= n) return;  // whole warps
  double v = 0.0;
  if (i < nP) {
    float* dst = i < nA ? g_a : g_d;
    if (!dst) return;
    const int pairs = B * l.nch;
    for (int j = lane; j < pairs; j += 32) {
      v += part[static_cast<size_t>(j) * nP + i];
      const int b = j / l.nch;
      if (with_gold && j % l.nch == 0)
        v -= i < nA ? cnt_a[static_cast<size_t>(b) * nA + i] : cnt_d[static_cast<size_t>(b) * nD + (i - nA)];
    }
    v = warp_sum_fixed(v);
    if (lane == 0) dst[i < nA ? i : i - nA] = static_cast<float>(scale * v);
    return;
  }
  const bool is_start = i < nP + C;
  const int c = is_start ? i - nP : i - nP - C;
  float* dst = is_start ? g_s : g_e;
  if (!dst) return;
  for (int b = lane; b < B; b += 32) {
    const double lz = logz[b];
    const int L = lengths[b];
    // rho[0] and alpha[L]: in the tables, or (checkpointed) the recurrences' last rows, edge [2B][C]
    const double r0 = l.ck ? edge[static_cast<size_t>(B + b) * C + c] : rho_all[tab_index(l, b, 0) + c];
    const double aL = l.ck ? edge[static_cast<size_t>(b) * C + c] : alpha_all[tab_index(l, b, L) + c];
    if (lz > kNegInf)
      v += is_start ? exp(static_cast<double>(s[c]) + r0 - lz) : exp(aL + static_cast<double>(e[c]) - lz);
    if (with_gold) v -= is_start ? cnt_s[static_cast<size_t>(b) * C + c] : cnt_e[static_cast<size_t>(b) * C + c];
  }
  v = warp_sum_fixed(v);
  if (lane == 0) dst[c] = static_cast<float>(scale * v);
}

// Entry i of a [B][T][C] array as (b, t, c).
struct FrameIndex {
  int b, t, c;
};
__device__ __forceinline__ FrameIndex frame_index(long long i, int T, int C) {
  return {static_cast<int>(i / (static_cast<long long>(T) * C)), static_cast<int>((i / C) % T),
          static_cast<int>(i % C)};
}

// d/d cum[t,c] = P(segment with label c ends at t) - P(one starts at t)
//             = exp(alpha[t,c] + gamma[t,c] - logZ) - exp(sigma[t,c] + rho[t,c] - logZ)
// minus the gold indicator (labels given); 0 on padding rows. The entry i =
// (b, t, c) of [B][T+1][C] as float32, the one expression of grad_cum_kernel
// and grad_frames_entries_kernel (so the two agree to the bit).
__device__ __forceinline__ float grad_cum_entry(size_t i, int b, int t, int c, int T, int L, double lz,
                                                const int32_t* __restrict__ labels, const int32_t* bound_all,
                                                const double* alpha_all, const double* sigma_all,
                                                const double* rho_all, const double* gamma_all, double scale) {
  double g = 0.0;
  if (t <= L && lz > kNegInf) {
    if (t >= 1) g += exp(alpha_all[i] + gamma_all[i] - lz);
    if (t < L) g -= exp(sigma_all[i] + rho_all[i] - lz);
    if (labels && bound_all[static_cast<size_t>(b) * (T + 1) + t]) {
      const int32_t* lab = labels + static_cast<size_t>(b) * T;
      if (t >= 1 && lab[t - 1] == c) g -= 1.0;
      if (t < L && lab[t] == c) g += 1.0;
    }
  }
  return static_cast<float>(scale * g);
}

__global__ void grad_cum_kernel(Layout l, const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels,
                                const int32_t* bound_all, const double* alpha_all, const double* sigma_all,
                                const double* rho_all, const double* gamma_all, const double* logz, double scale,
                                float* out, const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int C = l.C, T = l.T, nr = l.r1 - l.r0;  // rows [r0, r1) of every utterance (all of them: [0, T+1))
  const long long n = static_cast<long long>(l.B) * nr * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % C);
    const int t = l.r0 + static_cast<int>((i / C) % nr);
    const int b = static_cast<int>(i / (static_cast<long long>(nr) * C));
    out[(static_cast<size_t>(b) * (T + 1) + t) * C + c] =
        grad_cum_entry(static_cast<size_t>(tab_index(l, b, t) + c), b, t, c, T, lengths[b], logz[b], labels,
                       bound_all, alpha_all, sigma_all, rho_all, gamma_all, scale);
  }
}

// The frame scores' gradient dx [B][T][C] through the centered cumsum
// (crf::centered_cumsum_backward of grad_cum_kernel's output: the same float64
// sums in the same order, hence the same bits), in two kernels:
// grad_frames_entries_kernel writes h[t,c] = grad_cum_entry(b, t+1, c) into
// dx[b][t][c] for t < L (0 for padding frames), every entry its own thread;
// grad_frames_scan_kernel, one block per utterance, reads its rows into shared
// memory as float64 (16 loads in flight per thread) and writes
//   g[t,c]  = sum_{s=t..L-1} h[s,c]                        t descending
//   m[c]    = (sum_{t<L} g[t,c]) / L                       t ascending
//   dx[t,c] = float(g[t,c] - m[c])                         t < L
// each column's two sums on one thread (chunks of 8 loads, then the adds in order).
__global__ void grad_frames_entries_kernel(Layout l, const int32_t* __restrict__ lengths,
                                           const int32_t* __restrict__ labels, const int32_t* bound_all,
                                           const double* alpha_all, const double* sigma_all, const double* rho_all,
                                           const double* gamma_all, const double* logz, double scale,
                                           float* __restrict__ dx, const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int C = l.C, T = l.T;
  const long long n = static_cast<long long>(l.B) * T * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const auto [b, t, c] = frame_index(i, T, C);
    const int L = lengths[b];
    const size_t row = static_cast<size_t>(tab_index(l, b, t + 1) + c);  // grad cum row t + 1
    dx[i] = t < L ? grad_cum_entry(row, b, t + 1, c, T, L, logz[b], labels, bound_all, alpha_all, sigma_all, rho_all,
                                   gamma_all, scale)
                  : 0.f;
  }
}

constexpr int kFrameThreads = 256;
__global__ void __launch_bounds__(kFrameThreads)
    grad_frames_scan_kernel(Layout l, const int32_t* __restrict__ lengths, float* __restrict__ dx,
                            const unsigned long long* status) {
  if (input_invalid(status)) return;
  extern __shared__ double frame_smem[];  // g [T][C], then m [C]
  const int b = blockIdx.x, C = l.C, T = l.T;
  const int L = lengths[b];  // in [1, T]: the validation passed
  double* g = frame_smem;
  double* m = frame_smem + static_cast<size_t>(T) * C;
  float* xb = dx + static_cast<size_t>(b) * T * C;
  const int n = L * C;
  constexpr int kLoads = 16;
  for (int j0 = threadIdx.x; j0 < n; j0 += kFrameThreads * kLoads) {
    float v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int j = j0 + u * kFrameThreads;
      v[u] = j < n ? xb[j] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int j = j0 + u * kFrameThreads;
      if (j < n) g[j] = static_cast<double>(v[u]);
    }
  }
  __syncthreads();
  // Full chunks of kU rows without conditions (the kU loads issue together, then the
  // adds in order), the rest one row at a time: the same sums in the same order.
  constexpr int kU = 8;
  for (int c = threadIdx.x; c < C; c += kFrameThreads) {
    double run = 0.0;
    int t = L - 1;
    for (; t >= kU - 1; t -= kU) {  // rows t, t-1, ..., t-kU+1
      double v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) v[u] = g[(t - u) * C + c];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        run += v[u];
        g[(t - u) * C + c] = run;
      }
    }
    for (; t >= 0; --t) {
      run += g[t * C + c];
      g[t * C + c] = run;
    }
    double mean = 0.0;
    t = 0;
    for (; t + kU <= L; t += kU) {
      double v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) v[u] = g[(t + u) * C + c];
#pragma unroll
      for (int u = 0; u < kU; ++u) mean += v[u];
    }
    for (; t < L; ++t) mean += g[t * C + c];
    m[c] = mean / static_cast<double>(L);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kFrameThreads) xb[j] = static_cast<float>(g[j] - m[j % C]);
}

size_t grad_frames_smem_bytes(int T, int C) {
  return (static_cast<size_t>(T) * static_cast<size_t>(C) + static_cast<size_t>(C)) * sizeof(double);
}

// d/d o[t,c] = P(a segment with label c starts at t) = exp(sigma[t,c] + rho[t,c] - logZ)
// (rho includes o), minus 1 where a gold segment with label c starts at t
// (labels given); 0 on padding frames t >= L. out: [B][T][C].
__global__ void grad_onset_kernel(Layout l, const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels,
                                  const int32_t* bound_all, const double* sigma_all, const double* rho_all,
                                  const double* logz, double scale, float* out, const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int C = l.C, T = l.T, r1 = min(l.r1, T), nr = r1 - l.r0;  // frames [r0, min(r1, T))
  const long long n = static_cast<long long>(l.B) * nr * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const auto [b, tr, c] = frame_index(i, nr, C);
    const int t = l.r0 + tr;
    const int L = lengths[b];
    const double lz = logz[b];
    double g = 0.0;
    if (t < L && lz > kNegInf) {
      const size_t j = static_cast<size_t>(tab_index(l, b, t) + c);  // row t of [T+1][C]
      g = exp(sigma_all[j] + rho_all[j] - lz);
      if (labels && bound_all[static_cast<size_t>(b) * (T + 1) + t] && labels[static_cast<size_t>(b) * T + t] == c)
        g -= 1.0;
    }
    out[(static_cast<size_t>(b) * T + t) * C + c] = static_cast<float>(scale * g);
  }
}

void launch_marginals(const Layout& l, const Params& p, void* ws, cudaStream_t stream) {
  dim3 grid(chunk_last(l) - chunk_first(l), l.B);
  if (grid.x == 0) return;
  marginal_kernel<<<grid, 256, 0, stream>>>(l, p.cum_scores, p.transition, p.duration_bias, p.lengths,
                                            at<double>(ws, l.alpha), at<double>(ws, l.sigma), at<double>(ws, l.rho),
                                            at<double>(ws, l.gamma), at<double>(ws, l.logz), p.onset,
                                            at<double>(ws, l.part), at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("marginal_kernel");
}

void launch_param_reduce(const Layout& l, const Params& p, void* ws, bool with_gold, double scale, const Grads& grads,
                         cudaStream_t stream) {
  const int n = l.C * l.C + l.K * l.C + 2 * l.C;  // entries, one warp each
  param_reduce_kernel<<<(n + kReduceWarps - 1) / kReduceWarps, 32 * kReduceWarps, 0, stream>>>(
      l, start_ptr(p, ws, l), end_ptr(p, ws, l), p.lengths, at<double>(ws, l.part), at<double>(ws, l.alpha),
      at<double>(ws, l.rho), at<double>(ws, l.edge), at<double>(ws, l.logz), at<int32_t>(ws, l.cnt_a), at<int32_t>(ws, l.cnt_d),
      at<int32_t>(ws, l.cnt_s), at<int32_t>(ws, l.cnt_e), with_gold ? 1 : 0, scale, grads.transition,
      grads.duration_bias, grads.start, grads.end, at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("param_reduce_kernel");
}

void launch_grad_cum(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                     cudaStream_t stream) {
  const long long n = static_cast<long long>(l.B) * (l.r1 - l.r0) * l.C;
  grad_cum_kernel<<<grid_for(n, 256), 256, 0, stream>>>(l, p.lengths, labels, at<int32_t>(ws, l.bound),
                                                        at<double>(ws, l.alpha), at<double>(ws, l.sigma),
                                                        at<double>(ws, l.rho), at<double>(ws, l.gamma),
                                                        at<double>(ws, l.logz), scale, out,
                                                        at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("grad_cum_kernel");
}

void launch_grad_frames(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                        cudaStream_t stream) {
  const long long n = static_cast<long long>(l.B) * l.T * l.C;
  grad_frames_entries_kernel<<<grid_for(n, 256), 256, 0, stream>>>(
      l, p.lengths, labels, at<int32_t>(ws, l.bound), at<double>(ws, l.alpha), at<double>(ws, l.sigma),
      at<double>(ws, l.rho), at<double>(ws, l.gamma), at<double>(ws, l.logz), scale, out,
      at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("grad_frames_entries_kernel");
  const size_t smem = grad_frames_smem_bytes(l.T, l.C);
  allow_dynamic_smem(grad_frames_scan_kernel, smem);  // the current device's (its callers check the limit)
  grad_frames_scan_kernel<<<l.B, kFrameThreads, smem, stream>>>(
      l, p.lengths, out, at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("grad_frames_scan_kernel");
}

void launch_grad_onset(const Layout& l, const Params& p, const int32_t* labels, void* ws, double scale, float* out,
                       cudaStream_t stream) {
  const long long n = static_cast<long long>(l.B) * (std::min(l.r1, l.T) - l.r0) * l.C;
  if (n <= 0) return;
  grad_onset_kernel<<<grid_for(n, 256), 256, 0, stream>>>(l, p.lengths, labels, at<int32_t>(ws, l.bound),
                                                          at<double>(ws, l.sigma), at<double>(ws, l.rho),
                                                          at<double>(ws, l.logz), scale, out,
                                                          at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("grad_onset_kernel");
}

}  // namespace timitseg::crf::cuda_impl
