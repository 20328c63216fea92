// The transcript NLL's constrained part on the device (docs/crf.md "Training
// from transcripts: the transcript NLL"): log Z_c and the constrained
// marginals, subtracted from the outputs of the backward without labels.
//
//   transcript_pass_kernel       [B] blocks: S/F/H/G and log Z_c (constrained.cuh)
//   transcript_pieces_kernel     [B][T+1][N]: mass of phone n's pieces ending / starting at t
//   transcript_durations_kernel  [B][N][K]:   mass of phone n's pieces of duration d (and its continuations)
//   transcript_pairs_kernel      [B][N][J]:   mass of phone m - 1 - j followed by phone m (J = kMaxLinkBack)
//   transcript_cum_kernel        [B][T+1][C]: each label's cum / onset marginal, its phones in order
//   transcript_marginals_kernel  [B][P]:      each label's A, D, s, e marginal, its phones in order
//   (launch_transcript_marginals: the six above, reading the inputs only: beside the backward without labels)
//   transcript_rows_kernel, transcript_params_kernel: the gradients minus the marginals (launch_transcript_grads)
//
// Every entry is written by one thread that sums in a fixed order: no atomics,
// results are deterministic.
#include <algorithm>

#include "crf/cuda/constrained.cuh"

namespace timitseg::crf::cuda_impl {

TranscriptLayout make_transcript_layout(const Dims& d, int64_t N) {
  TranscriptLayout a;
  const size_t B = static_cast<size_t>(d.B), T1 = static_cast<size_t>(d.T + 1), n = static_cast<size_t>(N);
  const size_t cells = B * T1 * n;
  WorkspaceCarver ws;
  a.status = ws.take(64);
  a.zeros = ws.take(static_cast<size_t>(d.C) * sizeof(float));
  a.S = ws.take(cells * sizeof(double));
  a.F = ws.take(cells * sizeof(double));
  a.H = ws.take(cells * sizeof(double));
  a.G = ws.take(cells * sizeof(double));
  a.cum = ws.take(B * T1 * static_cast<size_t>(d.C) * sizeof(double));
  a.onset = ws.take(B * static_cast<size_t>(d.T) * static_cast<size_t>(d.C) * sizeof(double));
  a.params = ws.take(B * static_cast<size_t>(d.C * d.C + d.K * d.C + 2 * d.C) * sizeof(double));
  a.ends = ws.take(cells * sizeof(double));
  a.starts = ws.take(cells * sizeof(double));
  a.durations = ws.take(B * n * static_cast<size_t>(d.K) * sizeof(double));
  a.cont = ws.take(B * n * sizeof(double));
  a.pairs = ws.take(B * n * kMaxLinkBack * sizeof(double));
  a.lz = ws.take(B * sizeof(double));
  a.total = ws.off;
  return a;
}

namespace {

struct TranscriptArgs {
  PostArgs post;  // spans, out unused
  unsigned long long* status;
  double *cum, *onset, *params;        // the constrained marginals [B][T+1][C], [B][T][C], [B][P]
  double *ends, *starts;               // [B][T+1][N]
  double *durations, *cont, *pairs;    // [B][N][K], [B][N], [B][N][kMaxLinkBack]
  double* lz;                          // [B] log Z_c
};

__device__ PostUtt utterance(const PostArgs& a, int b, double lz) {
  const size_t base = static_cast<size_t>(b) * (a.T + 1) * a.N;
  return PostUtt{ConfUtt{a.p.lengths[b], a.K, a.C, a.p.cum_scores + static_cast<size_t>(b) * (a.T + 1) * a.C,
                         a.p.transition, a.p.duration_bias,
                         a.p.onset ? a.p.onset + static_cast<size_t>(b) * a.T * a.C : nullptr},
                 a.num_phones[b], a.N, a.phones + static_cast<size_t>(b) * a.N,
                 a.optional ? a.optional + static_cast<size_t>(b) * a.N : nullptr, a.s, a.e,
                 a.S + base, a.F + base, a.H + base, a.G + base, lz,
                 a.links ? a.links + static_cast<size_t>(b) * a.N : nullptr};
}

// The mass of phone n's final piece [v, v+d) and of its continuing piece [v, v+K) (another piece follows).
__device__ double final_piece(const PostUtt& x, int n, int v, int d) {
  return exp(x.at(x.S, v, n) + x.u.seg(v, d, x.y[n]) + x.at(x.G, v + d, n) - x.lz);
}
__device__ double continuing_piece(const PostUtt& x, int n, int v) {
  const int c = x.y[n];
  return exp(x.at(x.S, v, n) + x.u.seg(v, x.u.K, c) + x.u.trans(c, c) + x.at(x.H, v + x.u.K, n) - x.lz);
}

__global__ void transcript_pass_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  const int b = blockIdx.x;
  if (input_invalid(ta.status)) return;
  PostUtt x = utterance(a, b, kNegInf);
  int needed = 0;  // uniform over the block (a graph: the passes find an infeasible one, log Z_c = -inf)
  if (!x.lk)
    for (int n = 0; n < x.np; ++n) needed += !x.optional(n);
  __shared__ double lz;
  if (needed <= x.u.L) constrained_passes(x, &lz);
  if (threadIdx.x != 0) return;
  ta.lz[b] = x.lz;
  if (a.log_z_c) a.log_z_c[b] = x.lz;
  if (!(x.lz > kNegInf)) report(ta.status, kTranscript, b);
}

__global__ void transcript_pieces_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  if (input_invalid(ta.status)) return;  // the inputs are not safe to read
  const long long T1 = a.T + 1, total = static_cast<long long>(a.B) * T1 * a.N;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / (T1 * a.N)), t = static_cast<int>(i / a.N % T1), n = static_cast<int>(i % a.N);
    double e = 0.0, s = 0.0;
    const PostUtt x = utterance(a, b, ta.lz[b]);
    const int L = x.u.L, K = x.u.K;
    if (n < x.np && x.lz > kNegInf && t <= L) {
      for (int d = 1; d <= min(K, t); ++d) e += final_piece(x, n, t - d, d);
      if (t >= K && t < L) e += continuing_piece(x, n, t - K);
      if (t < L) {
        for (int d = 1; d <= min(K, L - t); ++d) s += final_piece(x, n, t, d);
        if (t + K < L) s += continuing_piece(x, n, t);
      }
    }
    ta.ends[i] = e;
    ta.starts[i] = s;
  }
}

__global__ void transcript_durations_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  if (input_invalid(ta.status)) return;  // the inputs are not safe to read
  const long long total = static_cast<long long>(a.B) * a.N * a.K;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / (static_cast<long long>(a.N) * a.K)), n = static_cast<int>(i / a.K % a.N);
    const int d = static_cast<int>(i % a.K) + 1;
    const PostUtt x = utterance(a, b, ta.lz[b]);
    const int L = x.u.L, K = x.u.K;
    double sum = 0.0, cont = 0.0;
    if (n < x.np && x.lz > kNegInf) {
      for (int v = 0; v + d <= L; ++v) sum += final_piece(x, n, v, d);
      if (d == K)
        for (int v = 0; v + K < L; ++v) cont += continuing_piece(x, n, v);
    }
    ta.durations[i] = sum + cont;
    if (d == K) ta.cont[static_cast<size_t>(b) * a.N + n] = cont;
  }
}

__global__ void transcript_pairs_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  if (input_invalid(ta.status)) return;  // the inputs are not safe to read
  const long long J = kMaxLinkBack, total = static_cast<long long>(a.B) * a.N * J;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / (J * a.N)), m = static_cast<int>(i / J % a.N), j = static_cast<int>(i % J);
    const PostUtt x = utterance(a, b, ta.lz[b]);
    const int n = m - 1 - j;
    double sum = 0.0;
    if (m < x.np && n >= 0 && x.lz > kNegInf && (x.link(m) >> j & 1)) {
      const double tr = x.u.trans(x.y[n], x.y[m]);
      for (int t = 1; t < x.u.L; ++t) sum += exp(x.at(x.F, t, n) + tr + x.at(x.H, t, m) - x.lz);
    }
    ta.pairs[i] = sum;
  }
}

// cum[b][t][c] = sum over phones n of label c (in order) of ends - starts; onset[b][t][c] = of starts.
__global__ void transcript_cum_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  if (input_invalid(ta.status)) return;  // the inputs are not safe to read
  const long long T1 = a.T + 1, total = static_cast<long long>(a.B) * T1 * a.C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / (T1 * a.C)), t = static_cast<int>(i / a.C % T1), c = static_cast<int>(i % a.C);
    const int np = a.num_phones[b];
    const int32_t* y = a.phones + static_cast<size_t>(b) * a.N;
    const size_t row = (static_cast<size_t>(b) * T1 + t) * a.N;
    double g = 0.0, o = 0.0;
    for (int n = 0; n < np; ++n) {
      if (y[n] != c) continue;
      g += ta.ends[row + n] - ta.starts[row + n];
      o += ta.starts[row + n];
    }
    ta.cum[i] = g;
    if (ta.onset && t < a.T) ta.onset[(static_cast<size_t>(b) * a.T + t) * a.C + c] = o;
  }
}

// params[b] = [A (C*C, from-major) | D (K*C) | s (C) | e (C)], each label's phones in order.
__global__ void transcript_marginals_kernel(TranscriptArgs ta) {
  const PostArgs& a = ta.post;
  if (input_invalid(ta.status)) return;  // the inputs are not safe to read
  const int C = a.C, K = a.K, P = C * C + K * C + 2 * C;
  const long long total = static_cast<long long>(a.B) * P;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / P), k = static_cast<int>(i % P);
    const PostUtt x = utterance(a, b, ta.lz[b]);
    const int np = x.np;
    const int32_t* y = x.y;
    const size_t bn = static_cast<size_t>(b) * a.N;
    double sum = 0.0;
    if (!(x.lz > kNegInf)) {
    } else if (k < C * C) {  // transition from k / C to k % C
      const int from = k / C, to = k % C;
      for (int m = 0; m < np; ++m) {  // each phone m of label `to`: its continuations, then each phone before it
        if (y[m] != to) continue;
        if (from == to) sum += ta.cont[bn + m];
        for (int32_t bits = x.link(m) & kLinkBackMask; bits != 0; bits &= bits - 1) {
          const int j = __ffs(bits) - 1, n = m - 1 - j;
          if (n >= 0 && y[n] == from) sum += ta.pairs[(bn + m) * kMaxLinkBack + j];
        }
      }
    } else if (k < C * C + K * C) {  // duration d = (k - C*C) / C + 1 of label (k - C*C) % C
      const int d = (k - C * C) / C, c = (k - C * C) % C;
      for (int n = 0; n < np; ++n)
        if (y[n] == c) sum += ta.durations[(bn + n) * K + d];
    } else if (k < C * C + K * C + C) {  // start
      const int c = k - C * C - K * C;
      for (int n = 0; n < np; ++n)
        if (y[n] == c && (x.link(n) & kLinkStart)) sum += exp(static_cast<double>(x.s[c]) + x.at(x.H, 0, n) - x.lz);
    } else {  // end
      const int c = k - C * C - K * C - C, L = x.u.L;
      for (int n = np - 1; n >= 0; --n)  // the last first
        if (y[n] == c && (x.link(n) & kLinkEnd)) sum += exp(x.at(x.F, L, n) + static_cast<double>(x.e[c]) - x.lz);
    }
    ta.params[i] = sum;
  }
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

TranscriptArgs transcript_args(const Layout& l, const TranscriptLayout& tl, const Params& p, int N,
                               const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                               const int32_t* links, void* ws, double* log_z_c) {
  TranscriptArgs ta{};
  PostArgs& a = ta.post;
  a.T = l.T;
  a.K = l.K;
  a.C = l.C;
  a.N = N;
  a.p = p;
  a.B = l.B;
  a.s = p.start ? p.start : at<float>(ws, tl.zeros);
  a.e = p.end ? p.end : at<float>(ws, tl.zeros);
  a.phones = phones;
  a.num_phones = num_phones;
  a.optional = optional;
  a.links = links;
  a.S = at<double>(ws, tl.S);
  a.F = at<double>(ws, tl.F);
  a.H = at<double>(ws, tl.H);
  a.G = at<double>(ws, tl.G);
  a.log_z_c = log_z_c;
  ta.status = at<unsigned long long>(ws, tl.status);
  ta.cum = at<double>(ws, tl.cum);
  ta.onset = p.onset ? at<double>(ws, tl.onset) : nullptr;
  ta.params = at<double>(ws, tl.params);
  ta.ends = at<double>(ws, tl.ends);
  ta.starts = at<double>(ws, tl.starts);
  ta.durations = at<double>(ws, tl.durations);
  ta.cont = at<double>(ws, tl.cont);
  ta.pairs = at<double>(ws, tl.pairs);
  ta.lz = at<double>(ws, tl.lz);
  return ta;
}

// Threads of the pass kernel: a warp per phone where the kernel's registers allow (at most 1024),
// at least kPassThreads; the results do not depend on it (each phone's sums stay in one warp, in order).
int pass_threads(int N) {
  static const int most = [] {  // the kernel's own limit, read once (thread-safe initialization)
    cudaFuncAttributes attr{};
    TS_CUDA(cudaFuncGetAttributes(&attr, transcript_pass_kernel));
    return std::max(32, attr.maxThreadsPerBlock / 32 * 32);
  }();
  return std::min(most, std::max(kPassThreads, std::min(1024, 32 * N)));
}

}  // namespace

void launch_transcript_marginals(const Layout& l, const TranscriptLayout& tl, const Params& p, int N,
                                 const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                 const int32_t* links, void* ws, double* log_z_c, cudaStream_t stream) {
  const TranscriptArgs ta = transcript_args(l, tl, p, N, phones, num_phones, optional, links, ws, log_z_c);
  transcript_pass_kernel<<<l.B, pass_threads(N), 0, stream>>>(ta);
  TS_LAUNCHED("transcript_pass_kernel");
  const long long cells = static_cast<long long>(l.B) * (l.T + 1) * N;
  transcript_pieces_kernel<<<grid_for(cells, 128), 128, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_pieces_kernel");
  transcript_durations_kernel<<<grid_for(static_cast<long long>(l.B) * N * l.K, 128), 128, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_durations_kernel");
  transcript_pairs_kernel<<<grid_for(static_cast<long long>(l.B) * N * kMaxLinkBack, 128), 128, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_pairs_kernel");
  const long long rows = static_cast<long long>(l.B) * (l.T + 1) * l.C;
  transcript_cum_kernel<<<grid_for(rows, 256), 256, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_cum_kernel");
  const int P = l.C * l.C + l.K * l.C + 2 * l.C;
  transcript_marginals_kernel<<<grid_for(static_cast<long long>(l.B) * P, 128), 128, 0, stream>>>(ta);
  TS_LAUNCHED("transcript_marginals_kernel");
}

void launch_transcript_grads(const Layout& l, const TranscriptLayout& tl, const Params& p, double scale, void* ws,
                             const Grads& grads, cudaStream_t stream) {
  const double* cum = at<double>(ws, tl.cum);
  const double* onset = at<double>(ws, tl.onset);
  const double* params = at<double>(ws, tl.params);
  const unsigned long long* status = at<unsigned long long>(ws, tl.status);
  const long long rows = static_cast<long long>(l.B) * (l.T + 1) * l.C;
  if (grads.cum_scores) {
    transcript_rows_kernel<<<grid_for(rows, 256), 256, 0, stream>>>(l.B, l.T + 1, l.C, 1, p.lengths, cum, scale,
                                                                      grads.cum_scores, status);
    TS_LAUNCHED("transcript_rows_kernel");
  }
  if (p.onset && grads.onset) {
    const long long frames = static_cast<long long>(l.B) * l.T * l.C;
    transcript_rows_kernel<<<grid_for(frames, 256), 256, 0, stream>>>(l.B, l.T, l.C, 0, p.lengths, onset, scale,
                                                                        grads.onset, status);
    TS_LAUNCHED("transcript_rows_kernel");
  }
  const int P = l.C * l.C + l.K * l.C + 2 * l.C;
  transcript_params_kernel<<<grid_for(P, 128), 128, 0, stream>>>(l.B, l.C, l.K, params, scale, grads, status);
  TS_LAUNCHED("transcript_params_kernel");
}

}  // namespace timitseg::crf::cuda_impl
