// Boundary posteriors: P(a segment ends at t) from alpha, gamma and log Z.
#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

// P(a segment ends at t) = sum_c exp(alpha[t,c] + gamma[t,c] - logZ), 1 <= t <= L.
__global__ void boundary_kernel(Layout l, const int32_t* __restrict__ lengths, const double* alpha_all,
                                const double* gamma_all, const double* logz, double* out,
                                const unsigned long long* status) {
  if (input_invalid(status)) return;
  const int C = l.C, T = l.T, nr = l.r1 - l.r0;  // rows [r0, r1) (all: [0, T+1))
  const long long n = static_cast<long long>(l.B) * nr;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int t = l.r0 + static_cast<int>(i % nr);
    const int b = static_cast<int>(i / nr);
    const int L = lengths[b];
    const double lz = logz[b];
    double v = 0.0;
    if (t >= 1 && t <= L && lz > kNegInf) {
      const size_t row = static_cast<size_t>(tab_index(l, b, t));
      for (int c = 0; c < C; ++c) v += exp(alpha_all[row + c] + gamma_all[row + c] - lz);
    }
    out[static_cast<size_t>(b) * (T + 1) + t] = v;
  }
}


void launch_boundary(const Layout& l, const Params& p, void* ws, double* out, cudaStream_t stream) {
  const long long n = static_cast<long long>(l.B) * (l.r1 - l.r0);
  boundary_kernel<<<grid_for(n, 256), 256, 0, stream>>>(l, p.lengths, at<double>(ws, l.alpha),
                                                        at<double>(ws, l.gamma), at<double>(ws, l.logz), out,
                                                        at<unsigned long long>(ws, l.status));
  TS_LAUNCHED("boundary_kernel");
}

}  // namespace timitseg::crf::cuda_impl
