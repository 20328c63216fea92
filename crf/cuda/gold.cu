// Gold segmentation scores and counts (docs/crf.md "Gold segmentation").
#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

// Gold segmentation: one block (kGoldThreads threads) per utterance.
// Frame runs are split left to right into pieces of at most K. bound[b][t] = 1
// when a gold segment boundary is at t (t = 0 and t = L included). Counts of
// the gold segments' parameters are integers (atomics on integers are exact
// and order-free); the score is summed in float64 by a fixed tree.
constexpr int kGoldThreads = 256;
__global__ void gold_kernel(int T, int K, int C, const float* __restrict__ cum_all, const float* __restrict__ A,
                            const float* __restrict__ D, const float* __restrict__ s, const float* __restrict__ e,
                            const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels_all,
                            const float* __restrict__ onset_all, int32_t* bound_all, int32_t* cnt_a, int32_t* cnt_d, int32_t* cnt_s, int32_t* cnt_e,
                            double* gold, double* gold_user, unsigned long long* status) {
  __shared__ int last_change[kGoldThreads];
  __shared__ double part[kGoldThreads];
  const int b = blockIdx.x, tid = threadIdx.x;
  if (input_invalid(status)) return;
  const int L = lengths[b];
  const float* cum = cum_all + static_cast<size_t>(b) * (T + 1) * C;
  const int32_t* lab = labels_all + static_cast<size_t>(b) * T;
  int32_t* bound = bound_all + static_cast<size_t>(b) * (T + 1);
  const int chunk = (L + kGoldThreads - 1) / kGoldThreads;
  const int t0 = min(L, tid * chunk), t1 = min(L, t0 + chunk);

  int lc = -1;
  for (int t = t0; t < t1; ++t)
    if (t == 0 || lab[t] != lab[t - 1]) lc = t;
  last_change[tid] = lc;
  __syncthreads();
  if (tid == 0) {  // exclusive max-scan, sequential (256 entries)
    int run = -1;
    for (int i = 0; i < kGoldThreads; ++i) {
      const int v = last_change[i];
      last_change[i] = run;
      run = max(run, v);
    }
  }
  __syncthreads();
  int rs = last_change[tid];
  for (int t = t0; t < t1; ++t) {
    if (t == 0 || lab[t] != lab[t - 1]) rs = t;
    bound[t] = ((t - rs) % K == 0) ? 1 : 0;
  }
  for (int t = L + tid; t <= T; t += kGoldThreads) bound[t] = (t == L) ? 1 : 0;
  __syncthreads();

  double score = 0.0;
  int32_t* ca = cnt_a + static_cast<size_t>(b) * C * C;
  int32_t* cd = cnt_d + static_cast<size_t>(b) * K * C;
  for (int t = t0; t < t1; ++t) {
    if (!bound[t]) continue;
    int d = 1;
    while (!bound[t + d]) ++d;  // bound[L] = 1 stops it; d <= K by construction
    const int c = lab[t];
    double v = static_cast<double>(cum[static_cast<size_t>(t + d) * C + c]) -
               static_cast<double>(cum[static_cast<size_t>(t) * C + c]) + static_cast<double>(D[(d - 1) * C + c]);
    if (t == 0) {
      v += s[c];
      atomicAdd(&cnt_s[static_cast<size_t>(b) * C + c], 1);
    } else {
      const int pc = lab[t - 1];
      v += A[pc * C + c];
      atomicAdd(&ca[pc * C + c], 1);
    }
    if (onset_all) v += static_cast<double>(onset_all[(static_cast<size_t>(b) * T + t) * C + c]);
    if (t + d == L) {
      v += e[c];
      atomicAdd(&cnt_e[static_cast<size_t>(b) * C + c], 1);
    }
    atomicAdd(&cd[(d - 1) * C + c], 1);
    score += v;
  }
  part[tid] = score;
  __syncthreads();
  for (int w = kGoldThreads / 2; w >= 1; w >>= 1) {
    if (tid < w) part[tid] += part[tid + w];
    __syncthreads();
  }
  if (tid == 0) {
    gold[b] = part[0];
    if (gold_user) gold_user[b] = part[0];
    if (!(part[0] > kNegInf)) report(status, kGold, b);
  }
}


void launch_gold(const Layout& l, const Params& p, const int32_t* labels, double* gold_user, void* ws,
                 cudaStream_t stream) {
  // The four count arrays are contiguous in the layout, cnt_e the last.
  const size_t counts_end = l.cnt_e + align256(static_cast<size_t>(l.B) * static_cast<size_t>(l.C) * sizeof(int32_t));
  TS_CUDA(cudaMemsetAsync(at<char>(ws, l.cnt_a), 0, counts_end - l.cnt_a, stream));
  gold_kernel<<<l.B, kGoldThreads, 0, stream>>>(l.T, l.K, l.C, p.cum_scores, p.transition, p.duration_bias,
                                                start_ptr(p, ws, l), end_ptr(p, ws, l), p.lengths, labels,
                                                p.onset, at<int32_t>(ws, l.bound), at<int32_t>(ws, l.cnt_a),
                                                at<int32_t>(ws, l.cnt_d), at<int32_t>(ws, l.cnt_s),
                                                at<int32_t>(ws, l.cnt_e), at<double>(ws, l.gold), gold_user,
                                                at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("gold_kernel");
}

}  // namespace timitseg::crf::cuda_impl
