// Random CRF inputs of the bench commands (`bench crf`, `bench align`): frame
// scores x [B][T][C] ~ N(0, 1) through the centered cumsum layer, transition
// [C][C], duration_bias [K][C], start [C] and end [C] ~ N(0, 0.5^2), every
// utterance of full length T. Draws from rng in that order.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/cumsum.h"

namespace timitseg::app {

struct RandomCrfInputs {
  crf::Dims dims;
  std::vector<float> cum, A, D, s, e;  // cum [B][T+1][C], A [C][C], D [K][C], s [C], e [C]
  std::vector<int32_t> lengths;        // [B], all T
  crf::Params params() const { return crf::Params{cum.data(), A.data(), D.data(), s.data(), e.data(), lengths.data()}; }
};

inline void fill_random_crf_inputs(const crf::Dims& dims, std::mt19937& rng, RandomCrfInputs& in) {
  std::normal_distribution<double> nx(0.0, 1.0), np(0.0, 0.5);
  in.dims = dims;
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  in.lengths.assign(B, static_cast<int32_t>(T));
  std::vector<float> x(B * T * C);
  for (float& v : x) v = static_cast<float>(nx(rng));
  in.cum.assign(B * (T + 1) * C, 0.0f);
  crf::centered_cumsum_forward<float>(B, T, C, x.data(), in.lengths.data(), in.cum.data());
  in.A.clear();
  in.D.clear();
  in.s.clear();
  in.e.clear();
  for (int64_t i = 0; i < C * C; ++i) in.A.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < K * C; ++i) in.D.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < C; ++i) in.s.push_back(static_cast<float>(np(rng))), in.e.push_back(static_cast<float>(np(rng)));
}

}  // namespace timitseg::app
