// The recurrence kernel (docs/cuda.md "Recurrences"): one thread block per
// utterance, label groups of G lanes, a shared-memory ring of the last K+1
// rows when it fits. Forward (alpha, sigma), backward (rho, gamma) and
// Viterbi are one template.
#include <stdexcept>
#include <type_traits>

#include "crf/cuda/recurrence.cuh"
#include "crf/cuda/reduce.cuh"

namespace timitseg::crf::cuda_impl {

// The Viterbi traceback of recurrence_kernel<.., true> for utterance b of
// length L (thread 0, from the best final label fin_idx through the
// backpointers), then a parallel copy of the segments into time order.
// Called by every thread of the block (it synchronizes).
__device__ __forceinline__ void viterbi_traceback(const RecArgs& a, int b, int L, size_t base, double fin_val,
                                                  int fin_idx) {
  const int T = a.T, K = a.K, C = a.C;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  __shared__ int nseg_s;
  int32_t* tmp = a.segtmp + static_cast<size_t>(b) * T * 3;
  if (tid == 0) {
    int n = 0;
    int t = L, c = fin_idx;
    bool ok = fin_val > kNegInf && c >= 0 && c < C;
    while (ok && t > 0) {
      const int d = a.bp_d[base + static_cast<size_t>(t) * C + c];
      if (d < 1 || d > min(K, t) || n >= T) {
        ok = false;
        break;
      }
      const int u = t - d;
      tmp[n * 3 + 0] = u;
      tmp[n * 3 + 1] = d;
      tmp[n * 3 + 2] = c;
      ++n;
      if (u > 0) {
        c = a.bp_c[base + static_cast<size_t>(u) * C + c];
        if (c < 0 || c >= C) ok = false;
      }
      t = u;
    }
    if (!ok) {
      n = 0;
      report(a.status, kLogZ, b);
    }
    nseg_s = n;
    a.nsegs[b] = n;
  }
  __syncthreads();
  const int n = nseg_s;
  int32_t* out = a.segments + static_cast<size_t>(b) * T * 3;
  for (int i = tid; i < n; i += nthreads) {
    const int j = n - 1 - i;
    out[i * 3 + 0] = tmp[j * 3 + 0];
    out[i * 3 + 1] = tmp[j * 3 + 1];
    out[i * 3 + 2] = tmp[j * 3 + 2];
  }
}

// Phase 2 of a step of recurrence_kernel: Y[pos,c] (sigma / gamma) for every
// label c from xrow (alpha / rho at pos) and the transition Ap, one group of
// G lanes per label; with kMax the back pointers bp_c.
template <bool kMax, bool kStore>
__device__ void transition_phase(const RecArgs& a, bool rev, int pos, int slot, size_t base, const float* Ap,
                                 const double* xrow, double* Y, double* yring_s, int G, unsigned gmask) {
  const int C = a.C, tid = threadIdx.x;
  const int lane = tid % G, grp = tid / G, ngroups = blockDim.x / G;
  for (int c = grp; c < C; c += ngroups) {
    auto term = [=](int c2) {
      const float t = rev ? Ap[c * C + c2] : Ap[c2 * C + c];
      return xrow[c2] + static_cast<double>(t);
    };
    int arg = 0;
    const double v = group_reduce<kMax>(C, lane, G, gmask, term, arg);
    if (lane == 0) {
      if (kStore) Y[static_cast<size_t>(pos) * C + c] = v;
      if (a.use_smem) yring_s[slot * C + c] = v;
      if (kMax) a.bp_c[base + static_cast<size_t>(pos) * C + c] = arg;
    }
  }
}

// Row 0 of the recurrence: forward sigma[0] = s at position 0, backward
// gamma[L] = e at position L. X there is -inf (no segment ends at 0 /
// starts at L). The ring also gets the cum_scores row of step 1.
__device__ void init_row0(const RecArgs& a, bool rev, int L, const float* cum, double* X, double* Y, double* yring_s,
                          float* cumring_s, int R_s) {
  const int tid = threadIdx.x, nthreads = blockDim.x, C = a.C;
  const int pos0 = rev ? L : 0;
  const int pos1 = rev ? L - 1 : 1;
  for (int c = tid; c < C; c += nthreads) {
    const double y0 = rev ? a.e[c] : a.s[c];
    if (Y) Y[static_cast<size_t>(pos0) * C + c] = y0;
    if (X) X[static_cast<size_t>(pos0) * C + c] = kNegInf;
    if (a.use_smem) {
      yring_s[(pos0 % R_s) * C + c] = y0;
      cumring_s[(pos0 % R_s) * C + c] = cum[static_cast<size_t>(pos0) * C + c];
      cumring_s[(pos1 % R_s) * C + c] = cum[static_cast<size_t>(pos1) * C + c];
    }
  }
}

// One block per utterance. Forward (blocks 0..B-1):
//   alpha[t,c] = lse_{d<=min(K,t)} cum[t,c]-cum[t-d,c] + D[d-1,c] + sigma[t-d,c] (+ o[t-d,c])
//   sigma[t,c] = lse_{c'} alpha[t,c'] + A[c',c]
// Backward (blocks B..2B-1), u = L-1 .. 0:
//   rho[u,c]   = lse_{d<=min(K,L-u)} cum[u+d,c]-cum[u,c] + D[d-1,c] + gamma[u+d,c]  (+ o[u,c])
// The onset o (docs/crf.md), when given, is read from global memory; without
// it every expression is the one of the version without onset (same bits).
//   gamma[u,c] = lse_{c''} A[c,c''] + rho[u,c'']
// Viterbi (kMax): the forward with max and backpointers, then traceback.
// kStore false (a.store 0): no X / Y tables (the ring in shared memory).
template <class Acc, bool kMax, bool kStore>
__global__ void __launch_bounds__(kMaxRecThreads, 1) recurrence_kernel(RecArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int B = a.B, T = a.T, K = a.K, C = a.C, G = a.G;
  const bool rev = blockIdx.x >= static_cast<unsigned>(B);
  const int b = rev ? blockIdx.x - B : blockIdx.x;
  if (input_invalid(a.status)) return;
  const int L = a.lengths[b];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid % G, grp = tid / G, ngroups = nthreads / G;
  const int wl = tid & 31;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (wl / G * G));

  const size_t base = static_cast<size_t>(b) * (T + 1) * C;
  const float* cum = a.cum + base;
  const float* onset = a.onset ? a.onset + static_cast<size_t>(b) * T * C : nullptr;  // [T][C] or null
  // Phase-1 / phase-2 outputs [T+1][C]; not stored (null) when !a.store, which
  // needs the ring in shared memory (Viterbi in the checkpointed layout).
  double* X = kStore ? (rev ? a.rho : a.alpha) + base : nullptr;
  double* Y = kStore ? (rev ? a.gamma : a.sigma) + base : nullptr;

  // Shared memory carve-up: doubles first.
  const int R_s = K + 1;
  double* xrow = reinterpret_cast<double*>(smem_raw);  // [C]
  double* yring_s = xrow + C;                          // [K+1][C] (smem mode)
  float* cumring_s = reinterpret_cast<float*>(yring_s + (a.use_smem ? static_cast<size_t>(R_s) * C : 0));
  float* D_s = cumring_s + (a.use_smem ? static_cast<size_t>(R_s) * C : 0);
  float* A_s = D_s + (a.use_smem ? static_cast<size_t>(K) * C : 0);

  const double* yring = a.use_smem ? yring_s : Y;
  const float* cumring = a.use_smem ? cumring_s : cum;
  const int R = a.use_smem ? R_s : T + 1;
  const float* Dp = a.use_smem ? D_s : a.D;
  const float* Ap = a.use_smem ? A_s : a.A;
  if (a.use_smem) {
    for (int i = tid; i < K * C; i += nthreads) D_s[i] = a.D[i];
    for (int i = tid; i < C * C; i += nthreads) A_s[i] = a.A[i];
  }

  init_row0(a, rev, L, cum, X, Y, yring_s, cumring_s, R_s);
  __syncthreads();

  for (int s = 1; s <= L; ++s) {
    const int pos = rev ? L - s : s;
    const int slot = pos % R;  // the only division of the step
    // Prefetch the cum_scores row of the next step into a register; it is
    // stored into the ring after phase 1 (its slot is read by phase 1 as
    // d = K), so the load latency hides behind phase 1 and 2.
    const int pos_next = rev ? pos - 1 : pos + 1;
    const bool prefetch = a.use_smem && s < L && tid < C;
    float next_cum = 0.0f;
    if (prefetch) next_cum = cum[static_cast<size_t>(pos_next) * C + tid];

    // Phase 1: segments ending at pos (forward) / starting at pos (backward).
    const int dmax = min(K, s);
    for (int c = grp; c < C; c += ngroups) {
      const double cp = cumring[slot * C + c];
      auto term = [=](int k) {  // duration d = k + 1
        int src = rev ? slot + (k + 1) : slot - (k + 1);
        src += src < 0 ? R : 0;
        src -= src >= R ? R : 0;
        const int row = src * C + c;
        const double seg = rev ? static_cast<double>(cumring[row]) - cp : cp - static_cast<double>(cumring[row]);
        const double v = seg + static_cast<double>(Dp[k * C + c]) + yring[row];
        // Forward: the segment [pos-d, pos) starts at pos-d; its onset enters here.
        return (onset && !rev) ? v + static_cast<double>(onset[static_cast<size_t>(pos - (k + 1)) * C + c]) : v;
      };
      int arg = 0;
      double v = group_reduce<kMax>(dmax, lane, G, gmask, term, arg);
      // Backward: every segment summed into rho[pos,c] starts at pos.
      if (onset && rev && v > kNegInf) v += static_cast<double>(onset[static_cast<size_t>(pos) * C + c]);
      if (lane == 0) {
        xrow[c] = v;
        if (kStore) X[static_cast<size_t>(pos) * C + c] = v;
        if (kMax) a.bp_d[base + static_cast<size_t>(pos) * C + c] = arg + 1;
      }
    }
    __syncthreads();
    if (s == L) break;  // sigma[L] / gamma[0] are never used
    if (a.use_smem) {
      const int nslot = rev ? (slot == 0 ? R - 1 : slot - 1) : (slot + 1 == R ? 0 : slot + 1);
      if (prefetch) cumring_s[nslot * C + tid] = next_cum;
      for (int c = tid + nthreads; c < C; c += nthreads) cumring_s[nslot * C + c] = cum[static_cast<size_t>(pos_next) * C + c];
    }
    // Phase 2: the C x C transition, once per position.
    transition_phase<kMax, kStore>(a, rev, pos, slot, base, Ap, xrow, Y, yring_s, G, gmask);
    __syncthreads();
  }

  // Final reduction over labels by warp 0 (finish_recurrence).
  __shared__ double fin_val;
  __shared__ int fin_idx;
  finish_recurrence<Acc, kMax>(a, b, rev, xrow, fin_val, fin_idx);
  if (!kMax) return;
  __syncthreads();

  // Viterbi traceback (thread 0), then a parallel copy into time order.
  viterbi_traceback(a, b, L, base, fin_val, fin_idx);
}


template <bool kMax>
void launch_recurrence(const Layout& l, RecArgs& a, int blocks, size_t smem_limit, bool force_global_ring,
                     cudaStream_t stream) {
  using Acc = typename std::conditional<kMax, MaxAcc, LseAcc>::type;
  const size_t R = static_cast<size_t>(l.K) + 1, C = static_cast<size_t>(l.C), K = static_cast<size_t>(l.K);
  const size_t smem_full = C * 8 + R * C * 8 + R * C * 4 + K * C * 4 + C * C * 4;
  const size_t smem_min = C * 8;
  a.use_smem = (!force_global_ring && smem_full <= smem_limit) ? 1 : 0;
  if (!a.store && !a.use_smem)
    throw std::logic_error("cuda backend: a recurrence without tables needs its ring in shared memory");
  const size_t smem = a.use_smem ? smem_full : smem_min;
  if (smem > smem_limit) throw std::invalid_argument("cuda backend: C too large for shared memory");
  const auto kernel = a.store ? recurrence_kernel<Acc, kMax, true> : recurrence_kernel<Acc, kMax, false>;
  if (smem > 48 * 1024) allow_dynamic_smem(kernel, smem);
  // Groups of G lanes, one label each per round; as few rounds as the
  // thread cap allows, and the labels spread evenly over the rounds.
  const int max_groups = kMaxRecThreads / a.G;
  const int rounds = (l.C + max_groups - 1) / max_groups;
  const int groups = (l.C + rounds - 1) / rounds;
  int threads = ((groups * a.G + 31) / 32) * 32;
  threads = std::max(threads, 32);
  kernel<<<blocks, threads, smem, stream>>>(a);
  TS_LAUNCHED("recurrence_kernel");
}


template void launch_recurrence<false>(const Layout&, RecArgs&, int, size_t, bool, cudaStream_t);
template void launch_recurrence<true>(const Layout&, RecArgs&, int, size_t, bool, cudaStream_t);

}  // namespace timitseg::crf::cuda_impl
