// Confidence on the device (docs/crf.md "Confidence"): span marginals from
// the loss's recurrences (sigma, gamma, log Z in the workspace), and the
// constrained forward-backward (the forced-alignment recurrence with
// log-sum-exp, forward S/F and backward H/G) with one thread block per
// utterance and one thread per phone (strided), as align.cu. Fixed orders,
// no atomics on values: results are deterministic.
#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

ConfLayout make_conf_layout(const Dims& d, int64_t N) {
  ConfLayout a;
  const size_t cells = static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(N);
  WorkspaceCarver ws;
  auto take = [&](size_t bytes) { return ws.take(bytes); };
  a.status = take(64);
  a.zeros = take(static_cast<size_t>(d.C) * sizeof(float));
  a.S = take(cells * sizeof(double));
  a.F = take(cells * sizeof(double));
  a.H = take(cells * sizeof(double));
  a.G = take(cells * sizeof(double));
  a.total = ws.off;
  return a;
}

TranscriptLayout make_transcript_layout(const Dims& d, int64_t N) {
  TranscriptLayout a;
  const size_t cells = static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(N);
  WorkspaceCarver ws;
  a.status = ws.take(64);
  a.zeros = ws.take(static_cast<size_t>(d.C) * sizeof(float));
  a.S = ws.take(cells * sizeof(double));
  a.F = ws.take(cells * sizeof(double));
  a.H = ws.take(cells * sizeof(double));
  a.G = ws.take(cells * sizeof(double));
  a.cum = ws.take(static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(d.C) * sizeof(double));
  a.onset = ws.take(static_cast<size_t>(d.B) * static_cast<size_t>(d.T) * static_cast<size_t>(d.C) * sizeof(double));
  a.params = ws.take(static_cast<size_t>(d.B) * static_cast<size_t>(d.C * d.C + d.K * d.C + 2 * d.C) * sizeof(double));
  a.total = ws.off;
  return a;
}

namespace {

__device__ double lse2(double a, double b) {
  const double m = a > b ? a : b;
  if (m == kNegInf) return kNegInf;
  return m + log(exp(a - m) + exp(b - m));
}

// One utterance's inputs (float32 read as float64).
struct ConfUtt {
  int L, K, C;
  const float* cum;  // [L+1][C]
  const float* A;
  const float* D;
  const float* on;   // [L][C] or null
  __device__ double trans(int from, int to) const { return static_cast<double>(A[from * C + to]); }
  __device__ double seg(int v, int d, int c) const {
    const double x = static_cast<double>(cum[static_cast<size_t>(v + d) * C + c]) -
                     static_cast<double>(cum[static_cast<size_t>(v) * C + c]) +
                     static_cast<double>(D[(d - 1) * C + c]);
    return on ? x + static_cast<double>(on[static_cast<size_t>(v) * C + c]) : x;
  }
  __device__ double phone(int v, int r, int c) const {  // pieces of K then the remainder
    double sc = 0.0;
    for (int pos = v; pos < v + r; pos += K) {
      if (pos > v) sc += trans(c, c);
      sc += seg(pos, min(K, v + r - pos), c);
    }
    return sc;
  }
};

// queries [B][Q][3] (start, duration, label) and num_queries [B] in range.
__global__ void query_validate_kernel(int B, int Q, int C, const int32_t* __restrict__ lengths,
                                      const int32_t* __restrict__ queries, const int32_t* __restrict__ nq,
                                      unsigned long long* status) {
  const long long total = static_cast<long long>(B) * Q;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long b = i / Q, k = i % Q;
    const int n = nq[b];
    if (n < 0 || n > Q) {
      if (k == 0) report(status, kNumQueries, b);
      continue;
    }
    if (k >= n) continue;
    const int32_t* q = queries + i * 3;
    if (q[0] < 0 || q[1] < 0 || static_cast<long long>(q[0]) + q[1] > lengths[b] || q[2] < 0 || q[2] >= C)
      report(status, kQueries, i);
  }
}

// spans [B][N][2] of the phones n < num_phones[b] inside [0, lengths[b]].
__global__ void span_validate_kernel(int B, int N, const int32_t* __restrict__ lengths,
                                     const int32_t* __restrict__ num_phones, const int32_t* __restrict__ spans,
                                     unsigned long long* status) {
  const long long total = static_cast<long long>(B) * N;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long b = i / N, k = i % N;
    if (k >= num_phones[b]) continue;
    const int s = spans[2 * i], r = spans[2 * i + 1];
    if (s < 0 || r < 0 || static_cast<long long>(s) + r > lengths[b]) report(status, kSpans, i);
  }
}

// out[b][i] = exp(sigma[s,c] + phone(s, r, c) + gamma[s+r,c] - log Z); 0 for r = 0 and rows past nq[b].
// Checkpointed (the tables a window of rows [r0, r1), windows in order): the
// window of s keeps sigma[s,c] in out[b][i], the window of s + r finishes it
// (the same expression when both are in one window).
__global__ void span_marginal_kernel(Layout l, const Params p, int Q, const int32_t* __restrict__ queries,
                                     const int32_t* __restrict__ nq, const double* sigma_all, const double* gamma_all,
                                     const double* logz, double* out) {
  const long long total = static_cast<long long>(l.B) * Q;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / Q), k = static_cast<int>(i % Q);
    const int32_t* q = queries + i * 3;
    if (k >= nq[b] || q[1] == 0) {
      if (l.r0 == 0) out[i] = 0.0;
      continue;
    }
    const int C = l.C, v = q[0], r = q[1], c = q[2];
    const bool has_v = v >= l.r0 && v < l.r1, has_end = v + r >= l.r0 && v + r < l.r1;
    if (!has_v && !has_end) continue;
    const double sv = has_v ? sigma_all[tab_index(l, b, v) + c] : out[i];
    if (!has_end) {
      out[i] = sv;
      continue;
    }
    const size_t base = static_cast<size_t>(b) * (l.T + 1) * C;
    const ConfUtt u{p.lengths[b], l.K, C, p.cum_scores + base, p.transition, p.duration_bias,
                    p.onset ? p.onset + static_cast<size_t>(b) * l.T * C : nullptr};
    out[i] = exp(sv + u.phone(v, r, c) + gamma_all[tab_index(l, b, v + r) + c] - logz[b]);
  }
}

struct PostArgs {
  int T, K, C, N;
  Params p;
  const float* s;  // never null
  const float* e;  // never null
  const int32_t* phones;
  const int32_t* num_phones;
  const int32_t* optional;
  const int32_t* spans;
  double *S, *F, *H, *G;  // [B][T+1][N]
  double* log_z_c;        // [B] or null
  double* out;            // [B][N][3]
};

// The tables of one utterance and the posteriors read from them (docs/crf.md).
struct PostUtt {
  ConfUtt u;
  int np, N;
  const int32_t* y;
  const int32_t* opt;
  const float *s, *e;
  double *S, *F, *H, *G;
  double lz;
  __device__ bool optional(int n) const { return opt != nullptr && opt[n] == 1; }
  __device__ double& at(double* tab, int t, int n) const { return tab[static_cast<size_t>(t) * N + n]; }
  __device__ double entry(int t, int n) const {
    if (t == 0) return n == 0 ? static_cast<double>(s[y[0]]) : (n == 1 && optional(0) ? static_cast<double>(s[y[1]]) : kNegInf);
    const double kept = n >= 1 ? at(F, t, n - 1) + u.trans(y[n - 1], y[n]) : kNegInf;
    const double skip = n >= 2 && optional(n - 1) ? at(F, t, n - 2) + u.trans(y[n - 2], y[n]) : kNegInf;
    return lse2(kept, skip);
  }
  __device__ double span(int n, int a, int b) const {
    if (a < 0 || b > u.L || a >= b) return 0.0;
    return exp(entry(a, n) + u.phone(a, b - a, y[n]) + at(G, b, n) - lz);
  }
  __device__ double starts(int n, int a) const { return a < 0 || a >= u.L ? 0.0 : exp(entry(a, n) + at(H, a, n) - lz); }
  __device__ double ends(int n, int t) const { return t < 1 || t > u.L ? 0.0 : exp(at(F, t, n) + at(G, t, n) - lz); }
  __device__ double skipped(int n) const {
    if (!optional(n)) return 0.0;
    if (n == 0) return exp(static_cast<double>(s[y[1]]) + at(H, 0, 1) - lz);
    if (n == np - 1) return exp(at(F, u.L, np - 2) + static_cast<double>(e[y[np - 2]]) - lz);
    double sum = 0.0;
    for (int t = 1; t < u.L; ++t) sum += exp(at(F, t, n - 1) + u.trans(y[n - 1], y[n + 1]) + at(H, t, n + 1) - lz);
    return sum;
  }
};

// Forward then backward, every thread over its phones, a barrier per row.
__device__ void constrained_passes(PostUtt& x, double* shared_lz) {
  const int tid = threadIdx.x, nt = blockDim.x, L = x.u.L, K = x.u.K, np = x.np;
  const int32_t* y = x.y;
  for (int n = tid; n < np; n += nt) x.at(x.S, 0, n) = x.entry(0, n), x.at(x.F, 0, n) = kNegInf;
  __syncthreads();
  for (int t = 1; t <= L; ++t) {
    for (int n = tid; n < np; n += nt) {
      double m = kNegInf;
      for (int d = 1; d <= min(K, t); ++d) m = fmax(m, x.at(x.S, t - d, n) + x.u.seg(t - d, d, y[n]));
      double sum = 0.0;
      if (m > kNegInf)
        for (int d = 1; d <= min(K, t); ++d) sum += exp(x.at(x.S, t - d, n) + x.u.seg(t - d, d, y[n]) - m);
      x.at(x.F, t, n) = m > kNegInf ? m + log(sum) : kNegInf;
    }
    __syncthreads();
    for (int n = tid; n < np; n += nt) {
      const double cont = t < L && t >= K ? x.at(x.S, t - K, n) + x.u.seg(t - K, K, y[n]) + x.u.trans(y[n], y[n]) : kNegInf;
      x.at(x.S, t, n) = t < L ? lse2(x.entry(t, n), cont) : kNegInf;
    }
    __syncthreads();
  }
  if (tid == 0) {
    double lz = x.at(x.F, L, np - 1) + static_cast<double>(x.e[y[np - 1]]);
    if (np >= 2 && x.optional(np - 1)) lz = lse2(lz, x.at(x.F, L, np - 2) + static_cast<double>(x.e[y[np - 2]]));
    *shared_lz = lz > kNegInf ? lz : kNegInf;
  }
  __syncthreads();
  x.lz = *shared_lz;
  if (!(x.lz > kNegInf)) return;  // uniform over the block
  for (int n = tid; n < np; n += nt) {
    x.at(x.G, L, n) = (n == np - 1 || (n == np - 2 && x.optional(np - 1))) ? static_cast<double>(x.e[y[n]]) : kNegInf;
    x.at(x.H, L, n) = kNegInf;
  }
  __syncthreads();
  for (int t = L - 1; t >= 0; --t) {
    for (int n = tid; n < np; n += nt) {
      double m = kNegInf;
      for (int d = 1; d <= min(K, L - t); ++d) m = fmax(m, x.u.seg(t, d, y[n]) + x.at(x.G, t + d, n));
      double sum = 0.0;
      if (m > kNegInf)
        for (int d = 1; d <= min(K, L - t); ++d) sum += exp(x.u.seg(t, d, y[n]) + x.at(x.G, t + d, n) - m);
      const double fin = m > kNegInf ? m + log(sum) : kNegInf;
      const double cont = t + K < L ? x.u.seg(t, K, y[n]) + x.u.trans(y[n], y[n]) + x.at(x.H, t + K, n) : kNegInf;
      x.at(x.H, t, n) = lse2(fin, cont);
    }
    __syncthreads();
    for (int n = tid; n < np; n += nt) {
      if (t == 0) {
        x.at(x.G, 0, n) = kNegInf;
        continue;
      }
      const double next = n + 1 < np ? x.u.trans(y[n], y[n + 1]) + x.at(x.H, t, n + 1) : kNegInf;
      const double skip = n + 2 < np && x.optional(n + 1) ? x.u.trans(y[n], y[n + 2]) + x.at(x.H, t, n + 2) : kNegInf;
      x.at(x.G, t, n) = lse2(next, skip);
    }
    __syncthreads();
  }
}

__global__ void align_posterior_kernel(PostArgs a) {
  const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, N = a.N, C = a.C;
  const int L = a.p.lengths[b], np = a.num_phones[b];
  double* out = a.out + static_cast<size_t>(b) * N * 3;
  for (int i = tid; i < 3 * N; i += nt) out[i] = 0.0;
  const size_t base = static_cast<size_t>(b) * (a.T + 1) * N;
  PostUtt x{ConfUtt{L, a.K, C, a.p.cum_scores + static_cast<size_t>(b) * (a.T + 1) * C, a.p.transition,
                    a.p.duration_bias, a.p.onset ? a.p.onset + static_cast<size_t>(b) * a.T * C : nullptr},
            np, N, a.phones + static_cast<size_t>(b) * N,
            a.optional ? a.optional + static_cast<size_t>(b) * N : nullptr, a.s, a.e,
            a.S + base, a.F + base, a.H + base, a.G + base, kNegInf};
  int needed = 0;  // every thread counts the same (uniform over the block)
  for (int n = 0; n < np; ++n) needed += !x.optional(n);
  __shared__ double lz;
  if (needed <= L) {
    constrained_passes(x, &lz);
  } else {
    x.lz = kNegInf;
  }
  if (tid == 0 && a.log_z_c) a.log_z_c[b] = x.lz;
  if (!(x.lz > kNegInf)) return;
  __syncthreads();
  for (int n = tid; n < np; n += nt) {
    const int s = a.spans[(static_cast<size_t>(b) * N + n) * 2], r = a.spans[(static_cast<size_t>(b) * N + n) * 2 + 1];
    double* o = out + 3 * n;
    if (r == 0) {
      o[0] = o[1] = o[2] = x.skipped(n);
      continue;
    }
    double v0 = 0.0, v1 = 0.0, v2 = 0.0;
    for (int ds = -1; ds <= 1; ++ds)
      for (int de = -1; de <= 1; ++de) v0 += x.span(n, s + ds, s + r + de);
    for (int d = -1; d <= 1; ++d) v1 += x.starts(n, s + d), v2 += x.ends(n, s + r + d);
    o[0] = v0, o[1] = v1, o[2] = v2;
  }
}

struct TranscriptArgs {
  PostArgs post;            // spans, out unused
  unsigned long long* status;
  double *cum, *onset, *params;  // the constrained marginals (TranscriptLayout)
};

// Thread c owns every entry whose (to-)label is c: cum[.][c], onset[.][c],
// D[.][c], A[.][c], s[c], e[c]; it visits its phones in order (deterministic).
__device__ void transcript_column(const PostUtt& x, int c, int T, double* gc, double* go, double* gA, double* gD,
                                  double* gs, double* ge) {
  const int L = x.u.L, K = x.u.K, C = x.u.C, np = x.np;
  const int32_t* y = x.y;
  for (int t = 0; t <= T; ++t) gc[static_cast<size_t>(t) * C + c] = 0.0;
  if (go)
    for (int t = 0; t < T; ++t) go[static_cast<size_t>(t) * C + c] = 0.0;
  for (int k = 0; k < C; ++k) gA[k * C + c] = 0.0;
  for (int d = 0; d < K; ++d) gD[d * C + c] = 0.0;
  gs[c] = 0.0;
  ge[c] = 0.0;
  auto piece = [&](int v, int d, double pr) {
    gc[static_cast<size_t>(v + d) * C + c] += pr;
    gc[static_cast<size_t>(v) * C + c] -= pr;
    gD[(d - 1) * C + c] += pr;
    if (go) go[static_cast<size_t>(v) * C + c] += pr;
  };
  for (int n = 0; n < np; ++n) {
    if (y[n] != c) continue;
    for (int v = 0; v < L; ++v) {
      const double sv = x.at(x.S, v, n);
      if (sv == kNegInf) continue;
      for (int d = 1; d <= min(K, L - v); ++d) piece(v, d, exp(sv + x.u.seg(v, d, c) + x.at(x.G, v + d, n) - x.lz));
      if (v + K < L) {
        const double pr = exp(sv + x.u.seg(v, K, c) + x.u.trans(c, c) + x.at(x.H, v + K, n) - x.lz);
        piece(v, K, pr);
        gA[c * C + c] += pr;
      }
    }
  }
  for (int m = 1; m < np; ++m) {  // phone n ends at t, phone m starts there (n = m-1, or m-2 over a skipped m-1)
    if (y[m] != c) continue;
    for (int n = m - 1; n >= max(0, m - 2); --n) {
      if (n == m - 2 && !x.optional(m - 1)) break;
      double sum = 0.0;
      for (int t = 1; t < L; ++t) sum += exp(x.at(x.F, t, n) + x.u.trans(y[n], c) + x.at(x.H, t, m) - x.lz);
      gA[y[n] * C + c] += sum;
    }
  }
  if (y[0] == c) gs[c] += exp(static_cast<double>(x.s[c]) + x.at(x.H, 0, 0) - x.lz);
  if (np >= 2 && x.optional(0) && y[1] == c) gs[c] += exp(static_cast<double>(x.s[c]) + x.at(x.H, 0, 1) - x.lz);
  if (y[np - 1] == c) ge[c] += exp(x.at(x.F, L, np - 1) + static_cast<double>(x.e[c]) - x.lz);
  if (np >= 2 && x.optional(np - 1) && y[np - 2] == c)
    ge[c] += exp(x.at(x.F, L, np - 2) + static_cast<double>(x.e[c]) - x.lz);
}

__global__ void transcript_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, N = a.N, C = a.C;
  if (input_invalid(ta.status)) return;
  const int L = a.p.lengths[b], np = a.num_phones[b];
  const size_t base = static_cast<size_t>(b) * (a.T + 1) * N;
  PostUtt x{ConfUtt{L, a.K, C, a.p.cum_scores + static_cast<size_t>(b) * (a.T + 1) * C, a.p.transition,
                    a.p.duration_bias, a.p.onset ? a.p.onset + static_cast<size_t>(b) * a.T * C : nullptr},
            np, N, a.phones + static_cast<size_t>(b) * N,
            a.optional ? a.optional + static_cast<size_t>(b) * N : nullptr, a.s, a.e,
            a.S + base, a.F + base, a.H + base, a.G + base, kNegInf};
  int needed = 0;  // uniform over the block
  for (int n = 0; n < np; ++n) needed += !x.optional(n);
  __shared__ double lz;
  if (needed <= L) {
    constrained_passes(x, &lz);
  } else {
    x.lz = kNegInf;
  }
  if (tid == 0 && a.log_z_c) a.log_z_c[b] = x.lz;
  if (!(x.lz > kNegInf)) {
    if (tid == 0) report(ta.status, kTranscript, b);
    return;
  }
  __syncthreads();
  const int P = C * C + a.K * C + 2 * C;
  double* gA = ta.params + static_cast<size_t>(b) * P;
  for (int c = tid; c < C; c += nt)
    transcript_column(x, c, a.T, ta.cum + static_cast<size_t>(b) * (a.T + 1) * C,
                      ta.onset ? ta.onset + static_cast<size_t>(b) * a.T * C : nullptr, gA, gA + C * C,
                      gA + C * C + a.K * C, gA + C * C + a.K * C + C);
}

// dst[b][t][c] (rows t < rows(b)) = float(dst - scale * marginal), every utterance's own rows.
__global__ void transcript_rows_kernel(int B, int T1, int C, int extra, const int32_t* __restrict__ lengths,
                                       const double* __restrict__ marg, double scale, float* dst,
                                       const unsigned long long* status) {
  if (static_cast<int>(*status >> kIndexBits) <= kTranscript) return;  // any error: nothing written
  const long long total = static_cast<long long>(B) * T1 * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long b = i / (static_cast<long long>(T1) * C), t = i / C % T1;
    if (t < lengths[b] + extra) dst[i] = static_cast<float>(static_cast<double>(dst[i]) - scale * marg[i]);
  }
}

// The parameters: dst = float(dst - scale * sum_b marginal[b]), b in order.
__global__ void transcript_params_kernel(int B, int C, int K, const double* __restrict__ marg, double scale,
                                         Grads g, const unsigned long long* status) {
  if (static_cast<int>(*status >> kIndexBits) <= kTranscript) return;
  const int P = C * C + K * C + 2 * C;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < P; i += gridDim.x * blockDim.x) {
    float* dst = i < C * C ? (g.transition ? g.transition + i : nullptr)
                 : i < C * C + K * C ? (g.duration_bias ? g.duration_bias + (i - C * C) : nullptr)
                 : i < C * C + K * C + C ? (g.start ? g.start + (i - C * C - K * C) : nullptr)
                                         : (g.end ? g.end + (i - C * C - K * C - C) : nullptr);
    if (!dst) continue;
    double sum = 0.0;
    for (int b = 0; b < B; ++b) sum += marg[static_cast<size_t>(b) * P + i];
    *dst = static_cast<float>(static_cast<double>(*dst) - scale * sum);
  }
}

}  // namespace

void launch_query_validate(const Layout& l, const int32_t* lengths, int Q, const int32_t* queries,
                           const int32_t* num_queries, unsigned long long* status, cudaStream_t stream) {
  const long long total = static_cast<long long>(l.B) * Q;
  query_validate_kernel<<<grid_for(total, 256), 256, 0, stream>>>(l.B, Q, l.C, lengths, queries, num_queries, status);
  TS_LAUNCHED("query_validate_kernel");
}

void launch_span_validate(const Layout& l, const int32_t* lengths, int N, const int32_t* num_phones,
                          const int32_t* spans, unsigned long long* status, cudaStream_t stream) {
  const long long total = static_cast<long long>(l.B) * N;
  span_validate_kernel<<<grid_for(total, 256), 256, 0, stream>>>(l.B, N, lengths, num_phones, spans, status);
  TS_LAUNCHED("span_validate_kernel");
}

void launch_span_marginals(const Layout& l, const Params& p, int Q, const int32_t* queries, const int32_t* num_queries,
                           void* ws, double* out, cudaStream_t stream) {
  const long long total = static_cast<long long>(l.B) * Q;
  span_marginal_kernel<<<grid_for(total, 128), 128, 0, stream>>>(l, p, Q, queries, num_queries, at<double>(ws, l.sigma),
                                                                 at<double>(ws, l.gamma), at<double>(ws, l.logz), out);
  TS_LAUNCHED("span_marginal_kernel");
}

void launch_align_posteriors(const Layout& l, const ConfLayout& cl, const Params& p, int N, const int32_t* phones,
                             const int32_t* num_phones, const int32_t* optional, const int32_t* spans, void* ws,
                             double* log_z_c, double* out, cudaStream_t stream) {
  PostArgs a{};
  a.T = l.T;
  a.K = l.K;
  a.C = l.C;
  a.N = N;
  a.p = p;
  a.s = p.start ? p.start : at<float>(ws, cl.zeros);
  a.e = p.end ? p.end : at<float>(ws, cl.zeros);
  a.phones = phones;
  a.num_phones = num_phones;
  a.optional = optional;
  a.spans = spans;
  a.S = at<double>(ws, cl.S);
  a.F = at<double>(ws, cl.F);
  a.H = at<double>(ws, cl.H);
  a.G = at<double>(ws, cl.G);
  a.log_z_c = log_z_c;
  a.out = out;
  const int threads = std::min(256, std::max(32, (N + 31) / 32 * 32));
  align_posterior_kernel<<<l.B, threads, 0, stream>>>(a);
  TS_LAUNCHED("align_posterior_kernel");
}

void launch_transcript(const Layout& l, const TranscriptLayout& tl, const Params& p, int N, const int32_t* phones,
                       const int32_t* num_phones, const int32_t* optional, double scale, void* ws, double* log_z_c,
                       const Grads& grads, cudaStream_t stream) {
  TranscriptArgs ta{};
  PostArgs& a = ta.post;
  a.T = l.T;
  a.K = l.K;
  a.C = l.C;
  a.N = N;
  a.p = p;
  a.s = p.start ? p.start : at<float>(ws, tl.zeros);
  a.e = p.end ? p.end : at<float>(ws, tl.zeros);
  a.phones = phones;
  a.num_phones = num_phones;
  a.optional = optional;
  a.S = at<double>(ws, tl.S);
  a.F = at<double>(ws, tl.F);
  a.H = at<double>(ws, tl.H);
  a.G = at<double>(ws, tl.G);
  a.log_z_c = log_z_c;
  ta.status = at<unsigned long long>(ws, tl.status);
  ta.cum = at<double>(ws, tl.cum);
  ta.onset = p.onset ? at<double>(ws, tl.onset) : nullptr;
  ta.params = at<double>(ws, tl.params);
  const int threads = std::min(256, std::max(32, (std::max(N, l.C) + 31) / 32 * 32));
  transcript_kernel<<<l.B, threads, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_kernel");
  const long long rows = static_cast<long long>(l.B) * (l.T + 1) * l.C;
  if (grads.cum_scores) {
    transcript_rows_kernel<<<grid_for(rows, 256), 256, 0, stream>>>(l.B, l.T + 1, l.C, 1, p.lengths, ta.cum, scale,
                                                                      grads.cum_scores, ta.status);
    TS_LAUNCHED("transcript_rows_kernel");
  }
  if (p.onset && grads.onset) {
    const long long frames = static_cast<long long>(l.B) * l.T * l.C;
    transcript_rows_kernel<<<grid_for(frames, 256), 256, 0, stream>>>(l.B, l.T, l.C, 0, p.lengths, ta.onset, scale,
                                                                        grads.onset, ta.status);
    TS_LAUNCHED("transcript_rows_kernel");
  }
  const int P = l.C * l.C + l.K * l.C + 2 * l.C;
  transcript_params_kernel<<<grid_for(P, 128), 128, 0, stream>>>(l.B, l.C, l.K, ta.params, scale, grads, ta.status);
  TS_LAUNCHED("transcript_params_kernel");
}

}  // namespace timitseg::crf::cuda_impl
