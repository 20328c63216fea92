// See data/transitions.h.
#include "data/transitions.h"

#include <algorithm>
#include <cmath>

namespace timitseg::data {

std::vector<int64_t> transition_middles(const Audio& audio, const std::vector<int64_t>& starts) {
  const size_t n = starts.size();
  std::vector<int64_t> out(n, -1);
  if (n < 2 || audio.sample_rate <= 0) return out;
  FeatureOptions o = FeatureOptions::defaults_for(FeatureType::fbank);
  o.sample_rate = audio.sample_rate;
  o.frame_length_ms = 20.0;
  o.frame_shift_ms = 5.0;
  o.num_mel_bins = 40;
  o.window_type = WindowType::hanning;
  o.preemph_coeff = 0.0;
  o.high_freq = std::min(8000.0, audio.sample_rate / 2.0);  // a 16 kHz corpus's band
  int32_t T = 0;
  std::vector<float> S = compute_features(audio, o, &T);  // [T][B] log-mel
  if (T < 2) return out;
  // Bands 60 dB below the loudest are floored there: a synthesizer's digital near-silence
  // would otherwise give the distance the log energies of rounding noise.
  const float floor = *std::max_element(S.begin(), S.end()) - static_cast<float>(std::log(1e6));
  for (float& v : S) v = std::max(v, floor);
  const int B = o.num_mel_bins;
  const int64_t L = o.frame_length_samples(), H = o.frame_shift_samples();
  const int64_t N = static_cast<int64_t>(audio.samples.size()), min_len = audio.sample_rate * 30 / 1000;
  std::vector<int64_t> edge(starts);  // [n + 1] phone i is [edge[i], edge[i + 1])
  edge.push_back(N);
  auto frame_at = [&](double sample) {  // the frame whose centre is nearest
    return static_cast<int>(std::clamp<double>(std::lround((sample - L / 2.0) / H), 0.0, T - 1.0));
  };
  auto middle_spectrum = [&](size_t i) {  // [B]
    const double d = static_cast<double>(edge[i + 1] - edge[i]);
    std::vector<double> ref(B, 0.0);
    const int a = frame_at(edge[i] + 0.4 * d), b = frame_at(edge[i] + 0.6 * d);
    for (int t = a; t <= b; ++t)
      for (int k = 0; k < B; ++k) ref[k] += S[static_cast<size_t>(t) * B + k];
    for (double& v : ref) v /= (b - a + 1);
    return ref;
  };
  auto distance = [&](int t, const std::vector<double>& ref) {
    double d = 0.0;
    for (int k = 0; k < B; ++k) {
      const double e = S[static_cast<size_t>(t) * B + k] - ref[k];
      d += e * e;
    }
    return d;
  };
  for (size_t i = 1; i < n; ++i) {
    if (edge[i] - edge[i - 1] < min_len || edge[i + 1] - edge[i] < min_len) continue;
    const std::vector<double> before = middle_spectrum(i - 1), after = middle_spectrum(i);
    const int from = frame_at(0.5 * (edge[i - 1] + edge[i])), to = frame_at(0.5 * (edge[i] + edge[i + 1]));
    for (int t = from + 1; t <= to; ++t)
      if (distance(t, after) < distance(t, before)) {
        out[i] = std::clamp<int64_t>(static_cast<int64_t>(t) * H + L / 2 - H / 2, edge[i - 1] + 1, edge[i + 1] - 1);
        break;
      }
  }
  return out;
}

}  // namespace timitseg::data
