// cuda_lstm_fused_bench: times the fused persistent BiLSTM layer kernels
// (model/cuda/lstm_fused.h), forward and backward through time, one layer,
// both directions, every utterance of full length T (so a launch runs exactly
// T steps). Default sizes: H = 128, T = 400, B in {32, 64, 128}.
//
// Per size: --warmup untimed forward+backward pairs, then --reps timed pairs;
// each call is timed alone with cudaEvents on one stream and the median is
// printed, in ms per launch and in us per time step (both directions and all
// batch groups run in parallel inside one step).
#include <CLI/CLI.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/lstm_fused.h"

using namespace timitseg;
namespace fused = timitseg::model::fused;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench(int B, int T, int H, int warmup, int reps) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nrm(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f / std::sqrt(float(H)), 1.0f / std::sqrt(float(H)));
  std::vector<float> xg(size_t(B) * T * 2 * 4 * H), w(size_t(2) * 4 * H * H), dy(size_t(B) * T * 2 * H);
  for (float& v : xg) v = nrm(rng);
  for (float& v : w) v = uni(rng);
  for (float& v : dy) v = nrm(rng);
  const std::vector<int32_t> len(B, T);
  Buffer d_xg(Memory::device, 0), d_w(Memory::device, 0), d_len(Memory::device, 0), d_dy(Memory::device, 0);
  d_xg.upload(xg);
  d_w.upload(w);
  d_len.upload(len);
  d_dy.upload(dy);
  Buffer y(Memory::device, size_t(B) * T * 2 * H * 4), gates(Memory::device, size_t(2) * B * T * 4 * H * 4),
      cell(Memory::device, size_t(2) * B * T * H * 4), hprev(Memory::device, size_t(2) * B * T * H * 4),
      dxg(Memory::device, size_t(B) * T * 2 * 4 * H * 4);

  cudaStream_t stream = nullptr;
  TS_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr, e2 = nullptr;
  TS_CUDA(cudaEventCreate(&e0));
  TS_CUDA(cudaEventCreate(&e1));
  TS_CUDA(cudaEventCreate(&e2));
  std::vector<double> fwd, bwd;
  for (int it = 0; it < warmup + reps; ++it) {
    TS_CUDA(cudaEventRecord(e0, stream));
    fused::forward(B, T, H, d_xg.as<float>(), d_w.as<float>(), d_len.as<int32_t>(), y.as<float>(), gates.as<float>(),
                   cell.as<float>(), hprev.as<float>(), stream);
    TS_CUDA(cudaEventRecord(e1, stream));
    fused::backward(B, T, H, d_w.as<float>(), d_len.as<int32_t>(), d_dy.as<float>(), gates.as<float>(),
                    cell.as<float>(), dxg.as<float>(), stream);
    TS_CUDA(cudaEventRecord(e2, stream));
    TS_CUDA(cudaEventSynchronize(e2));
    float f = 0, b = 0;
    TS_CUDA(cudaEventElapsedTime(&f, e0, e1));
    TS_CUDA(cudaEventElapsedTime(&b, e1, e2));
    if (it >= warmup) {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  TS_CUDA(cudaEventDestroy(e0));
  TS_CUDA(cudaEventDestroy(e1));
  TS_CUDA(cudaEventDestroy(e2));
  TS_CUDA(cudaStreamDestroy(stream));
  const double mf = median(fwd), mb = median(bwd);
  std::printf("B=%4d T=%4d H=%4d  forward %8.3f ms (%6.2f us/step)  backward %8.3f ms (%6.2f us/step)  "
              "fwd+bwd %8.3f ms = %.0f frames/s per layer\n",
              B, T, H, mf, 1000.0 * mf / T, mb, 1000.0 * mb / T, mf + mb, double(B) * T / ((mf + mb) * 1e-3));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuda_lstm_fused_bench: time the fused persistent BiLSTM layer kernels"};
  int H = 128, T = 400, warmup = 3, reps = 20;
  std::vector<int> batches{32, 64, 128};
  app.add_option("--hidden", H, "units per direction (64, 128, 256)");
  app.add_option("--frames", T, "frames per utterance (every utterance has this length)");
  app.add_option("--batch", batches, "batch sizes")->expected(1, 64);
  app.add_option("--warmup", warmup, "untimed forward+backward pairs first");
  app.add_option("--reps", reps, "timed forward+backward pairs (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::string why;
    if (!fused::supported(H, &why)) {
      std::fprintf(stderr, "cuda_lstm_fused_bench: the fused LSTM cannot run here: %s\n", why.c_str());
      return 1;
    }
    std::printf("device: %s\n", cuda::device_name().c_str());
    for (int B : batches) bench(B, T, H, warmup, std::max(reps, 1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_lstm_fused_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
