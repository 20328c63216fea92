// Parameter marginals in the scaled linear domain (docs/cuda.md "Linear
// marginals"): the partials of marginal_kernel (backward.cu) with 4 C exps
// per position instead of C^2 + K C, and an exact fallback per term.
//
// For one (chunk, utterance) block and a tile of positions u, with
// Ra[u] = max_c' alpha[u,c'], Amax[c] = max_c' A[c',c], Dmax[c] = max_k D[k,c]
// and a per-chunk reference ref[c] = max_u X[u,c] of
// X[u,c] = sigma[u,c] - cum[u,c] + o[u,c] (Y[v,c] = gamma[v,c] + cum[v,c]):
//   transition term   exp(alpha[u,c'] + A[c',c] + rho[u,c] - logZ) = P[u,c'] EA[c',c] Q[u,c]
//     P = exp(alpha - Ra) <= 1, EA = exp(A - Amax) <= 1, Q = exp(rho + Ra + Amax - logZ)
//   duration term     exp(X[u,c] + D[d-1,c] + Y[u+d,c] - logZ) = p[u,c] ED[d-1,c] q[u+d,c]
//     p = exp(X - ref) <= 1, ED = exp(D - Dmax) <= 1, q = exp(Y + ref + Dmax - logZ)
// The block sums P Q (p q) over its positions per entry and multiplies by EA
// (ED) once. Exactness: every term is a probability (<= 1). An entry whose
// EA (ED) is below 2^-900 (and not 0 from a -inf parameter) is summed on the
// exact log-domain terms. Otherwise a Q (q) over 2^900 (or +inf) sends its
// terms to the exact form; with Q <= 2^900 a product that underflows is
// below 2^-122 absolute (P or p <= 1, EA >= 2^-900), far under the float32
// gradient, and a product of normal factors is the exp of the sum to a few
// float64 ulps. Exact terms are added as term / EA (term <= 1, so <= 2^900).
// The choice depends on the data alone: reruns are bitwise identical.
#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {
namespace {

constexpr int kTile = 16;              // positions per tile
constexpr int kMargThreads = 256;
constexpr double kFactorMin = 0x1p-900;  // EA, ED below: entry always exact
constexpr double kQMax = 0x1p900;        // Q, q above: term exact

// Shared memory of O((kTile + K) C): the per-entry sums live in the output
// partials (each owned by one thread) and each entry's scale is recomputed
// per tile, so that several blocks fit per SM (one wave at B=32 T=200).
struct MargSmem {
  double *P, *Q, *p;  // [kTile][C]
  double* q;          // [kTile + K - 1][C]
  double *amax, *dmax, *ref;  // [C]
  double* ra;                 // [kTile]
};

__device__ MargSmem carve_marg(unsigned char* raw, int K, int C) {
  MargSmem m;
  double* x = reinterpret_cast<double*>(raw);
  m.P = x, x += kTile * C;
  m.Q = x, x += kTile * C;
  m.p = x, x += kTile * C;
  m.q = x, x += (kTile + K - 1) * C;
  m.amax = x, x += C;
  m.dmax = x, x += C;
  m.ref = x, x += C;
  m.ra = x;
  return m;
}

struct MargArgs {
  Layout l;
  const float *cum_all, *A, *D, *onset_all;
  const int32_t* lengths;
  const double *alpha_all, *sigma_all, *rho_all, *gamma_all, *logz;
  double* part;
  const unsigned long long* status;
};

// Column maxima of A and D and the chunk's reference ref[c]. The maxima are taken by up to kTile slices of the block per column (partials
// in the P / Q / p tiles, then combined by one thread per column), so that
// no thread walks a whole column: the loads are the kernel's latency.
__device__ void marg_setup(const MargArgs& a, MargSmem m, const float* cum, const double* sigma, const float* onset,
                           int u0, int u1) {
  const int C = a.l.C, K = a.l.K;
  const int ns = max(1, min(kTile, static_cast<int>(blockDim.x) / C));
  for (int i = threadIdx.x; i < ns * C; i += blockDim.x) {
    const int c = i % C, j = i / C;
    double am = kNegInf, dm = kNegInf, rf = kNegInf;
#pragma unroll 4
    for (int c2 = j; c2 < C; c2 += ns) am = fmax(am, static_cast<double>(a.A[c2 * C + c]));
#pragma unroll 4
    for (int k = j; k < K; k += ns) dm = fmax(dm, static_cast<double>(a.D[k * C + c]));
#pragma unroll 4
    for (int u = u0 + j; u < u1; u += ns) {
      const size_t r = static_cast<size_t>(u) * C + c;
      const double o = onset ? static_cast<double>(onset[r]) : 0.0;
      rf = fmax(rf, sigma[r] - static_cast<double>(cum[r]) + o);
    }
    m.P[i] = am;
    m.Q[i] = dm;
    m.p[i] = rf;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    double am = kNegInf, dm = kNegInf, rf = kNegInf;
    for (int j = 0; j < ns; ++j) {
      am = fmax(am, m.P[j * C + c]);
      dm = fmax(dm, m.Q[j * C + c]);
      rf = fmax(rf, m.p[j * C + c]);
    }
    m.amax[c] = am;
    m.dmax[c] = dm;
    m.ref[c] = rf;
  }
}

// Scale of entry e: EA or ED; -1: always exact (under kFactorMin); 0: the
// parameter is -inf (every term 0).
__device__ __forceinline__ double entry_scale(const MargArgs& a, const MargSmem& m, int e, int nA, int C) {
  const int c = e % C;
  const double v = e < nA ? static_cast<double>(a.A[e]) : static_cast<double>(a.D[e - nA]);
  if (v == kNegInf) return 0.0;
  const double f = exp(v - (e < nA ? m.amax[c] : m.dmax[c]));
  return f < kFactorMin ? -1.0 : f;
}

// The tile's factors: Ra, P, Q (positions u = t0 + r, 1 <= u < u1 for P and
// Q), p (u0 <= u < u1) and q (v = t0 + 1 + j <= L). Q / q over kQMax: -1.
__device__ void marg_factors(const MargArgs& a, MargSmem m, const float* cum, const float* onset, long long base,
                             int t0, int nr, int L, double lz) {
  const int C = a.l.C, K = a.l.K;
  const double* alpha = a.alpha_all + base;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  for (int r = warp; r < nr; r += nwarps) {
    double mx = kNegInf;
    for (int c = lane; c < C; c += 32) mx = fmax(mx, alpha[static_cast<size_t>(t0 + r) * C + c]);
    for (int off = 16; off >= 1; off >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) m.ra[r] = mx;
  }
  __syncthreads();
  const int nq = min(kTile + K - 1, L - t0);
  const int n1 = nr * C;
  for (int i = threadIdx.x; i < 3 * n1 + nq * C; i += blockDim.x) {
    if (i < n1) {  // P
      const int r = i / C;
      const double ra = m.ra[r];  // row 0 (no transition there) is never read
      m.P[i] = (ra == kNegInf || t0 + r == 0) ? 0.0 : exp(alpha[static_cast<size_t>(t0) * C + i] - ra);
    } else if (i < 2 * n1) {  // Q
      const int j = i - n1, r = j / C, c = j % C;
      const double v = exp((a.rho_all + base)[static_cast<size_t>(t0) * C + j] + m.ra[r] + m.amax[c] - lz);
      m.Q[j] = v > kQMax ? -1.0 : v;
    } else if (i < 3 * n1) {  // p
      const int j = i - 2 * n1, c = j % C;
      const size_t r = static_cast<size_t>(t0) * C + j;
      const double o = onset ? static_cast<double>(onset[r]) : 0.0;
      const double rf = m.ref[c];
      m.p[j] = rf == kNegInf ? 0.0 : exp((a.sigma_all + base)[r] - static_cast<double>(cum[r]) + o - rf);
    } else {  // q, rows v = t0 + 1 + j
      const int j = i - 3 * n1, c = j % C;
      const size_t r = static_cast<size_t>(t0 + 1) * C + j;
      const double rf = m.ref[c];
      double v = 0.0;
      if (rf != kNegInf)
        v = exp((a.gamma_all + base)[r] + static_cast<double>(cum[r]) + rf + m.dmax[c] - lz);
      m.q[j] = v > kQMax ? -1.0 : v;
    }
  }
  __syncthreads();
}

// Adds the tile's terms to each entry's sum in out (one thread per entry,
// positions in order; the first tile starts the sum, the last one scales it).
__device__ void marg_accumulate(const MargArgs& a, MargSmem m, const float* cum, const float* onset, long long base,
                                int t0, int nr, int u0, int L, double lz, bool first, bool last, double* out) {
  const int C = a.l.C, K = a.l.K, nA = C * C, nD = K * C;
  const double* alpha = a.alpha_all + base;
  const double* rho = a.rho_all + base;
  const double* sigma = a.sigma_all + base;
  const double* gamma = a.gamma_all + base;
  for (int e = threadIdx.x; e < nA + nD; e += blockDim.x) {
    const double f = entry_scale(a, m, e, nA, C);
    const bool exact = f < 0.0;
    const double inv = exact ? 1.0 : 1.0 / f;
    double s = 0.0;
    if (f != 0.0 && e < nA) {
      const int cp = e / C, c = e % C;
      const double av = static_cast<double>(a.A[e]);
      for (int r = max(0, 1 - t0); r < nr; ++r) {
        const double Qv = m.Q[r * C + c];
        if (!exact && Qv >= 0.0) {
          s = fma(m.P[r * C + cp], Qv, s);
        } else {
          const size_t u = static_cast<size_t>(t0 + r);
          s += exp(alpha[u * C + cp] + av + rho[u * C + c] - lz) * inv;
        }
      }
    } else if (f != 0.0) {
      const int k = (e - nA) / C, c = (e - nA) % C, d = k + 1;
      const double dd = static_cast<double>(a.D[e - nA]);
      const int rend = min(nr, L - d + 1 - t0);
      for (int r = max(0, u0 - t0); r < rend; ++r) {
        const double qv = m.q[(r + k) * C + c];
        if (!exact && qv >= 0.0) {
          s = fma(m.p[r * C + c], qv, s);
        } else {
          const size_t r0 = static_cast<size_t>(t0 + r) * C + c, r1 = r0 + static_cast<size_t>(d) * C;
          const double o = onset ? static_cast<double>(onset[r0]) : 0.0;
          const double seg = static_cast<double>(cum[r1]) - static_cast<double>(cum[r0]);
          s += exp(sigma[r0] + (seg + dd + o) + gamma[r1] - lz) * inv;
        }
      }
    }
    const double tot = first ? 0.0 + s : out[e] + s;
    out[e] = last && f > 0.0 ? tot * f : tot;
  }
}

__global__ void __launch_bounds__(kMargThreads) marginal_fast_kernel(MargArgs a) {
  extern __shared__ __align__(16) unsigned char marg_raw[];
  if (input_invalid(a.status)) return;
  const int ch = chunk_first(a.l) + blockIdx.x, b = blockIdx.y;
  const int C = a.l.C, K = a.l.K, nA = C * C, nD = K * C;
  const int L = a.lengths[b];
  const double lz = a.logz[b];
  double* out = a.part + (static_cast<size_t>(b) * a.l.nch + ch) * (nA + nD);
  if (!(lz > kNegInf)) {
    for (int e = threadIdx.x; e < nA + nD; e += blockDim.x) out[e] = 0.0;
    return;
  }
  MargSmem m = carve_marg(marg_raw, K, C);
  const size_t base = static_cast<size_t>(b) * (a.l.T + 1) * C;
  const float* cum = a.cum_all + base;
  const float* onset = a.onset_all ? a.onset_all + static_cast<size_t>(b) * a.l.T * C : nullptr;  // [T][C]
  const int u0 = ch * a.l.chunk, u1 = min(L, u0 + a.l.chunk);
  if (u0 >= u1) {  // a chunk past the utterance's end
    for (int e = threadIdx.x; e < nA + nD; e += blockDim.x) out[e] = 0.0;
    return;
  }
  const long long tb = tab_index(a.l, b, 0);  // the tables' rows by position (a window when checkpointed)
  marg_setup(a, m, cum, a.sigma_all + tb, onset, u0, u1);
  for (int t0 = u0; t0 < u1; t0 += kTile) {
    const int nr = min(kTile, u1 - t0);
    __syncthreads();  // the previous tile's sums are done with the factors (and setup with the maxima)
    marg_factors(a, m, cum, onset, tb, t0, nr, L, lz);
    marg_accumulate(a, m, cum, onset, tb, t0, nr, u0, L, lz, t0 == u0, t0 + kTile >= u1, out);
  }
}

}  // namespace

size_t marginal_fast_smem_bytes(int K, int C) {
  return sizeof(double) * (static_cast<size_t>(3 * kTile + kTile + K - 1) * C + 3 * C + kTile);
}

void launch_marginals_fast(const Layout& l, const Params& p, void* ws, cudaStream_t stream) {
  const size_t smem = marginal_fast_smem_bytes(l.K, l.C);
  allow_dynamic_smem(marginal_fast_kernel, smem);
  MargArgs a{l,
             p.cum_scores,
             p.transition,
             p.duration_bias,
             p.onset,
             p.lengths,
             at<double>(ws, l.alpha),
             at<double>(ws, l.sigma),
             at<double>(ws, l.rho),
             at<double>(ws, l.gamma),
             at<double>(ws, l.logz),
             at<double>(ws, l.part),
             at<unsigned long long>(ws, l.status)};
  dim3 grid(chunk_last(l) - chunk_first(l), l.B);
  if (grid.x == 0) return;
  marginal_fast_kernel<<<grid, kMargThreads, smem, stream>>>(a);
  TS_LAUNCHED("marginal_fast_kernel");
}

}  // namespace timitseg::crf::cuda_impl
