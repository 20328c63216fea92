// Device reductions shared by the kernels of crf/cuda and model/cuda (CUDA
// sources only). Fixed orders, so that a result does not depend on timing.
#pragma once

namespace timitseg::cuda {

// In-block sum of one double per thread (blockDim.x a power of two, `shared`
// holding blockDim.x doubles), fixed tree order. Returns the total in thread 0.
__device__ inline double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  return shared[0];
}

}  // namespace timitseg::cuda
