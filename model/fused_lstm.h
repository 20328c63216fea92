// What the rooms above model/ may ask of the fused LSTM kernel
// (model/cuda/lstm_fused.h, private to model/): how many SMs one run
// occupies and whether it can run on this machine. options/device_choice.cpp
// (the `auto` pick of train.rnn_algo) and `compare --jobs` (its default) ask.
#pragma once

#include <string>

namespace timitseg::model {

// The SMs one fused-LSTM run occupies at batch B and H units per direction
// (model/cuda/lstm_fused.h grid_ctas; 0 for an H the kernel lacks): `compare
// --jobs` sizes its default by it. Every build, with or without CUDA.
int fused_grid_ctas(int B, int H);

// True when the fused kernels can run here for H units per direction
// (model/cuda/lstm_fused.h supported(): the size, a device of compute
// capability >= 9.0, sm_90 code in the binary, a cluster that fits);
// otherwise false with the reason in *why (when given). A build without CUDA
// has no fused kernel: false, "this build has no CUDA". Never throws.
bool fused_lstm_supported(int H, std::string* why = nullptr);

}  // namespace timitseg::model
