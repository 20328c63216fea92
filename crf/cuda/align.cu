// Forced alignment on the device (docs/crf.md "Forced alignment"): the F/S
// recurrence, one thread block per utterance, one thread per phone (strided),
// two __syncthreads per frame; back pointers in the workspace and a traceback
// by thread 0. No reductions across threads, so results are deterministic and
// equal to the cpu backend's (same float64 expressions in the same order; only
// additions, so no FMA contraction can change them).
#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

AlignLayout make_align_layout(const Dims& d, int64_t N) {
  AlignLayout a;
  const size_t cells = static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(N);
  WorkspaceCarver ws;
  auto take = [&](size_t bytes) { return ws.take(bytes); };
  a.status = take(64);
  a.zeros = take(static_cast<size_t>(d.C) * sizeof(float));
  a.F = take(cells * sizeof(double));
  a.S = take(cells * sizeof(double));
  a.bp_d = take(cells * sizeof(int32_t));
  a.bp_s = take(cells * sizeof(int32_t));
  a.total = ws.off;
  return a;
}

// num_phones[b] in [1, N]; phones[b][i] in [0, C) for i < num_phones[b];
// optional (when given) 0 or 1 there, never 1 twice in a row (kOptional at
// [b][i]), never 1 everywhere (kOptionalAll at b).
__global__ void align_validate_kernel(int B, int N, int C, const int32_t* __restrict__ phones,
                                      const int32_t* __restrict__ num_phones, const int32_t* __restrict__ optional,
                                      unsigned long long* status) {
  const long long total = static_cast<long long>(B) * (N + 1);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    if (i < B) {
      const int n = num_phones[i];
      if (n < 1 || n > N) {
        report(status, kNumPhones, i);
      } else if (optional) {
        bool kept = false;
        for (int k = 0; k < n; ++k) kept |= optional[i * N + k] == 0;
        if (!kept) report(status, kOptionalAll, i);
      }
      continue;
    }
    const long long j = i - B, b = j / N, k = j % N;
    const int n = num_phones[b];
    if (n < 1 || n > N || k >= n) continue;
    const int c = phones[j];
    if (c < 0 || c >= C) report(status, kPhones, j);
    if (optional) {
      const int o = optional[j];
      if ((o != 0 && o != 1) || (o == 1 && k > 0 && optional[j - 1] == 1)) report(status, kOptional, j);
    }
  }
}

void launch_align_validate(int B, int N, int C, const int32_t* phones, const int32_t* num_phones,
                           const int32_t* optional, unsigned long long* status, cudaStream_t stream) {
  const long long total = static_cast<long long>(B) * (N + 1);
  align_validate_kernel<<<grid_for(total, 256), 256, 0, stream>>>(B, N, C, phones, num_phones, optional, status);
  TS_LAUNCHED("align_validate_kernel");
}

namespace {

struct AlignArgs {
  int T, K, C, N;
  const float* cum;    // [B][T+1][C]
  const float* A;      // [C][C]
  const float* D;      // [K][C]
  const float* s;      // [C] (never null)
  const float* e;      // [C] (never null)
  const float* onset;  // [B][T][C] or null
  const int32_t* lengths;
  const int32_t* phones;      // [B][N]
  const int32_t* num_phones;  // [B]
  const int32_t* optional;    // [B][N] or null
  double* F;      // [B][T+1][N]
  double* S;      // [B][T+1][N]
  int32_t* bp_d;  // [B][T+1][N]
  int32_t* bp_s;  // [B][T+1][N]
  double* score;  // [B]
  int32_t* spans; // [B][N][2]
};

// Thread 0 of align_kernel once F, S and their back pointers are complete: the
// score of utterance b (the last phone, or the one before it with an optional
// last phone skipped; -inf: no alignment) and its spans by the traceback.
__device__ void align_finish(const AlignArgs& a, int b, int L, int np, const int32_t* y, const int32_t* opt,
                             const double* F, const int32_t* bp_d, const int32_t* bp_s, int32_t* out) {
  const int N = a.N, K = a.K;
  auto is_opt = [&](int n) { return opt != nullptr && opt[n] == 1; };
  double total = F[static_cast<size_t>(L) * N + np - 1] + static_cast<double>(a.e[y[np - 1]]);
  bool skip_last = false;
  if (np >= 2 && is_opt(np - 1)) {  // the last phone skipped
    const double alt = F[static_cast<size_t>(L) * N + np - 2] + static_cast<double>(a.e[y[np - 2]]);
    if (alt > total) total = alt, skip_last = true;
  }
  if (!(total > kNegInf)) {  // no alignment of finite score
    a.score[b] = kNegInf;
    return;
  }
  a.score[b] = total;
  int n = np - 1, end = L;
  if (skip_last) out[2 * n] = L, --n;
  int u = end - bp_d[static_cast<size_t>(end) * N + n];
  while (true) {
    const int how = bp_s[static_cast<size_t>(u) * N + n];
    if (how == 1) {
      u -= K;
      continue;
    }
    out[2 * n] = u;
    out[2 * n + 1] = end - u;
    if (how == 2) {
      out[2 * (n - 1)] = u;
      n -= 2;
    } else {
      n -= 1;
    }
    if (n < 0) break;
    end = u;
    u = end - bp_d[static_cast<size_t>(end) * N + n];
  }
}

__global__ void align_kernel(AlignArgs a) {
  const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  const int T = a.T, K = a.K, C = a.C, N = a.N;
  const int L = a.lengths[b], np = a.num_phones[b];
  const int32_t* y = a.phones + static_cast<size_t>(b) * N;
  const int32_t* opt = a.optional ? a.optional + static_cast<size_t>(b) * N : nullptr;
  auto is_opt = [&](int n) { return opt != nullptr && opt[n] == 1; };
  int32_t* out = a.spans + static_cast<size_t>(b) * N * 2;
  for (int i = tid; i < 2 * N; i += nt) out[i] = 0;
  int needed = 0;  // every thread counts the same (uniform over the block)
  for (int n = 0; n < np; ++n) needed += !is_opt(n);
  if (needed > L) {  // infeasible: every phone kept needs a frame
    if (tid == 0) a.score[b] = kNegInf;
    return;
  }
  const size_t base = static_cast<size_t>(b) * (T + 1) * N;
  double* F = a.F + base;
  double* S = a.S + base;
  int32_t* bp_d = a.bp_d + base;
  int32_t* bp_s = a.bp_s + base;
  const float* cum = a.cum + static_cast<size_t>(b) * (T + 1) * C;
  const float* on = a.onset ? a.onset + static_cast<size_t>(b) * T * C : nullptr;
  auto seg = [&](int u, int d, int c) {
    const double v = static_cast<double>(cum[static_cast<size_t>(u + d) * C + c]) -
                     static_cast<double>(cum[static_cast<size_t>(u) * C + c]) +
                     static_cast<double>(a.D[(d - 1) * C + c]);
    return on ? v + static_cast<double>(on[static_cast<size_t>(u) * C + c]) : v;
  };
  // S[0][n]: the first kept phone starts at 0 (phone 0, or phone 1 with phone 0 skipped).
  for (int n = tid; n < np; n += nt) {
    S[n] = n == 0 ? static_cast<double>(a.s[y[0]]) : (n == 1 && is_opt(0) ? static_cast<double>(a.s[y[1]]) : kNegInf);
    bp_s[n] = n == 1 ? 2 : 0;
  }
  __syncthreads();
  for (int t = 1; t <= L; ++t) {
    for (int n = tid; n < np; n += nt) {  // F[t][n]: ties to the smallest final piece d
      const int c = y[n];
      double top = kNegInf;
      int arg = 1;
      for (int d = 1; d <= min(K, t); ++d) {
        const double v = S[static_cast<size_t>(t - d) * N + n] + seg(t - d, d, c);
        if (v > top) top = v, arg = d;
      }
      F[static_cast<size_t>(t) * N + n] = top;
      bp_d[static_cast<size_t>(t) * N + n] = arg;
    }
    __syncthreads();
    if (t < L) {
      // S[t][n]: ties to the entry after phone n-1, then after phone n-2 with
      // the optional phone n-1 skipped, then the continuation.
      for (int n = tid; n < np; n += nt) {
        const int c = y[n];
        double top = n == 0 ? kNegInf
                            : F[static_cast<size_t>(t) * N + n - 1] + static_cast<double>(a.A[y[n - 1] * C + c]);
        int arg = 0;
        if (n >= 2 && is_opt(n - 1)) {
          const double skip = F[static_cast<size_t>(t) * N + n - 2] + static_cast<double>(a.A[y[n - 2] * C + c]);
          if (skip > top) top = skip, arg = 2;
        }
        if (t >= K) {
          const double cont =
              S[static_cast<size_t>(t - K) * N + n] + seg(t - K, K, c) + static_cast<double>(a.A[c * C + c]);
          if (cont > top) top = cont, arg = 1;
        }
        S[static_cast<size_t>(t) * N + n] = top;
        bp_s[static_cast<size_t>(t) * N + n] = arg;
      }
    }
    __syncthreads();
  }
  if (tid != 0) return;
  align_finish(a, b, L, np, y, opt, F, bp_d, bp_s, out);
}

}  // namespace

void launch_align(const Layout& l, const AlignLayout& al, const Params& p, int N, const int32_t* phones,
                  const int32_t* num_phones, const int32_t* optional, void* ws, double* score, int32_t* spans,
                  cudaStream_t stream) {
  AlignArgs a{};
  a.T = l.T;
  a.K = l.K;
  a.C = l.C;
  a.N = N;
  a.cum = p.cum_scores;
  a.A = p.transition;
  a.D = p.duration_bias;
  a.s = p.start ? p.start : at<float>(ws, al.zeros);
  a.e = p.end ? p.end : at<float>(ws, al.zeros);
  a.onset = p.onset;
  a.lengths = p.lengths;
  a.phones = phones;
  a.num_phones = num_phones;
  a.optional = optional;
  a.F = at<double>(ws, al.F);
  a.S = at<double>(ws, al.S);
  a.bp_d = at<int32_t>(ws, al.bp_d);
  a.bp_s = at<int32_t>(ws, al.bp_s);
  a.score = score;
  a.spans = spans;
  const int threads = std::min(256, std::max(32, (N + 31) / 32 * 32));
  align_kernel<<<l.B, threads, 0, stream>>>(a);
  TS_LAUNCHED("align_kernel");
}

}  // namespace timitseg::crf::cuda_impl
