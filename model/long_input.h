// Long recordings through the encoder in windows (docs/align.md, "Long
// recordings"): the BiLSTM runs over windows of kWindowFrames frames with
// kContextFrames frames of context on each side; each window's middle is
// kept. Shared by the CPU executor (model/cpu/long_forward.h) and the GPU
// executor (model/cuda/cuda_executor_long.cpp), so that both cut alike.
#pragma once

#include <cstdint>
#include <vector>

namespace timitseg::model {

constexpr int kWindowFrames = 16384;  // about 2.7 minutes at 10 ms
constexpr int kContextFrames = 512;   // 5.1 s either side

// One window: frames [a, b) kept, [wa, wb) forwarded (wa <= a < b <= wb).
struct Window {
  int64_t a = 0, b = 0, wa = 0, wb = 0;
};

// The windows covering frames [0, length): [0, window), [window, 2 window), ...
// each with `context` frames either side where the recording has them.
// Throws std::invalid_argument for window < 1 or context < 0.
std::vector<Window> windows_of(int64_t length, int64_t window = kWindowFrames, int64_t context = kContextFrames);

// The cumsum [T+1][C] of a long recording's scores x [T][C] (L valid frames):
// centre_frames = 0 centres every frame by the whole recording's mean
// (crf::centered_cumsum_forward, as a short utterance); centre_frames = M > 0
// by the mean of the frames [t - M, t + M] around it
// (crf::running_centered_cumsum_forward; `--centre-frames`, docs/align.md).
// The CPU and GPU executors call this one function, so both centre alike.
void long_cumsum(int64_t T, int64_t C, const float* x, int32_t L, int64_t centre_frames, float* cum);

}  // namespace timitseg::model
