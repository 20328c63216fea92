// Confidence on the device (docs/crf.md "Confidence"): span marginals from
// the loss's recurrences (sigma, gamma, log Z in the workspace), and the
// constrained forward-backward (the forced-alignment recurrence with
// log-sum-exp, forward S/F and backward H/G, constrained.cuh) with one
// thread block per utterance. Fixed orders, no atomics on values: results are
// deterministic. The transcript NLL's kernels: transcript.cu.
#include "crf/cuda/constrained.cuh"

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

namespace {

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
  align_posterior_kernel<<<l.B, kPassThreads, 0, stream>>>(a);
  TS_LAUNCHED("align_posterior_kernel");
}

}  // namespace timitseg::crf::cuda_impl
